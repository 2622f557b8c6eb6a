//! Ordering lanes (SPEC §11): the deliveries of one (endpoint, ordering key)
//! go one at a time, in the order their events were accepted.
//!
//! A lane is a row in `ordering_lanes` while it has something in flight; its
//! head is the one delivery of the lane that may be claimed (the worker's
//! claim checks it: `repo::delivery_batches`). The deliveries behind the head
//! wait in `ordering_lane_waiting` by position, as `scheduled` rows without a
//! `next_attempt_at` (nothing claims or re-enqueues them). Whatever makes the
//! head terminal — delivered, failed, dead — moves the lane on in the same
//! transaction: the lowest waiting position becomes the head, goes `pending`
//! and gets its outbox row ([`release`]); with nothing waiting the lane's row
//! is removed.
//!
//! **Locking:** a transaction that moves a lane on or joins it first takes
//! the lane row's lock in a statement of its own ([`lock`]), then touches the
//! deliveries. Ingest joins a lane by upserting its row, which takes the same
//! lock; so positions are handed out in commit order, and a release — whose
//! statements start after the lock was granted — sees every delivery that
//! joined before it. Not tenant-scoped by a client: the worker acts on ids
//! from its claim; replay passes the caller's tenant.
use chrono::{DateTime, Utc};

use crate::db::{DbError, Pool};
use crate::ids::{DeliveryId, EndpointId, EventId, TenantId};
use crate::repo::deliveries;
use crate::repo::delivery_queries::TimeKey;
use crate::repo::sql;
use crate::repo::GenericClient;
use tokio_postgres::types::ToSql;

/// One (endpoint, ordering key) of a tenant.
#[derive(Debug, Clone, Copy)]
pub struct LaneKey<'a> {
    pub tenant: TenantId,
    pub endpoint: EndpointId,
    pub ordering_key: &'a str,
}

const LOCK: &str = "SELECT head_delivery_id FROM relayops.ordering_lanes
     WHERE tenant_id = $1 AND endpoint_id = $2 AND ordering_key = $3
     FOR UPDATE";

/// Takes the lane's lock for the rest of the caller's transaction and returns
/// its head (`None`: the lane has nothing in flight). Must run as a statement
/// of its own, before the statements that rely on it (see the module's doc).
pub async fn lock(tx: &impl GenericClient, lane: LaneKey<'_>) -> Result<Option<DeliveryId>, DbError> {
    let row = sql::query_opt(tx, LOCK, &[&lane.tenant.as_uuid(), &lane.endpoint.as_uuid(), &lane.ordering_key]).await?;
    Ok(row.map(|row| DeliveryId::from_uuid(row.get(0))))
}

/// The lane moves on from `$4`, its head, which has just become terminal: the
/// lowest waiting position becomes the head and gets its outbox message (the
/// envelope as `QueueMessage::DeliveryV1` serializes it, as ingest builds it);
/// with nothing waiting the lane's row goes. Nothing happens if `$4` is not the
/// head (a lane moves on from its head only).
const RELEASE: &str = "WITH next AS (
         DELETE FROM relayops.ordering_lane_waiting w
         WHERE (w.tenant_id, w.endpoint_id, w.ordering_key, w.seq) IN (
             SELECT tenant_id, endpoint_id, ordering_key, seq FROM relayops.ordering_lane_waiting
             WHERE tenant_id = $1 AND endpoint_id = $2 AND ordering_key = $3
             ORDER BY seq LIMIT 1)
           AND EXISTS (SELECT 1 FROM relayops.ordering_lanes l
                       WHERE l.tenant_id = $1 AND l.endpoint_id = $2 AND l.ordering_key = $3
                         AND l.head_delivery_id = $4)
         RETURNING w.delivery_id, w.event_id),
     moved AS (
         UPDATE relayops.ordering_lanes l
         SET head_delivery_id = n.delivery_id, head_event_id = n.event_id, blocked_since = NULL, updated_at = now()
         FROM next n
         WHERE l.tenant_id = $1 AND l.endpoint_id = $2 AND l.ordering_key = $3 AND l.head_delivery_id = $4),
     emptied AS (
         DELETE FROM relayops.ordering_lanes l
         WHERE l.tenant_id = $1 AND l.endpoint_id = $2 AND l.ordering_key = $3 AND l.head_delivery_id = $4
           AND NOT EXISTS (SELECT 1 FROM next)),
     woken AS (
         UPDATE relayops.deliveries d SET status = 'pending', updated_at = now()
         FROM next n
         WHERE d.tenant_id = $1 AND d.id = n.delivery_id AND d.event_id = n.event_id
           AND d.status = 'scheduled' AND d.next_attempt_at IS NULL
         RETURNING d.id, d.event_id)
     INSERT INTO relayops.outbox_messages (tenant_id, delivery_id, envelope)
     SELECT $1, w.id, jsonb_build_object(
         'type', 'delivery.v1',
         'tenant_id', $5::text,
         'delivery_id', 'dlv_' || replace(w.id::text, '-', ''),
         'event_id', 'evt_' || replace(w.event_id::text, '-', ''),
         'endpoint_id', $6::text)
     FROM woken w
     RETURNING delivery_id";

