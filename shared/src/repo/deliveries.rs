//! Deliveries: what a claim (a lease with owner and expiry) returns, the
//! single-row settle paths (an attempt with the delivery's next state, or a
//! settle without attempt), and the tenant-scoped reads operators use. The
//! worker's batched claim, record and deferral are in
//! [`delivery_batches`](super::delivery_batches).

use crate::repo::GenericClient;
use chrono::{DateTime, Utc};
use tokio_postgres::Row;

use crate::db::DbError;
use crate::domain::{AttemptOutcome, DeliveryStatus, Destination, EndpointKind};
use crate::ids::{AttemptId, DeliveryId, EndpointId, EventId, TenantId};
use crate::repo::endpoints::EndpointHealth;
use crate::repo::sql;

/// What a claim returns: everything [`DeliveryJob`] needs besides the ids.
macro_rules! claimed_columns {
    () => {
        "d.attempt_count, d.event_id, d.endpoint_id, d.ordering_key, e.event_type, e.payload::text AS body,
         ep.url, ep.enabled, ep.timeout_ms, ep.max_attempts, ep.retry_schedule_secs, ep.secret,
         ep.rate_limit_per_sec, ep.rate_limit_burst, ep.max_in_flight,
         ep.kind, ep.destination, ep.aws_role_arn, ep.failing_since, ep.last_success_at, ep.last_failure_at,
         ep.circuit_open_until IS NOT NULL AS circuit_open, coalesce(ep.circuit_probe = d.id, false) AS circuit_probe,
         ep.circuit_failures > 0 AS circuit_failing,
         CASE WHEN ep.previous_secret_expires_at > now() THEN ep.previous_secret END AS previous_secret"
    };
}
pub(crate) use claimed_columns;

/// Due for an attempt: pending, a retry whose time has come, or in progress
/// under a lease that expired (its worker died).
macro_rules! claimable {
    () => {
        "(d.status = 'pending'
          OR (d.status = 'scheduled' AND d.next_attempt_at <= now())
          OR (d.status = 'in_progress' AND d.lease_expires_at < now()))"
    };
}
pub(crate) use claimable;

/// A delivery with an ordering key may be claimed only as its lane's head
/// (`repo::lanes`): whatever message names a delivery waiting behind it (a
/// duplicate, a stale replay) finds it not claimable. Unordered deliveries
/// never read the lane table.
macro_rules! heads_its_lane {
    () => {
        "(d.ordering_key IS NULL
          OR EXISTS (SELECT 1 FROM relayops.ordering_lanes l
                     WHERE l.tenant_id = d.tenant_id AND l.endpoint_id = d.endpoint_id
                       AND l.ordering_key = d.ordering_key AND l.head_delivery_id = d.id))"
    };
}
pub(crate) use heads_its_lane;

/// Finds a delivery by id (`$id`, SQL) in its partition only: a delivery id
/// made by `relayops.delivery_id_for` carries its event id's millisecond, the
/// partition key; an id from before partitioning matches every partition.
/// `$event_id` names the partition key column (`event_id` unless given).
macro_rules! in_its_partition {
    ($id:literal) => {
        $crate::repo::deliveries::in_its_partition!("event_id", $id)
    };
    ($event_id:literal, $id:literal) => {
        concat!($event_id, " BETWEEN relayops.event_id_floor(", $id, ") AND relayops.event_id_ceiling(", $id, ")")
    };
}
pub(crate) use in_its_partition;

/// The attempt and the delivery's next state in ONE statement (atomic on its
/// own, one round trip). Only the lease holder may settle: if the lease was
/// lost, the UPDATE matches nothing and so nothing is inserted.
const SETTLE_WITH_ATTEMPT: &str = concat!(
    "WITH settled AS (
         UPDATE relayops.deliveries
         SET status = $3, attempt_count = $4, next_attempt_at = $5,
             lease_owner = NULL, lease_expires_at = NULL,
             last_http_status = $6, last_error = $7,
             delivered_at = CASE WHEN $3 = 'delivered' THEN now() ELSE delivered_at END,
             updated_at = now()
         WHERE tenant_id = $1 AND id = $2 AND ",
    in_its_partition!("$2"),
    "
           AND status = 'in_progress' AND lease_owner = $8
         RETURNING tenant_id, id)
     INSERT INTO relayops.delivery_attempts (id, tenant_id, delivery_id, attempt_number, outcome,
         http_status, error, request_headers, response_body, latency_ms, worker_id, started_at)
     SELECT $9, settled.tenant_id, settled.id, $4, $10, $6, $7, $11, $12, $13, $8, $14 FROM settled"
);

/// Settles without an attempt (e.g. the endpoint was disabled after fan-out).
const SETTLE_WITHOUT_ATTEMPT: &str = concat!(
    "UPDATE relayops.deliveries
     SET status = $3, last_error = $4, lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
     WHERE tenant_id = $1 AND id = $2 AND ",
    in_its_partition!("$2"),
    "
       AND status = 'in_progress' AND lease_owner = $5"
);

