//! The outbox, from the publisher's side: claim a batch (short transaction,
//! `FOR UPDATE SKIP LOCKED`, so publishers run in parallel; tenants in turn;
//! an event's row comes with its pending deliveries), delete rows only
//! after the broker confirmed them (the outbox holds the work in flight and
//! nothing else), release what failed, and reclaim the claims of publishers
//! that died. Not tenant-scoped: rows are never chosen by a client.
use std::time::Duration;

use uuid::Uuid;

use crate::broker::DeliveryTask;
use crate::db::DbError;
use crate::ids::{DeliveryId, EndpointId, EventId, TenantId};
use crate::repo::{sql, GenericClient};

/// The claim of a batch of rows (`FOR UPDATE SKIP LOCKED`, so publishers run
/// in parallel), taken **fairly between tenants**, and, in the same
/// statement, the deliveries each `event_deliveries.v1` row stands for.
///
/// Which rows: a walk over the tenants with pending rows (`walk`), in
/// `tenant_id` order from just after `$4` (the last tenant the previous
/// claim reached), wrapping round, at most `$2` tenants — each step one
/// probe of the `(tenant_id, id) WHERE status = 'pending'` index, so the
/// walk costs O(tenants visited), never O(rows waiting). Each tenant offers
/// its oldest rows not locked by another claim, at most `per_tenant` (a fair
/// share of the batch, at most four batches' worth in all), locked
/// (`FOR UPDATE SKIP LOCKED`, so publishers run in parallel; the statement's
/// locks last only as long as it), and the batch takes them round-robin:
/// every tenant's first row, then every tenant's second, … up to `$2`. A
/// tenant's lone event is thus in the next claim however many rows another
/// tenant has waiting (oldest-first, it waited behind all of them), and a
/// tenant alone still fills whole batches. `more` says whether rows may be
/// left (a tenant offered all it could, or the walk stopped short); the
/// statement returns the last tenant reached, where the next walk goes on.
///
/// The deliveries: those of each event row's event still `pending` (one
/// result row per delivery; a row of any other kind, or an event with none
/// left, comes once with no delivery). An event's row names its event
/// in `event_id` (the ingest statements write it; no other row has one). Each
/// event's lookup is a probe of the `(event_id, endpoint_id)` index of the one
/// partition its id names (a nested loop, pruned per row at run time); the
/// status and the tenant are tested outside the `OFFSET 0` fence, so no
/// statistics can turn it into a scan of every pending row (the BENCHMARKS.md
/// of commit `1e9a367`, "Claim queries stay O(batch)") or of the tenant's
/// deliveries (the expansion, with the tenant inside, read every delivery of
/// the tenant in the partition through `(tenant_id, endpoint_id, created_at)`
/// on most runs of a bench: commit `c45e285`). It was a statement of its own
/// after the claim: a round trip and ~0.3 ms of Postgres per lone event more
/// (issue 18).
///
/// The rows offered are locked in a CTE of their own, which Postgres runs
/// once (it is read several times, so it is materialized), and the update
/// takes them by `= ANY(ARRAY(…))`, never `IN (…)`: as a semi-join, the
/// planner may run a locking sub-select again for each row it tests, and
/// every run skips the rows the previous ones locked — one claim took
/// thousands of rows in 27–31 s under a burst of ingest, then released most
/// of them as "left for the next batch".
const CLAIM_BATCH: &str = "WITH RECURSIVE walk (tenant_id, turn, first) AS (
         SELECT n.tenant_id, 1::bigint, n.tenant_id
         FROM (SELECT COALESCE(
                  (SELECT tenant_id FROM relayops.outbox_messages
                   WHERE status = 'pending' AND tenant_id > $4 ORDER BY tenant_id LIMIT 1),
                  (SELECT tenant_id FROM relayops.outbox_messages
                   WHERE status = 'pending' ORDER BY tenant_id LIMIT 1)) AS tenant_id) n
         WHERE n.tenant_id IS NOT NULL
       UNION ALL
         SELECT n.tenant_id, w.turn + 1, w.first
         FROM walk w CROSS JOIN LATERAL (SELECT COALESCE(
                  (SELECT tenant_id FROM relayops.outbox_messages
                   WHERE status = 'pending' AND tenant_id > w.tenant_id ORDER BY tenant_id LIMIT 1),
                  (SELECT tenant_id FROM relayops.outbox_messages
                   WHERE status = 'pending' ORDER BY tenant_id LIMIT 1)) AS tenant_id) n
         WHERE w.turn < $2::bigint AND n.tenant_id <> w.first),
     sized AS (
         SELECT count(*) AS tenants,
                greatest(1, least($2::bigint - count(*) + 1, ceil(4.0 * $2::bigint / greatest(count(*), 1))))::bigint AS per_tenant
         FROM walk),
     offered AS (
         SELECT r.id, r.rank, w.turn, w.tenant_id
         FROM walk w CROSS JOIN LATERAL (
             SELECT o.id, row_number() OVER (ORDER BY o.id) AS rank
             FROM (SELECT id FROM relayops.outbox_messages
                   WHERE status = 'pending' AND tenant_id = w.tenant_id AND available_at <= now()
                   ORDER BY id LIMIT (SELECT per_tenant FROM sized)
                   FOR UPDATE SKIP LOCKED) o) r),
     chosen AS (SELECT id, turn, tenant_id FROM offered ORDER BY rank, turn LIMIT $2::bigint),
     claimed AS (
         UPDATE relayops.outbox_messages o
         SET status = 'claimed', claimed_by = $1,
             claim_expires_at = now() + $3::bigint * interval '1 millisecond',
             publish_attempts = o.publish_attempts + 1
         WHERE o.id = ANY(ARRAY(SELECT id FROM chosen))
         RETURNING o.id, o.envelope, o.tenant_id, o.event_id)
     SELECT c.id, c.envelope, c.tenant_id, c.event_id, d.id AS delivery_id, d.endpoint_id,
            ((SELECT tenants FROM sized) >= $2::bigint
             OR (SELECT count(*) FROM offered) > $2::bigint
             OR EXISTS (SELECT 1 FROM offered WHERE rank = (SELECT per_tenant FROM sized))) AS more,
            (SELECT tenant_id FROM chosen ORDER BY turn DESC LIMIT 1) AS reached
     FROM claimed c
     LEFT JOIN LATERAL (
         SELECT d.id, d.endpoint_id, d.status, d.tenant_id FROM relayops.deliveries d
         WHERE d.event_id = c.event_id OFFSET 0) d ON d.status = 'pending' AND d.tenant_id = c.tenant_id
     ORDER BY c.id";

