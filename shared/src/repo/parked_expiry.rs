//! Parked deliveries that run out of time (SPEC §12, "waiting never changes
//! what a delivery promises"). A delivery parked behind an open endpoint
//! circuit ([`circuits`](super::circuits)) makes no attempts, so its retry
//! schedule alone would never end it. The claim that parks it stores in
//! `next_attempt_at` when its policy gives it up (its remaining attempts'
//! waits, as if tried on schedule from then; or the endpoint's
//! `circuit_hold_secs` if longer); once that time passes, the recovery pass
//! makes it `dead` here, exactly as a last failed attempt would: with its
//! dead letter (`dead_letter.v1` to the operations DLQ), the tenant's
//! `delivery.dead`, and its ordering lane moved on (or blocked, as the
//! endpoint says), all in one transaction. It can be replayed like any dead
//! delivery.
//!
//! A delivery parked while waiting for a slot of its endpoint
//! ([`waiting`](super::waiting)) has no give-up time: it waits for a working
//! endpoint. Should the endpoint's circuit open, the clock starts then
//! ([`start_clocks`]): from there on it waits for a failing endpoint, and its
//! policy's remaining time is counted as for a delivery parked by the circuit
//! (a last attempt excepted, as the circuit excepts it: it is admitted and sent).
//!
//! Lock order: every ordering lane of the batch first (sorted, so two passes
//! cannot deadlock), then the deliveries (`FOR UPDATE SKIP LOCKED`, still
//! parked and due): the order every lane transaction follows.
use tokio_postgres::Row;

use crate::db::DbError;
use crate::domain::operational::{DeadDelivery, Subject};
use crate::domain::EndpointKind;
use crate::ids::{DeliveryId, EndpointId, EventId, TenantId};
use crate::repo::circuits::{gives_up_at, last_attempt};
use crate::repo::lanes::{self, LaneKey};
use crate::repo::{operational, sql, GenericClient};

/// Why such a delivery died, as its `last_error` and dead letter say.
pub const GAVE_UP: &str = "the retry schedule ran out while waiting behind an open circuit (parked)";

/// Gives parked deliveries without a give-up time (waiting for a slot) of
/// endpoints whose circuit is open the give-up time a park by the circuit
/// would have written now; at most `$1` of them (on
/// `deliveries_partitioned_waiting_for_slot_idx`). Not a last attempt: the
/// circuit never holds one back (`circuits::parks`), and a worker admits it.
const START_CLOCKS: &str = concat!(
    "WITH waiting AS (
         SELECT d.id, d.event_id FROM relayops.webhook_endpoints ep
         JOIN relayops.deliveries d ON d.endpoint_id = ep.id AND d.tenant_id = ep.tenant_id
         WHERE ep.circuit_open_until IS NOT NULL AND ep.enabled
           AND d.status = 'parked' AND d.next_attempt_at IS NULL
           AND NOT ",
    last_attempt!(),
    "
         LIMIT $1
         FOR UPDATE OF d SKIP LOCKED)
     UPDATE relayops.deliveries d SET next_attempt_at = ",
    gives_up_at!(),
    "
     FROM waiting w, relayops.webhook_endpoints ep
     WHERE d.id = w.id AND d.event_id = w.event_id AND ep.id = d.endpoint_id AND ep.tenant_id = d.tenant_id"
);

/// Parked deliveries whose time is up, soonest first (no lock: the lanes are
/// locked before the rows).
const DUE: &str = "SELECT d.tenant_id, d.id, d.event_id, d.endpoint_id, d.ordering_key
     FROM relayops.deliveries d
     WHERE d.status = 'parked' AND d.next_attempt_at <= now()
     ORDER BY d.next_attempt_at
     LIMIT $1";

