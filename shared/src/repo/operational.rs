//! Emitting an operational event: stored as one of the tenant's events and
//! fanned out, by the ingest statement, to the tenant's enabled operational
//! endpoints whose subscriptions match (outbox, retries, signatures and the
//! outbound filter as for any event). Run it in the transaction that makes the
//! change it reports, so the event exists exactly when the change does.
use crate::db::DbError;
use chrono::{DateTime, Utc};

use crate::broker::{DeadLetter, QueueMessage};
use crate::domain::operational::{DeadDelivery, DisabledBy, OperationalEvent, Subject};
use crate::ids::TenantId;
use crate::repo::events::{self, NewEvent};
use crate::repo::{outbox, sql, GenericClient};

/// Whether the tenant has an operational endpoint that could receive anything:
/// without one nothing is stored (no event rows nobody asked for).
const HAS_OPERATIONAL_ENDPOINT: &str = "SELECT EXISTS (
     SELECT 1 FROM relayops.webhook_endpoints WHERE tenant_id = $1 AND kind = 'operational' AND enabled)";

/// Stores the event when the loop rule allows it and the tenant has an enabled
/// operational endpoint; returns whether it was stored.
pub async fn emit(client: &impl GenericClient, tenant: TenantId, event: &OperationalEvent) -> Result<bool, DbError> {
    if !event.is_emitted() {
        return Ok(false);
    }
    let row = sql::query_one(client, HAS_OPERATIONAL_ENDPOINT, &[&tenant.as_uuid()]).await?;
    if !row.get::<_, bool>(0) {
        return Ok(false);
    }
    let new_event =
        NewEvent { event_type: &event.event_type, payload: &event.payload, idempotency_key: None, ordering_key: None };
    events::insert_operational_event(client, tenant, &new_event).await?;
    tracing::info!(tenant_id = %tenant, event_type = event.event_type.as_str(), "operational event emitted");
    Ok(true)
}

/// Reports a disabled endpoint (`endpoint.disabled`, saying who disabled it
/// and why) as `emit` does; returns whether it was stored.
pub async fn emit_disabled(
    client: &impl GenericClient,
    tenant: TenantId,
    subject: &Subject,
    by: DisabledBy,
    reason: &str,
    failing_since: Option<DateTime<Utc>>,
) -> Result<bool, DbError> {
    let event = OperationalEvent::endpoint_disabled(tenant, subject, by, reason, failing_since);
    emit(client, tenant, &event).await
}

/// Reports a delivery's death, in the transaction that made it `dead`: its
/// dead letter (`dead_letter.v1` to the operations DLQ, saying `reason`) and
/// the tenant's `delivery.dead` (as `emit` does). For a last failed attempt
/// (the worker) and a parked delivery given up (`repo::parked_expiry`)
/// alike; returns whether `delivery.dead` was stored.
pub async fn emit_death(
    client: &impl GenericClient,
    tenant: TenantId,
    subject: &Subject,
    dead: &DeadDelivery<'_>,
    reason: String,
) -> Result<bool, DbError> {
    let letter = DeadLetter {
        tenant_id: tenant,
        delivery_id: dead.delivery_id,
        event_id: dead.event_id,
        endpoint_id: subject.id,
        attempts: dead.attempts,
        last_http_status: dead.last_http_status,
        reason,
    };
    outbox::insert_message(client, tenant, Some(dead.delivery_id), &QueueMessage::DeadLetterV1(letter)).await?;
    emit(client, tenant, &OperationalEvent::delivery_dead(tenant, subject, dead)).await
}
