//! Middleware every router gets: a request id and the request's duration.
//!
//! The id comes from the caller's `x-request-id` when it is a sane token (at
//! most 128 characters of `A-Z a-z 0-9 - _ . :`), otherwise a new one is made;
//! it is returned in the response's `x-request-id`, set on the `request` span
//! (so every log line inside the request carries it), quoted in problem
//! bodies (`request_id`), and on the one access line per request. The duration is recorded by route template and status.
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use super::names::HTTP_REQUEST_DURATION;

pub const REQUEST_ID_HEADER: &str = "x-request-id";
const MAX_REQUEST_ID_LEN: usize = 128;

tokio::task_local! {
    /// The id of the request being served on this task (problem bodies quote it).
    static CURRENT_REQUEST_ID: String;
}

/// The id of the request being served, when inside [`observe`].
pub fn current_request_id() -> Option<String> {
    CURRENT_REQUEST_ID.try_with(Clone::clone).ok()
}

/// The caller's id when it is safe to log and echo back.
fn accepted_request_id(value: &HeaderValue) -> Option<String> {
    let text = value.to_str().ok()?;
    let sane = !text.is_empty()
        && text.len() <= MAX_REQUEST_ID_LEN
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
    sane.then(|| text.to_owned())
}

fn new_request_id() -> String {
    format!("req_{}", uuid::Uuid::new_v4().simple())
}

/// Methods as a bounded label: anything non-standard is `other`.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// `axum::middleware::from_fn(observe)`, added with `Router::layer` so the
/// matched route template is known.
pub async fn observe(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let request_id =
        request.headers().get(REQUEST_ID_HEADER).and_then(accepted_request_id).unwrap_or_else(new_request_id);
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", MatchedPath::as_str).to_owned();
    let method = method_label(request.method());
    let span = tracing::info_span!("request", request_id = %request_id);
    let mut response = CURRENT_REQUEST_ID.scope(request_id.clone(), next.run(request).instrument(span)).await;

    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    metrics::histogram!(HTTP_REQUEST_DURATION, "method" => method, "route" => route.clone(), "status" => status.to_string())
        .record(elapsed.as_secs_f64());
    tracing::info!(
        target: "relayops::access",
        request_id = %request_id,
        method,
        route = %route,
        status,
        latency_ms = elapsed.as_millis() as u64,
        "request"
    );
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bounded_printable_tokens_are_taken_from_the_caller() {
        let take = |text: &str| accepted_request_id(&HeaderValue::from_str(text).unwrap());
        assert_eq!(take("abc-123_x.y:z").as_deref(), Some("abc-123_x.y:z"));
        assert_eq!(take(""), None);
        assert_eq!(take("has space"), None);
        assert_eq!(take("new\tline"), None);
        assert_eq!(take(&"a".repeat(MAX_REQUEST_ID_LEN)).map(|id| id.len()), Some(MAX_REQUEST_ID_LEN));
        assert_eq!(take(&"a".repeat(MAX_REQUEST_ID_LEN + 1)), None);
        assert!(new_request_id().starts_with("req_"));
    }
}