pub(crate) const DELIVERY_COLUMNS: &str = "id, event_id, endpoint_id, ordering_key, status, attempt_count,
     next_attempt_at, last_http_status, last_error, delivered_at, created_at, updated_at";

/// Everything the worker needs to send one attempt.
#[derive(Debug, Clone)]
pub struct DeliveryJob {
    pub tenant_id: TenantId,
    pub delivery_id: DeliveryId,
    pub event_id: EventId,
    pub endpoint_id: EndpointId,
    /// Its ordering lane's key: settling it terminal moves the lane on.
    pub ordering_key: Option<String>,
    pub event_type: String,
    /// The payload exactly as it will be sent and signed.
    pub body: String,
    pub url: String,
    /// How it leaves: POSTed to `url`, or sent to the SQS queue `url` names.
    pub destination: Destination,
    /// An AWS destination's role in the customer's account, to assume.
    pub aws_role_arn: Option<String>,
    pub endpoint_enabled: bool,
    pub endpoint_kind: EndpointKind,
    /// The endpoint's health as the claim read it (see `repo::endpoint_health`).
    pub endpoint_health: EndpointHealth,
    pub timeout_ms: Option<i32>,
    /// The endpoint's retry policy; `None` means the platform default.
    pub max_attempts: Option<i32>,
    pub retry_schedule_secs: Option<Vec<i32>>,
    /// The endpoint's flow control; `None` means the platform default.
    pub rate_limit_per_sec: Option<i32>,
    pub rate_limit_burst: Option<i32>,
    pub max_in_flight: Option<i32>,
    pub secret: String,
    pub previous_secret: Option<String>,
    /// The number this attempt will get.
    pub attempt_number: i32,
    /// The endpoint's circuit as the claim read it.
    pub circuit: CircuitSeen,
}

/// An endpoint's circuit as a claim read it (`repo::circuits`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CircuitSeen {
    /// Open or half-open: deliveries other than the probe park.
    pub open: bool,
    /// This delivery is the half-open circuit's probe.
    pub probe: bool,
    /// The endpoint's shared run of failures is under way (an answer ends it).
    pub failing: bool,
}

#[derive(Debug)]
pub enum ClaimOutcome {
    Claimed(Box<DeliveryJob>),
    /// Due, but its endpoint's circuit is open: the row is `parked` (no
    /// lease, no attempt) until the circuit closes (`repo::circuits`).
    Parked {
        endpoint_id: EndpointId,
    },
    /// Not due, terminal, leased by a live worker, or gone (`None`).
    NotClaimable {
        status: Option<DeliveryStatus>,
        next_attempt_at: Option<DateTime<Utc>>,
    },
}

/// The job a claim statement's returned row describes.
pub(crate) fn job_from_row(tenant: TenantId, delivery: DeliveryId, row: &Row) -> DeliveryJob {
    let attempt_count: i32 = row.get("attempt_count");
    DeliveryJob {
        tenant_id: tenant,
        delivery_id: delivery,
        event_id: EventId::from_uuid(row.get("event_id")),
        endpoint_id: EndpointId::from_uuid(row.get("endpoint_id")),
        ordering_key: row.get("ordering_key"),
        event_type: row.get("event_type"),
        body: row.get("body"),
        url: row.get("url"),
        destination: Destination::from_stored(row.get("destination")),
        aws_role_arn: row.get("aws_role_arn"),
        endpoint_enabled: row.get("enabled"),
        endpoint_kind: EndpointKind::from_stored(row.get("kind")),
        endpoint_health: EndpointHealth::from_row(row),
        timeout_ms: row.get("timeout_ms"),
        max_attempts: row.get("max_attempts"),
        retry_schedule_secs: row.get("retry_schedule_secs"),
        rate_limit_per_sec: row.get("rate_limit_per_sec"),
        rate_limit_burst: row.get("rate_limit_burst"),
        max_in_flight: row.get("max_in_flight"),
        secret: row.get("secret"),
        previous_secret: row.get("previous_secret"),
        attempt_number: attempt_count + 1,
        circuit: CircuitSeen {
            open: row.get("circuit_open"),
            probe: row.get("circuit_probe"),
            failing: row.get("circuit_failing"),
        },
    }
}

/// One attempt's record and the delivery's next state.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub outcome: AttemptOutcome,
    pub http_status: Option<i32>,
    pub error: Option<String>,
    pub request_headers: serde_json::Value,
    pub response_body: Option<String>,
    pub latency_ms: i32,
    pub started_at: DateTime<Utc>,
    /// For `Retry`: when the next attempt is due.
    pub next_attempt_at: Option<DateTime<Utc>>,
}

/// Whether the worker still held the lease when it settled.
#[derive(Debug, PartialEq, Eq)]
pub enum Settled {
    Recorded,
    LeaseLost,
}

