//! Replay: dead or failed deliveries go back to pending with a new outbox row
//! (ordered ones through their lane: the head is sent now, one the lane had
//! moved on from joins its back, one waiting keeps its turn),
//! in the caller's transaction — one by id, or in bulk by filter (with a cap per
//! call, and a count for dry runs). One by id also rescues a `pending` or
//! `scheduled` row (a new message now), so an operator never has to wait for
//! recovery to unstick a delivery. Attempt numbers keep counting up because
//! `attempt_count` is left as it is.
use crate::repo::GenericClient;
use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::broker::envelope::DeliveryTask;
use crate::db::partitions::{id_lower_bound, id_upper_bound};
use crate::db::{DbError, Pool};
use crate::domain::DeliveryStatus;
use crate::ids::{DeliveryId, EndpointId, EventId, TenantId};
use crate::repo::deliveries::in_its_partition;
use crate::repo::lanes::{self, Joined, LaneKey};
use crate::repo::outbox;
use crate::repo::sql;

/// The most deliveries one bulk replay takes (`POST /v1/replays`, the console's).
pub const MAX_PER_CALL: i64 = 1000;

/// Dead and failed rows are replayed; `pending` and `scheduled` rows are
/// rescued (sent now: a row whose message was lost need not wait for recovery,
/// a retry can be brought forward). The previous status is returned.
/// Unordered deliveries only: one with an ordering key goes through its lane
/// ([`replay_in_lane`]).
const REVIVE_ONE: &str = concat!(
    "UPDATE relayops.deliveries d
     SET status = 'pending', next_attempt_at = NULL, updated_at = now()
     FROM (SELECT id, event_id, status FROM relayops.deliveries
           WHERE tenant_id = $1 AND id = $2
             AND ",
    in_its_partition!("$2"),
    "
             AND ordering_key IS NULL
           FOR UPDATE) previous
     WHERE d.tenant_id = $1 AND d.id = previous.id AND d.event_id = previous.event_id
       AND previous.status IN ('dead', 'failed', 'pending', 'scheduled', 'parked')
     RETURNING d.id, d.event_id, d.endpoint_id, previous.status AS previous_status"
);

const CURRENT_STATUS: &str = concat!(
    "SELECT status, ordering_key, endpoint_id, event_id FROM relayops.deliveries
     WHERE tenant_id = $1 AND id = $2
       AND ",
    in_its_partition!("$2")
);

/// An ordered delivery's status, locked (after its lane's lock).
const LOCK_STATUS: &str = concat!(
    "SELECT status FROM relayops.deliveries
     WHERE tenant_id = $1 AND id = $2
       AND ",
    in_its_partition!("$2"),
    "
     FOR UPDATE"
);

/// An ordered delivery that may be sent now (its lane's head): pending, to
/// get a new message.
const MAKE_PENDING: &str = concat!(
    "UPDATE relayops.deliveries SET status = 'pending', next_attempt_at = NULL, updated_at = now()
     WHERE tenant_id = $1 AND id = $2 AND ",
    in_its_partition!("$2")
);

/// An ordered delivery that waits in its lane: no claim takes it, no recovery
/// re-enqueues it (`repo::lanes`).
const MAKE_WAITING: &str = concat!(
    "UPDATE relayops.deliveries SET status = 'scheduled', next_attempt_at = NULL, updated_at = now()
     WHERE tenant_id = $1 AND id = $2 AND ",
    in_its_partition!("$2")
);

/// The filter shared by the bulk count and the bulk replay ($1..$8). A time
/// window also bounds the partition key ($7, $8: the window widened by the
/// clock slack, as UUIDv7 bounds), so only its partitions are read.
const MATCHING: &str = "FROM relayops.deliveries d
     JOIN relayops.events e ON e.tenant_id = d.tenant_id AND e.id = d.event_id
     WHERE d.tenant_id = $1 AND d.status = ANY($2)
       AND ($3::uuid IS NULL OR d.endpoint_id = $3)
       AND ($4::text IS NULL OR e.event_type = $4)
       AND ($5::timestamptz IS NULL OR d.created_at >= $5)
       AND ($6::timestamptz IS NULL OR d.created_at < $6)
       AND d.event_id >= $7 AND d.event_id < $8";

#[derive(Debug, PartialEq, Eq)]
pub enum ReplayOutcome {
    /// Back to pending with a new message; holds the status it had.
    Replayed(DeliveryStatus),
    /// An ordered delivery its lane had moved on from: it joined the back of
    /// its lane (`scheduled`, without a due time) and is sent once the
    /// deliveries in flight there are terminal; holds the status it had.
    Queued(DeliveryStatus),
    /// An ordered delivery waiting behind an earlier one of its lane: it may
    /// not jump the lane, and will be sent in its turn.
    WaitingInLane,
    NotFound,
    /// Delivered, or in progress under a worker's lease.
    NotReplayable(DeliveryStatus),
}

