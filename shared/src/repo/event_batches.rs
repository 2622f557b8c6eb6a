//! Group commit for ingest: concurrent `POST /v1/events` requests that meet
//! share ONE statement (one plan, one commit, one WAL flush) through a
//! [`Batcher`]. A request that finds a free lane runs at once, alone, with
//! the single-event statement, so a lone event waits for no one; batches form
//! only while every lane is busy.
//!
//! Each request keeps every promise of the single statement: its answer comes
//! after the statement that carried it committed; an idempotency key is
//! honoured as before (a batch carries each tenant's key once — a repeat within
//! the batch runs after it, alone, and is answered as a repeat); an event with
//! an ordering key runs alone too, after the batch, sorted by ordering key
//! (each key's events in request order); idempotency keys are written in key
//! order and lanes in ordering-key order, so two batches never wait on each
//! other's keys in opposite orders. A batch the database refuses for any reason other than
//! being unreachable (or missing history partitions) is written again one
//! event at a time, so one bad event fails only its own request.
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use futures_util::future::join_all;
use serde_json::Value;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::config::IngestConfig;
use crate::db::batcher::{BatchError, BatchFn, BatchLimits, Batcher};
use crate::db::{DbError, Pool};
use crate::domain::EndpointKind;
use crate::handoff::{claim_for, ClaimFor, Handoff};
use crate::repo::events::{
    find_duplicate, handed_deliveries, insert_prepared, outbox_row_columns, subscribed_endpoints, IngestOutcome,
    PreparedEvent, WriteOptions,
};
use crate::repo::retention::IDEMPOTENCY_WINDOW;
use crate::repo::{sql, GenericClient};

/// What one request gets back from the batcher.
pub type IngestResult = Result<IngestOutcome, DbError>;

/// The batcher ingest writes through.
pub type IngestBatcher = Batcher<PreparedEvent, IngestResult>;

/// Most events one statement carries.
pub const MAX_BATCH: usize = 64;

/// Ingest statements a process runs at once unless `RELAYOPS_INGEST_LANES`
/// says otherwise (and at most half its pool). Posts that arrive while both
/// lanes are busy share the next statement: under load, batches grow rather
/// than statements multiplying, and an event in a batch of ~10 takes about a
/// third of a lone event's statement time (measured in commit `b973d05`:
/// 2 lanes against 8 cost 0.83× the CPU per delivery to one endpoint flat
/// out, fan-out and a paced lone event unchanged). The worker's statements
/// default to 2 lanes too.
pub const DEFAULT_INGEST_LANES: usize = 2;

/// The ingest lanes of a process whose pool holds `pool_size` connections:
/// `configured` when set, else [`DEFAULT_INGEST_LANES`] but at most half the
/// pool (at least 1), so the rest stay free for reads.
fn ingest_lanes(configured: Option<usize>, pool_size: usize) -> usize {
    configured.unwrap_or(DEFAULT_INGEST_LANES.min((pool_size / 2).max(1)))
}

