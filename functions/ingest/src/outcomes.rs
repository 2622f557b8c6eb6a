//! Ingest's counters: events stored, idempotent duplicates, and refusals by
//! reason. Stored and duplicate are counted by the handlers after the write
//! commits; refusals by a route layer that reads the problem type the error
//! response carries, so every refusal is counted however it arose.
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use relayops_shared::api::ProblemType;
use relayops_shared::observe::names::{EVENTS_DUPLICATE, EVENTS_RECEIVED, EVENTS_REJECTED};

/// Events stored and duplicates answered, after the commit.
pub(crate) fn count(stored: usize, duplicates: usize) {
    metrics::counter!(EVENTS_RECEIVED).increment(stored as u64);
    metrics::counter!(EVENTS_DUPLICATE).increment(duplicates as u64);
}

/// Events refused inside an accepted batch (invalid items, reused keys).
pub(crate) fn count_rejected_items(reason: &'static str, items: usize) {
    metrics::counter!(EVENTS_REJECTED, "reason" => reason).increment(items as u64);
}

/// Route layer: a refused ingest request counts once, by its problem type
/// (`overloaded` is reported as `backpressure`).
pub(crate) async fn count_refusals(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if status.is_client_error() || status.is_server_error() {
        let reason = match response.extensions().get::<ProblemType>() {
            Some(ProblemType("overloaded")) => "backpressure",
            Some(ProblemType(kind)) => kind,
            // A refusal from outside our handlers (axum's own rejections).
            None if status.is_client_error() => "bad-request",
            None => "internal",
        };
        metrics::counter!(EVENTS_REJECTED, "reason" => reason).increment(1);
    }
    response
}
