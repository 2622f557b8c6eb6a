//! Endpoint circuits (SPEC §12): where a failing endpoint's deliveries wait.
//!
//! - **Closed** (`circuit_open_until` NULL): deliveries are claimed and sent.
//! - **Open** (until `circuit_open_until`): the endpoint failed many times in
//!   a row, counted on its row by every worker ([`failed`]; an answer resets
//!   the run, [`answered`]), and the failure that completed the run opened
//!   it; every claim of one of its
//!   deliveries parks it instead (`status = 'parked'`, no lease, no attempt:
//!   the claim statement's [`parks`] condition), and the message is acked.
//!   A parked delivery costs nothing while it waits: no broker message, no
//!   retry-queue round, no recovery pass re-enqueues it. It keeps its retry
//!   policy's promise: its `next_attempt_at` is when the policy gives it up
//!   ([`gives_up_at`]), and then it dies as if its attempts had been made
//!   ([`parked_expiry`](super::parked_expiry)), unless released first.
//! - **Half-open** (its time passed): the recovery pass releases the oldest
//!   parked delivery as the probe ([`release`]: pending, with an outbox
//!   row); every other delivery still parks. The worker records the probe's
//!   answer: a success closes the circuit ([`close`]), a failure opens it
//!   again for twice the cooldown, up to a maximum ([`probe_failed`]).
//! - **Closed again, parked deliveries left**: workers admit them, oldest
//!   first, as the endpoint's slots allow ([`waiting`]): the worker that
//!   sent the probe frees its slot and takes the next, and every worker's
//!   pass finds endpoints with parked deliveries on the parked rows' own
//!   index, so a park that commits after the circuit closed (a claim that
//!   read it open) is admitted like any other. Nothing is published again.
//!
//! A disabled endpoint's parked deliveries are released by the recovery
//! pass, at most [`RELEASE_WINDOW`] of them pending or in flight at once
//! (the worker then settles them `failed`, as for any delivery of a disabled
//! endpoint). Nothing here loses a delivery: a parked row is only ever made
//! pending again together with its outbox row, in one transaction, or
//! leased by the worker that sends it.
use std::time::Duration;

use deadpool_postgres::Transaction;
use tokio_postgres::Row;

use crate::broker::DeliveryTask;
use crate::db::{DbError, Object};
use crate::ids::{DeliveryId, EndpointId, TenantId};
use crate::repo::waiting::{self, parked_endpoints_then, ENDPOINTS_PER_PASS};
use crate::repo::{outbox, recovery, sql, GenericClient};

/// Whether the delivery's next attempt is its last (`ep`: the endpoint row,
/// `d`: the delivery). The circuit never holds a last attempt back: parking
/// saves retries, and a last attempt has none left (held back, it would
/// override the endpoint's "give up after `max_attempts`"). The 8 is
/// [`DEFAULT_MAX_ATTEMPTS`].
macro_rules! last_attempt {
    () => {
        "(d.attempt_count + 1 >= coalesce(ep.max_attempts, 8))"
    };
}
pub(crate) use last_attempt;

/// The claim's condition for parking instead of leasing (`ep`: the endpoint
/// row, `d`: the delivery): the circuit is open or half-open, this is not
/// its probe, and this would not be its [`last_attempt`]. A disabled
/// endpoint's deliveries are never parked.
macro_rules! parks {
    () => {
        concat!(
            "(ep.enabled AND ep.circuit_open_until IS NOT NULL AND ep.circuit_probe IS DISTINCT FROM d.id
          AND NOT ",
            $crate::repo::circuits::last_attempt!(),
            ")"
        )
    };
}
pub(crate) use parks;

/// When a delivery the claim parks now is given up (`ep`: the endpoint row,
/// `d`: the delivery): its retry policy's remaining time, as if it were tried
/// on schedule from now, or the endpoint's hold if longer (migration 0022's
/// `relayops.parked_gives_up_at`). Stored as the parked row's
/// `next_attempt_at`; [`parked_expiry`](super::parked_expiry) makes it `dead` then.
macro_rules! gives_up_at {
    () => {
        "relayops.parked_gives_up_at(d.attempt_count, ep.max_attempts, ep.retry_schedule_secs, ep.circuit_hold_secs)"
    };
}
pub(crate) use gives_up_at;

