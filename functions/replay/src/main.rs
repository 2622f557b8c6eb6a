//! The replay Lambda: builds its clients once per container, then serves the
//! router through lambda_http (API Gateway REST/HTTP API or a function URL).
use relayops_shared::{api, telemetry};

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    telemetry::init();
    let state = api::state_from_env()?;
    lambda_http::run(relayops_replay::router(state)).await
}
