//! The JSON shapes the query API answers with.
use chrono::{DateTime, Utc};
use relayops_shared::ids::{AttemptId, DeliveryId, EndpointId, EventId};
use relayops_shared::repo::attempts::AttemptRecordRow;
use relayops_shared::repo::deliveries::DeliveryRecord;
use relayops_shared::repo::events::EventRecord;
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct ListView<T> {
    pub data: Vec<T>,
}

impl<T> ListView<T> {
    pub fn new(data: Vec<T>) -> Self {
        Self { data }
    }
}

#[derive(Debug, Serialize)]
pub struct EventView {
    id: EventId,
    event_type: String,
    payload: serde_json::Value,
    idempotency_key: Option<String>,
    received_at: DateTime<Utc>,
}

impl From<EventRecord> for EventView {
    fn from(row: EventRecord) -> Self {
        Self {
            id: row.id,
            event_type: row.event_type,
            payload: row.payload,
            idempotency_key: row.idempotency_key,
            received_at: row.received_at,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct DeliveryView {
    id: DeliveryId,
    event_id: EventId,
    endpoint_id: EndpointId,
    status: String,
    attempt_count: i32,
    next_attempt_at: Option<DateTime<Utc>>,
    last_http_status: Option<i32>,
    last_error: Option<String>,
    delivered_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<DeliveryRecord> for DeliveryView {
    fn from(row: DeliveryRecord) -> Self {
        Self {
            id: row.id,
            event_id: row.event_id,
            endpoint_id: row.endpoint_id,
            status: row.status,
            attempt_count: row.attempt_count,
            next_attempt_at: row.next_attempt_at,
            last_http_status: row.last_http_status,
            last_error: row.last_error,
            delivered_at: row.delivered_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct AttemptView {
    id: AttemptId,
    attempt_number: i32,
    outcome: String,
    http_status: Option<i32>,
    error: Option<String>,
    request_headers: serde_json::Value,
    response_body: Option<String>,
    latency_ms: i32,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
}

impl From<AttemptRecordRow> for AttemptView {
    fn from(row: AttemptRecordRow) -> Self {
        Self {
            id: row.id,
            attempt_number: row.attempt_number,
            outcome: row.outcome,
            http_status: row.http_status,
            error: row.error,
            request_headers: row.request_headers,
            response_body: row.response_body,
            latency_ms: row.latency_ms,
            started_at: row.started_at,
            finished_at: row.finished_at,
        }
    }
}