/// Moves the lane on after its head `finished` became terminal, in the
/// caller's transaction (after [`lock`]). Returns the delivery released to be
/// sent next, if any: the caller wakes the publisher after its commit.
pub async fn release(
    tx: &impl GenericClient,
    lane: LaneKey<'_>,
    finished: DeliveryId,
) -> Result<Option<DeliveryId>, DbError> {
    let row = sql::query_opt(
        tx,
        RELEASE,
        &[
            &lane.tenant.as_uuid(),
            &lane.endpoint.as_uuid(),
            &lane.ordering_key,
            &finished.as_uuid(),
            &lane.tenant.to_string(),
            &lane.endpoint.to_string(),
        ],
    )
    .await?;
    Ok(row.map(|row| DeliveryId::from_uuid(row.get(0))))
}

const BLOCKS_ON_DEAD_LETTER: &str = "SELECT dead_letter_lane = 'block' FROM relayops.webhook_endpoints
     WHERE tenant_id = $1 AND id = $2";

/// Whether the endpoint holds a lane whose head died (its `dead_letter_lane`
/// is `block`) instead of letting the next delivery go.
pub async fn blocks_on_dead_letter(tx: &impl GenericClient, lane: LaneKey<'_>) -> Result<bool, DbError> {
    let row = sql::query_opt(tx, BLOCKS_ON_DEAD_LETTER, &[&lane.tenant.as_uuid(), &lane.endpoint.as_uuid()]).await?;
    Ok(row.is_some_and(|row| row.get(0)))
}

/// What a death did to its lane ([`after_death`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterDeath {
    /// The endpoint blocks on dead letters: the lane waits on the dead head.
    Blocked,
    /// The lane moved on; the delivery released to be sent next, if any.
    MovedOn(Option<DeliveryId>),
}

/// What `dead`'s death does to its lane (after [`lock`], in the death's
/// transaction): hold the lane on it if the endpoint blocks on dead
/// letters, else move on. For a last failed attempt and a parked delivery
/// given up alike.
pub async fn after_death(tx: &impl GenericClient, lane: LaneKey<'_>, dead: DeliveryId) -> Result<AfterDeath, DbError> {
    if blocks_on_dead_letter(tx, lane).await? {
        block(tx, lane, dead).await?;
        return Ok(AfterDeath::Blocked);
    }
    Ok(AfterDeath::MovedOn(release(tx, lane, dead).await?))
}

const BLOCK: &str = "UPDATE relayops.ordering_lanes SET blocked_since = now(), updated_at = now()
     WHERE tenant_id = $1 AND endpoint_id = $2 AND ordering_key = $3 AND head_delivery_id = $4";

/// Holds the lane on its dead head (after [`lock`]): nothing behind it goes
/// until the head is replayed ([`unblock`]) or skipped ([`release`]).
pub async fn block(tx: &impl GenericClient, lane: LaneKey<'_>, dead: DeliveryId) -> Result<(), DbError> {
    let params: [&(dyn ToSql + Sync); 4] =
        [&lane.tenant.as_uuid(), &lane.endpoint.as_uuid(), &lane.ordering_key, &dead.as_uuid()];
    sql::execute(tx, BLOCK, &params).await?;
    Ok(())
}

const UNBLOCK: &str = "UPDATE relayops.ordering_lanes SET blocked_since = NULL, updated_at = now()
     WHERE tenant_id = $1 AND endpoint_id = $2 AND ordering_key = $3 AND head_delivery_id = $4
       AND blocked_since IS NOT NULL";

