//! Reading a delivery's attempt history (attempts are written by
//! [`deliveries::record_attempt`](super::deliveries::record_attempt) only).
use crate::repo::GenericClient;
use chrono::{DateTime, Utc};

use crate::db::partitions::{delivery_event_millis, id_lower_bound_ms};
use crate::db::DbError;
use crate::ids::{AttemptId, DeliveryId, TenantId};
use crate::repo::sql;

const LIST_ATTEMPTS: &str = "SELECT id, attempt_number, outcome, http_status, error, request_headers, response_body,
            latency_ms, started_at, finished_at
     FROM relayops.delivery_attempts
     WHERE tenant_id = $1 AND delivery_id = $2 AND attempt_number > $3 AND id >= $5
     ORDER BY attempt_number LIMIT $4";

#[derive(Debug, Clone)]
pub struct AttemptRecordRow {
    pub id: AttemptId,
    pub attempt_number: i32,
    pub outcome: String,
    pub http_status: Option<i32>,
    pub error: Option<String>,
    pub request_headers: serde_json::Value,
    pub response_body: Option<String>,
    pub latency_ms: i32,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
}

/// Up to `limit` attempts numbered above `after`, oldest first.
pub async fn list_attempts(
    client: &impl GenericClient,
    tenant: TenantId,
    delivery: DeliveryId,
    after: i32,
    limit: i64,
) -> Result<Vec<AttemptRecordRow>, DbError> {
    // Attempts are partitioned by their own time, which comes after their
    // delivery's (less the clock slack): older partitions are skipped.
    let since = delivery_event_millis(delivery.as_uuid()).map(id_lower_bound_ms).unwrap_or(uuid::Uuid::nil());
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
        [&tenant.as_uuid(), &delivery.as_uuid(), &after, &limit, &since];
    let rows = sql::query(client, LIST_ATTEMPTS, &params).await?;
    Ok(rows
        .iter()
        .map(|row| AttemptRecordRow {
            id: AttemptId::from_uuid(row.get("id")),
            attempt_number: row.get("attempt_number"),
            outcome: row.get("outcome"),
            http_status: row.get("http_status"),
            error: row.get("error"),
            request_headers: row.get("request_headers"),
            response_body: row.get("response_body"),
            latency_ms: row.get("latency_ms"),
            started_at: row.get("started_at"),
            finished_at: row.get("finished_at"),
        })
        .collect())
}