/// Makes the named deliveries `dead` if they are still parked and due;
/// returns what the dead letter and `delivery.dead` need.
const GIVE_UP: &str = "WITH wanted AS (
         SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[]) AS w(tenant_id, id, event_id)),
     locked AS (
         SELECT d.tenant_id, d.id, d.event_id FROM relayops.deliveries d
         JOIN wanted w ON d.id = w.id AND d.event_id = w.event_id AND d.tenant_id = w.tenant_id
         WHERE d.status = 'parked' AND d.next_attempt_at <= now()
         ORDER BY d.id
         FOR UPDATE OF d SKIP LOCKED)
     UPDATE relayops.deliveries d
     SET status = 'dead', next_attempt_at = NULL, last_error = $4, updated_at = now()
     FROM locked l, relayops.events e, relayops.webhook_endpoints ep
     WHERE d.id = l.id AND d.event_id = l.event_id
       AND e.id = d.event_id AND e.tenant_id = d.tenant_id
       AND ep.id = d.endpoint_id AND ep.tenant_id = d.tenant_id
     RETURNING d.tenant_id, d.id, d.event_id, d.endpoint_id, d.ordering_key, d.attempt_count,
               d.last_http_status, e.event_type, ep.kind, ep.url";

/// Starts the clock of at most `limit` deliveries parked for a slot of an
/// endpoint whose circuit is open ([`START_CLOCKS`]); returns how many.
pub async fn start_clocks(client: &impl GenericClient, limit: i64) -> Result<u64, DbError> {
    sql::execute(client, START_CLOCKS, &[&limit]).await
}

/// One sweep, in the caller's transaction: at most `limit` parked
/// deliveries whose time is up become `dead`, each with its dead letter,
/// `delivery.dead` and lane step; returns how many.
pub async fn give_up_due(client: &impl GenericClient, limit: i64) -> Result<u64, DbError> {
    let due = sql::query(client, DUE, &[&limit]).await?;
    if due.is_empty() {
        return Ok(0);
    }
    let mut lanes_first: Vec<(uuid::Uuid, uuid::Uuid, String)> = due
        .iter()
        .filter_map(|row| {
            let key: Option<String> = row.get("ordering_key");
            key.map(|key| (row.get("tenant_id"), row.get("endpoint_id"), key))
        })
        .collect();
    lanes_first.sort();
    lanes_first.dedup();
    for (tenant, endpoint, key) in &lanes_first {
        let lane = LaneKey {
            tenant: TenantId::from_uuid(*tenant),
            endpoint: EndpointId::from_uuid(*endpoint),
            ordering_key: key,
        };
        lanes::lock(client, lane).await?;
    }
    let column = |name: &str| due.iter().map(|row| row.get::<_, uuid::Uuid>(name)).collect::<Vec<_>>();
    let (tenants, ids, events) = (column("tenant_id"), column("id"), column("event_id"));
    let dead = sql::query(client, GIVE_UP, &[&tenants, &ids, &events, &GAVE_UP]).await?;
    for row in &dead {
        after_death(client, row).await?;
    }
    Ok(dead.len() as u64)
}

/// The dead letter, `delivery.dead` and the lane's step for one delivery just
/// made dead.
async fn after_death(client: &impl GenericClient, row: &Row) -> Result<(), DbError> {
    let tenant = TenantId::from_uuid(row.get("tenant_id"));
    let delivery = DeliveryId::from_uuid(row.get("id"));
    let endpoint = EndpointId::from_uuid(row.get("endpoint_id"));
    let subject = Subject { id: endpoint, kind: EndpointKind::from_stored(row.get("kind")), url: row.get("url") };
    let event_type: String = row.get("event_type");
    let dead = DeadDelivery {
        delivery_id: delivery,
        event_id: EventId::from_uuid(row.get("event_id")),
        event_type: &event_type,
        attempts: row.get("attempt_count"),
        last_http_status: row.get("last_http_status"),
        last_error: Some(GAVE_UP),
    };
    operational::emit_death(client, tenant, &subject, &dead, GAVE_UP.to_owned()).await?;
    let ordering_key: Option<String> = row.get("ordering_key");
    if let Some(key) = ordering_key.as_deref() {
        lanes::after_death(client, LaneKey { tenant, endpoint, ordering_key: key }, delivery).await?;
    }
    Ok(())
}
