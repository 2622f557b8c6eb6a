//! The recovery pass (run from the publisher's tick): nothing may depend on
//! RabbitMQ alone remembering a delivery. It re-enqueues, through the outbox:
//!
//! - deliveries whose worker lease expired (the worker died mid-attempt);
//! - deliveries due for a retry whose message never came (`grace` after the
//!   due time);
//! - `pending` deliveries whose message is gone: pending for longer than the
//!   grace, with no outbox row still waiting to be published (their own, or
//!   their event's `event_deliveries.v1`) and their
//!   message published longer than the grace ago (the broker dropped it at the
//!   ready queue's delivery limit, or a database crash undid a claim after the
//!   message was acked).
//!
//! Published outbox rows are deleted, so "published longer than the grace
//! ago" comes from watermarks (`relayops.outbox_watermarks`) each pass
//! samples: at `sampled_at`, every outbox row created before
//! `published_before` had been published. An outbox row and the delivery
//! state it enqueues are written in one transaction (same `now()`), so a
//! pending row whose `updated_at` is before the watermark of a sample taken
//! more than the grace ago had its message published before that sample. This
//! keeps what the kept rows protected: after a broker outage, the backlog's
//! deliveries (old `updated_at`, messages published moments ago, still on a
//! long ready queue) are not re-enqueued a second time. Until a sample older
//! than the grace exists (a new installation), no pending row counts as lost.
//!
//! Waiting is not lost (SPEC §12): a message may wait its turn on a long
//! ready queue far longer than the grace (a tenant's backlog behind a slow
//! receiver, a broker outage's backlog). So a row counts as stranded only
//! once every ready queue its message may be in has been *seen empty* after
//! the message entered it, at least the grace ago
//! (`relayops.ready_queue_sightings`, recorded by publishers from their
//! depth samples: [`record_empty_sightings`]): by then the message had
//! been handed to a consumer, which would have claimed the row long since.
//! A first attempt's message is in one of the first-attempt shards; a
//! retry's comes back at or before its due time to the shard it arrived by
//! or its tenant's own (`Topology::return_shard`), so any ready queue.
//! Until a queue has been seen empty (a new installation, a broker that
//! cannot be reached), nothing that depends on it counts as lost.
//!
//! Each re-enqueued row's clock (`updated_at`, or `next_attempt_at` for a
//! retry) restarts, so a row is re-enqueued at most once per grace. A duplicate
//! message this may create is absorbed by the worker's claim.
use std::time::Duration;

use tokio_postgres::Row;

use crate::repo::GenericClient;
use uuid::Uuid;

use crate::broker::envelope::DeliveryTask;
use crate::db::DbError;
use crate::ids::{DeliveryId, EndpointId, EventId, TenantId};
use crate::repo::outbox;
use crate::repo::sql;

/// The time before which every message that entered all of the ready queues
/// `$3` was handed to a consumer at least the grace (`$1`) ago: the oldest
/// of their latest sightings empty that are older than the grace;
/// `-infinity` while one of them has none.
macro_rules! seen_empty_before {
    () => {
        "(SELECT CASE WHEN count(*) = cardinality($3::text[])
                      THEN min(coalesce(CASE WHEN seen_empty_at < now() - $1::bigint * interval '1 millisecond'
                                             THEN seen_empty_at ELSE seen_empty_before END,
                                        '-infinity'))
                      ELSE '-infinity' END
          FROM relayops.ready_queue_sightings WHERE queue = ANY($3::text[]))"
    };
}