/// The blocked lane's head is being sent again (a replay): the lane is no
/// longer blocked, and its head holds it as any head does.
pub async fn unblock(tx: &impl GenericClient, lane: LaneKey<'_>, head: DeliveryId) -> Result<(), DbError> {
    let params: [&(dyn ToSql + Sync); 4] =
        [&lane.tenant.as_uuid(), &lane.endpoint.as_uuid(), &lane.ordering_key, &head.as_uuid()];
    sql::execute(tx, UNBLOCK, &params).await?;
    Ok(())
}

const FIND_BLOCKED_BY: &str = "SELECT endpoint_id, ordering_key FROM relayops.ordering_lanes
     WHERE tenant_id = $1 AND head_delivery_id = $2 AND blocked_since IS NOT NULL";

/// Skips a blocked lane's dead head: the lane moves on past it (the next
/// delivery of the key goes; the dead one stays dead, and may still be
/// replayed — to the back of the lane). `None` when `dead` blocks no lane of
/// the tenant. Takes the lane's lock, then releases, in the caller's
/// transaction; returns the delivery released, if any.
pub async fn skip(tx: &impl GenericClient, tenant: TenantId, dead: DeliveryId) -> Result<Option<Skipped>, DbError> {
    let Some(row) = sql::query_opt(tx, FIND_BLOCKED_BY, &[&tenant.as_uuid(), &dead.as_uuid()]).await? else {
        return Ok(None);
    };
    let ordering_key: String = row.get("ordering_key");
    let lane = LaneKey { tenant, endpoint: EndpointId::from_uuid(row.get("endpoint_id")), ordering_key: &ordering_key };
    // Checked again under the lock: a replay may have unblocked it meanwhile.
    if lock(tx, lane).await? != Some(dead) || !is_blocked(tx, lane).await? {
        return Ok(None);
    }
    let released = release(tx, lane, dead).await?;
    Ok(Some(Skipped { endpoint: lane.endpoint, ordering_key: ordering_key.clone(), released }))
}

/// A skipped lane: which, and the delivery now sent next (if any waited).
#[derive(Debug, Clone)]
pub struct Skipped {
    pub endpoint: EndpointId,
    pub ordering_key: String,
    pub released: Option<DeliveryId>,
}

/// What asking to skip a delivery came to.
#[derive(Debug, Clone)]
pub enum SkipOutcome {
    /// The lane moved on past the dead delivery (committed).
    Skipped(Skipped),
    /// No such delivery in the tenant.
    NotFound,
    /// The delivery (in this status) holds no blocked lane: not dead, not
    /// ordered, its endpoint releases on dead letters, or it was already
    /// replayed or skipped. Nothing changed.
    HoldsNoLane(String),
}

/// [`skip`] in a transaction of its own, committed when the lane moved on
/// (the API's and the console's skip). The caller wakes the publisher when a
/// delivery was released.
pub async fn skip_one(pool: &Pool, tenant: TenantId, dead: DeliveryId) -> Result<SkipOutcome, DbError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    if let Some(skipped) = skip(&tx, tenant, dead).await? {
        tx.commit().await?;
        return Ok(SkipOutcome::Skipped(skipped));
    }
    drop(tx);
    Ok(match deliveries::get_delivery(&client, tenant, dead).await? {
        None => SkipOutcome::NotFound,
        Some(delivery) => SkipOutcome::HoldsNoLane(delivery.status),
    })
}

const IS_BLOCKED: &str = "SELECT blocked_since IS NOT NULL FROM relayops.ordering_lanes
     WHERE tenant_id = $1 AND endpoint_id = $2 AND ordering_key = $3";

async fn is_blocked(tx: &impl GenericClient, lane: LaneKey<'_>) -> Result<bool, DbError> {
    let row =
        sql::query_opt(tx, IS_BLOCKED, &[&lane.tenant.as_uuid(), &lane.endpoint.as_uuid(), &lane.ordering_key]).await?;
    Ok(row.is_some_and(|row| row.get(0)))
}