/// A row still claimed by `$2`: the table's CHECK makes `claimed_by` and
/// `claim_expires_at` set exactly when `status = 'claimed'`, so the condition
/// below says that without naming the status — named, it let the planner
/// take the partial index of claimed rows and read every entry in it, dead
/// ones not yet vacuumed included (47 a delete in a bench run at 200
/// events/s, growing until autovacuum came), instead of the primary key.
macro_rules! still_claimed_by {
    ($owner:literal) => {
        concat!("claimed_by = ", $owner, " AND claim_expires_at IS NOT NULL")
    };
}

const DELETE_PUBLISHED: &str =
    concat!("DELETE FROM relayops.outbox_messages WHERE id = ANY($1) AND ", still_claimed_by!("$2"), " RETURNING id");

const RELEASE: &str = concat!(
    "UPDATE relayops.outbox_messages
     SET status = 'pending', claimed_by = NULL, claim_expires_at = NULL, last_error = $3
     WHERE id = ANY($1) AND ",
    still_claimed_by!("$2")
);

const RECLAIM_EXPIRED: &str = "UPDATE relayops.outbox_messages
     SET status = 'pending', claimed_by = NULL, claim_expires_at = NULL, last_error = 'claim expired'
     WHERE status = 'claimed' AND claim_expires_at < now()";

