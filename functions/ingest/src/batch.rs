//! `POST /v1/events/batch`: up to 500 events in one transaction (their writes
//! one set-based statement), each with its own idempotency key and its own
//! result. Invalid items are reported and
//! skipped; the valid ones are committed together (or, if the database fails,
//! none are). Rate limits count every event of the batch.
use axum::extract::State;
use axum::Json;
use relayops_shared::api::{ApiError, ApiJson, ApiState, Authenticated};
use relayops_shared::auth::Scope;
use relayops_shared::db::DbError;
use relayops_shared::domain::{EventPayload, EventType, IdempotencyKey, OrderingKey, ValidationError};
use relayops_shared::repo::event_batches;
use relayops_shared::repo::events::{IngestOutcome, NewEvent, PreparedEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::{EventReceiptResponse, PostEventRequest};

pub const MAX_BATCH: usize = 500;

/// Up to 500 events, each as `POST /v1/events` takes it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    #[schema(value_type = Vec<PostEventRequest>)]
    events: Vec<Value>,
}

/// What became of one event of the batch.
#[derive(Debug, Serialize, ToSchema)]
pub struct ItemResult {
    index: usize,
    /// 201 created, 200 a repeat of an earlier event, 409 key reused for a
    /// different event, 413 payload over 256 KiB, 422 invalid.
    status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    event: Option<EventReceiptResponse>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchResponse {
    accepted: usize,
    duplicates: usize,
    rejected: usize,
    results: Vec<ItemResult>,
}

struct Parsed {
    event_type: EventType,
    payload: EventPayload,
    key: Option<IdempotencyKey>,
    ordering_key: Option<OrderingKey>,
}

/// An item refused before the database: its status (413 or 422) and why.
struct Refused {
    status: u16,
    error: String,
}

impl Refused {
    fn invalid(error: impl ToString) -> Self {
        Self { status: 422, error: error.to_string() }
    }
}

/// What became of one item in the database (or why it never got there).
enum Written {
    Invalid(Refused),
    Outcome(IngestOutcome),
}

fn parse_item(value: Value) -> Result<Parsed, Refused> {
    let item: PostEventRequest = serde_json::from_value(value).map_err(Refused::invalid)?;
    let event_type = EventType::parse(&item.event_type).map_err(Refused::invalid)?;
    let payload = EventPayload::parse(item.payload).map_err(|error| {
        // As a single event's: over the limit 413, otherwise 422.
        let error = ApiError::from(error);
        Refused { status: error.status().as_u16(), error: error.to_string() }
    })?;
    let key = item.idempotency_key.as_deref().map(IdempotencyKey::parse).transpose().map_err(Refused::invalid)?;
    let ordering_key = item.ordering_key.as_deref().map(OrderingKey::parse).transpose().map_err(Refused::invalid)?;
    Ok(Parsed { event_type, payload, key, ordering_key })
}

/// Posts up to 500 events in one transaction; each item gets its own result.
#[utoipa::path(
    post, path = "/v1/events/batch", tag = "ingest", request_body = BatchRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every item's result (an item whose payload is over 256 KiB: 413)", body = BatchResponse),
        (status = 413, description = "The body is over 8 MiB"),
        (status = 429, description = "The tenant is over its ingest rate (see `Retry-After`)"),
        (status = 503, description = "The pipeline is backed up, or history partitions are missing (see `Retry-After` and the problem type)")
    )
)]
pub async fn post_batch(
    State(state): State<ApiState>,
    caller: Authenticated,
    ApiJson(request): ApiJson<BatchRequest>,
) -> Result<Json<BatchResponse>, ApiError> {
    caller.require(Scope::Ingest)?;
    if request.events.is_empty() || request.events.len() > MAX_BATCH {
        return Err(ValidationError::new("events", format!("must hold 1 to {MAX_BATCH} events")).into());
    }
    state.check_backpressure()?;
    state.check_ingest_rate_for(&caller, request.events.len() as u32).await?;

    let parsed: Vec<Result<Parsed, Refused>> = request.events.into_iter().map(parse_item).collect();
    let tenant = caller.tenant_id;
    let valid: Vec<PreparedEvent> = parsed
        .iter()
        .filter_map(|item| item.as_ref().ok())
        .map(|item| {
            let new_event = NewEvent {
                event_type: &item.event_type,
                payload: &item.payload,
                idempotency_key: item.key.as_ref(),
                ordering_key: item.ordering_key.as_ref(),
            };
            PreparedEvent::new(tenant, &new_event)
        })
        .collect();
    // The valid events in one set-based statement (the first occurrence of a
    // key wins), in one transaction with the answers to keys already held.
    let mut client = state.pool.get().await.map_err(DbError::from)?;
    let tx = client.transaction().await.map_err(DbError::from)?;
    let mut written = if valid.is_empty() {
        Vec::new().into_iter()
    } else {
        event_batches::write_together(&tx, &valid, state.ingest_writes.options()).await?.into_iter()
    };
    let outcomes: Vec<Result<Written, DbError>> = parsed
        .into_iter()
        .map(|item| match item {
            Err(refused) => Ok(Written::Invalid(refused)),
            Ok(_) => written.next().map(Written::Outcome).ok_or_else(|| DbError::Pool("batch item not written".into())),
        })
        .collect();
    let mut results = Vec::with_capacity(outcomes.len());
    let mut fanned_out = false;
    for (index, outcome) in outcomes.into_iter().enumerate() {
        let result = match outcome? {
            Written::Invalid(Refused { status, error }) => {
                ItemResult { index, status, event: None, error: Some(error) }
            }
            Written::Outcome(IngestOutcome::Created(receipt)) => {
                fanned_out |= receipt.deliveries > 0;
                ItemResult { index, status: 201, event: Some(receipt.into()), error: None }
            }
            Written::Outcome(IngestOutcome::Duplicate(receipt)) => {
                ItemResult { index, status: 200, event: Some(receipt.into()), error: None }
            }
            Written::Outcome(IngestOutcome::KeyReused { original }) => ItemResult {
                index,
                status: 409,
                event: None,
                error: Some(format!("idempotency key already used for event {original} with a different request")),
            },
        };
        results.push(result);
    }
    tx.commit().await.map_err(DbError::from)?;
    if fanned_out {
        state.wake_publisher();
    }
    let count = |status: u16| results.iter().filter(|r| r.status == status).count();
    let response = BatchResponse {
        accepted: count(201),
        duplicates: count(200),
        rejected: results.len() - count(201) - count(200),
        results,
    };
    tracing::info!(tenant_id = %caller.tenant_id, accepted = response.accepted, rejected = response.rejected, "event batch");
    crate::outcomes::count(response.accepted, response.duplicates);
    crate::outcomes::count_rejected_items("batch-item", response.rejected);
    Ok(Json(response))
}
