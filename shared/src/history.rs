//! History maintenance, one pass: partitions created ahead and expired ones
//! dropped (`db::partitions`), tenants' shorter retention applied and old
//! idempotency keys pruned (`repo::retention`), each in bounded work. Run by
//! the publisher's recovery pass (long-lived loop and scheduled Lambda alike)
//! every `RELAYOPS_HISTORY_MAINTENANCE_MS`.
pub mod missing;

use crate::config::HistoryConfig;
use crate::db::partitions::{self, PartitionReport};
use crate::db::{DbError, Pool};
use crate::repo::retention;

/// Rows deleted per kind per tenant, and keys per pass, at most.
const SWEEP_BATCH: i64 = 5_000;

#[derive(Debug, Default, Clone)]
pub struct HistoryReport {
    pub partitions: PartitionReport,
    /// Rows of tenants with a shorter retention, deleted.
    pub tenant_rows_deleted: u64,
    /// Idempotency keys past their window, deleted.
    pub keys_pruned: u64,
}

pub async fn maintain(pool: &Pool, config: &HistoryConfig) -> Result<HistoryReport, DbError> {
    let client = pool.get().await?;
    let partitions = partitions::maintain(&client, config).await?;
    let tenant_rows_deleted = retention::sweep_tenants(&client, config.retention, SWEEP_BATCH).await?;
    let keys_pruned = retention::prune_idempotency_keys(&client, SWEEP_BATCH).await?;
    Ok(HistoryReport { partitions, tenant_rows_deleted, keys_pruned })
}
