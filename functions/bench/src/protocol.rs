//! How the bench's clients post, as the API asks its clients to: a `503` or
//! `429` is sent again after its `Retry-After` (capped), with the same body
//! and `Idempotency-Key`, until [`RETRY_BUDGET`] has passed in all. A refusal
//! writes nothing, so the retry cannot double an event; the key makes even a
//! retry after a lost answer safe.
use std::time::{Duration, Instant};

/// The longest a client goes on retrying one request.
pub const RETRY_BUDGET: Duration = Duration::from_secs(60);
/// The longest single wait honoured, whatever `Retry-After` says.
const MAX_WAIT: Duration = Duration::from_secs(10);

/// A fresh idempotency key for one event (`bench-<uuid>`).
pub fn idempotency_key() -> String {
    format!("bench-{}", uuid::Uuid::new_v4().simple())
}

/// The final answer (or transport error) and the refusals retried before it.
pub struct Sent {
    pub response: Result<reqwest::Response, reqwest::Error>,
    /// The status of each answer retried (503 or 429), in order.
    pub refused: Vec<u16>,
}

/// Sends the request `build` makes (call it with the same body and key each
/// time) until the answer is neither 503 nor 429, or the budget is spent.
pub async fn send(mut build: impl FnMut() -> reqwest::RequestBuilder) -> Sent {
    let started = Instant::now();
    let mut refused = Vec::new();
    loop {
        let response = build().send().await;
        let status = response.as_ref().map(|r| r.status().as_u16()).unwrap_or(0);
        if !matches!(status, 503 | 429) {
            return Sent { response, refused };
        }
        let wait = response
            .as_ref()
            .ok()
            .and_then(|r| r.headers().get(reqwest::header::RETRY_AFTER))
            .and_then(|value| value.to_str().ok()?.trim().parse::<u64>().ok())
            .map_or(Duration::from_secs(1), Duration::from_secs)
            .min(MAX_WAIT);
        if started.elapsed() + wait > RETRY_BUDGET {
            return Sent { response, refused };
        }
        refused.push(status);
        tokio::time::sleep(wait).await;
    }
}
