//! Deliveries waiting in Postgres for their endpoint (SPEC §12): `parked`
//! rows, with no broker message, admitted by a worker when the endpoint can
//! take one more.
//!
//! A delivery parks when its endpoint's circuit is open ([`circuits`]), or
//! when its endpoint could not take it now (`max_in_flight` requests in
//! flight, or no rate-limit token): the worker that found it so parks it
//! instead of sending it round the retry queues
//! (`delivery_batches::park_many`, or a deferral that parks). A worker that
//! noted the endpoint — or its pass over the endpoints with parked
//! deliveries, once a second — takes the oldest parked delivery of that
//! endpoint straight from here ([`admit_oldest`]) into a slot (and token) it
//! holds: leased as a claim would, and sent. "Waiting for a slot" below
//! means either (no give-up time). A delivery that waited
//! is published once, and written once more than one that did not (its park).
//!
//! Only enabled endpoints admit (a disabled endpoint's parked deliveries are
//! released by the recovery pass, to be failed). While its circuit is open,
//! an endpoint admits only a last attempt that was waiting for a slot (the
//! circuit never holds one back); the other deliveries waiting for a slot
//! get a give-up time from the recovery pass once the circuit opened
//! ([`parked_expiry::start_clocks`]), and all wait for its probe
//! ([`circuits::release`]). A circuit-parked delivery whose policy gave it
//! up is left to [`parked_expiry`].
//!
//! [`parked_expiry`]: super::parked_expiry
//! [`parked_expiry::start_clocks`]: super::parked_expiry::start_clocks
//!
//! [`circuits`]: super::circuits
//! [`circuits::release`]: super::circuits::release
use std::time::Duration;

use crate::db::DbError;
use crate::ids::{DeliveryId, EndpointId, TenantId};
use crate::repo::circuits::last_attempt;
use crate::repo::deliveries::{claimed_columns, job_from_row, DeliveryJob};
use crate::repo::{sql, GenericClient};

/// The most endpoints one pass finds.
pub const ENDPOINTS_PER_PASS: i64 = 100;

/// Leases the oldest admissible parked delivery of an enabled endpoint
/// (`$1` tenant, `$2` endpoint) to `$3` for `$4` ms, on the parked rows'
/// `(endpoint_id, updated_at)` index; a row another worker is admitting is
/// skipped. Admissible while the circuit is closed: one waiting for a slot
/// (no give-up time) or one the circuit parked whose time is not up; while
/// it is open, only a last attempt waiting for a slot (the circuit never
/// holds one back: `circuits::last_attempt`). Gives the claim's columns.
const ADMIT_OLDEST: &str = concat!(
    "WITH ep AS MATERIALIZED (
         SELECT ep.* FROM relayops.webhook_endpoints ep
         WHERE ep.tenant_id = $1 AND ep.id = $2 AND ep.enabled),
     picked AS (
         SELECT d.id, d.event_id FROM relayops.deliveries d
         WHERE d.endpoint_id = $2 AND d.status = 'parked' AND d.tenant_id = $1
           AND EXISTS (SELECT 1 FROM ep
                       WHERE CASE WHEN ep.circuit_open_until IS NULL
                                  THEN d.next_attempt_at IS NULL OR d.next_attempt_at > now()
                                  ELSE d.next_attempt_at IS NULL AND ",
    last_attempt!(),
    "
                             END)
         ORDER BY d.updated_at
         LIMIT 1
         FOR UPDATE SKIP LOCKED)
     UPDATE relayops.deliveries d
     SET status = 'in_progress', lease_owner = $3, lease_expires_at = now() + $4::bigint * interval '1 millisecond',
         next_attempt_at = NULL, updated_at = now()
     FROM picked
     CROSS JOIN LATERAL (SELECT e.event_type, e.payload, e.tenant_id FROM relayops.events e
                         WHERE e.id = picked.event_id OFFSET 0) e
     CROSS JOIN ep
     WHERE d.id = picked.id AND d.event_id = picked.event_id AND e.tenant_id = $1
     RETURNING d.tenant_id, d.id, ",
    claimed_columns!()
);

