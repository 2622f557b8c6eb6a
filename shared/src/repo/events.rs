//! Ingest's one atomic write — the event, a delivery per matching enabled
//! endpoint, and an outbox row per delivery — and reading events back.
use crate::repo::GenericClient;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio_postgres::Row;

use crate::db::DbError;
use crate::domain::{EndpointKind, EventPayload, EventType, IdempotencyKey};
use crate::ids::{EventId, TenantId};
use crate::repo::retention::IDEMPOTENCY_WINDOW;
use crate::repo::sql;

/// The whole of ingest in ONE statement (atomic by itself, one round trip):
/// the idempotency key, if any (a key older than its window, or whose event is
/// gone, is taken over: `relayops.event_exists`, a function so that the
/// statement does not open every `events` partition when it starts); the event; one delivery per enabled endpoint of the
/// tenant of the kind given (`$10`: the tenant's events go to its `webhook`
/// endpoints only, the platform's operational events to its `operational`
/// endpoints only) whose subscription matches exactly, by `prefix.*`, or `*` (the rule
/// of `EventTypePattern::matches`), its id carrying the event id's time
/// (`relayops.delivery_id_for`: the id names the partition); one outbox row per
/// delivery. A key held by another event inserts nothing and returns no row,
/// so the caller can tell; a concurrent request with the same key waits for
/// this one's commit.
///
/// The envelope is built here as `QueueMessage::DeliveryV1` serializes it
/// (`ids` text form: prefix + 32 hex digits); a unit test in `broker::envelope`
/// pins that shape, and every delivery test reads these messages back.
const INGEST: &str = "WITH key AS (
         INSERT INTO relayops.idempotency_keys AS k (tenant_id, idempotency_key, event_id, request_hash)
         SELECT $2, $5, $1, $6 WHERE $5::text IS NOT NULL
         ON CONFLICT (tenant_id, idempotency_key) DO UPDATE
             SET event_id = EXCLUDED.event_id, request_hash = EXCLUDED.request_hash, created_at = now()
             WHERE k.created_at < now() - $9::bigint * interval '1 second'
                OR NOT relayops.event_exists(k.event_id)
         RETURNING 1),
     new_event AS (
         INSERT INTO relayops.events (id, tenant_id, event_type, payload, idempotency_key, request_hash)
         SELECT $1, $2, $3, $4, $5, $6
         WHERE $5::text IS NULL OR EXISTS (SELECT 1 FROM key)
         RETURNING id, tenant_id, received_at),
     new_deliveries AS (
         INSERT INTO relayops.deliveries (id, tenant_id, event_id, endpoint_id)
         SELECT relayops.delivery_id_for(new_event.id), ep.tenant_id, new_event.id, ep.id
         FROM new_event JOIN relayops.webhook_endpoints ep ON ep.tenant_id = new_event.tenant_id
         WHERE ep.enabled AND ep.kind = $10
           AND EXISTS (
             SELECT 1 FROM relayops.endpoint_subscriptions s
             WHERE s.tenant_id = ep.tenant_id AND s.endpoint_id = ep.id
               AND (s.event_type_pattern = $3
                    OR s.event_type_pattern = '*'
                    OR (right(s.event_type_pattern, 2) = '.*'
                        AND starts_with($3, left(s.event_type_pattern, -1)))))
         RETURNING id, endpoint_id),
     new_outbox AS (
         INSERT INTO relayops.outbox_messages (tenant_id, delivery_id, envelope)
         SELECT $2, d.id, jsonb_build_object(
             'type', 'delivery.v1',
             'tenant_id', $7::text,
             'delivery_id', 'dlv_' || replace(d.id::text, '-', ''),
             'event_id', $8::text,
             'endpoint_id', 'ep_' || replace(d.endpoint_id::text, '-', ''))
         FROM new_deliveries d)
     SELECT received_at, (SELECT count(*) FROM new_deliveries) AS deliveries FROM new_event";

/// The event a key names (found by id, so in its partition only).
const FIND_BY_IDEMPOTENCY_KEY: &str = "SELECT e.id, e.event_type, e.idempotency_key, k.request_hash, e.received_at,
            (SELECT count(*) FROM relayops.deliveries d WHERE d.tenant_id = e.tenant_id AND d.event_id = e.id) AS deliveries
     FROM relayops.idempotency_keys k
     JOIN relayops.events e ON e.id = k.event_id AND e.tenant_id = k.tenant_id
     WHERE k.tenant_id = $1 AND k.idempotency_key = $2";

/// What [`EventRecord::from_row`] reads (the payload as Postgres renders it).
pub(crate) const EVENT_COLUMNS: &str = "id, event_type, payload::text AS payload, idempotency_key, received_at";

pub struct NewEvent<'a> {
    pub event_type: &'a EventType,
    pub payload: &'a EventPayload,
    pub idempotency_key: Option<&'a IdempotencyKey>,
}

impl NewEvent<'_> {
    /// What makes two requests "the same" for idempotency.
    fn request_hash(&self) -> Vec<u8> {
        let mut hasher = Sha256::new();
        hasher.update(self.event_type.as_str().as_bytes());
        hasher.update([0]);
        hasher.update(serde_json::to_vec(self.payload.as_json()).unwrap_or_default());
        hasher.finalize().to_vec()
    }
}

/// What ingest answers: the same for the original request and its repeats.
#[derive(Debug, Clone)]
pub struct EventReceipt {
    pub id: EventId,
    pub event_type: String,
    pub idempotency_key: Option<String>,
    pub received_at: DateTime<Utc>,
    pub deliveries: i64,
}

