//! The manage Lambda: builds its clients once per container, then serves the
//! router through lambda_http (API Gateway REST/HTTP API or a function URL),
//! with API Gateway's source address as the login throttle's peer.
use relayops_shared::api::lambda::LambdaHttp;
use relayops_shared::telemetry;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    telemetry::init();
    let app = LambdaHttp::from_env()?;
    let peer = axum::middleware::from_fn(relayops_shared::api::lambda_peer::source_ip_as_peer);
    lambda_http::run(app.app(relayops_manage::router).layer(peer)).await
}
