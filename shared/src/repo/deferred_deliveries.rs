//! Deliveries written after ingest: an unordered event that matches more
//! endpoints than `IngestConfig::deliveries_at_ingest_max` is stored by
//! ingest with ONE outbox row in status `fanout` naming the endpoints it
//! matched, and no delivery yet (so ingest costs the same for 1 or 1,000
//! subscribers). A publisher then writes those deliveries here, many events
//! in one set-based statement, and turns each row into the `pending`
//! `event_deliveries.v1` row ingest writes for smaller events — which it
//! publishes as any other.
//!
//! Promises kept: the statement is atomic (a crash before its commit leaves
//! the rows as they were, to be written by the next publisher; after it, the
//! ordinary outbox path takes over), needs no broker (deliveries appear
//! while RabbitMQ is away), and writes each event's deliveries once (the row
//! it turns is locked, `SKIP LOCKED` for other publishers, and leaves status
//! `fanout` in the same statement). Ids come from the outbox, never from a
//! client; each endpoint is matched on the row's tenant.
use crate::db::DbError;
use crate::repo::{sql, GenericClient};

/// At most this many events' deliveries per statement: at 100 subscribers,
/// 800 rows (~50 ms of Postgres), so one statement never holds a publisher
/// for long.
pub const EVENTS_PER_STATEMENT: i64 = 8;

/// The oldest `$1` rows waiting for their deliveries (skipping rows another
/// publisher is writing), their deliveries, and the rows made `pending`. An
/// endpoint deleted since ingest gets no delivery (its deliveries would have
/// gone with it); one disabled since gets one, which the worker settles as
/// it does a delivery written at ingest ("endpoint disabled").
const WRITE: &str = "WITH taken AS (
         SELECT id, tenant_id, event_id, fanout_endpoints FROM relayops.outbox_messages
         WHERE status = 'fanout'
         ORDER BY id
         LIMIT $1
         FOR UPDATE SKIP LOCKED),
     written AS (
         INSERT INTO relayops.deliveries (id, tenant_id, event_id, endpoint_id)
         SELECT relayops.delivery_id_for(t.event_id), t.tenant_id, t.event_id, ep.id
         FROM taken t
         CROSS JOIN LATERAL unnest(t.fanout_endpoints) AS f(endpoint_id)
         JOIN relayops.webhook_endpoints ep ON ep.tenant_id = t.tenant_id AND ep.id = f.endpoint_id
         RETURNING 1),
     turned AS (
         UPDATE relayops.outbox_messages o SET status = 'pending', fanout_endpoints = NULL
         FROM taken t WHERE o.id = t.id
         RETURNING 1)
     SELECT (SELECT count(*) FROM turned) AS events, (SELECT count(*) FROM written) AS deliveries";

/// What one [`write`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Events whose deliveries were written (their rows now `pending`).
    pub events: u64,
    pub deliveries: u64,
}

impl Written {
    /// Whether more events may be waiting (this statement took all it could).
    pub fn took_all_it_could(&self) -> bool {
        self.events >= EVENTS_PER_STATEMENT as u64
    }
}

/// Writes the deliveries of up to [`EVENTS_PER_STATEMENT`] events that wait
/// for them, oldest first, in one statement.
pub async fn write(client: &impl GenericClient) -> Result<Written, DbError> {
    let row = sql::query_one(client, WRITE, &[&EVENTS_PER_STATEMENT]).await?;
    let count = |column: &str| row.get::<_, i64>(column) as u64;
    Ok(Written { events: count("events"), deliveries: count("deliveries") })
}