/// A delivery (re)joins its lane at the back: it is the head if the lane had
/// nothing in flight, else it waits behind the last position.
const JOIN: &str = "WITH lane AS (
         INSERT INTO relayops.ordering_lanes AS l
             (tenant_id, endpoint_id, ordering_key, last_seq, head_delivery_id, head_event_id)
         VALUES ($1, $2, $3, 1, $4, $5)
         ON CONFLICT (tenant_id, endpoint_id, ordering_key)
             DO UPDATE SET last_seq = l.last_seq + 1, updated_at = now()
         RETURNING l.head_delivery_id, l.last_seq),
     waiting AS (
         INSERT INTO relayops.ordering_lane_waiting (tenant_id, endpoint_id, ordering_key, seq, delivery_id, event_id)
         SELECT $1, $2, $3, lane.last_seq, $4, $5 FROM lane WHERE lane.head_delivery_id <> $4)
     SELECT head_delivery_id = $4 AS is_head FROM lane";

/// Where a delivery that joined its lane stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    /// Nothing was in flight: it may be sent now.
    Head,
    /// It waits for the deliveries ahead of it to be terminal.
    Waiting,
}

/// Puts a delivery at the back of its lane (a replay of a delivery the lane
/// had moved on from: it is sent after what is in flight now, never between).
/// The caller sets the delivery's state to match ([`Joined`]).
pub async fn join(
    tx: &impl GenericClient,
    lane: LaneKey<'_>,
    delivery: DeliveryId,
    event: EventId,
) -> Result<Joined, DbError> {
    let row = sql::query_one(
        tx,
        JOIN,
        &[&lane.tenant.as_uuid(), &lane.endpoint.as_uuid(), &lane.ordering_key, &delivery.as_uuid(), &event.as_uuid()],
    )
    .await?;
    Ok(if row.get::<_, bool>("is_head") { Joined::Head } else { Joined::Waiting })
}

const IS_WAITING: &str = "SELECT EXISTS (SELECT 1 FROM relayops.ordering_lane_waiting
                                   WHERE tenant_id = $1 AND delivery_id = $2)";

/// Whether a delivery waits in its lane behind an earlier one.
pub async fn is_waiting(client: &impl GenericClient, tenant: TenantId, delivery: DeliveryId) -> Result<bool, DbError> {
    Ok(sql::query_one(client, IS_WAITING, &[&tenant.as_uuid(), &delivery.as_uuid()]).await?.get(0))
}

/// A lane held on its dead head (its endpoint blocks on dead letters).
#[derive(Debug, Clone)]
pub struct BlockedLane {
    pub ordering_key: String,
    /// The dead delivery holding the lane: replay or skip it.
    pub delivery_id: DeliveryId,
    pub event_id: EventId,
    pub blocked_since: DateTime<Utc>,
    /// How many deliveries of the key wait behind it.
    pub waiting: i64,
}

const LIST_BLOCKED: &str = "SELECT l.ordering_key, l.head_delivery_id, l.head_event_id, l.blocked_since,
            (SELECT count(*) FROM relayops.ordering_lane_waiting w
             WHERE w.tenant_id = l.tenant_id AND w.endpoint_id = l.endpoint_id
               AND w.ordering_key = l.ordering_key) AS waiting
     FROM relayops.ordering_lanes l
     WHERE l.tenant_id = $1 AND l.endpoint_id = $2 AND l.blocked_since IS NOT NULL
       AND ($3::timestamptz IS NULL OR (l.blocked_since, l.head_delivery_id) < ($3, $4))
     ORDER BY l.blocked_since DESC, l.head_delivery_id DESC
     LIMIT $5";

/// Up to `limit` of the endpoint's blocked lanes after `after` (the last of
/// the previous page), most recently blocked first (`ordering_lanes_blocked_idx`).
pub async fn list_blocked(
    client: &impl GenericClient,
    tenant: TenantId,
    endpoint: EndpointId,
    after: Option<TimeKey>,
    limit: i64,
) -> Result<Vec<BlockedLane>, DbError> {
    let (at, id) = (after.map(|key| key.at), after.map(|key| key.id));
    let rows = sql::query(client, LIST_BLOCKED, &[&tenant.as_uuid(), &endpoint.as_uuid(), &at, &id, &limit]).await?;
    Ok(rows
        .iter()
        .map(|row| BlockedLane {
            ordering_key: row.get("ordering_key"),
            delivery_id: DeliveryId::from_uuid(row.get("head_delivery_id")),
            event_id: EventId::from_uuid(row.get("head_event_id")),
            blocked_since: row.get("blocked_since"),
            waiting: row.get("waiting"),
        })
        .collect())
}
