//! The bench's own webhook receiver on loopback: answers 200 at once (or, on
//! `/slow/{ms}/{name}`, after `ms` milliseconds; on `/status/{code}/{name}`,
//! with that status and no `Retry-After`; on `/until/{unix_ms}/{name}`, 500
//! until that moment and 200 after; on `/fails-once/{name}`, 503 to the
//! first request of every other delivery and 200 to the next — a delivery counting as
//! arrived only once answered 200) and records when each delivery
//! arrived (first arrival per delivery id, with the hook it came to, and how
//! many requests each delivery took).
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;

#[derive(Default)]
pub struct Arrivals {
    /// delivery id -> (event id, first arrival, hook name)
    pub by_delivery: HashMap<String, (String, Instant, String)>,
    pub requests: u64,
    /// Deliveries `/fails-once/` answered 503 already.
    failed_once: std::collections::HashSet<String>,
}

#[derive(Clone, Default)]
pub struct Receiver {
    pub arrivals: Arc<Mutex<Arrivals>>,
}

impl Receiver {
    pub fn delivered(&self) -> usize {
        self.arrivals.lock().map(|a| a.by_delivery.len()).unwrap_or(0)
    }

    /// Deliveries that arrived at hooks whose name starts with `prefix`.
    pub fn delivered_to(&self, prefix: &str) -> usize {
        self.arrivals
            .lock()
            .map(|a| a.by_delivery.values().filter(|(_, _, hook)| hook.starts_with(prefix)).count())
            .unwrap_or(0)
    }

    /// Deliveries that first arrived from `from` to `to` (both included).
    pub fn delivered_between(&self, from: Instant, to: Instant) -> usize {
        self.arrivals
            .lock()
            .map(|a| a.by_delivery.values().filter(|(_, at, _)| (from..=to).contains(at)).count())
            .unwrap_or(0)
    }

    /// How many deliveries arrived at the hook named `hook`, and when the
    /// last of them first arrived.
    pub fn last_arrival_at(&self, hook: &str) -> (usize, Option<Instant>) {
        let Ok(arrivals) = self.arrivals.lock() else { return (0, None) };
        let at: Vec<Instant> =
            arrivals.by_delivery.values().filter(|(_, _, name)| name == hook).map(|(_, at, _)| *at).collect();
        (at.len(), at.iter().max().copied())
    }

    /// When the last delivery so far first arrived.
    pub fn last_arrival(&self) -> Option<Instant> {
        self.arrivals.lock().ok()?.by_delivery.values().map(|(_, at, _)| *at).max()
    }

    pub fn reset(&self) {
        if let Ok(mut arrivals) = self.arrivals.lock() {
            *arrivals = Arrivals::default();
        }
    }
}

fn record(receiver: &Receiver, headers: &HeaderMap, hook: String) {
    let now = Instant::now();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    if let Ok(mut arrivals) = receiver.arrivals.lock() {
        arrivals.requests += 1;
        let event = header("x-relayops-event-id");
        arrivals.by_delivery.entry(header("x-relayops-delivery-id")).or_insert((event, now, hook));
    }
}

async fn receive(State(receiver): State<Receiver>, Path(hook): Path<String>, headers: HeaderMap) -> &'static str {
    record(&receiver, &headers, hook);
    "ok"
}

/// Arrival is recorded when the request comes in; the answer takes `ms`.
async fn receive_slowly(
    State(receiver): State<Receiver>,
    Path((ms, hook)): Path<(u64, String)>,
    headers: HeaderMap,
) -> &'static str {
    record(&receiver, &headers, format!("slow-{hook}"));
    tokio::time::sleep(std::time::Duration::from_millis(ms.min(60_000))).await;
    "ok"
}

/// Arrival is recorded as on the other routes; the answer is `code` (500 if
/// `code` is no status).
async fn receive_with_status(
    State(receiver): State<Receiver>,
    Path((code, hook)): Path<(u16, String)>,
    headers: HeaderMap,
) -> StatusCode {
    record(&receiver, &headers, format!("status-{hook}"));
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// 500 until `unix_ms` (milliseconds since the epoch), then 200: a receiver
/// that is down for a while. A request answered 500 is counted, not recorded
/// as an arrival.
async fn receive_once_up(
    State(receiver): State<Receiver>,
    Path((unix_ms, hook)): Path<(u64, String)>,
    headers: HeaderMap,
) -> StatusCode {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    if now.as_millis() < u128::from(unix_ms) {
        if let Ok(mut arrivals) = receiver.arrivals.lock() {
            arrivals.requests += 1;
        }
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    record(&receiver, &headers, format!("until-{hook}"));
    StatusCode::OK
}

/// 503 to the first request (counted, not an arrival) of every other
/// delivery (by its id's last character), 200 after: half the deliveries
/// need one retry, and failures never come twenty in a row (an endpoint's
/// circuit stays closed). Recorded as hook `retried-{name}`.
async fn receive_after_one_failure(
    State(receiver): State<Receiver>,
    Path(hook): Path<String>,
    headers: HeaderMap,
) -> StatusCode {
    let delivery = headers.get("x-relayops-delivery-id").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let fails = delivery.bytes().last().is_some_and(|last| last % 2 == 0);
    let first =
        fails && receiver.arrivals.lock().map(|mut a| a.failed_once.insert(delivery.to_owned())).unwrap_or(false);
    if first {
        if let Ok(mut arrivals) = receiver.arrivals.lock() {
            arrivals.requests += 1;
        }
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    record(&receiver, &headers, format!("retried-{hook}"));
    StatusCode::OK
}

/// Serves on an OS-chosen loopback port; returns the receiver and its base URL.
pub async fn start() -> anyhow::Result<(Receiver, String)> {
    let receiver = Receiver::default();
    let app = Router::new()
        .route("/hook/{name}", post(receive))
        .route("/slow/{ms}/{name}", post(receive_slowly))
        .route("/status/{code}/{name}", post(receive_with_status))
        .route("/until/{unix_ms}/{name}", post(receive_once_up))
        .route("/fails-once/{name}", post(receive_after_one_failure))
        .with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((receiver, format!("http://{address}")))
}
