//! The JSON shapes the query API answers with.
use chrono::{DateTime, Utc};
use relayops_shared::domain::DeliveryStatus;
use relayops_shared::ids::{AttemptId, DeliveryId, EndpointId, EventId};
use relayops_shared::repo::attempts::AttemptRecordRow;
use relayops_shared::repo::deliveries::DeliveryRecord;
use relayops_shared::repo::events::EventRecord;
use serde::Serialize;
use utoipa::ToSchema;

/// A page of a list: `next_cursor` is null on the last page; otherwise pass it
/// back as `cursor` for the next one.
macro_rules! page {
    ($(#[$doc:meta])* $name:ident, $item:ty) => {
        $(#[$doc])*
        #[derive(Debug, Serialize, ToSchema)]
        pub struct $name {
            pub data: Vec<$item>,
            /// Null on the last page; otherwise the `cursor` for the next one.
            pub next_cursor: Option<String>,
        }
    };
}

page!(
    /// A page of events, newest first.
    EventPage, EventView);
page!(
    /// A page of deliveries, newest first.
    DeliveryPage, DeliveryView);
page!(
    /// A page of a delivery's attempts, oldest first.
    AttemptPage, AttemptView);

/// JSON text from the database, written into the answer as it is.
#[derive(Debug)]
pub struct JsonText(String);

impl Serialize for JsonText {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw: &serde_json::value::RawValue = serde_json::from_str(&self.0).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

/// An event as it was received.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventView {
    id: EventId,
    event_type: String,
    /// The JSON payload, as posted.
    #[schema(value_type = Object)]
    payload: JsonText,
    idempotency_key: Option<String>,
    /// The ordering key it was posted with: its deliveries go to each endpoint
    /// one at a time, in posting order among the events with this key.
    ordering_key: Option<String>,
    received_at: DateTime<Utc>,
}

impl From<EventRecord> for EventView {
    fn from(row: EventRecord) -> Self {
        Self {
            id: row.id,
            event_type: row.event_type,
            payload: JsonText(row.payload),
            idempotency_key: row.idempotency_key,
            ordering_key: row.ordering_key,
            received_at: row.received_at,
        }
    }
}

/// One event to one endpoint, and where it stands.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryView {
    id: DeliveryId,
    event_id: EventId,
    endpoint_id: EndpointId,
    /// Its event's ordering key: the delivery is sent only after the earlier
    /// deliveries of this key to this endpoint are terminal.
    ordering_key: Option<String>,
    /// `scheduled` with no `next_attempt_at` on an ordered delivery: it waits
    /// in its ordering lane for the earlier ones.
    #[schema(value_type = DeliveryStatusDoc)]
    status: String,
    attempt_count: i32,
    /// When a retry is due (`scheduled`); none while an ordered delivery waits
    /// for its lane.
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
            ordering_key: row.ordering_key,
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

/// One HTTP attempt: what was sent and what came back.
#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptView {
    id: AttemptId,
    attempt_number: i32,
    /// `delivered`, `retry`, `failed` or `dead`.
    outcome: String,
    /// The receiver's HTTP status; null when no response came (timeout,
    /// connection error, refused address).
    http_status: Option<i32>,
    /// Why the attempt did not succeed, when it did not.
    error: Option<String>,
    /// The headers sent (the signature itself is never stored).
    #[schema(value_type = Object)]
    request_headers: serde_json::Value,
    /// The start of the receiver's response body (at most 4 KiB).
    response_body: Option<String>,
    /// From sending the request to the end of reading the response.
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

/// The statuses a delivery can be in.
#[derive(ToSchema)]
#[schema(as = DeliveryStatus, rename_all = "snake_case")]
#[allow(dead_code)]
pub enum DeliveryStatusDoc {
    Pending,
    InProgress,
    Scheduled,
    /// Waiting in Postgres, without attempts, for its endpoint: its circuit
    /// is open, or it has `max_in_flight` requests in flight.
    Parked,
    Delivered,
    Failed,
    Dead,
}

/// How many deliveries are in each status.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct StatusCounts {
    pub pending: i64,
    pub in_progress: i64,
    pub scheduled: i64,
    pub parked: i64,
    pub delivered: i64,
    pub failed: i64,
    pub dead: i64,
}

impl StatusCounts {
    pub fn add(&mut self, status: DeliveryStatus, count: i64) {
        let slot = match status {
            DeliveryStatus::Pending => &mut self.pending,
            DeliveryStatus::InProgress => &mut self.in_progress,
            DeliveryStatus::Scheduled => &mut self.scheduled,
            DeliveryStatus::Parked => &mut self.parked,
            DeliveryStatus::Delivered => &mut self.delivered,
            DeliveryStatus::Failed => &mut self.failed,
            DeliveryStatus::Dead => &mut self.dead,
        };
        *slot += count;
    }

    pub fn total(&self) -> i64 {
        self.pending + self.in_progress + self.scheduled + self.parked + self.delivered + self.failed + self.dead
    }
}

/// "Is my endpoint healthy": its deliveries counted by status.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointStatsView {
    pub endpoint_id: EndpointId,
    /// The window counted, as asked (null: unbounded).
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    pub total: i64,
    pub by_status: StatusCounts,
}
