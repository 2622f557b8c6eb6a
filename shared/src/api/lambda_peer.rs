//! The login throttle's peer in a Lambda. There is no socket there: the address
//! API Gateway saw the caller connect from (its request context, not a header
//! the caller wrote) stands in as the peer `ClientAddress` counts by. Every
//! HTTP Lambda that reads `ClientAddress` (manage's login, the console's
//! sign-in) layers this over its router. Built with the `lambda` feature.
use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request};
use axum::middleware::Next;
use axum::response::Response;
use lambda_http::request::RequestContext;
use lambda_http::RequestExt;

/// Middleware (`axum::middleware::from_fn(source_ip_as_peer)`): inserts
/// API Gateway's source address as the request's `ConnectInfo`.
pub async fn source_ip_as_peer(mut request: Request, next: Next) -> Response {
    let source = match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(context)) => context.http.source_ip.clone(),
        Some(RequestContext::ApiGatewayV1(context)) => context.identity.source_ip.clone(),
        _ => None,
    };
    if let Some(ip) = source.and_then(|text| text.parse::<IpAddr>().ok()) {
        request.extensions_mut().insert(ConnectInfo(SocketAddr::new(ip, 0)));
    }
    next.run(request).await
}
