//! What the simulator remembers: registered secrets, every request received
//! (with its signature check), and per-delivery counters for scripted failures.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use chrono::{DateTime, Utc};
use relayops_shared::domain::SigningSecret;
use relayops_shared::signing;
use serde::Serialize;
use tokio::sync::watch;

/// One request as the simulator saw it.
#[derive(Debug, Clone, Serialize)]
pub struct Received {
    pub path: String,
    pub delivery_id: Option<String>,
    pub webhook_id: Option<String>,
    pub event_type: Option<String>,
    pub attempt: Option<u32>,
    pub body: serde_json::Value,
    /// The body exactly as received (what the signature covers).
    pub raw_body: String,
    pub webhook_timestamp: Option<String>,
    pub webhook_signature: Option<String>,
    /// `None` when no secret is registered; otherwise whether any verified.
    pub signature_valid: Option<bool>,
    /// How many signatures the request carried (one per active secret).
    pub signature_count: usize,
    /// How many registered secrets verify one of them.
    pub verified_by: usize,
    /// Seconds between the `webhook-timestamp` and arrival.
    pub timestamp_skew_secs: Option<i64>,
    pub answered_status: u16,
    pub received_at: DateTime<Utc>,
}

#[derive(Default)]
struct Inner {
    secrets: Vec<SigningSecret>,
    received: Vec<Received>,
    per_delivery: HashMap<String, u32>,
    /// First attempts to `/sim/alternate/…` so far.
    alternating: u64,
    /// Per path: requests open now, and the most ever open at once.
    in_flight: HashMap<String, (u32, u32)>,
}

/// Counts a request as open on its path until dropped (also when the client
/// gives up and the handler is cancelled).
pub struct OpenRequest {
    simulator: Simulator,
    path: String,
}

impl Drop for OpenRequest {
    fn drop(&mut self) {
        if let Some((open, _)) = self.simulator.lock().in_flight.get_mut(&self.path) {
            *open = open.saturating_sub(1);
        }
    }
}

/// Cheap to clone; all clones share one record.
#[derive(Clone)]
pub struct Simulator {
    inner: Arc<Mutex<Inner>>,
    count: Arc<watch::Sender<usize>>,
}

impl Default for Simulator {
    fn default() -> Self {
        Self { inner: Arc::default(), count: Arc::new(watch::channel(0).0) }
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|value| value.to_str().ok()).map(str::to_owned)
}

impl Simulator {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data; keep going.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn register_secret(&self, text: &str) -> Result<(), String> {
        let secret = SigningSecret::parse(text).map_err(|error| error.to_string())?;
        self.lock().secrets.push(secret);
        Ok(())
    }

    /// How many requests this delivery id has made so far, this one included.
    /// Whether this first attempt to `/sim/alternate/…` is an odd one (the
    /// 1st, 3rd, …), counted across every delivery.
    pub fn odd_alternating_request(&self) -> bool {
        let mut inner = self.lock();
        inner.alternating += 1;
        inner.alternating % 2 == 1
    }

    pub fn count_for_delivery(&self, headers: &HeaderMap) -> u32 {
        let key = header(headers, signing::HEADER_DELIVERY_ID).unwrap_or_default();
        let mut inner = self.lock();
        let count = inner.per_delivery.entry(key).or_insert(0);
        *count += 1;
        *count
    }

    pub fn record(&self, path: &str, headers: &HeaderMap, body: &[u8], answered_status: u16) {
        let now = Utc::now();
        let webhook_id = header(headers, signing::HEADER_ID);
        let timestamp = header(headers, signing::HEADER_TIMESTAMP).and_then(|t| t.parse::<i64>().ok());
        let signature = header(headers, signing::HEADER_SIGNATURE);
        let mut inner = self.lock();
        let verified_by = match (&webhook_id, timestamp, &signature) {
            (Some(id), Some(ts), Some(sig)) => {
                inner.secrets.iter().filter(|secret| signing::verify(secret, id, ts, body, sig)).count()
            }
            _ => 0,
        };
        let signature_valid = (!inner.secrets.is_empty()).then_some(verified_by > 0);
        let signature_count = signature.as_deref().map(|sig| sig.split(' ').count()).unwrap_or(0);
        inner.received.push(Received {
            path: path.to_owned(),
            delivery_id: header(headers, signing::HEADER_DELIVERY_ID),
            webhook_id,
            event_type: header(headers, signing::HEADER_EVENT_TYPE),
            attempt: header(headers, signing::HEADER_ATTEMPT).and_then(|a| a.parse().ok()),
            body: serde_json::from_slice(body).unwrap_or(serde_json::Value::Null),
            raw_body: String::from_utf8_lossy(body).into_owned(),
            webhook_timestamp: header(headers, signing::HEADER_TIMESTAMP),
            webhook_signature: signature.clone(),
            signature_valid,
            signature_count,
            verified_by,
            timestamp_skew_secs: timestamp.map(|ts| now.timestamp() - ts),
            answered_status,
            received_at: now,
        });
        let total = inner.received.len();
        drop(inner);
        self.count.send_replace(total);
    }

    /// Marks a request open on `path` for as long as the guard lives.
    pub fn open(&self, path: &str) -> OpenRequest {
        let mut inner = self.lock();
        let (open, max) = inner.in_flight.entry(path.to_owned()).or_insert((0, 0));
        *open += 1;
        *max = (*max).max(*open);
        drop(inner);
        // Wake waiters: what is open is part of what they may be waiting for.
        self.count.send_modify(|_| {});
        OpenRequest { simulator: self.clone(), path: path.to_owned() }
    }

    /// The most requests that were ever open at once on `path`.
    pub fn max_in_flight(&self, path: &str) -> u32 {
        self.lock().in_flight.get(path).map(|(_, max)| *max).unwrap_or(0)
    }

    pub fn received(&self) -> Vec<Received> {
        self.lock().received.clone()
    }

    /// Waits until `done` holds for what was received, or `limit` passes;
    /// returns the final record either way.
    pub async fn wait_until(&self, limit: Duration, done: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        let mut changes = self.count.subscribe();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let received = self.received();
            if done(&received) {
                return received;
            }
            if tokio::time::timeout_at(deadline, changes.changed()).await.is_err() {
                return self.received();
            }
        }
    }
}
