//! Ingest's one atomic write — the event, a delivery per matching enabled
//! endpoint, and the outbox row(s) that get them published — and reading
//! events back.
use crate::repo::GenericClient;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::broker::{DeliveryTask, EventDeliveries};
use crate::db::DbError;
use crate::domain::{EndpointKind, EventPayload, EventType, IdempotencyKey, OrderingKey};
use crate::handoff::{claim_for, ClaimFor, HandedRow, Handoff};
use crate::ids::{DeliveryId, EndpointId, EventId, TenantId};
use crate::repo::outbox::OutboxMessage;
use crate::repo::retention::IDEMPOTENCY_WINDOW;
use crate::repo::sql;
use uuid::Uuid;

/// Ingest's first CTE (`key`): the idempotency key, if any, taken or taken
/// over (see [`INGEST`]).
macro_rules! idempotency_key_cte {
    () => {
        "WITH key AS (
         INSERT INTO relayops.idempotency_keys AS k (tenant_id, idempotency_key, event_id, request_hash)
         SELECT $2, $5, $1, $6 WHERE $5::text IS NOT NULL
         ON CONFLICT (tenant_id, idempotency_key) DO UPDATE
             SET event_id = EXCLUDED.event_id, request_hash = EXCLUDED.request_hash, created_at = now()
             WHERE k.created_at < now() - $9::bigint * interval '1 second'
                OR NOT relayops.event_exists(k.event_id)
         RETURNING 1),"
    };
}

