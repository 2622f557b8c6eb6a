//! The recovery pass (run from the publisher's tick): nothing may depend on
//! RabbitMQ alone remembering a delivery. It re-enqueues, through the outbox,
//! deliveries whose worker lease expired (the worker died mid-attempt) and
//! deliveries due for a retry whose message never came (`grace` after the due
//! time). A duplicate message this may create is absorbed by the worker's claim.
use std::time::Duration;

use crate::repo::GenericClient;
use uuid::Uuid;

use crate::broker::envelope::DeliveryTask;
use crate::db::DbError;
use crate::ids::{DeliveryId, EndpointId, EventId, TenantId};
use crate::repo::outbox;
use crate::repo::sql;

const FIND_STRANDED: &str = "SELECT id, tenant_id, event_id, endpoint_id FROM relayops.deliveries
     WHERE (status = 'in_progress' AND lease_expires_at < now())
        OR (status = 'scheduled' AND next_attempt_at < now() - $1::bigint * interval '1 millisecond')
     LIMIT $2
     FOR UPDATE SKIP LOCKED";

/// Expired leases become pending; overdue retries get their due time reset, so
/// the grace period starts again instead of re-enqueueing on every tick.
const REVIVE: &str = "UPDATE relayops.deliveries
     SET status = CASE WHEN status = 'in_progress' THEN 'pending' ELSE status END,
         next_attempt_at = CASE WHEN status = 'scheduled' THEN now() ELSE next_attempt_at END,
         lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
     WHERE id = ANY($1)";

/// Re-enqueues up to `limit` stranded deliveries; returns how many. Must run in
/// a transaction (the caller's).
pub async fn requeue_stranded(tx: &impl GenericClient, grace: Duration, limit: i64) -> Result<u64, DbError> {
    let grace_ms = grace.as_millis() as i64;
    let rows = sql::query(tx, FIND_STRANDED, &[&grace_ms, &limit]).await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let tasks: Vec<DeliveryTask> = rows
        .iter()
        .map(|row| DeliveryTask {
            tenant_id: TenantId::from_uuid(row.get("tenant_id")),
            delivery_id: DeliveryId::from_uuid(row.get("id")),
            event_id: EventId::from_uuid(row.get("event_id")),
            endpoint_id: EndpointId::from_uuid(row.get("endpoint_id")),
        })
        .collect();
    let ids: Vec<Uuid> = tasks.iter().map(|task| task.delivery_id.as_uuid()).collect();
    sql::execute(tx, REVIVE, &[&ids]).await?;
    outbox::insert_delivery_messages(tx, &tasks).await?;
    Ok(rows.len() as u64)
}