fn task(tenant: TenantId, row: &Row) -> DeliveryTask {
    DeliveryTask {
        tenant_id: tenant,
        delivery_id: DeliveryId::from_uuid(row.get("id")),
        event_id: EventId::from_uuid(row.get("event_id")),
        endpoint_id: EndpointId::from_uuid(row.get("endpoint_id")),
    }
}

pub async fn replay_delivery(
    tx: &impl GenericClient,
    tenant: TenantId,
    id: DeliveryId,
) -> Result<ReplayOutcome, DbError> {
    let Some(row) = sql::query_opt(tx, REVIVE_ONE, &[&tenant.as_uuid(), &id.as_uuid()]).await? else {
        let Some(current) = sql::query_opt(tx, CURRENT_STATUS, &[&tenant.as_uuid(), &id.as_uuid()]).await? else {
            return Ok(ReplayOutcome::NotFound);
        };
        if let Some(ordering_key) = current.get::<_, Option<String>>("ordering_key") {
            let endpoint = EndpointId::from_uuid(current.get("endpoint_id"));
            let lane = LaneKey { tenant, endpoint, ordering_key: &ordering_key };
            return replay_in_lane(tx, lane, id, EventId::from_uuid(current.get("event_id"))).await;
        }
        return Ok(match DeliveryStatus::parse(current.get("status")) {
            Some(status) => ReplayOutcome::NotReplayable(status),
            None => ReplayOutcome::NotFound,
        });
    };
    outbox::insert_delivery_messages(tx, &[task(tenant, &row)]).await?;
    let previous = DeliveryStatus::parse(row.get("previous_status")).unwrap_or(DeliveryStatus::Pending);
    Ok(ReplayOutcome::Replayed(previous))
}

/// Replays (or rescues) an ordered delivery through its lane, in the caller's
/// transaction: the lane's lock first, then the delivery's (the order every
/// lane transaction follows). The lane's head is sent now, as an unordered
/// delivery would be; a delivery waiting in the lane stays in its turn; one
/// the lane had moved on from (dead or failed, the lane released) joins the
/// back of the lane — a replay is a new acceptance, so the receiver gets it
/// after what is in flight for its key now, never in between.
async fn replay_in_lane(
    tx: &impl GenericClient,
    lane: LaneKey<'_>,
    id: DeliveryId,
    event: EventId,
) -> Result<ReplayOutcome, DbError> {
    let head = lanes::lock(tx, lane).await?;
    let ids: [&(dyn ToSql + Sync); 2] = [&lane.tenant.as_uuid(), &id.as_uuid()];
    let Some(row) = sql::query_opt(tx, LOCK_STATUS, &ids).await? else {
        return Ok(ReplayOutcome::NotFound);
    };
    let Some(previous) = DeliveryStatus::parse(row.get("status")) else {
        return Ok(ReplayOutcome::NotFound);
    };
    if matches!(previous, DeliveryStatus::Delivered | DeliveryStatus::InProgress) {
        return Ok(ReplayOutcome::NotReplayable(previous));
    }
    let task = DeliveryTask { tenant_id: lane.tenant, delivery_id: id, event_id: event, endpoint_id: lane.endpoint };
    if head == Some(id) {
        lanes::unblock(tx, lane, id).await?;
        sql::execute(tx, MAKE_PENDING, &ids).await?;
        outbox::insert_delivery_messages(tx, &[task]).await?;
        return Ok(ReplayOutcome::Replayed(previous));
    }
    if lanes::is_waiting(tx, lane.tenant, id).await? {
        return Ok(ReplayOutcome::WaitingInLane);
    }
    match lanes::join(tx, lane, id, event).await? {
        Joined::Head => {
            sql::execute(tx, MAKE_PENDING, &ids).await?;
            outbox::insert_delivery_messages(tx, &[task]).await?;
            Ok(ReplayOutcome::Replayed(previous))
        }
        Joined::Waiting => {
            sql::execute(tx, MAKE_WAITING, &ids).await?;
            Ok(ReplayOutcome::Queued(previous))
        }
    }
}

/// `replay_delivery` in a transaction of its own, committed when the delivery
/// was replayed (the API's and the console's replay of one delivery).
pub async fn replay_one(pool: &Pool, tenant: TenantId, id: DeliveryId) -> Result<ReplayOutcome, DbError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let outcome = replay_delivery(&tx, tenant, id).await?;
    if matches!(outcome, ReplayOutcome::Replayed(_) | ReplayOutcome::Queued(_)) {
        tx.commit().await?;
    }
    Ok(outcome)
}

/// Which deliveries a bulk replay takes. `statuses` holds only dead and/or failed.
#[derive(Debug, Clone)]
pub struct ReplayFilter {
    pub statuses: Vec<DeliveryStatus>,
    pub endpoint: Option<EndpointId>,
    pub event_type: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

impl ReplayFilter {
    fn statuses(&self) -> Vec<&'static str> {
        self.statuses.iter().map(DeliveryStatus::as_str).collect()
    }

    /// The partition key range the time window can reach.
    fn event_id_range(&self) -> (Uuid, Uuid) {
        let floor = self.since.map(id_lower_bound).unwrap_or(Uuid::nil());
        let ceiling = self.until.map(id_upper_bound).unwrap_or(Uuid::max());
        (floor, ceiling)
    }
}