/// The platform's default `max_attempts`, as [`parks`] writes it (the
/// worker's retry policy checks that they agree).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;

/// The most of a disabled endpoint's deliveries pending or in flight at
/// once while its parked deliveries are released (to be failed).
pub const RELEASE_WINDOW: i64 = 1_000;

/// One more failure in the endpoint's run (`$3`: the run that opens the
/// circuit, `$4`: the cooldown in ms); the run reaching `$3` opens the
/// circuit and starts again. Only while it is closed and the endpoint enabled.
const FAILED: &str = "UPDATE relayops.webhook_endpoints
     SET circuit_failures = CASE WHEN circuit_failures + 1 >= $3 THEN 0 ELSE circuit_failures + 1 END,
         circuit_open_until = CASE WHEN circuit_failures + 1 >= $3
                                   THEN now() + $4::bigint * interval '1 millisecond' END,
         circuit_cooldown_ms = CASE WHEN circuit_failures + 1 >= $3 THEN $4::bigint::integer
                                    ELSE circuit_cooldown_ms END
     WHERE tenant_id = $1 AND id = $2 AND enabled AND circuit_open_until IS NULL
     RETURNING circuit_open_until IS NOT NULL AS opened";

const ANSWERED: &str = "UPDATE relayops.webhook_endpoints SET circuit_failures = 0
     WHERE tenant_id = $1 AND id = $2 AND circuit_failures > 0";

const PROBE_FAILED: &str = "UPDATE relayops.webhook_endpoints
     SET circuit_cooldown_ms = least(coalesce(circuit_cooldown_ms::bigint, $4::bigint) * 2, $5::bigint),
         circuit_open_until = now()
             + least(coalesce(circuit_cooldown_ms::bigint, $4::bigint) * 2, $5::bigint) * interval '1 millisecond',
         circuit_probe = NULL, circuit_probe_at = NULL
     WHERE tenant_id = $1 AND id = $2 AND circuit_probe = $3";

const CLOSE: &str = "UPDATE relayops.webhook_endpoints
     SET circuit_open_until = NULL, circuit_cooldown_ms = NULL, circuit_probe = NULL, circuit_probe_at = NULL,
         circuit_closed_at = now(), circuit_failures = 0
     WHERE tenant_id = $1 AND id = $2 AND circuit_open_until IS NOT NULL";

/// Half-open circuits without a live probe, oldest first (their
/// `circuit_open_until` index): an enabled one gets its oldest parked
/// delivery released as the probe; one with nothing parked, or disabled,
/// closes (a disabled endpoint's parked deliveries are released by
/// [`RELEASE_ENDPOINT`]). One whose parked rows are all locked now (a
/// replay, a give-up, another pass) is left as it is for the next pass:
/// `any_parked` sees them, locked or not.
const PROBE: &str = "WITH due AS (
         SELECT id, tenant_id, enabled FROM relayops.webhook_endpoints
         WHERE circuit_open_until <= now()
           AND (circuit_probe IS NULL OR circuit_probe_at < now() - $1::bigint * interval '1 millisecond')
         ORDER BY circuit_open_until
         LIMIT $2
         FOR UPDATE SKIP LOCKED),
     probe AS (
         SELECT due.id AS endpoint_id, due.tenant_id, due.enabled, p.id, p.event_id,
                EXISTS (SELECT 1 FROM relayops.deliveries x
                        WHERE x.endpoint_id = due.id AND x.status = 'parked' AND x.tenant_id = due.tenant_id)
                  AS any_parked
         FROM due
         LEFT JOIN LATERAL (
             SELECT d.id, d.event_id FROM relayops.deliveries d
             WHERE due.enabled AND d.endpoint_id = due.id AND d.status = 'parked' AND d.tenant_id = due.tenant_id
             ORDER BY d.updated_at
             LIMIT 1
             FOR UPDATE SKIP LOCKED) p ON true),
     marked AS (
         UPDATE relayops.webhook_endpoints e
         SET circuit_probe = probe.id, circuit_probe_at = CASE WHEN probe.id IS NULL THEN NULL ELSE now() END,
             circuit_open_until = CASE WHEN probe.id IS NULL THEN NULL ELSE e.circuit_open_until END,
             circuit_closed_at = CASE WHEN probe.id IS NULL THEN now() ELSE e.circuit_closed_at END,
             circuit_failures = 0
         FROM probe
         WHERE e.id = probe.endpoint_id AND (probe.id IS NOT NULL OR NOT probe.any_parked OR NOT probe.enabled))
     UPDATE relayops.deliveries d SET status = 'pending', next_attempt_at = NULL, updated_at = now()
     FROM probe WHERE d.id = probe.id AND d.event_id = probe.event_id AND d.status = 'parked'
     RETURNING d.tenant_id, d.id, d.event_id, d.endpoint_id";