#[derive(Debug)]
pub enum IngestOutcome {
    Created(EventReceipt),
    /// The idempotency key was used before for the same request.
    Duplicate(EventReceipt),
    /// The idempotency key was used before for a different request.
    KeyReused {
        original: EventId,
    },
}

/// An event ready to be written: its id (made now, so ids follow acceptance
/// order) and what identifies a repeat of its request.
#[derive(Debug, Clone)]
pub struct PreparedEvent {
    pub id: EventId,
    pub tenant: TenantId,
    pub event_type: String,
    pub payload: Value,
    pub idempotency_key: Option<String>,
    pub request_hash: Vec<u8>,
}

impl PreparedEvent {
    pub fn new(tenant: TenantId, event: &NewEvent<'_>) -> Self {
        Self {
            id: EventId::new(),
            tenant,
            event_type: event.event_type.as_str().to_owned(),
            payload: Value::Object(event.payload.as_json().clone()),
            idempotency_key: event.idempotency_key.map(|key| key.as_str().to_owned()),
            request_hash: event.request_hash(),
        }
    }

    /// The receipt of this event, written now with `deliveries` deliveries.
    pub(crate) fn receipt(&self, received_at: DateTime<Utc>, deliveries: i64) -> EventReceipt {
        EventReceipt {
            id: self.id,
            event_type: self.event_type.clone(),
            idempotency_key: self.idempotency_key.clone(),
            received_at,
            deliveries,
        }
    }
}

/// One statement: atomic without a transaction; inside the caller's (a batch)
/// it commits with the rest. Fans out to the tenant's `webhook` endpoints.
pub async fn insert_event_with_deliveries(
    client: &impl GenericClient,
    tenant: TenantId,
    event: &NewEvent<'_>,
) -> Result<IngestOutcome, DbError> {
    insert_prepared(client, &PreparedEvent::new(tenant, event), EndpointKind::Webhook).await
}

/// The same statement for an operational event (see
/// [`domain::operational`](crate::domain::operational)): it fans out to the
/// tenant's `operational` endpoints only. Use [`operational::emit`](super::operational::emit).
pub(crate) async fn insert_operational_event(
    client: &impl GenericClient,
    tenant: TenantId,
    event: &NewEvent<'_>,
) -> Result<IngestOutcome, DbError> {
    insert_prepared(client, &PreparedEvent::new(tenant, event), EndpointKind::Operational).await
}

/// Writes one prepared event with [`INGEST`], fanning out to endpoints of `kind`.
pub async fn insert_prepared(
    client: &impl GenericClient,
    event: &PreparedEvent,
    kind: EndpointKind,
) -> Result<IngestOutcome, DbError> {
    let key = event.idempotency_key.as_deref();
    let inserted = sql::query_opt(
        client,
        INGEST,
        &[
            &event.id.as_uuid(),
            &event.tenant.as_uuid(),
            &event.event_type,
            &event.payload,
            &key,
            &event.request_hash,
            &event.tenant.to_string(),
            &event.id.to_string(),
            &(IDEMPOTENCY_WINDOW.as_secs() as i64),
            &kind.as_str(),
        ],
    )
    .await?;
    match inserted {
        Some(row) => Ok(IngestOutcome::Created(event.receipt(row.get("received_at"), row.get("deliveries")))),
        None => find_duplicate(client, event.tenant, key.unwrap_or_default(), &event.request_hash).await,
    }
}

/// What a request whose key is held by an earlier event gets: that event
/// (a repeat) or a conflict (the key was used for a different request).
pub(crate) async fn find_duplicate(
    tx: &impl GenericClient,
    tenant: TenantId,
    key: &str,
    request_hash: &[u8],
) -> Result<IngestOutcome, DbError> {
    let row = sql::query_one(tx, FIND_BY_IDEMPOTENCY_KEY, &[&tenant.as_uuid(), &key]).await?;
    let id = EventId::from_uuid(row.get("id"));
    let stored_hash: Vec<u8> = row.get("request_hash");
    if stored_hash != request_hash {
        return Ok(IngestOutcome::KeyReused { original: id });
    }
    Ok(IngestOutcome::Duplicate(EventReceipt {
        id,
        event_type: row.get("event_type"),
        idempotency_key: row.get("idempotency_key"),
        received_at: row.get("received_at"),
        deliveries: row.get("deliveries"),
    }))
}

#[derive(Debug, Clone)]
pub struct EventRecord {
    pub id: EventId,
    pub event_type: String,
    /// The payload as Postgres renders the `jsonb` (valid JSON, passed on
    /// as-is: its numbers may not fit an `f64`, so it is never parsed here).
    pub payload: String,
    pub idempotency_key: Option<String>,
    pub received_at: DateTime<Utc>,
}

impl EventRecord {
    pub(crate) fn from_row(row: &Row) -> Self {
        Self {
            id: EventId::from_uuid(row.get("id")),
            event_type: row.get("event_type"),
            payload: row.get("payload"),
            idempotency_key: row.get("idempotency_key"),
            received_at: row.get("received_at"),
        }
    }
}

pub async fn get_event(
    client: &impl GenericClient,
    tenant: TenantId,
    id: EventId,
) -> Result<Option<EventRecord>, DbError> {
    let sql = format!("SELECT {EVENT_COLUMNS} FROM relayops.events WHERE tenant_id = $1 AND id = $2");
    let row = sql::query_opt(client, &sql, &[&tenant.as_uuid(), &id.as_uuid()]).await?;
    Ok(row.as_ref().map(EventRecord::from_row))
}