/// A loose index scan over the parked rows' own index, one probe per
/// distinct endpoint, from `$1` in endpoint-id order, below `$2`, at most
/// `$3` scanned, giving `found(endpoint_id)`; the statement goes on with
/// `$rest`, which picks the endpoints it wants from it.
macro_rules! parked_endpoints_then {
    ($rest:literal) => {
        concat!(
            "WITH RECURSIVE parked(endpoint_id) AS (
         (SELECT endpoint_id FROM relayops.deliveries
          WHERE status = 'parked' AND endpoint_id >= $1 AND endpoint_id < $2
          ORDER BY endpoint_id LIMIT 1)
         UNION ALL
         SELECT (SELECT d.endpoint_id FROM relayops.deliveries d
                 WHERE d.status = 'parked' AND d.endpoint_id > parked.endpoint_id AND d.endpoint_id < $2
                 ORDER BY d.endpoint_id LIMIT 1)
         FROM parked WHERE parked.endpoint_id IS NOT NULL),
     found AS (SELECT endpoint_id FROM parked WHERE endpoint_id IS NOT NULL LIMIT $3)
     ",
            $rest
        )
    };
}
pub(crate) use parked_endpoints_then;

/// Endpoints with parked deliveries that may admit some now: enabled, and
/// the circuit closed or some waiting for a slot (no give-up time).
const ADMITTING_ENDPOINTS: &str = parked_endpoints_then!(
    "SELECT e.tenant_id, e.id FROM found
     JOIN relayops.webhook_endpoints e ON e.id = found.endpoint_id
     WHERE e.enabled
       AND (e.circuit_open_until IS NULL
            OR EXISTS (SELECT 1 FROM relayops.deliveries d
                       WHERE d.endpoint_id = e.id AND d.status = 'parked' AND d.next_attempt_at IS NULL
                         AND d.tenant_id = e.tenant_id))"
);

/// Leases the oldest parked delivery of `endpoint` to `worker` for `lease`,
/// if the endpoint may admit one now; `None` when it has none it may admit
/// (or it is disabled). Committed without waiting for the WAL flush, like a
/// claim ([`sql::query_unflushed`]): a lease a database crash undoes leaves
/// the delivery parked, to be admitted (and sent) again.
pub async fn admit_oldest(
    client: &deadpool_postgres::Client,
    tenant: TenantId,
    endpoint: EndpointId,
    worker: &str,
    lease: Duration,
) -> Result<Option<DeliveryJob>, DbError> {
    let lease_ms = lease.as_millis().min(i64::MAX as u128) as i64;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
        [&tenant.as_uuid(), &endpoint.as_uuid(), &worker, &lease_ms];
    let row = sql::query_unflushed(client, ADMIT_OLDEST, &params).await?.into_iter().next();
    Ok(row.map(|row| job_from_row(tenant, DeliveryId::from_uuid(row.get("id")), &row)))
}

/// Up to [`ENDPOINTS_PER_PASS`] endpoints with parked deliveries they may
/// admit now.
pub async fn admitting_endpoints(client: &impl GenericClient) -> Result<Vec<(TenantId, EndpointId)>, DbError> {
    let found = parked_endpoints(client, ADMITTING_ENDPOINTS).await?;
    Ok(found.into_iter().map(|(tenant, id)| (TenantId::from_uuid(tenant), EndpointId::from_uuid(id))).collect())
}

/// Up to [`ENDPOINTS_PER_PASS`] endpoints `statement` (one made with
/// [`parked_endpoints_then`], giving `tenant_id` and `id`) picks, in
/// endpoint-id order from a random point, wrapping around (so that past that
/// many each takes its turn).
pub(crate) async fn parked_endpoints(
    client: &impl GenericClient,
    statement: &'static str,
) -> Result<Vec<(uuid::Uuid, uuid::Uuid)>, DbError> {
    let start = uuid::Uuid::new_v4();
    let (first, last) = (uuid::Uuid::nil(), uuid::Uuid::max());
    let mut found = Vec::new();
    for (from, below) in [(start, last), (first, start)] {
        let want = ENDPOINTS_PER_PASS - found.len() as i64;
        if want <= 0 {
            break;
        }
        // The scan walks endpoints the statement leaves out too; a few
        // times what is wanted bounds it.
        let scanned = want * 10;
        for row in sql::query(client, statement, &[&from, &below, &scanned]).await? {
            found.push((row.get("tenant_id"), row.get("id")));
        }
    }
    found.truncate(ENDPOINTS_PER_PASS as usize);
    Ok(found)
}