/// Disabled endpoints that have parked deliveries, found on the parked
/// rows' own index ([`parked_endpoints_then`]; no flag to keep true).
const DISABLED_PARKED_ENDPOINTS: &str = parked_endpoints_then!(
    "SELECT e.tenant_id, e.id FROM found
     JOIN relayops.webhook_endpoints e ON e.id = found.endpoint_id
     WHERE NOT e.enabled"
);

/// Locks one disabled endpoint whose parked deliveries are to be released
/// (its still-open circuit is closed here), for the few statements of its
/// release; skipped when another pass has it.
const RELEASE_ENDPOINT: &str = "WITH releasing AS (
         SELECT id, circuit_open_until FROM relayops.webhook_endpoints
         WHERE tenant_id = $1 AND id = $2 AND NOT enabled
         FOR UPDATE SKIP LOCKED),
     closed AS (
         UPDATE relayops.webhook_endpoints e
         SET circuit_open_until = NULL, circuit_probe = NULL, circuit_probe_at = NULL, circuit_closed_at = now()
         FROM releasing WHERE e.id = releasing.id AND releasing.circuit_open_until IS NOT NULL)
     SELECT id FROM releasing";

/// How many of the endpoint's deliveries are pending or in flight (at most `$3`).
const OUTSTANDING: &str = "SELECT count(*) FROM (
         SELECT 1 FROM relayops.deliveries
         WHERE tenant_id = $1 AND endpoint_id = $2 AND status IN ('pending', 'in_progress')
         LIMIT $3) x";

const RELEASE_OLDEST: &str = "WITH picked AS (
         SELECT id, event_id FROM relayops.deliveries
         WHERE endpoint_id = $2 AND status = 'parked' AND tenant_id = $1
         ORDER BY updated_at
         LIMIT $3
         FOR UPDATE SKIP LOCKED)
     UPDATE relayops.deliveries d SET status = 'pending', next_attempt_at = NULL, updated_at = now()
     FROM picked WHERE d.id = picked.id AND d.event_id = picked.event_id
     RETURNING d.tenant_id, d.id, d.event_id, d.endpoint_id";

/// Counts a failed attempt in the endpoint's run of failures, shared by
/// every worker (the endpoint row); the run reaching `run` opens the circuit
/// for `cooldown`. `true` when this failure opened it; nothing is counted
/// while it is open (or the endpoint is disabled or gone).
pub async fn failed(
    client: &impl GenericClient,
    tenant: TenantId,
    endpoint: EndpointId,
    run: u32,
    cooldown: Duration,
) -> Result<bool, DbError> {
    let (run, cooldown_ms) = (i32::try_from(run).unwrap_or(i32::MAX), millis(cooldown));
    let row = sql::query_opt(client, FAILED, &[&tenant.as_uuid(), &endpoint.as_uuid(), &run, &cooldown_ms]).await?;
    Ok(row.is_some_and(|row| row.get("opened")))
}

