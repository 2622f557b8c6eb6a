//! The manage Lambda: builds its clients once per container, then serves the
//! router through lambda_http (API Gateway REST/HTTP API or a function URL).
use relayops_shared::api::lambda::LambdaHttp;
use relayops_shared::telemetry;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    telemetry::init();
    let app = LambdaHttp::from_env()?;
    lambda_http::run(app.app(relayops_manage::router).layer(axum::middleware::from_fn(source_ip_as_peer))).await
}

/// There is no socket in a Lambda: the address API Gateway saw the caller
/// connect from (its request context, not a header the caller wrote) stands
/// in as the peer the login throttle counts by.
async fn source_ip_as_peer(
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use lambda_http::request::RequestContext;
    use lambda_http::RequestExt;
    let source = match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(context)) => context.http.source_ip.clone(),
        Some(RequestContext::ApiGatewayV1(context)) => context.identity.source_ip.clone(),
        _ => None,
    };
    if let Some(ip) = source.and_then(|text| text.parse::<std::net::IpAddr>().ok()) {
        request.extensions_mut().insert(axum::extract::ConnectInfo(std::net::SocketAddr::new(ip, 0)));
    }
    next.run(request).await
}
