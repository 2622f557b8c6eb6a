//! The bench's own webhook receiver on loopback: answers 200 at once and
//! records when each delivery arrived (first arrival per delivery id, and how
//! many requests each delivery took).
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::Router;

#[derive(Default)]
pub struct Arrivals {
    /// event id -> first arrival of any of its deliveries, per delivery
    pub by_delivery: HashMap<String, (String, Instant)>,
    pub requests: u64,
}

#[derive(Clone, Default)]
pub struct Receiver {
    pub arrivals: Arc<Mutex<Arrivals>>,
}

impl Receiver {
    pub fn delivered(&self) -> usize {
        self.arrivals.lock().map(|a| a.by_delivery.len()).unwrap_or(0)
    }

    pub fn reset(&self) {
        if let Ok(mut arrivals) = self.arrivals.lock() {
            *arrivals = Arrivals::default();
        }
    }
}

async fn receive(State(receiver): State<Receiver>, headers: HeaderMap) -> &'static str {
    let now = Instant::now();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    if let Ok(mut arrivals) = receiver.arrivals.lock() {
        arrivals.requests += 1;
        arrivals.by_delivery.entry(header("x-relayops-delivery-id")).or_insert((header("x-relayops-event-id"), now));
    }
    "ok"
}

/// Serves on an OS-chosen loopback port; returns the receiver and its base URL.
pub async fn start() -> anyhow::Result<(Receiver, String)> {
    let receiver = Receiver::default();
    let app = Router::new().route("/hook/{name}", post(receive)).with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((receiver, format!("http://{address}")))
}