/// The endpoints (`ep`: `id`, `tenant_id`) an event of tenant `$tenant` and
/// type `$event_type` fans out to, as a `FROM` item after the event's: enabled,
/// of kind `$kind`, subscribed exactly, by `prefix.*`, or `*` (the rule of
/// `EventTypePattern::matches`). Each pattern that matches the type
/// (`relayops.patterns_matching`, migration 0017) is looked up by key —
/// tenant and pattern — in the tenant's subscriptions, then each subscribed
/// endpoint by its id, its tenant, state and kind tested on the row found:
/// the work is that of the matching subscriptions, however many endpoints
/// and subscriptions the tenant has. The `OFFSET 0` fences keep that order
/// and those keys whatever the statistics say: with the patterns as one
/// `= ANY` array, generic plans sought the subscriptions by tenant alone and
/// filtered every one of the tenant's (2.2 ms an event for a tenant with 2,000
/// subscriptions), and with the tenant beside the endpoint's id, plans made
/// on small tables sought endpoints through `(tenant_id, created_at, id)`,
/// reading every endpoint of the tenant per subscriber (measured in commit
/// `6c7e078`). An endpoint matched by two patterns counts once.
macro_rules! subscribed_endpoints {
    ($tenant:literal, $event_type:literal, $kind:literal) => {
        concat!(
            "CROSS JOIN LATERAL (
             SELECT DISTINCT s.endpoint_id
             FROM unnest(relayops.patterns_matching(",
            $event_type,
            ")) AS p(pattern)
             CROSS JOIN LATERAL (
                 SELECT s.endpoint_id FROM relayops.endpoint_subscriptions s
                 WHERE s.tenant_id = ",
            $tenant,
            " AND s.event_type_pattern = p.pattern OFFSET 0) s
             OFFSET 0) s
         CROSS JOIN LATERAL (
             SELECT ep.id, ep.tenant_id FROM (
                 SELECT ep.id, ep.tenant_id, ep.enabled, ep.kind FROM relayops.webhook_endpoints ep
                 WHERE ep.id = s.endpoint_id OFFSET 0) ep
             WHERE ep.tenant_id = ",
            $tenant,
            " AND ep.enabled AND ep.kind = ",
            $kind,
            ") ep"
        )
    };
}
pub(crate) use subscribed_endpoints;

/// The columns an event's outbox row is written with after its `tenant_id`,
/// `event_id` and `envelope`: `fanout` when `$later` (its deliveries are
/// written later, by a publisher: see [`INGEST`]), else `pending`, or
/// already claimed by the publisher of the process that writes it (`$owner`
/// not null: `handoff`, the row is handed to it once the statement commits)
/// for `$ttl_ms`.
macro_rules! outbox_row_columns {
    ($later:literal, $owner:literal, $ttl_ms:literal) => {
        concat!(
            "CASE WHEN ",
            $later,
            " THEN 'fanout' WHEN ",
            $owner,
            "::text IS NULL THEN 'pending' ELSE 'claimed' END, CASE WHEN ",
            $later,
            " THEN NULL ELSE ",
            $owner,
            "::text END, CASE WHEN ",
            $later,
            " OR ",
            $owner,
            "::text IS NULL THEN NULL ELSE now() + ",
            $ttl_ms,
            "::bigint * interval '1 millisecond' END, CASE WHEN ",
            $later,
            " OR ",
            $owner,
            "::text IS NULL THEN 0 ELSE 1 END"
        )
    };
}
pub(crate) use outbox_row_columns;

/// The deliveries of `new_deliveries` (ids and endpoints, in id order) as
/// two arrays, for the publisher that gets the event's row handed over —
/// only when `$owner` names it (no work, and NULL, otherwise).
macro_rules! handed_deliveries {
    ($owner:literal) => {
        concat!(
            "array_agg(id ORDER BY id) FILTER (WHERE ",
            $owner,
            "::text IS NOT NULL) AS delivery_ids, array_agg(endpoint_id ORDER BY id) FILTER (WHERE ",
            $owner,
            "::text IS NOT NULL) AS endpoint_ids"
        )
    };
}
pub(crate) use handed_deliveries;

/// One `delivery.v1` outbox row per delivery `d` of `new_deliveries` (ordered
/// events: only a lane's head gets a message).
macro_rules! outbox_rows {
    () => {
        "INSERT INTO relayops.outbox_messages (tenant_id, delivery_id, envelope)
         SELECT $2, d.id, jsonb_build_object(
             'type', 'delivery.v1',
             'tenant_id', $7::text,
             'delivery_id', 'dlv_' || replace(d.id::text, '-', ''),
             'event_id', $8::text,
             'endpoint_id', 'ep_' || replace(d.endpoint_id::text, '-', ''))
         FROM new_deliveries d"
    };
}

/// The whole of ingest in ONE statement (atomic by itself, one round trip):
/// the idempotency key, if any (a key older than its window, or whose event is
/// gone, is taken over: `relayops.event_exists`, a function so that the
/// statement does not open every `events` partition when it starts); the event; one delivery per enabled endpoint of the
/// tenant of the kind given (`$10`: the tenant's events go to its `webhook`
/// endpoints only, the platform's operational events to its `operational`
/// endpoints only) whose subscription matches exactly, by `prefix.*`, or `*` (the rule
/// of `EventTypePattern::matches`), its id carrying the event id's time
/// (`relayops.delivery_id_for`: the id names the partition); and, when it has
/// any delivery, ONE outbox row for the event (`event_deliveries.v1`, naming
/// the event in `event_id`), which the publisher expands into a `delivery.v1`
/// message per pending delivery (`repo::outbox_fanout`), so the writes per
/// subscriber are the delivery row alone. An event that matches more than
/// `$13` endpoints (`IngestConfig::deliveries_at_ingest_max`) gets no
/// delivery here: its row is written in status `fanout` with the endpoints it
/// matched (`fanout_endpoints`, in id order), and a publisher writes the
/// deliveries and makes the row `pending` in one statement
/// (`deferred_deliveries`), so ingest's cost stays that of one
/// event whatever the subscribers; the answer counts them all the same
/// (`deliveries`: the endpoints matched). The row is written already claimed
/// when `$11` names this process's publisher (`handoff`; `$12` the claim's
/// length in ms), and the statement returns what the publisher needs to
/// publish it without a claim: the row's id and the deliveries (ids and
/// endpoints, in id order). A key held by another event inserts nothing and returns no row,
/// so the caller can tell; a concurrent request with the same key waits for
/// this one's commit.
///
/// The envelopes are built here as `QueueMessage::DeliveryV1` serializes it
/// and `broker::EventDeliveries` reads it (`ids` text form: prefix + 32 hex
/// digits); unit tests in `broker::envelope` pin those shapes, and every
/// delivery test reads these messages back.
const INGEST: &str = concat!(
    idempotency_key_cte!(),
    "
     new_event AS (
         INSERT INTO relayops.events (id, tenant_id, event_type, payload, idempotency_key, request_hash)
         SELECT $1, $2, $3, $4, $5, $6
         WHERE $5::text IS NULL OR EXISTS (SELECT 1 FROM key)
         RETURNING id, tenant_id, received_at),
     targets AS MATERIALIZED (
         SELECT ep.id, ep.tenant_id FROM new_event
         ",
    subscribed_endpoints!("new_event.tenant_id", "$3", "$10"),
    "),
     plan AS (SELECT count(*) AS matched, count(*) > $13 AS later FROM targets),
     new_deliveries AS (
         INSERT INTO relayops.deliveries (id, tenant_id, event_id, endpoint_id)
         SELECT relayops.delivery_id_for($1), t.tenant_id, $1, t.id
         FROM targets t, plan WHERE NOT plan.later
         RETURNING id, endpoint_id),
     new_outbox AS (
         INSERT INTO relayops.outbox_messages
             (tenant_id, event_id, envelope, status, claimed_by, claim_expires_at, publish_attempts, fanout_endpoints)
         SELECT $2, $1, jsonb_build_object('type', 'event_deliveries.v1', 'tenant_id', $7::text, 'event_id', $8::text),
                ",
    outbox_row_columns!("plan.later", "$11", "$12"),
    ",
                CASE WHEN plan.later THEN (SELECT array_agg(id ORDER BY id) FROM targets) END
         FROM plan WHERE plan.matched > 0
         RETURNING id, status)
     SELECT received_at, plan.matched AS deliveries, fanned.delivery_ids, fanned.endpoint_ids,
            (SELECT id FROM new_outbox WHERE status = 'claimed') AS outbox_id
     FROM new_event, plan,
          (SELECT ",
    handed_deliveries!("$11"),
    " FROM new_deliveries) fanned"
);

/// [`INGEST`] for an event with an ordering key (`$11`): the event and its
/// deliveries carry the key, and each delivery joins its endpoint's lane
/// ([`lanes`](super::lanes)) by upserting the lane's row (whose lock orders
/// concurrent events of one key by commit, rows taken in endpoint order so
/// two events fanning out to the same endpoints cannot deadlock). A delivery
/// that finds its lane empty becomes its head: `pending` with an outbox row,
/// as unordered ones are. One that finds the lane busy waits in
/// `ordering_lane_waiting` as `scheduled` without a due time and gets no
/// message until the lane reaches it. Unordered events never run this.
const INGEST_ORDERED: &str = concat!(
    idempotency_key_cte!(),
    "
     new_event AS (
         INSERT INTO relayops.events (id, tenant_id, event_type, payload, idempotency_key, request_hash, ordering_key)
         SELECT $1, $2, $3, $4, $5, $6, $11
         WHERE $5::text IS NULL OR EXISTS (SELECT 1 FROM key)
         RETURNING id, tenant_id, received_at),
     targets AS MATERIALIZED (
         SELECT relayops.delivery_id_for(new_event.id) AS id, ep.id AS endpoint_id
         FROM new_event
         ",
    subscribed_endpoints!("new_event.tenant_id", "$3", "$10"),
    "),
     lanes AS (
         INSERT INTO relayops.ordering_lanes AS l
             (tenant_id, endpoint_id, ordering_key, last_seq, head_delivery_id, head_event_id)
         SELECT $2, t.endpoint_id, $11, 1, t.id, $1 FROM targets t ORDER BY t.endpoint_id
         ON CONFLICT (tenant_id, endpoint_id, ordering_key)
             DO UPDATE SET last_seq = l.last_seq + 1, updated_at = now()
         RETURNING l.endpoint_id, l.head_delivery_id, l.last_seq),
     new_deliveries AS (
         INSERT INTO relayops.deliveries (id, tenant_id, event_id, endpoint_id, ordering_key, status)
         SELECT t.id, $2, $1, t.endpoint_id, $11,
                CASE WHEN l.head_delivery_id = t.id THEN 'pending' ELSE 'scheduled' END
         FROM targets t JOIN lanes l ON l.endpoint_id = t.endpoint_id
         RETURNING id, endpoint_id, status),
     waiting AS (
         INSERT INTO relayops.ordering_lane_waiting (tenant_id, endpoint_id, ordering_key, seq, delivery_id, event_id)
         SELECT $2, t.endpoint_id, $11, l.last_seq, t.id, $1
         FROM targets t JOIN lanes l ON l.endpoint_id = t.endpoint_id
         WHERE l.head_delivery_id <> t.id),
     new_outbox AS (
         ",
    outbox_rows!(),
    " WHERE d.status = 'pending')
     SELECT received_at, (SELECT count(*) FROM new_deliveries) AS deliveries FROM new_event"
);

/// The subscriber lookup every ingest statement runs
/// ([`subscribed_endpoints`]), alone: a tenant's `webhook` endpoints for an
/// event type.
const SUBSCRIBERS: &str = concat!(
    "SELECT ep.id FROM (SELECT $1::uuid AS tenant_id) new_event
     ",
    subscribed_endpoints!("new_event.tenant_id", "$2", "'webhook'")
);

/// [`SUBSCRIBERS`] run on its generic plan, as ingest's statements run it
/// once prepared, and that plan with what each step read
/// ([`sql::explain_on_generic_plan`]; for tests).
pub async fn explain_subscribers(
    client: &mut deadpool_postgres::Object,
    tenant: TenantId,
    event_type: &str,
) -> Result<Value, DbError> {
    sql::explain_on_generic_plan(client, SUBSCRIBERS, &["uuid", "text"], &[&tenant.as_uuid(), &event_type]).await
}

/// The event a key names (found by id, so in its partition only).
/// Its deliveries are those written and, while a publisher has not written
/// them yet, those its `fanout` outbox row names (one snapshot: either).
const FIND_BY_IDEMPOTENCY_KEY: &str =
    "SELECT e.id, e.event_type, e.idempotency_key, e.ordering_key, k.request_hash, e.received_at,
            (SELECT count(*) FROM relayops.deliveries d WHERE d.tenant_id = e.tenant_id AND d.event_id = e.id)
            + coalesce((SELECT sum(cardinality(o.fanout_endpoints)) FROM relayops.outbox_messages o
                        WHERE o.event_id = e.id AND o.status = 'fanout'), 0)::bigint AS deliveries
     FROM relayops.idempotency_keys k
     JOIN relayops.events e ON e.id = k.event_id AND e.tenant_id = k.tenant_id
     WHERE k.tenant_id = $1 AND k.idempotency_key = $2";

/// What [`EventRecord::from_row`] reads (the payload as Postgres renders it).
pub(crate) const EVENT_COLUMNS: &str =
    "id, event_type, payload::text AS payload, idempotency_key, ordering_key, received_at";

pub struct NewEvent<'a> {
    pub event_type: &'a EventType,
    pub payload: &'a EventPayload,
    pub idempotency_key: Option<&'a IdempotencyKey>,
    /// Deliveries of events with the same key go to each endpoint one at a
    /// time, in the order the events were accepted.
    pub ordering_key: Option<&'a OrderingKey>,
}

impl NewEvent<'_> {
    /// What makes two requests "the same" for idempotency.
    fn request_hash(&self) -> Vec<u8> {
        let mut hasher = Sha256::new();
        hasher.update(self.event_type.as_str().as_bytes());
        hasher.update([0]);
        hasher.update(serde_json::to_vec(self.payload.as_json()).unwrap_or_default());
        // Only when given, so the hashes of unordered events stay as they were.
        if let Some(key) = self.ordering_key {
            hasher.update([0]);
            hasher.update(key.as_str().as_bytes());
        }
        hasher.finalize().to_vec()
    }
}

/// What ingest answers: the same for the original request and its repeats.
#[derive(Debug)]
pub struct EventReceipt {
    pub id: EventId,
    pub event_type: String,
    pub idempotency_key: Option<String>,
    pub ordering_key: Option<String>,
    pub received_at: DateTime<Utc>,
    pub deliveries: i64,
    /// The event's outbox row when it was written claimed by this process's
    /// publisher: handed to it when dropped ([`handoff`](crate::handoff)).
    pub handed: Option<HandedRow>,
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
    /// Set: written alone with [`INGEST_ORDERED`] (its lane's position).
    pub ordering_key: Option<String>,
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
            ordering_key: event.ordering_key.map(|key| key.as_str().to_owned()),
            request_hash: event.request_hash(),
        }
    }

    /// The receipt of this event, written now with `deliveries` deliveries
    /// (and its outbox row claimed for this process's publisher, if it was).
    pub(crate) fn receipt(
        &self,
        received_at: DateTime<Utc>,
        deliveries: i64,
        handed: Option<HandedRow>,
    ) -> EventReceipt {
        EventReceipt {
            id: self.id,
            event_type: self.event_type.clone(),
            idempotency_key: self.idempotency_key.clone(),
            ordering_key: self.ordering_key.clone(),
            received_at,
            deliveries,
            handed,
        }
    }

    /// The outbox row an ingest statement wrote for this event with `claim`,
    /// from the statement's result (`outbox_id`, and the deliveries as
    /// `delivery_ids` / `endpoint_ids` in id order): what the publisher needs
    /// to publish it without claiming it. None when nothing was claimed (no
    /// claim, or no delivery, so no row).
    pub(crate) fn handed_row(&self, claim: Option<ClaimFor<'_>>, row: &Row) -> Option<HandedRow> {
        let claim = claim?;
        let id: i64 = row.get::<_, Option<i64>>("outbox_id")?;
        let deliveries: Vec<Uuid> = row.get::<_, Option<Vec<Uuid>>>("delivery_ids").unwrap_or_default();
        let endpoints: Vec<Uuid> = row.get::<_, Option<Vec<Uuid>>>("endpoint_ids").unwrap_or_default();
        let pending = deliveries
            .into_iter()
            .zip(endpoints)
            .map(|(delivery, endpoint)| DeliveryTask {
                tenant_id: self.tenant,
                delivery_id: DeliveryId::from_uuid(delivery),
                event_id: self.id,
                endpoint_id: EndpointId::from_uuid(endpoint),
            })
            .collect();
        let envelope = EventDeliveries { tenant_id: self.tenant, event_id: self.id }.envelope();
        Some(claim.row(OutboxMessage { id, envelope, pending }))
    }
}

/// How ingest writes an unordered event's deliveries and outbox row.
#[derive(Clone, Copy)]
pub struct WriteOptions<'h> {
    /// This process's publisher, which takes the rows written claimed by it.
    pub handoff: Option<&'h Handoff>,
    /// Up to how many matched endpoints ingest writes the deliveries itself;
    /// above, a publisher writes them ([`INGEST`]; `IngestConfig`).
    pub deliveries_at_ingest_max: i64,
}

impl WriteOptions<'_> {
    /// Deliveries always written by ingest, rows never handed over.
    pub const AT_INGEST: WriteOptions<'static> = WriteOptions { handoff: None, deliveries_at_ingest_max: i64::MAX };
}

impl Default for WriteOptions<'_> {
    /// No hand-off; deliveries as `IngestConfig::default` says.
    fn default() -> Self {
        let config = crate::config::IngestConfig::default();
        WriteOptions { handoff: None, deliveries_at_ingest_max: config.deliveries_at_ingest_max }
    }
}