/// Records the attempt and the delivery's new state, both or neither (one
/// statement). Pass a transaction when more must commit with it.
pub async fn record_attempt(
    client: &impl GenericClient,
    job: &DeliveryJob,
    worker_id: &str,
    attempt: &AttemptRecord,
) -> Result<Settled, DbError> {
    let status = attempt.outcome.next_status().as_str();
    let inserted = sql::execute(
        client,
        SETTLE_WITH_ATTEMPT,
        &[
            &job.tenant_id.as_uuid(),
            &job.delivery_id.as_uuid(),
            &status,
            &job.attempt_number,
            &attempt.next_attempt_at,
            &attempt.http_status,
            &attempt.error,
            &worker_id,
            &AttemptId::new().as_uuid(),
            &attempt.outcome.as_str(),
            &attempt.request_headers,
            &attempt.response_body,
            &attempt.latency_ms,
            &attempt.started_at,
        ],
    )
    .await?;
    Ok(if inserted == 0 { Settled::LeaseLost } else { Settled::Recorded })
}

/// Moves a lease's expiry forward, for a send that is taking long: only while
/// this worker still holds the row.
const EXTEND_LEASE: &str = concat!(
    "UPDATE relayops.deliveries
     SET lease_expires_at = now() + $4::bigint * interval '1 millisecond'
     WHERE tenant_id = $1 AND id = $2 AND ",
    in_its_partition!("$2"),
    "
       AND status = 'in_progress' AND lease_owner = $3
     RETURNING id"
);

/// Extends this worker's lease on a delivery it is still sending; `false` when
/// the lease is no longer its own. A lease, not a promise: it commits without
/// waiting for the disk ([`sql::query_unflushed`]).
pub async fn extend_lease(
    client: &mut deadpool_postgres::Object,
    job: &DeliveryJob,
    worker_id: &str,
    lease: std::time::Duration,
) -> Result<bool, DbError> {
    let lease_ms = lease.as_millis() as i64;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
        [&job.tenant_id.as_uuid(), &job.delivery_id.as_uuid(), &worker_id, &lease_ms];
    let rows = sql::query_unflushed(client, EXTEND_LEASE, &params).await?;
    Ok(!rows.is_empty())
}

pub async fn settle_without_attempt(
    client: &impl GenericClient,
    job: &DeliveryJob,
    worker_id: &str,
    status: DeliveryStatus,
    reason: &str,
) -> Result<Settled, DbError> {
    let updated = sql::execute(
        client,
        SETTLE_WITHOUT_ATTEMPT,
        &[&job.tenant_id.as_uuid(), &job.delivery_id.as_uuid(), &status.as_str(), &reason, &worker_id],
    )
    .await?;
    Ok(if updated == 0 { Settled::LeaseLost } else { Settled::Recorded })
}

/// A delivery as operators see it.
#[derive(Debug, Clone)]
pub struct DeliveryRecord {
    pub id: DeliveryId,
    pub event_id: EventId,
    pub endpoint_id: EndpointId,
    pub ordering_key: Option<String>,
    pub status: String,
    pub attempt_count: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_http_status: Option<i32>,
    pub last_error: Option<String>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl DeliveryRecord {
    pub(crate) fn from_row(row: &Row) -> Self {
        Self {
            id: DeliveryId::from_uuid(row.get("id")),
            event_id: EventId::from_uuid(row.get("event_id")),
            endpoint_id: EndpointId::from_uuid(row.get("endpoint_id")),
            ordering_key: row.get("ordering_key"),
            status: row.get("status"),
            attempt_count: row.get("attempt_count"),
            next_attempt_at: row.get("next_attempt_at"),
            last_http_status: row.get("last_http_status"),
            last_error: row.get("last_error"),
            delivered_at: row.get("delivered_at"),
            created_at: row.get("created_at"),
            updated_at: row.get("updated_at"),
        }
    }
}

pub async fn get_delivery(
    client: &impl GenericClient,
    tenant: TenantId,
    id: DeliveryId,
) -> Result<Option<DeliveryRecord>, DbError> {
    let sql = format!(
        "SELECT {DELIVERY_COLUMNS} FROM relayops.deliveries WHERE tenant_id = $1 AND id = $2 AND {}",
        in_its_partition!("$2")
    );
    let row = sql::query_opt(client, &sql, &[&tenant.as_uuid(), &id.as_uuid()]).await?;
    Ok(row.as_ref().map(DeliveryRecord::from_row))
}

pub async fn list_for_event(
    client: &impl GenericClient,
    tenant: TenantId,
    event: EventId,
) -> Result<Vec<DeliveryRecord>, DbError> {
    let sql = format!(
        "SELECT {DELIVERY_COLUMNS} FROM relayops.deliveries WHERE tenant_id = $1 AND event_id = $2
         ORDER BY created_at, id"
    );
    let rows = sql::query(client, &sql, &[&tenant.as_uuid(), &event.as_uuid()]).await?;
    Ok(rows.iter().map(DeliveryRecord::from_row).collect())
}
