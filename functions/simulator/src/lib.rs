//! The simulator: a real webhook receiver whose path picks its behaviour, which
//! verifies each request's Standard Webhooks signature against the secrets
//! registered with it and records what it received.
//!
//! | path | answers |
//! |---|---|
//! | `POST /sim/ok` | 200 |
//! | `POST /sim/status/{code}` | that status (e.g. 410, 500, 503) |
//! | `POST /sim/slow/{ms}` | 200 after `ms` milliseconds |
//! | `POST /sim/retry-after/{secs}` | 429 with `Retry-After: secs` |
//! | `POST /sim/flaky/{n}` | 503 for the first `n` requests of a delivery id, then 200 |
//! | `POST /sim/alternate/{code}` | that status to every other first attempt (the 1st, 3rd, … of any delivery), 200 to the others and to every retry |
//! | `POST /sim/slow-once/{ms}` | 200 after `ms` milliseconds the first time a delivery id comes, at once after |
//! | `POST /sim/timeout` | never answers in time |
//! | `POST /sim/redirect` | 302 to the cloud metadata address (a receiver must not be followed) |
//! | `POST /sim/chaos` | per (delivery id, attempt), pseudo-randomly: 10 % 500, 5 % hang 2 s, 10 % slow 200 ms, else 200 |
//! | `POST /_sim/secrets` `{"secret": "whsec_…"}` | registers a secret to verify with |
//! | `GET /_sim/received` | everything received, oldest first |
//!
//! Invariant: the simulator knows nothing of RelayOps' database or broker; it
//! sees only what any receiver would see.
mod record;

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

pub use record::{Received, Simulator};

pub fn router(simulator: Simulator) -> Router {
    Router::new()
        .route("/sim/ok", post(ok))
        .route("/sim/status/{code}", post(status))
        .route("/sim/slow/{ms}", post(slow))
        .route("/sim/slow-once/{ms}", post(slow_once))
        .route("/sim/retry-after/{secs}", post(retry_after))
        .route("/sim/flaky/{failures}", post(flaky))
        .route("/sim/alternate/{code}", post(alternate))
        .route("/sim/timeout", post(timeout))
        .route("/sim/chaos", post(chaos))
        .route("/sim/redirect", post(redirect))
        .route("/_sim/secrets", post(register_secret))
        .route("/_sim/received", get(list_received))
        .with_state(simulator)
}

async fn ok(State(sim): State<Simulator>, headers: HeaderMap, body: Bytes) -> Response {
    sim.record("/sim/ok", &headers, &body, 200);
    (StatusCode::OK, "ok").into_response()
}

async fn status(State(sim): State<Simulator>, Path(code): Path<u16>, headers: HeaderMap, body: Bytes) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
    sim.record(&format!("/sim/status/{code}"), &headers, &body, status.as_u16());
    (status, format!("simulated {}", status.as_u16())).into_response()
}

async fn slow(State(sim): State<Simulator>, Path(ms): Path<u64>, headers: HeaderMap, body: Bytes) -> Response {
    let path = format!("/sim/slow/{ms}");
    let _open = sim.open(&path);
    tokio::time::sleep(Duration::from_millis(ms.min(600_000))).await;
    sim.record(&path, &headers, &body, 200);
    (StatusCode::OK, "slow ok").into_response()
}

async fn slow_once(State(sim): State<Simulator>, Path(ms): Path<u64>, headers: HeaderMap, body: Bytes) -> Response {
    sim.record(&format!("/sim/slow-once/{ms}"), &headers, &body, 200);
    if sim.count_for_delivery(&headers) == 1 {
        tokio::time::sleep(Duration::from_millis(ms.min(600_000))).await;
    }
    (StatusCode::OK, "ok").into_response()
}

async fn retry_after(State(sim): State<Simulator>, Path(secs): Path<u64>, headers: HeaderMap, body: Bytes) -> Response {
    sim.record(&format!("/sim/retry-after/{secs}"), &headers, &body, 429);
    (StatusCode::TOO_MANY_REQUESTS, [("retry-after", secs.to_string())], "slow down").into_response()
}

async fn flaky(State(sim): State<Simulator>, Path(failures): Path<u32>, headers: HeaderMap, body: Bytes) -> Response {
    let seen = sim.count_for_delivery(&headers);
    let status = if seen <= failures { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
    sim.record(&format!("/sim/flaky/{failures}"), &headers, &body, status.as_u16());
    (status, "flaky").into_response()
}

async fn alternate(State(sim): State<Simulator>, Path(code): Path<u16>, headers: HeaderMap, body: Bytes) -> Response {
    let failing = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let retry = headers.get("x-relayops-attempt").and_then(|v| v.to_str().ok()).is_some_and(|attempt| attempt != "1");
    let status = if !retry && sim.odd_alternating_request() { failing } else { StatusCode::OK };
    sim.record(&format!("/sim/alternate/{code}"), &headers, &body, status.as_u16());
    (status, "alternate").into_response()
}

async fn timeout(State(sim): State<Simulator>, headers: HeaderMap, body: Bytes) -> Response {
    sim.record("/sim/timeout", &headers, &body, 0);
    tokio::time::sleep(Duration::from_secs(3600)).await;
    StatusCode::OK.into_response()
}

async fn redirect(State(sim): State<Simulator>, headers: HeaderMap, body: Bytes) -> Response {
    sim.record("/sim/redirect", &headers, &body, 302);
    (StatusCode::FOUND, [("location", "http://169.254.169.254/latest/meta-data/")], "moved").into_response()
}

/// Chaos that is the same for the same (delivery id, attempt), so a run can be
/// reasoned about afterwards, yet spread across deliveries like real failures.
async fn chaos(State(sim): State<Simulator>, headers: HeaderMap, body: Bytes) -> Response {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for name in ["x-relayops-delivery-id", "x-relayops-attempt"] {
        headers.get(name).map(|value| value.as_bytes()).hash(&mut hasher);
    }
    let roll = hasher.finish() % 100;
    let status = match roll {
        0..=9 => StatusCode::INTERNAL_SERVER_ERROR,
        10..=14 => {
            tokio::time::sleep(Duration::from_secs(2)).await;
            StatusCode::OK
        }
        15..=24 => {
            tokio::time::sleep(Duration::from_millis(200)).await;
            StatusCode::OK
        }
        _ => StatusCode::OK,
    };
    sim.record("/sim/chaos", &headers, &body, status.as_u16());
    (status, "chaos").into_response()
}

#[derive(Deserialize)]
struct SecretRequest {
    secret: String,
}

async fn register_secret(State(sim): State<Simulator>, Json(request): Json<SecretRequest>) -> Response {
    match sim.register_secret(&request.secret) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(message) => (StatusCode::UNPROCESSABLE_ENTITY, Json(json!({ "detail": message }))).into_response(),
    }
}

async fn list_received(State(sim): State<Simulator>) -> Json<Vec<Received>> {
    Json(sim.received())
}