/// One statement: atomic without a transaction; inside the caller's (a batch)
/// it commits with the rest. Fans out to the tenant's `webhook` endpoints.
pub async fn insert_event_with_deliveries(
    client: &impl GenericClient,
    tenant: TenantId,
    event: &NewEvent<'_>,
) -> Result<IngestOutcome, DbError> {
    let event = PreparedEvent::new(tenant, event);
    insert_prepared(client, &event, EndpointKind::Webhook, WriteOptions::default()).await
}

/// The same statement for an operational event (see
/// [`domain::operational`](crate::domain::operational)): it fans out to the
/// tenant's `operational` endpoints only. Use [`operational::emit`](super::operational::emit).
pub(crate) async fn insert_operational_event(
    client: &impl GenericClient,
    tenant: TenantId,
    event: &NewEvent<'_>,
) -> Result<IngestOutcome, DbError> {
    // Written in the transaction of the change it reports, deliveries and all.
    let event = PreparedEvent::new(tenant, event);
    insert_prepared(client, &event, EndpointKind::Operational, WriteOptions::AT_INGEST).await
}

/// Writes one prepared event with [`INGEST`] (or [`INGEST_ORDERED`] when it
/// has an ordering key), fanning out to endpoints of `kind`, as `options`
/// say: with a `handoff` that takes rows now, an unordered event's outbox row
/// is written claimed by that publisher and comes back in the receipt
/// (`handed`) — unless the event matched more endpoints than
/// `deliveries_at_ingest_max` (its row waits for a publisher to write them).
pub async fn insert_prepared(
    client: &impl GenericClient,
    event: &PreparedEvent,
    kind: EndpointKind,
    options: WriteOptions<'_>,
) -> Result<IngestOutcome, DbError> {
    let key = event.idempotency_key.as_deref();
    let (id, tenant) = (event.id.as_uuid(), event.tenant.as_uuid());
    let (tenant_text, id_text) = (event.tenant.to_string(), event.id.to_string());
    let (kind, window) = (kind.as_str(), IDEMPOTENCY_WINDOW.as_secs() as i64);
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        &id,
        &tenant,
        &event.event_type,
        &event.payload,
        &key,
        &event.request_hash,
        &tenant_text,
        &id_text,
        &window,
        &kind,
    ];
    // Ordered events keep their rows pending: only a lane's head has one.
    let (claim, owner, ttl_ms) = claim_for(options.handoff.filter(|_| event.ordering_key.is_none()));
    let statement = match &event.ordering_key {
        Some(ordering_key) => {
            params.push(ordering_key);
            INGEST_ORDERED
        }
        None => {
            params.extend([&owner as &(dyn ToSql + Sync), &ttl_ms, &options.deliveries_at_ingest_max]);
            INGEST
        }
    };
    match sql::query_opt(client, statement, &params).await? {
        Some(row) => {
            let handed = event.handed_row(claim, &row);
            Ok(IngestOutcome::Created(event.receipt(row.get("received_at"), row.get("deliveries"), handed)))
        }
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
        ordering_key: row.get("ordering_key"),
        received_at: row.get("received_at"),
        deliveries: row.get("deliveries"),
        handed: None,
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
    pub ordering_key: Option<String>,
    pub received_at: DateTime<Utc>,
}

impl EventRecord {
    pub(crate) fn from_row(row: &Row) -> Self {
        Self {
            id: EventId::from_uuid(row.get("id")),
            event_type: row.get("event_type"),
            payload: row.get("payload"),
            idempotency_key: row.get("idempotency_key"),
            ordering_key: row.get("ordering_key"),
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

/// The event types of the tenant's events `ids` (a page of deliveries shows
/// them); ids not found are left out.
pub async fn event_types(
    client: &impl GenericClient,
    tenant: TenantId,
    ids: &[EventId],
) -> Result<std::collections::HashMap<EventId, String>, DbError> {
    const EVENT_TYPES: &str = "SELECT id, event_type FROM relayops.events WHERE tenant_id = $1 AND id = ANY($2)";
    let ids: Vec<Uuid> = ids.iter().map(|id| id.as_uuid()).collect();
    let rows = sql::query(client, EVENT_TYPES, &[&tenant.as_uuid(), &ids]).await?;
    Ok(rows.iter().map(|row| (EventId::from_uuid(row.get("id")), row.get("event_type"))).collect())
}
