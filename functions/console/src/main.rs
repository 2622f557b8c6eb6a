//! The console Lambda: builds its clients once per container, then serves the
//! router through lambda_http (API Gateway HTTP API routes `/console/…` here).
use relayops_shared::api::lambda::LambdaHttp;
use relayops_shared::telemetry;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    telemetry::init();
    let app = LambdaHttp::from_env()?;
    lambda_http::run(app.app(relayops_console::router)).await
}