/// [`INGEST`](super::events) for many events of the tenants' `webhook`
/// endpoints: the same CTEs over `unnest` of the events' columns (one
/// `event_deliveries.v1` outbox row per event with a delivery, claimed by this
/// process's publisher when `$10` names it, for `$11` ms; an event matching
/// more than `$12` endpoints gets a `fanout` row naming them instead of its
/// deliveries; those names are aggregated once for the whole batch, in
/// `later_endpoints` — a subquery per event over `targets` read every event's
/// targets for each event, 64 × 64 × 100 rows for a full batch of events
/// with 100 subscribers). Whether an event's deliveries wait is told to each
/// of its targets by a window count (`counted`), not by joining the targets
/// to the per-event `plan`: the planner estimates an event's subscribers at
/// about one (subscription patterns are declared distinct, migration 0020),
/// and such a join became a nested loop over every target for every event.
/// The key CTE returns the event id each key now names (the new event's,
/// when the key was free or taken over), and only those events are written.
const INGEST_MANY: &str = concat!(
    "WITH input AS (
         SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::jsonb[], $5::text[], $6::bytea[],
                              $7::text[], $8::text[])
             AS i(id, tenant_id, event_type, payload, idempotency_key, request_hash, tenant_text, id_text)),
     key AS (
         INSERT INTO relayops.idempotency_keys AS k (tenant_id, idempotency_key, event_id, request_hash)
         SELECT tenant_id, idempotency_key, id, request_hash FROM input
         WHERE idempotency_key IS NOT NULL
         ORDER BY tenant_id, idempotency_key
         ON CONFLICT (tenant_id, idempotency_key) DO UPDATE
             SET event_id = EXCLUDED.event_id, request_hash = EXCLUDED.request_hash, created_at = now()
             WHERE k.created_at < now() - $9::bigint * interval '1 second'
                OR NOT relayops.event_exists(k.event_id)
         RETURNING k.event_id),
     new_event AS (
         INSERT INTO relayops.events (id, tenant_id, event_type, payload, idempotency_key, request_hash)
         SELECT id, tenant_id, event_type, payload, idempotency_key, request_hash FROM input
         WHERE idempotency_key IS NULL OR id IN (SELECT event_id FROM key)
         RETURNING id, tenant_id, event_type, received_at),
     targets AS MATERIALIZED (
         SELECT e.id AS event_id, ep.id AS endpoint_id, ep.tenant_id
         FROM new_event e
         ",
    subscribed_endpoints!("e.tenant_id", "e.event_type", "'webhook'"),
    "),
     counted AS MATERIALIZED (
         SELECT t.event_id, t.endpoint_id, t.tenant_id, count(*) OVER (PARTITION BY t.event_id) > $12 AS later
         FROM targets t),
     plan AS (
         SELECT event_id, count(*) AS matched, count(*) > $12 AS later
         FROM targets GROUP BY event_id),
     later_endpoints AS (
         SELECT event_id, array_agg(endpoint_id ORDER BY endpoint_id) AS endpoint_ids
         FROM counted WHERE later
         GROUP BY event_id),
     new_deliveries AS (
         INSERT INTO relayops.deliveries (id, tenant_id, event_id, endpoint_id)
         SELECT relayops.delivery_id_for(event_id), tenant_id, event_id, endpoint_id
         FROM counted WHERE NOT later
         RETURNING id, tenant_id, event_id, endpoint_id),
     new_outbox AS (
         INSERT INTO relayops.outbox_messages
             (tenant_id, event_id, envelope, status, claimed_by, claim_expires_at, publish_attempts, fanout_endpoints)
         SELECT i.tenant_id, i.id, jsonb_build_object(
             'type', 'event_deliveries.v1', 'tenant_id', i.tenant_text, 'event_id', i.id_text),
             ",
    outbox_row_columns!("p.later", "$10", "$11"),
    ",
             l.endpoint_ids
         FROM input i JOIN plan p ON p.event_id = i.id
         LEFT JOIN later_endpoints l ON l.event_id = i.id
         ORDER BY i.id
         RETURNING id, event_id, status)
     SELECT e.id, e.received_at, coalesce(p.matched, 0) AS deliveries, fanned.delivery_ids,
            fanned.endpoint_ids, o.id AS outbox_id
     FROM new_event e
     LEFT JOIN plan p ON p.event_id = e.id
     LEFT JOIN (SELECT event_id, ",
    handed_deliveries!("$10"),
    "
                FROM new_deliveries GROUP BY event_id) fanned
            ON fanned.event_id = e.id
     LEFT JOIN new_outbox o ON o.event_id = e.id AND o.status = 'claimed'"
);

/// Ingest's writes through one batcher per process, started on first use
/// (it needs the runtime), with `RELAYOPS_INGEST_LANES` lanes (default
/// [`DEFAULT_INGEST_LANES`], at most half the pool's connections: the rest
/// stay free for reads).
#[derive(Clone)]
pub struct IngestWrites {
    pool: Pool,
    batcher: Arc<OnceLock<IngestBatcher>>,
    /// This process's publisher, when it has one: events' outbox rows are
    /// written claimed by it and handed over ([`handoff`](crate::handoff)).
    handoff: Option<Handoff>,
    /// Up to how many matched endpoints ingest writes an event's deliveries.
    config: IngestConfig,
}

impl IngestWrites {
    pub fn new(pool: Pool) -> Self {
        Self { pool, batcher: Arc::new(OnceLock::new()), handoff: None, config: IngestConfig::default() }
    }

    /// Up to how many matched endpoints ingest writes an event's deliveries
    /// itself (before the first write, like [`with_handoff`](Self::with_handoff)).
    pub fn with_config(mut self, config: &IngestConfig) -> Self {
        self.config = *config;
        self
    }

    /// How events written outside the batcher (the batch route) are written:
    /// the same rule, no hand-off.
    pub fn options(&self) -> WriteOptions<'static> {
        WriteOptions { handoff: None, deliveries_at_ingest_max: self.config.deliveries_at_ingest_max }
    }

    /// Hands the outbox rows written from now on to this process's
    /// publisher (before the first write: the batcher keeps what it started with).
    pub fn with_handoff(mut self, handoff: Handoff) -> Self {
        self.handoff = Some(handoff);
        self
    }

    /// Writes one event (with others that arrive meanwhile) and answers it
    /// once the statement that carried it committed.
    pub async fn write(&self, event: PreparedEvent) -> Result<IngestResult, BatchError> {
        let batcher = self.batcher.get_or_init(|| {
            let lanes = ingest_lanes(self.config.lanes, self.pool.status().max_size);
            spawn(self.pool.clone(), lanes, self.handoff.clone(), self.config.deliveries_at_ingest_max)
        });
        batcher.call(event).await
    }
}