/// One count per partial index (when published rows were kept, a
/// `status IN (...)` scanned them all: 113 ms at 174k rows; this form 0.9 ms):
/// rows to publish, rows being published, and rows whose deliveries a
/// publisher has still to write (`repo::deferred_deliveries`).
const COUNT_PENDING: &str = "SELECT (SELECT count(*) FROM relayops.outbox_messages WHERE status = 'pending')
          + (SELECT count(*) FROM relayops.outbox_messages WHERE status = 'claimed')
          + (SELECT count(*) FROM relayops.outbox_messages WHERE status = 'fanout')";

#[derive(Debug, Clone)]
pub struct OutboxMessage {
    pub id: i64,
    pub envelope: serde_json::Value,
    /// For an `event_deliveries.v1` row: its event's deliveries that were
    /// still `pending` when it was claimed (empty for any other row).
    pub pending: Vec<DeliveryTask>,
}

/// Where a publisher's next claim starts its walk over the tenants (see
/// [`CLAIM_BATCH`]): after the last tenant the previous claim reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantTurn(Uuid);

/// A claimed batch, and whether the outbox may hold more rows to claim now.
#[derive(Debug, Default)]
pub struct ClaimedBatch {
    pub messages: Vec<OutboxMessage>,
    pub more: bool,
}

/// Claims up to `limit` rows for `ttl`, fairly between tenants from `turn`
/// on (which it moves on), each with the pending deliveries it stands for
/// (see [`CLAIM_BATCH`]). The claim's commit does not wait for the WAL
/// flush: a claim lost in a database crash leaves the rows pending, to be
/// claimed again.
pub async fn claim_batch(
    client: &mut deadpool_postgres::Object,
    owner: &str,
    limit: i64,
    ttl: Duration,
    turn: &mut TenantTurn,
) -> Result<ClaimedBatch, DbError> {
    let ttl_ms = ttl.as_millis() as i64;
    let rows = sql::query_unflushed(client, CLAIM_BATCH, &[&owner, &limit, &ttl_ms, &turn.0]).await?;
    let mut batch = ClaimedBatch::default();
    if let Some(first) = rows.first() {
        batch.more = first.get("more");
        if let Some(reached) = first.get::<_, Option<Uuid>>("reached") {
            *turn = TenantTurn(reached);
        }
    }
    // By row id (RETURNING keeps no order; the statement sorts), a row's
    // deliveries one after another.
    let messages = &mut batch.messages;
    for row in &rows {
        let id: i64 = row.get("id");
        if messages.last().is_none_or(|last: &OutboxMessage| last.id != id) {
            messages.push(OutboxMessage { id, envelope: row.get("envelope"), pending: Vec::new() });
        }
        let (Some(delivery), Some(event)) =
            (row.get::<_, Option<Uuid>>("delivery_id"), row.get::<_, Option<Uuid>>("event_id"))
        else {
            continue;
        };
        let message = messages.last_mut().expect("pushed above");
        message.pending.push(DeliveryTask {
            tenant_id: TenantId::from_uuid(row.get("tenant_id")),
            delivery_id: DeliveryId::from_uuid(delivery),
            event_id: EventId::from_uuid(event),
            endpoint_id: EndpointId::from_uuid(row.get("endpoint_id")),
        });
    }
    Ok(batch)
}

/// `EXPLAIN (ANALYZE, FORMAT JSON)` of [`claim_batch`]'s statement as it runs
/// (its generic plan under `sql::BY_KEY_PLANS`), rolled back. For tests and
/// benchmarks.
pub async fn explain_claim_batch(
    client: &mut deadpool_postgres::Object,
    owner: &str,
    limit: i64,
    ttl: Duration,
) -> Result<serde_json::Value, DbError> {
    let (ttl_ms, from) = (ttl.as_millis() as i64, TenantTurn::default().0);
    sql::explain_on_generic_plan(
        client,
        CLAIM_BATCH,
        &["text", "bigint", "bigint", "uuid"],
        &[&owner, &limit, &ttl_ms, &from],
    )
    .await
}

