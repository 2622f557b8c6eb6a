//! The ingest function: `POST /v1/events` (and `POST /v1/events/batch`, see
//! [`batch`]). Authenticates the caller, validates the body, and in ONE
//! transaction stores the event, a delivery per matching enabled endpoint and
//! one outbox row for the event (the publisher sends a message per delivery).
//! A repeated idempotency key returns the original event with 200.
//!
//! Invariant: ingest never talks to RabbitMQ; the outbox is its only output.
mod batch;
mod outcomes;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use relayops_shared::api::{not_found_fallback, ApiError, ApiJson, ApiState, Authenticated};
use relayops_shared::auth::Scope;
use relayops_shared::domain::{
    EventPayload, EventType, IdempotencyKey, OrderingKey, ValidationError, MAX_PAYLOAD_BYTES,
};
use relayops_shared::ids::EventId;
use relayops_shared::repo::events::{EventReceipt, IngestOutcome, NewEvent, PreparedEvent};
use serde::{Deserialize, Serialize};
use utoipa::{OpenApi, ToSchema};

/// Room for the envelope around the largest payload.
const MAX_BODY_BYTES: usize = MAX_PAYLOAD_BYTES + 16 * 1024;
/// A batch may carry up to 8 MiB in all (each event still within its own limit).
const MAX_BATCH_BODY_BYTES: usize = 8 * 1024 * 1024;

/// The function's routes, for mounting beside others (the local runner).
pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/v1/events", post(post_event))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .route("/v1/events/batch", post(batch::post_batch).layer(DefaultBodyLimit::max(MAX_BATCH_BODY_BYTES)))
        .route_layer(axum::middleware::from_fn(outcomes::count_refusals))
}

/// The function on its own, as its Lambda serves it.
pub fn router(state: ApiState) -> Router {
    // Request ids, and one CloudWatch EMF line per request (its metrics).
    relayops_shared::observe::lambda::lambda_router(routes().fallback(not_found_fallback).with_state(state), "ingest")
}

#[derive(OpenApi)]
#[openapi(
    paths(post_event, batch::post_batch),
    tags((name = "ingest", description = "Posting events"))
)]
struct IngestApi;

/// This function's routes, documented.
pub fn openapi() -> utoipa::openapi::OpenApi {
    IngestApi::openapi()
}

/// An event to deliver to every endpoint subscribed to its type.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct PostEventRequest {
    /// Dot-separated segments of letters, digits, `_` or `-` (e.g. `order.created`).
    #[schema(example = "order.created")]
    #[schema(pattern = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$", min_length = 1, max_length = 128)]
    event_type: String,
    /// A JSON object, at most 256 KiB (262,144 bytes) as compact JSON; larger
    /// is 413.
    #[schema(value_type = Object)]
    payload: serde_json::Value,
    /// Repeating a key returns the original event instead of a new one (also
    /// accepted as the `Idempotency-Key` header; both must agree).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 255)]
    idempotency_key: Option<String>,
    /// Opt-in ordering: the deliveries of events that share a key go to each
    /// endpoint one at a time, in the order the events were accepted — the
    /// next only once the previous one is delivered, failed or dead (retries
    /// hold it). 1 to 256 characters, no control characters, no leading or
    /// trailing whitespace. Events without one are delivered in parallel.
    #[serde(default)]
    #[schema(example = "order-1042", min_length = 1, max_length = 256)]
    ordering_key: Option<String>,
}

/// The stored event (the original one for a repeated idempotency key).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventReceiptResponse {
    id: EventId,
    event_type: String,
    idempotency_key: Option<String>,
    /// The event's ordering key, if it was posted with one.
    ordering_key: Option<String>,
    received_at: DateTime<Utc>,
    /// How many deliveries the event fanned out to.
    deliveries: i64,
}

impl From<EventReceipt> for EventReceiptResponse {
    fn from(receipt: EventReceipt) -> Self {
        Self {
            id: receipt.id,
            event_type: receipt.event_type,
            idempotency_key: receipt.idempotency_key,
            ordering_key: receipt.ordering_key,
            received_at: receipt.received_at,
            deliveries: receipt.deliveries,
        }
    }
}

