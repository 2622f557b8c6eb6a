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
//! `fanout` in the same statement). A row whose deliveries the database
//! refuses is set aside for a minute with the reason (`last_error`), so it
//! holds up neither the rows behind it nor publishing. Ids come from the
//! outbox, never from a client; each endpoint is matched on the row's tenant.
use crate::db::DbError;
use crate::repo::{sql, GenericClient};

/// At most this many events' deliveries per statement: at 100 subscribers,
/// 800 rows (~50 ms of Postgres), so one statement never holds a publisher
/// for long.
pub const EVENTS_PER_STATEMENT: i64 = 8;

/// The deliveries of the `taken` rows (`$taken`: a query of outbox rows in
/// status `fanout`, locked), and those rows made `pending`; a row whose event
/// no longer exists (its history removed by retention while no publisher
/// ran; `relayops.event_exists`, as ingest's key takeover asks it) is
/// deleted instead — nothing is left to deliver. An endpoint
/// deleted since ingest gets no delivery (its deliveries would have gone with
/// it); one disabled since gets one, which the worker settles as it does a
/// delivery written at ingest ("endpoint disabled").
macro_rules! write_taken {
    ($taken:literal) => {
        concat!(
            "WITH taken AS (
         SELECT id, tenant_id, event_id, fanout_endpoints FROM relayops.outbox_messages
         ",
            $taken,
            "
         FOR UPDATE SKIP LOCKED),
     live AS (SELECT * FROM taken WHERE relayops.event_exists(event_id)),
     written AS (
         INSERT INTO relayops.deliveries (id, tenant_id, event_id, endpoint_id)
         SELECT relayops.delivery_id_for(t.event_id), t.tenant_id, t.event_id, ep.id
         FROM live t
         CROSS JOIN LATERAL unnest(t.fanout_endpoints) AS f(endpoint_id)
         JOIN relayops.webhook_endpoints ep ON ep.tenant_id = t.tenant_id AND ep.id = f.endpoint_id
         RETURNING 1),
     turned AS (
         UPDATE relayops.outbox_messages o SET status = 'pending', fanout_endpoints = NULL, last_error = NULL
         FROM live t WHERE o.id = t.id
         RETURNING 1),
     gone AS (
         DELETE FROM relayops.outbox_messages o USING taken t
         WHERE o.id = t.id AND t.id NOT IN (SELECT id FROM live)
         RETURNING 1)
     SELECT (SELECT count(*) FROM turned) AS events, (SELECT count(*) FROM written) AS deliveries,
            (SELECT count(*) FROM gone) AS gone"
        )
    };
}

/// The oldest `$1` rows due (skipping rows another publisher is writing).
const WRITE: &str = write_taken!("WHERE status = 'fanout' AND available_at <= now() ORDER BY id LIMIT $1");

/// One row, by id (after [`WRITE`] failed: which row is it?).
const WRITE_ONE: &str = write_taken!("WHERE id = $1 AND status = 'fanout'");

const OLDEST_DUE: &str = "SELECT id FROM relayops.outbox_messages
     WHERE status = 'fanout' AND available_at <= now() ORDER BY id LIMIT $1";

/// A row whose deliveries the database refused is set aside for a while with
/// the reason, so it does not hold up the rows behind it.
const SET_ASIDE: &str = "UPDATE relayops.outbox_messages
     SET available_at = now() + $2::bigint * interval '1 millisecond', last_error = $3,
         publish_attempts = publish_attempts + 1
     WHERE id = $1 AND status = 'fanout'";

/// How long a row whose deliveries were refused waits before the next try.
pub const SET_ASIDE_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// What one [`write`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Events whose deliveries were written (their rows now `pending`).
    pub events: u64,
    pub deliveries: u64,
    /// Events whose deliveries the database refused: set aside for
    /// [`SET_ASIDE_FOR`], with the reason in the row's `last_error`.
    pub set_aside: u64,
    /// Rows deleted because their event no longer exists.
    pub gone: u64,
}

impl Written {
    /// Whether more events may be waiting (this statement took all it could).
    pub fn took_all_it_could(&self) -> bool {
        self.events + self.set_aside + self.gone >= EVENTS_PER_STATEMENT as u64
    }

    fn add(&mut self, row: &tokio_postgres::Row) {
        self.events += row.get::<_, i64>("events") as u64;
        self.deliveries += row.get::<_, i64>("deliveries") as u64;
        let gone = row.get::<_, i64>("gone") as u64;
        if gone > 0 {
            tracing::warn!(rows = gone, "deferred deliveries of events that no longer exist dropped");
        }
        self.gone += gone;
    }
}

/// Writes the deliveries of up to [`EVENTS_PER_STATEMENT`] events that wait
/// for them, oldest first, in one statement. If the database refuses it
/// (anything but being unreachable), the same rows are written one at a
/// time, and each one refused is set aside (see [`SET_ASIDE_FOR`]): one bad
/// event never stops the others.
pub async fn write(client: &impl GenericClient) -> Result<Written, DbError> {
    let mut written = Written::default();
    match sql::query_one(client, WRITE, &[&EVENTS_PER_STATEMENT]).await {
        Ok(row) => written.add(&row),
        Err(error) if error.is_unavailable() => return Err(error),
        Err(error) => {
            tracing::warn!(error = %crate::telemetry::error_chain(&error), "deferred deliveries refused; writing them one event at a time");
            let due = sql::query(client, OLDEST_DUE, &[&EVENTS_PER_STATEMENT]).await?;
            for id in due.iter().map(|row| row.get::<_, i64>("id")) {
                match sql::query_one(client, WRITE_ONE, &[&id]).await {
                    Ok(row) => written.add(&row),
                    Err(error) if error.is_unavailable() => return Err(error),
                    Err(error) => {
                        let reason = crate::telemetry::error_chain(&error);
                        tracing::warn!(outbox_id = id, error = %reason, "an event's deliveries refused; set aside");
                        let wait_ms = SET_ASIDE_FOR.as_millis() as i64;
                        sql::execute(client, SET_ASIDE, &[&id, &wait_ms, &reason]).await?;
                        written.set_aside += 1;
                    }
                }
            }
        }
    }
    Ok(written)
}