/// `EXPLAIN (ANALYZE, FORMAT JSON)` of [`delete_published`]'s statement as
/// it runs, rolled back. For tests.
pub async fn explain_delete_published(
    client: &mut deadpool_postgres::Object,
    owner: &str,
    ids: &[i64],
) -> Result<serde_json::Value, DbError> {
    sql::explain_on_generic_plan(client, DELETE_PUBLISHED, &["bigint[]", "text"], &[&ids, &owner]).await
}

/// Deletes the rows whose messages the broker confirmed and returns their
/// ids; rows whose claim was taken over are skipped. Does not wait for the WAL flush: a delete lost in a
/// database crash (or a publisher dying before it) means the rows are
/// published again — a duplicate message the worker's claim absorbs.
pub async fn delete_published(
    client: &mut deadpool_postgres::Object,
    owner: &str,
    ids: &[i64],
) -> Result<Vec<i64>, DbError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(sql::query_unflushed(client, DELETE_PUBLISHED, &[&ids, &owner]).await?.iter().map(|row| row.get(0)).collect())
}

/// Gives rows back for another try (the broker refused them).
pub async fn release(client: &impl GenericClient, owner: &str, ids: &[i64], error: &str) -> Result<u64, DbError> {
    if ids.is_empty() {
        return Ok(0);
    }
    sql::execute(client, RELEASE, &[&ids, &owner, &error]).await
}

/// Makes rows claimed by a publisher that died (claim expired) claimable again.
pub async fn reclaim_expired(client: &impl GenericClient) -> Result<u64, DbError> {
    sql::execute(client, RECLAIM_EXPIRED, &[]).await
}

/// Rows not yet published (the backlog).
pub async fn backlog(client: &impl GenericClient) -> Result<i64, DbError> {
    Ok(sql::query_one(client, COUNT_PENDING, &[]).await?.get(0))
}

const INSERT_MESSAGE: &str =
    "INSERT INTO relayops.outbox_messages (tenant_id, delivery_id, envelope) VALUES ($1, $2, $3)";

/// Adds one message to the outbox, in the caller's transaction.
pub async fn insert_message(
    client: &impl GenericClient,
    tenant: crate::ids::TenantId,
    delivery: Option<crate::ids::DeliveryId>,
    message: &crate::broker::QueueMessage,
) -> Result<(), DbError> {
    sql::execute(client, INSERT_MESSAGE, &[&tenant.as_uuid(), &delivery.map(|id| id.as_uuid()), &message.to_json()])
        .await?;
    Ok(())
}

const INSERT_DELIVERY_MESSAGES: &str = "INSERT INTO relayops.outbox_messages (tenant_id, delivery_id, envelope)
     SELECT tenant_id, delivery_id, envelope
     FROM unnest($1::uuid[], $2::uuid[], $3::jsonb[]) AS batch (tenant_id, delivery_id, envelope)";

/// Adds a `delivery.v1` message per task, in one statement, in the caller's
/// transaction (ingest fan-out, replay, recovery).
pub async fn insert_delivery_messages(
    client: &impl GenericClient,
    tasks: &[crate::broker::DeliveryTask],
) -> Result<(), DbError> {
    if tasks.is_empty() {
        return Ok(());
    }
    let tenants: Vec<uuid::Uuid> = tasks.iter().map(|task| task.tenant_id.as_uuid()).collect();
    let deliveries: Vec<uuid::Uuid> = tasks.iter().map(|task| task.delivery_id.as_uuid()).collect();
    let envelopes: Vec<serde_json::Value> =
        tasks.iter().map(|task| crate::broker::QueueMessage::DeliveryV1(*task).to_json()).collect();
    sql::execute(client, INSERT_DELIVERY_MESSAGES, &[&tenants, &deliveries, &envelopes]).await?;
    Ok(())
}