/// Expired leases; retries whose message came back (to a ready queue, `$3`:
/// all of them) before every one was last seen empty, the grace ago.
const FIND_EXPIRED_OR_OVERDUE: &str = concat!(
    "SELECT id, tenant_id, event_id, endpoint_id FROM relayops.deliveries
     WHERE (status = 'in_progress' AND lease_expires_at < now())
        OR (status = 'scheduled' AND next_attempt_at < now() - $1::bigint * interval '1 millisecond'
            AND next_attempt_at < ",
    seen_empty_before!(),
    ")
     LIMIT $2::bigint
     FOR UPDATE SKIP LOCKED"
);

/// Pending rows whose message is gone. Candidates are the oldest pending rows
/// (`deliveries_pending_since_idx`), at most four times the limit, and only
/// those written before the newest watermark older than the grace: while a
/// broker outage holds a large backlog, rows behind it are not looked at one
/// by one every tick. The `NOT EXISTS` pair is the precise test: no outbox row
/// for the delivery is still waiting (one written by a later replay or
/// recovery), nor its event's row (`event_deliveries.v1`, which publishes
/// every pending delivery of the event).
const FIND_LOST_PENDING: &str = concat!(
    "SELECT d.id, d.tenant_id, d.event_id, d.endpoint_id FROM relayops.deliveries d
     WHERE (d.id, d.event_id) IN (
         SELECT id, event_id FROM relayops.deliveries
         WHERE status = 'pending'
           AND updated_at < now() - $1::bigint * interval '1 millisecond'
           AND updated_at < coalesce((SELECT published_before FROM relayops.outbox_watermarks
                                      WHERE sampled_at < now() - $1::bigint * interval '1 millisecond'
                                        AND sampled_at < ",
    seen_empty_before!(),
    "
                                      ORDER BY sampled_at DESC LIMIT 1), '-infinity')
         ORDER BY updated_at
         LIMIT $2::bigint * 4)
       AND d.status = 'pending'
       AND NOT EXISTS (SELECT 1 FROM relayops.outbox_messages o WHERE o.delivery_id = d.id AND o.status <> 'published')
       AND NOT EXISTS (SELECT 1 FROM relayops.outbox_messages o WHERE o.event_id = d.event_id AND o.status <> 'published')
     LIMIT $2::bigint
     FOR UPDATE OF d SKIP LOCKED"
);

/// This pass's watermark: the oldest outbox row still waiting — pending (the
/// oldest id, through the pending index), claimed (few: the batches in
/// flight, through the claimed index) or waiting for its deliveries to be
/// written (`fanout`: none of its deliveries exists yet, so counting it only
/// holds the watermark back) — or now when none is. A row marked
/// `published` by a publisher older than `0011` (a rolling upgrade) is
/// ignored. Samples older than the newest one the next passes still need
/// are deleted.
const SAMPLE_WATERMARK: &str = "WITH sampled AS (
         INSERT INTO relayops.outbox_watermarks (sampled_at, published_before)
         SELECT now(), least(now(),
             (SELECT created_at FROM relayops.outbox_messages WHERE status = 'pending' ORDER BY id LIMIT 1),
             (SELECT min(created_at) FROM relayops.outbox_messages WHERE status = 'claimed'),
             (SELECT created_at FROM relayops.outbox_messages WHERE status = 'fanout' ORDER BY id LIMIT 1))
         ON CONFLICT (sampled_at) DO NOTHING)
     DELETE FROM relayops.outbox_watermarks
     WHERE sampled_at < (SELECT max(sampled_at) FROM relayops.outbox_watermarks
                         WHERE sampled_at < now() - $1::bigint * interval '1 millisecond')";

/// Expired leases become pending; overdue retries get their due time reset, so
/// the grace period starts again instead of re-enqueueing on every tick; lost
/// pending rows get their clock reset for the same reason.
const REVIVE: &str = "UPDATE relayops.deliveries
     SET status = CASE WHEN status = 'in_progress' THEN 'pending' ELSE status END,
         next_attempt_at = CASE WHEN status = 'scheduled' THEN now() ELSE next_attempt_at END,
         lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
     WHERE (id, event_id) IN (SELECT * FROM unnest($1::uuid[], $2::uuid[]))";

/// Records that the ready `queues` were seen empty `ages_ms` ago (`None`:
/// not since the last call). What the search needs is the latest sighting
/// older than the grace; two are kept: `seen_empty_at` is kept until it is
/// older than the grace (newer sightings meanwhile are dropped), then it
/// becomes `seen_empty_before` and the next sighting takes its place. So the
/// search's time trails the best one by at most about the grace. A row
/// changes only then: a sighting that changes nothing writes nothing (an
/// idle installation's passes would otherwise rewrite every queue's row
/// each second).
const RECORD_SIGHTINGS: &str = "INSERT INTO relayops.ready_queue_sightings AS s (queue, seen_empty_at)
     SELECT queue, now() - age_ms * interval '1 millisecond'
     FROM unnest($1::text[], $2::bigint[]) AS seen(queue, age_ms)
     WHERE age_ms IS NOT NULL
     ON CONFLICT (queue) DO UPDATE
     SET seen_empty_before = CASE WHEN s.seen_empty_at < now() - $3::bigint * interval '1 millisecond'
                                  THEN s.seen_empty_at ELSE s.seen_empty_before END,
         seen_empty_at = CASE WHEN s.seen_empty_at < now() - $3::bigint * interval '1 millisecond'
                              THEN excluded.seen_empty_at ELSE s.seen_empty_at END
     WHERE s.seen_empty_at < now() - $3::bigint * interval '1 millisecond'";