/// Starts the ingest batcher on the current runtime: `lanes` statements at
/// most at once, each on a connection of `pool`, rows handed to `handoff`'s
/// publisher when there is one, deliveries written for events matching up
/// to `deliveries_at_ingest_max` endpoints.
pub fn spawn(pool: Pool, lanes: usize, handoff: Option<Handoff>, deliveries_at_ingest_max: i64) -> IngestBatcher {
    let run: BatchFn<PreparedEvent, IngestResult> = Arc::new(move |events| {
        let (pool, handoff) = (pool.clone(), handoff.clone());
        Box::pin(async move {
            let client = pool.get().await?;
            let options = WriteOptions { handoff: handoff.as_ref(), deliveries_at_ingest_max };
            write_with_options(&client, events, options).await
        })
    });
    Batcher::spawn(BatchLimits { max_items: MAX_BATCH, lanes }, run)
}

/// Writes `events` (to the tenants' `webhook` endpoints) and answers each in
/// order. `Err` only when the database is unreachable or history partitions
/// are missing: every request in the batch gets that answer.
pub async fn write(client: &impl GenericClient, events: Vec<PreparedEvent>) -> Result<Vec<IngestResult>, DbError> {
    write_with(client, &events, OnRefusal::OneByOne, WriteOptions::default()).await
}

/// [`write`] as `options` say: the unordered events' outbox rows written
/// claimed by its `handoff`'s publisher while it takes them (each receipt's
/// `handed`), deliveries written by a publisher for events matching more
/// endpoints than its `deliveries_at_ingest_max`.
pub async fn write_with_options(
    client: &impl GenericClient,
    events: Vec<PreparedEvent>,
    options: WriteOptions<'_>,
) -> Result<Vec<IngestResult>, DbError> {
    write_with(client, &events, OnRefusal::OneByOne, options).await
}

/// Writes `events` inside the caller's transaction, all or nothing (the
/// batch route): the first occurrence of a key wins, a later one is answered
/// as a repeat or a conflict; any refusal fails the whole.
pub async fn write_together(
    client: &impl GenericClient,
    events: &[PreparedEvent],
    options: WriteOptions<'_>,
) -> Result<Vec<IngestOutcome>, DbError> {
    write_with(client, events, OnRefusal::FailAll, options).await?.into_iter().collect()
}

/// What to do when the database refuses a set statement.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OnRefusal {
    /// Write each event alone, so one bad event fails only itself.
    OneByOne,
    /// Fail them all (inside a transaction, which the refusal aborted).
    FailAll,
}