/// An answer ends the endpoint's run of failures; `true` when one was under way.
pub async fn answered(client: &impl GenericClient, tenant: TenantId, endpoint: EndpointId) -> Result<bool, DbError> {
    Ok(sql::execute(client, ANSWERED, &[&tenant.as_uuid(), &endpoint.as_uuid()]).await? == 1)
}

/// The probe `probe` failed: the circuit opens again for twice its last
/// cooldown (`first` when it has none), at most `max`.
pub async fn probe_failed(
    client: &impl GenericClient,
    tenant: TenantId,
    endpoint: EndpointId,
    probe: DeliveryId,
    first: Duration,
    max: Duration,
) -> Result<bool, DbError> {
    let (first, max) = (millis(first), millis(max));
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
        [&tenant.as_uuid(), &endpoint.as_uuid(), &probe.as_uuid(), &first, &max];
    Ok(sql::execute(client, PROBE_FAILED, &params).await? == 1)
}

/// Closes an open circuit (the probe, or any other delivery, succeeded);
/// workers admit its parked deliveries ([`waiting`]).
pub async fn close(client: &impl GenericClient, tenant: TenantId, endpoint: EndpointId) -> Result<bool, DbError> {
    Ok(sql::execute(client, CLOSE, &[&tenant.as_uuid(), &endpoint.as_uuid()]).await? == 1)
}

/// What one pass released.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// Parked deliveries released as probes of half-open circuits.
    pub probes: u64,
    /// Parked deliveries released because their endpoint was disabled.
    pub released: u64,
}

/// One pass, each step in its own short transaction (no endpoint row stays
/// locked beyond its own release): probes for half-open circuits, then a
/// window of parked deliveries for each disabled endpoint, each made pending
/// with its outbox row. `probe_timeout`: how long a released probe may go
/// without an answer before another is released (its message may have been
/// lost with a broker; the probe itself is not lost: recovery sends it
/// again). A crash between steps loses nothing: what was not committed is
/// still parked for the next pass.
pub async fn release(client: &mut Object, probe_timeout: Duration) -> Result<Released, DbError> {
    let tx = client.transaction().await?;
    let probes = sql::query(&tx, PROBE, &[&millis(probe_timeout), &ENDPOINTS_PER_PASS]).await?;
    outbox::insert_delivery_messages(&tx, &tasks(&probes)).await?;
    commit_release(tx, probes.len()).await?;
    let mut released = 0;
    for (tenant, id) in waiting::parked_endpoints(&*client, DISABLED_PARKED_ENDPOINTS).await? {
        let tx = client.transaction().await?;
        if sql::query_opt(&tx, RELEASE_ENDPOINT, &[&tenant, &id]).await?.is_none() {
            continue;
        }
        let outstanding: i64 = sql::query_one(&tx, OUTSTANDING, &[&tenant, &id, &RELEASE_WINDOW]).await?.get(0);
        let room = RELEASE_WINDOW - outstanding;
        let rows = if room > 0 { sql::query(&tx, RELEASE_OLDEST, &[&tenant, &id, &room]).await? } else { vec![] };
        outbox::insert_delivery_messages(&tx, &tasks(&rows)).await?;
        commit_release(tx, rows.len()).await?;
        released += rows.len() as u64;
    }
    Ok(Released { probes: probes.len() as u64, released })
}

/// Commits a release step; the `publisher.before_release_commit` failpoint
/// crashes the process just before, when the step released anything.
async fn commit_release(tx: Transaction<'_>, released: usize) -> Result<(), DbError> {
    if released > 0 {
        crate::failpoint::crash_if_armed("publisher.before_release_commit");
    }
    Ok(tx.commit().await?)
}

fn tasks(rows: &[Row]) -> Vec<DeliveryTask> {
    rows.iter().map(recovery::task).collect()
}

fn millis(duration: Duration) -> i64 {
    duration.as_millis().min(i64::MAX as u128) as i64
}