/// `MATCHING`'s parameters ($1..$8), owned here so both statements bind them alike.
struct MatchingParams<'a> {
    tenant: Uuid,
    statuses: Vec<&'static str>,
    endpoint: Option<Uuid>,
    filter: &'a ReplayFilter,
    floor: Uuid,
    ceiling: Uuid,
}

impl<'a> MatchingParams<'a> {
    fn new(tenant: TenantId, filter: &'a ReplayFilter) -> Self {
        let (floor, ceiling) = filter.event_id_range();
        let endpoint = filter.endpoint.map(|id| id.as_uuid());
        Self { tenant: tenant.as_uuid(), statuses: filter.statuses(), endpoint, filter, floor, ceiling }
    }

    fn list(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.tenant,
            &self.statuses,
            &self.endpoint,
            &self.filter.event_type,
            &self.filter.since,
            &self.filter.until,
            &self.floor,
            &self.ceiling,
        ]
    }
}

/// How many deliveries match (for a dry run, and to report what remains).
pub async fn count_matching(
    client: &impl GenericClient,
    tenant: TenantId,
    filter: &ReplayFilter,
) -> Result<i64, DbError> {
    let sql = format!("SELECT count(*) {MATCHING}");
    let params = MatchingParams::new(tenant, filter);
    let row = sql::query_one(client, &sql, &params.list()).await?;
    Ok(row.get(0))
}

/// Replays up to `cap` matching deliveries, oldest first; returns their ids.
/// Rows another replay is working on are skipped, not waited for.
pub async fn replay_matching(
    tx: &impl GenericClient,
    tenant: TenantId,
    filter: &ReplayFilter,
    cap: i64,
) -> Result<Vec<DeliveryId>, DbError> {
    let replayed_in_lanes = replay_matching_in_lanes(tx, tenant, filter, cap).await?;
    let cap = cap - replayed_in_lanes.len() as i64;
    let sql = format!(
        "WITH picked AS (SELECT d.id, d.event_id {MATCHING} AND d.ordering_key IS NULL
                         ORDER BY d.created_at, d.id LIMIT $9 FOR UPDATE OF d SKIP LOCKED)
         UPDATE relayops.deliveries d SET status = 'pending', next_attempt_at = NULL, updated_at = now()
         FROM picked WHERE d.id = picked.id AND d.event_id = picked.event_id
         RETURNING d.id, d.event_id, d.endpoint_id"
    );
    let params = MatchingParams::new(tenant, filter);
    let mut list = params.list();
    list.push(&cap);
    let rows = sql::query(tx, &sql, &list).await?;
    let tasks: Vec<DeliveryTask> = rows.iter().map(|row| task(tenant, row)).collect();
    outbox::insert_delivery_messages(tx, &tasks).await?;
    Ok(replayed_in_lanes.into_iter().chain(tasks.iter().map(|task| task.delivery_id)).collect())
}

/// The ordered deliveries among the matching ones, each replayed through its
/// lane ([`replay_in_lane`]; oldest first, so replays of one key rejoin their
/// lane in their original order). Read without locks: each is locked after
/// its lane, and checked again then.
async fn replay_matching_in_lanes(
    tx: &impl GenericClient,
    tenant: TenantId,
    filter: &ReplayFilter,
    cap: i64,
) -> Result<Vec<DeliveryId>, DbError> {
    let sql = format!(
        "SELECT d.id, d.event_id, d.endpoint_id, d.ordering_key {MATCHING} AND d.ordering_key IS NOT NULL
         ORDER BY d.created_at, d.id LIMIT $9"
    );
    let params = MatchingParams::new(tenant, filter);
    let mut list = params.list();
    list.push(&cap);
    let mut replayed = Vec::new();
    for row in sql::query(tx, &sql, &list).await? {
        let ordering_key: String = row.get("ordering_key");
        let endpoint = EndpointId::from_uuid(row.get("endpoint_id"));
        let lane = LaneKey { tenant, endpoint, ordering_key: &ordering_key };
        let (id, event) = (DeliveryId::from_uuid(row.get("id")), EventId::from_uuid(row.get("event_id")));
        if let ReplayOutcome::Replayed(_) | ReplayOutcome::Queued(_) = replay_in_lane(tx, lane, id, event).await? {
            replayed.push(id);
        }
    }
    Ok(replayed)
}

/// A bulk replay in one transaction: how many deliveries match, and the ids of
/// the up to `cap` replayed (the API's `POST /v1/replays` and the console's).
pub async fn replay_bulk(
    pool: &Pool,
    tenant: TenantId,
    filter: &ReplayFilter,
    cap: i64,
) -> Result<(i64, Vec<DeliveryId>), DbError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let matched = count_matching(&tx, tenant, filter).await?;
    let replayed = replay_matching(&tx, tenant, filter, cap).await?;
    tx.commit().await?;
    Ok((matched, replayed))
}
