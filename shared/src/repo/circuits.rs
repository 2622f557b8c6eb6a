//! Endpoint circuits (SPEC §12): where a failing endpoint's deliveries wait.
//!
//! - **Closed** (`circuit_open_until` NULL): deliveries are claimed and sent.
//! - **Open** (until `circuit_open_until`): a worker that saw the endpoint fail
//!   many times in a row opened it ([`open`]); every claim of one of its
//!   deliveries parks it instead (`status = 'parked'`, no lease, no attempt:
//!   the claim statement's [`parks`] condition), and the message is acked.
//!   A parked delivery costs nothing while it waits: no broker message, no
//!   retry-queue round, no recovery pass looks at it.
//! - **Half-open** (its time passed): the recovery pass releases the oldest
//!   parked delivery as the probe ([`release`]: pending, with an outbox
//!   row); every other delivery still parks. The worker records the probe's
//!   answer: a success closes the circuit ([`close`]), a failure opens it
//!   again for twice the cooldown, up to a maximum ([`probe_failed`]).
//! - **Releasing** (closed, `circuit_parked` still set): each recovery pass
//!   releases parked deliveries, oldest first, so that at most
//!   [`RELEASE_WINDOW`] of the endpoint's deliveries are pending or in flight
//!   at once; once nothing is parked and the circuit has been closed longer
//!   than any claim statement runs, the flag is cleared.
//!
//! A disabled endpoint's parked deliveries are released the same way (the
//! worker then settles them `failed`, as for any delivery of a disabled
//! endpoint). Nothing here loses a delivery: a parked row is only ever made
//! pending again together with its outbox row, in one transaction.
use std::time::Duration;

use tokio_postgres::Row;

use crate::broker::DeliveryTask;
use crate::db::DbError;
use crate::ids::{DeliveryId, EndpointId, TenantId};
use crate::repo::{outbox, recovery, sql, GenericClient};

/// The claim's condition for parking instead of leasing (`ep`: the endpoint
/// row, `d`: the delivery): the circuit is open or half-open, this is not
/// its probe, and this would not be its last attempt. A disabled endpoint's
/// deliveries are never parked; nor is a last attempt (parking saves retries,
/// and a last attempt has none left: held back, it would override the
/// endpoint's "give up after `max_attempts`"). The 8 is
/// [`DEFAULT_MAX_ATTEMPTS`].
macro_rules! parks {
    () => {
        "(ep.enabled AND ep.circuit_open_until IS NOT NULL AND ep.circuit_probe IS DISTINCT FROM d.id
          AND d.attempt_count + 1 < coalesce(ep.max_attempts, 8))"
    };
}
pub(crate) use parks;

/// The platform's default `max_attempts`, as [`parks`] writes it (the
/// worker's retry policy checks that they agree).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;

/// The most of a releasing endpoint's deliveries pending or in flight at
/// once: released deliveries join the endpoint's flow control like any
/// burst, and a circuit that opens again finds at most this many unparked.
pub const RELEASE_WINDOW: i64 = 1_000;

/// The most endpoints one recovery pass probes or releases.
const ENDPOINTS_PER_PASS: i64 = 100;

/// How long the flag outlives the close: longer than any claim statement
/// that read the circuit open may take to commit its park.
const SETTLE_AFTER: Duration = Duration::from_secs(60);

const OPEN: &str = "UPDATE relayops.webhook_endpoints
     SET circuit_open_until = now() + $3::bigint * interval '1 millisecond', circuit_cooldown_ms = $3,
         circuit_probe = NULL, circuit_probe_at = NULL, circuit_parked = true
     WHERE tenant_id = $1 AND id = $2 AND enabled AND circuit_open_until IS NULL";

const PROBE_FAILED: &str = "UPDATE relayops.webhook_endpoints
     SET circuit_cooldown_ms = least(coalesce(circuit_cooldown_ms::bigint, $4::bigint) * 2, $5::bigint),
         circuit_open_until = now()
             + least(coalesce(circuit_cooldown_ms::bigint, $4::bigint) * 2, $5::bigint) * interval '1 millisecond',
         circuit_probe = NULL, circuit_probe_at = NULL
     WHERE tenant_id = $1 AND id = $2 AND circuit_probe = $3";

const CLOSE: &str = "UPDATE relayops.webhook_endpoints
     SET circuit_open_until = NULL, circuit_cooldown_ms = NULL, circuit_probe = NULL, circuit_probe_at = NULL,
         circuit_closed_at = now()
     WHERE tenant_id = $1 AND id = $2 AND circuit_open_until IS NOT NULL";