async fn write_with(
    client: &impl GenericClient,
    events: &[PreparedEvent],
    on_refusal: OnRefusal,
    options: WriteOptions<'_>,
) -> Result<Vec<IngestResult>, DbError> {
    if let [event] = events {
        return match insert_prepared(client, event, EndpointKind::Webhook, options).await {
            Err(error) if on_refusal == OnRefusal::FailAll || is_for_everyone(&error) => Err(error),
            outcome => Ok(vec![outcome]),
        };
    }
    // The set statement takes unordered events whose key is the first of its
    // kind (ON CONFLICT may touch a row once). The rest run alone after it:
    // events with an ordering key (`INGEST_ORDERED`: each takes its lane
    // position in its own statement), then an idempotency key's later
    // occurrences (answered as repeats or conflicts), in request order.
    let mut keys = HashSet::new();
    let (mut first, mut ordered, mut repeats) = (Vec::new(), Vec::new(), Vec::new());
    for (index, event) in events.iter().enumerate() {
        let first_of_key = event.idempotency_key.as_deref().is_none_or(|key| keys.insert((event.tenant, key)));
        match (first_of_key, &event.ordering_key) {
            (false, _) => repeats.push(index),
            (true, Some(_)) => ordered.push(index),
            (true, None) => first.push(index),
        }
    }
    // Each ordered event locks its lanes until the transaction ends (the
    // batch route's): taken in request order, two batches naming the same
    // keys in opposite orders would wait on each other — a deadlock Postgres
    // breaks by aborting one. So the keys go in one fixed order; the sort is
    // stable, so each key's events keep their request order, the order its
    // lanes promise.
    ordered.sort_by(|&a, &b| events[a].ordering_key.cmp(&events[b].ordering_key));
    let later: Vec<usize> = ordered.into_iter().chain(repeats).collect();
    let mut outcomes: Vec<Option<IngestResult>> = (0..events.len()).map(|_| None).collect();
    let firsts: Vec<&PreparedEvent> = first.iter().map(|&index| &events[index]).collect();
    let written = if firsts.is_empty() { Ok((Vec::new(), None)) } else { insert_many(client, &firsts, options).await };
    match written {
        Ok((rows, claim)) => {
            let written: HashMap<Uuid, &Row> = rows.iter().map(|row| (row.get("id"), row)).collect();
            let mut held = Vec::new();
            for (&index, event) in first.iter().zip(&firsts) {
                match written.get(&event.id.as_uuid()) {
                    Some(row) => {
                        let handed = event.handed_row(claim, row);
                        let receipt = event.receipt(row.get("received_at"), row.get("deliveries"), handed);
                        outcomes[index] = Some(Ok(IngestOutcome::Created(receipt)))
                    }
                    None => held.push(index),
                }
            }
            // Keys held by earlier events: their answers, pipelined.
            let found = join_all(held.iter().map(|&index| {
                let event = &events[index];
                let key = event.idempotency_key.as_deref().unwrap_or_default();
                find_duplicate(client, event.tenant, key, &event.request_hash)
            }))
            .await;
            for (index, outcome) in held.into_iter().zip(found) {
                outcomes[index] = Some(outcome);
            }
        }
        Err(error) if on_refusal == OnRefusal::FailAll || is_for_everyone(&error) => return Err(error),
        Err(error) => {
            tracing::warn!(events = firsts.len(), error = %crate::telemetry::error_chain(&error), "ingest batch refused; writing its events one at a time");
            for &index in &first {
                outcomes[index] = Some(insert_prepared(client, &events[index], EndpointKind::Webhook, options).await);
            }
        }
    }
    for index in later {
        let outcome = insert_prepared(client, &events[index], EndpointKind::Webhook, options).await;
        // Inside a transaction a refusal aborted everything written so far.
        let outcome = if on_refusal == OnRefusal::FailAll { Ok(outcome?) } else { outcome };
        outcomes[index] = Some(outcome);
    }
    Ok(outcomes
        .into_iter()
        .map(|outcome| outcome.unwrap_or_else(|| Err(DbError::Pool("event not written".into()))))
        .collect())
}

/// Errors that would refuse every event alike: no point writing one by one.
fn is_for_everyone(error: &DbError) -> bool {
    error.is_unavailable() || matches!(error, DbError::NoPartition(_))
}

/// Runs [`INGEST_MANY`]: a row per event written (those whose key was held
/// by another event are absent: `id`, `received_at`, `deliveries`, and what
/// [`PreparedEvent::handed_row`] reads), and the claim their outbox rows were
/// written with (by the hand-off's publisher while it takes rows).
async fn insert_many<'h>(
    client: &impl GenericClient,
    events: &[&PreparedEvent],
    options: WriteOptions<'h>,
) -> Result<(Vec<Row>, Option<ClaimFor<'h>>), DbError> {
    let ids: Vec<Uuid> = events.iter().map(|event| event.id.as_uuid()).collect();
    let tenants: Vec<Uuid> = events.iter().map(|event| event.tenant.as_uuid()).collect();
    let types: Vec<&str> = events.iter().map(|event| event.event_type.as_str()).collect();
    let payloads: Vec<&Value> = events.iter().map(|event| &event.payload).collect();
    let keys: Vec<Option<&str>> = events.iter().map(|event| event.idempotency_key.as_deref()).collect();
    let hashes: Vec<&[u8]> = events.iter().map(|event| event.request_hash.as_slice()).collect();
    let tenant_texts: Vec<String> = events.iter().map(|event| event.tenant.to_string()).collect();
    let id_texts: Vec<String> = events.iter().map(|event| event.id.to_string()).collect();
    let window = IDEMPOTENCY_WINDOW.as_secs() as i64;
    let (claim, owner, ttl_ms) = claim_for(options.handoff);
    let max = options.deliveries_at_ingest_max;
    let rows = sql::query(
        client,
        INGEST_MANY,
        &[&ids, &tenants, &types, &payloads, &keys, &hashes, &tenant_texts, &id_texts, &window, &owner, &ttl_ms, &max],
    )
    .await?;
    Ok((rows, claim))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ingest_runs_two_lanes_unless_configured_and_never_takes_more_than_half_a_small_pool() {
        assert_eq!(ingest_lanes(None, 16), 2, "a long-lived process's pool");
        assert_eq!(ingest_lanes(None, 2), 1, "a Lambda's pool keeps a connection for reads");
        assert_eq!(ingest_lanes(None, 1), 1, "at least one lane");
        assert_eq!(ingest_lanes(Some(8), 16), 8, "RELAYOPS_INGEST_LANES wins");
        assert_eq!(ingest_lanes(Some(3), 2), 3, "even beyond half the pool, as configured");
    }
}
