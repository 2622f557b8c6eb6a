//! Row-level retention, beside the partition drops of `db::partitions`:
//! tenants whose retention is shorter than the platform's lose their older
//! terminal deliveries (with their attempts), then the events left without
//! deliveries, in bounded batches; idempotency keys are pruned once past
//! their window. Not tenant-scoped by a client: run by the maintenance pass.
use std::time::Duration;

use uuid::Uuid;

use crate::db::partitions::uuid_floor;
use crate::db::DbError;
use crate::repo::sql;
use crate::repo::GenericClient;

/// How long an idempotency key is honoured: a repeat within this window gets
/// the original answer; after it, the key may be used for a new event.
pub const IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(7 * 86_400);

const SHORTER_RETENTION: &str = "SELECT id, retention_days FROM relayops.tenants
     WHERE retention_days IS NOT NULL AND retention_days::bigint * 86400 < $1::bigint";

/// Terminal deliveries of one tenant whose event is older than the bound
/// (the partition key, so older partitions only), with their attempts.
const DELETE_DELIVERIES: &str = "WITH gone AS (
         DELETE FROM relayops.deliveries d
         WHERE (d.id, d.event_id) IN (
             SELECT id, event_id FROM relayops.deliveries
             WHERE tenant_id = $1 AND event_id < $2 AND status IN ('delivered', 'failed', 'dead')
             LIMIT $3)
         RETURNING d.tenant_id, d.id),
     attempts AS (
         DELETE FROM relayops.delivery_attempts a USING gone
         WHERE a.tenant_id = gone.tenant_id AND a.delivery_id = gone.id
         RETURNING 1)
     SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM attempts)";

const DELETE_EVENTS: &str = "DELETE FROM relayops.events e
     WHERE e.id IN (
         SELECT id FROM relayops.events x
         WHERE x.tenant_id = $1 AND x.id < $2
           AND NOT EXISTS (SELECT 1 FROM relayops.deliveries d WHERE d.event_id = x.id)
         LIMIT $3)";

const DELETE_TENANT_KEYS: &str = "DELETE FROM relayops.idempotency_keys
     WHERE (tenant_id, idempotency_key) IN (
         SELECT tenant_id, idempotency_key FROM relayops.idempotency_keys
         WHERE tenant_id = $1 AND created_at < now() - $2::bigint * interval '1 second'
         LIMIT $3)";

const PRUNE_KEYS: &str = "DELETE FROM relayops.idempotency_keys
     WHERE (tenant_id, idempotency_key) IN (
         SELECT tenant_id, idempotency_key FROM relayops.idempotency_keys
         WHERE created_at < now() - $1::bigint * interval '1 second'
         LIMIT $2)";

/// Deletes up to `batch` rows of each kind per tenant with a retention
/// shorter than `platform`; returns how many rows went.
pub async fn sweep_tenants(client: &impl GenericClient, platform: Duration, batch: i64) -> Result<u64, DbError> {
    let platform_secs = platform.as_secs() as i64;
    let tenants = sql::query(client, SHORTER_RETENTION, &[&platform_secs]).await?;
    let mut deleted = 0;
    for tenant in tenants {
        let id: Uuid = tenant.get("id");
        let days: i32 = tenant.get("retention_days");
        let secs = i64::from(days) * 86_400;
        let bound = uuid_floor(chrono::Utc::now() - chrono::Duration::seconds(secs));
        let rows: i64 = sql::query_one(client, DELETE_DELIVERIES, &[&id, &bound, &batch]).await?.get(0);
        deleted += rows as u64;
        deleted += sql::execute(client, DELETE_EVENTS, &[&id, &bound, &batch]).await?;
        deleted += sql::execute(client, DELETE_TENANT_KEYS, &[&id, &secs, &batch]).await?;
    }
    Ok(deleted)
}

/// Deletes up to `batch` idempotency keys older than their window.
pub async fn prune_idempotency_keys(client: &impl GenericClient, batch: i64) -> Result<u64, DbError> {
    let window = IDEMPOTENCY_WINDOW.as_secs() as i64;
    sql::execute(client, PRUNE_KEYS, &[&window, &batch]).await
}
