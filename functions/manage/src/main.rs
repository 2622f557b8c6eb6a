//! The manage Lambda: builds the pool once per container, then serves the
//! router through lambda_http (API Gateway REST/HTTP API or a function URL).
use relayops_shared::api::ApiState;
use relayops_shared::{config::DatabaseConfig, db, telemetry};

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    telemetry::init();
    let pool = db::connect_pool(&DatabaseConfig::from_env()?)?;
    lambda_http::run(relayops_manage::router(ApiState::new(pool))).await
}