/// Records when each of `queues` was last seen empty (`ages[i]` ago; `None`:
/// not seen empty lately), for [`requeue_stranded`].
pub async fn record_empty_sightings(
    client: &impl GenericClient,
    queues: &[String],
    ages: &[Option<Duration>],
    grace: Duration,
) -> Result<(), DbError> {
    let ages_ms: Vec<Option<i64>> = ages.iter().map(|age| age.map(|age| age.as_millis() as i64)).collect();
    if ages_ms.iter().all(Option::is_none) {
        return Ok(());
    }
    sql::execute(client, RECORD_SIGHTINGS, &[&queues, &ages_ms, &(grace.as_millis() as i64)]).await?;
    Ok(())
}

/// The ready queues (names from `broker::ReadyShards`, `<ns>.ready` first),
/// and which of them a stranded delivery's message may be in.
#[derive(Debug, Clone)]
pub struct ReadyQueues {
    all: Vec<String>,
}

impl ReadyQueues {
    pub fn of(shards: &crate::broker::ReadyShards) -> Self {
        Self { all: shards.all().iter().map(|shard| shard.queue.clone()).collect() }
    }

    /// Every ready queue, indexed like `ReadyShards::all`.
    pub fn all(&self) -> &[String] {
        &self.all
    }

    /// Where first attempts (and re-publications through the outbox) go:
    /// the shards after `<ns>.ready`, or that one alone.
    fn first(&self) -> &[String] {
        if self.all.len() > 1 {
            &self.all[1..]
        } else {
            &self.all
        }
    }
}

/// What one recovery pass re-enqueued.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Requeued {
    /// Expired leases and overdue retries.
    pub expired_or_overdue: u64,
    /// Pending rows whose message was lost.
    pub lost_pending: u64,
}

impl Requeued {
    pub fn total(&self) -> u64 {
        self.expired_or_overdue + self.lost_pending
    }
}

/// Re-enqueues up to `limit` stranded deliveries of each kind. Must run in a
/// transaction (the caller's).
pub async fn requeue_stranded(
    tx: &impl GenericClient,
    grace: Duration,
    limit: i64,
    queues: &ReadyQueues,
) -> Result<Requeued, DbError> {
    let grace_ms = grace.as_millis() as i64;
    // The search for expired leases and overdue retries spans every history
    // partition (such a row may be in any). Planned for its parameters —
    // what Postgres does for a prepared statement's first five runs on each
    // connection — each planning opened every partition and its indexes:
    // 12 ms a pass with 35 partitions against ~1 ms to run, once a second
    // for the first minutes of every publisher (and of every Lambda
    // container) (commit `45d9e11`). Its generic plan is made at
    // once: a scan of each partition's two small partial indexes, whatever
    // the parameters. The lost-pending search (6 ms to plan) is left to
    // Postgres's choice: its generic plan, made without the LIMIT's value,
    // may hash every pending row, which in a broker outage's backlog is
    // the one plan it must not keep; nor is REVIVE's (a hashed scan of every
    // partition for an unknown number of ids).
    let expired =
        sql::query_on_generic_plan_in_transaction(tx, FIND_EXPIRED_OR_OVERDUE, &[&grace_ms, &limit, &queues.all()])
            .await?;
    let lost = sql::query(tx, FIND_LOST_PENDING, &[&grace_ms, &limit, &queues.first()]).await?;
    sql::execute(tx, SAMPLE_WATERMARK, &[&grace_ms]).await?;
    let requeued = Requeued { expired_or_overdue: expired.len() as u64, lost_pending: lost.len() as u64 };
    if requeued.total() == 0 {
        return Ok(requeued);
    }
    let tasks: Vec<DeliveryTask> = expired.iter().chain(&lost).map(task).collect();
    let ids: Vec<Uuid> = tasks.iter().map(|task| task.delivery_id.as_uuid()).collect();
    let events: Vec<Uuid> = tasks.iter().map(|task| task.event_id.as_uuid()).collect();
    sql::execute(tx, REVIVE, &[&ids, &events]).await?;
    outbox::insert_delivery_messages(tx, &tasks).await?;
    Ok(requeued)
}

/// The delivery a row with `tenant_id`, `id`, `event_id` and `endpoint_id`
/// names, as a message (also the circuits' release, `repo::circuits`).
pub(crate) fn task(row: &Row) -> DeliveryTask {
    DeliveryTask {
        tenant_id: TenantId::from_uuid(row.get("tenant_id")),
        delivery_id: DeliveryId::from_uuid(row.get("id")),
        event_id: EventId::from_uuid(row.get("event_id")),
        endpoint_id: EndpointId::from_uuid(row.get("endpoint_id")),
    }
}