/// Half-open circuits without a live probe: each gets its oldest parked
/// delivery released as the probe; one with nothing parked closes.
const PROBE: &str = "WITH due AS (
         SELECT id, tenant_id FROM relayops.webhook_endpoints
         WHERE circuit_parked AND enabled AND circuit_open_until <= now()
           AND (circuit_probe IS NULL OR circuit_probe_at < now() - $1::bigint * interval '1 millisecond')
         ORDER BY circuit_open_until
         LIMIT $2
         FOR UPDATE SKIP LOCKED),
     probe AS (
         SELECT due.id AS endpoint_id, due.tenant_id, p.id, p.event_id
         FROM due
         LEFT JOIN LATERAL (
             SELECT d.id, d.event_id FROM relayops.deliveries d
             WHERE d.endpoint_id = due.id AND d.status = 'parked' AND d.tenant_id = due.tenant_id
             ORDER BY d.updated_at
             LIMIT 1
             FOR UPDATE SKIP LOCKED) p ON true),
     marked AS (
         UPDATE relayops.webhook_endpoints e
         SET circuit_probe = probe.id, circuit_probe_at = now(),
             circuit_open_until = CASE WHEN probe.id IS NULL THEN NULL ELSE e.circuit_open_until END,
             circuit_closed_at = CASE WHEN probe.id IS NULL THEN now() ELSE e.circuit_closed_at END
         FROM probe WHERE e.id = probe.endpoint_id)
     UPDATE relayops.deliveries d SET status = 'pending', updated_at = now()
     FROM probe WHERE d.id = probe.id AND d.event_id = probe.event_id AND d.status = 'parked'
     RETURNING d.tenant_id, d.id, d.event_id, d.endpoint_id";

/// Closed (or disabled) endpoints that still have parked deliveries, locked;
/// a disabled one whose circuit is still open has it closed here (the only
/// row written: the others are read, not rewritten every pass). `settled`:
/// closed for longer than `$2` (a circuit closed by this statement is not).
const RELEASING: &str = "WITH releasing AS (
         SELECT id, tenant_id, circuit_open_until, circuit_closed_at FROM relayops.webhook_endpoints
         WHERE circuit_parked AND (circuit_open_until IS NULL OR NOT enabled)
         LIMIT $1
         FOR UPDATE SKIP LOCKED),
     closed AS (
         UPDATE relayops.webhook_endpoints e
         SET circuit_open_until = NULL, circuit_probe = NULL, circuit_probe_at = NULL, circuit_closed_at = now()
         FROM releasing WHERE e.id = releasing.id AND releasing.circuit_open_until IS NOT NULL)
     SELECT tenant_id, id,
            circuit_open_until IS NULL
              AND coalesce(circuit_closed_at < now() - $2::bigint * interval '1 millisecond', true) AS settled
     FROM releasing";

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
     UPDATE relayops.deliveries d SET status = 'pending', updated_at = now()
     FROM picked WHERE d.id = picked.id AND d.event_id = picked.event_id
     RETURNING d.tenant_id, d.id, d.event_id, d.endpoint_id";

const SETTLED: &str = "UPDATE relayops.webhook_endpoints SET circuit_parked = false
     WHERE tenant_id = $1 AND id = $2 AND circuit_open_until IS NULL";

/// Opens a closed circuit for `cooldown`; `false` when it was already open
/// (or the endpoint is disabled or gone).
pub async fn open(
    client: &impl GenericClient,
    tenant: TenantId,
    endpoint: EndpointId,
    cooldown: Duration,
) -> Result<bool, DbError> {
    let cooldown_ms = millis(cooldown);
    Ok(sql::execute(client, OPEN, &[&tenant.as_uuid(), &endpoint.as_uuid(), &cooldown_ms]).await? == 1)
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
/// its parked deliveries are released by the next recovery passes.
pub async fn close(client: &impl GenericClient, tenant: TenantId, endpoint: EndpointId) -> Result<bool, DbError> {
    Ok(sql::execute(client, CLOSE, &[&tenant.as_uuid(), &endpoint.as_uuid()]).await? == 1)
}

/// What one pass released.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// Parked deliveries released as probes of half-open circuits.
    pub probes: u64,
    /// Parked deliveries released because their circuit closed (or their
    /// endpoint was disabled).
    pub released: u64,
}

/// One pass, in the caller's transaction: probes for half-open circuits,
/// then a window of parked deliveries for each releasing endpoint, each made
/// pending with its outbox row. `probe_timeout`: how long a released probe
/// may go without an answer before another is released (its message may
/// have been lost with a broker; the probe itself is not lost: recovery
/// sends it again).
pub async fn release(client: &impl GenericClient, probe_timeout: Duration) -> Result<Released, DbError> {
    let probes = sql::query(client, PROBE, &[&millis(probe_timeout), &ENDPOINTS_PER_PASS]).await?;
    outbox::insert_delivery_messages(client, &tasks(&probes)).await?;
    let mut released = 0;
    for endpoint in sql::query(client, RELEASING, &[&ENDPOINTS_PER_PASS, &millis(SETTLE_AFTER)]).await? {
        let (tenant, id): (uuid::Uuid, uuid::Uuid) = (endpoint.get("tenant_id"), endpoint.get("id"));
        let outstanding: i64 = sql::query_one(client, OUTSTANDING, &[&tenant, &id, &RELEASE_WINDOW]).await?.get(0);
        let room = RELEASE_WINDOW - outstanding;
        let rows = if room > 0 { sql::query(client, RELEASE_OLDEST, &[&tenant, &id, &room]).await? } else { vec![] };
        outbox::insert_delivery_messages(client, &tasks(&rows)).await?;
        released += rows.len() as u64;
        if (rows.len() as i64) < room && endpoint.get::<_, bool>("settled") {
            sql::execute(client, SETTLED, &[&tenant, &id]).await?;
        }
    }
    Ok(Released { probes: probes.len() as u64, released })
}

fn tasks(rows: &[Row]) -> Vec<DeliveryTask> {
    rows.iter().map(recovery::task).collect()
}

fn millis(duration: Duration) -> i64 {
    duration.as_millis().min(i64::MAX as u128) as i64
}