/// The key may come in the body or the `Idempotency-Key` header; both must agree.
fn idempotency_key(headers: &HeaderMap, body: Option<&str>) -> Result<Option<IdempotencyKey>, ApiError> {
    let header = match headers.get("idempotency-key") {
        Some(value) => Some(
            value.to_str().map_err(|_| ValidationError::new("idempotency_key", "header must be printable ASCII"))?,
        ),
        None => None,
    };
    let text = match (header, body) {
        (Some(header), Some(body)) if header != body => {
            return Err(
                ValidationError::new("idempotency_key", "the Idempotency-Key header and the body field differ").into()
            )
        }
        (header, body) => header.or(body),
    };
    Ok(text.map(IdempotencyKey::parse).transpose()?)
}

/// Posts one event: stored with a delivery per subscribed, enabled endpoint,
/// in one transaction.
#[utoipa::path(
    post, path = "/v1/events", tag = "ingest", request_body = PostEventRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "Same as the body's `idempotency_key`")),
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Stored; deliveries are on their way", body = EventReceiptResponse),
        (status = 200, description = "A repeat of an earlier event (same idempotency key)", body = EventReceiptResponse),
        (status = 409, description = "The idempotency key was used for a different event"),
        (status = 413, description = "The payload is over 256 KiB, or the body too large"),
        (status = 429, description = "The tenant is over its ingest rate (see `Retry-After`)"),
        (status = 503, description = "The pipeline is backed up, or history partitions are missing (see `Retry-After` and the problem type)")
    )
)]
async fn post_event(
    State(state): State<ApiState>,
    caller: Authenticated,
    headers: HeaderMap,
    ApiJson(request): ApiJson<PostEventRequest>,
) -> Result<(StatusCode, Json<EventReceiptResponse>), ApiError> {
    let entered = std::time::Instant::now();
    caller.require(Scope::Ingest)?;
    // Backpressure first: it is in memory, and refusing there spends no token.
    state.check_backpressure()?;
    state.check_ingest_rate(&caller).await?;
    let event_type = EventType::parse(&request.event_type)?;
    let payload = EventPayload::parse(request.payload)?;
    let key = idempotency_key(&headers, request.idempotency_key.as_deref())?;
    let ordering_key = request.ordering_key.as_deref().map(OrderingKey::parse).transpose()?;

    // One statement, shared with the requests that arrive meanwhile (group
    // commit); atomic on its own, so no explicit transaction.
    let new_event = NewEvent {
        event_type: &event_type,
        payload: &payload,
        idempotency_key: key.as_ref(),
        ordering_key: ordering_key.as_ref(),
    };
    let outcome = state.ingest_writes.write(PreparedEvent::new(caller.tenant_id, &new_event)).await??;
    match outcome {
        IngestOutcome::Created(mut receipt) => {
            outcomes::count(1, 0);
            relayops_shared::hop!("ingest.committed", event_id = %receipt.id, handler_us = entered.elapsed().as_micros() as u64);
            // Stored, not yet published by this process: dying here leaves the
            // rows to any other publisher (LISTEN wake-up missed, idle
            // interval; a row claimed for this process's publisher once its
            // claim expires).
            relayops_shared::failpoint::crash_if_armed("ingest.after_commit");
            match receipt.handed.take() {
                // To this process's publisher, which needs no wake-up.
                Some(handed) => drop(handed),
                None if receipt.deliveries > 0 => state.wake_publisher(),
                None => {}
            }
            tracing::info!(tenant_id = %caller.tenant_id, event_id = %receipt.id, deliveries = receipt.deliveries, "event accepted");
            Ok((StatusCode::CREATED, Json(receipt.into())))
        }
        IngestOutcome::Duplicate(receipt) => {
            outcomes::count(0, 1);
            Ok((StatusCode::OK, Json(receipt.into())))
        }
        IngestOutcome::KeyReused { original } => Err(ApiError::Conflict(format!(
            "idempotency key already used for event {original} with a different event type or payload"
        ))),
    }
}
