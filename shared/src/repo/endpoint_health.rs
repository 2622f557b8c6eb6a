//! Endpoint health for the console, aggregated from the attempt history of one
//! tenant: success rate and p95 latency over a recent window, each endpoint's
//! latest attempt, and attempts by outcome in time buckets (for a chart).
//!
//! Read-only. Every query filters by tenant; the time window bounds how many
//! attempts are read (a day's, for the console).
use chrono::{DateTime, Utc};

use crate::db::DbError;
use crate::ids::{EndpointId, TenantId};
use crate::repo::sql;
use crate::repo::GenericClient;

/// Per endpoint: attempts and deliveries in `[$2, now)` ("recent") and
/// `[$3, now)` ("window", the longer one), p95 latency of each.
const SUMMARIES: &str = "SELECT d.endpoint_id,
        count(*) FILTER (WHERE a.started_at >= $2) AS recent_attempts,
        count(*) FILTER (WHERE a.started_at >= $2 AND a.outcome = 'delivered') AS recent_delivered,
        percentile_disc(0.95) WITHIN GROUP (ORDER BY a.latency_ms) FILTER (WHERE a.started_at >= $2) AS recent_p95,
        count(*) AS window_attempts,
        count(*) FILTER (WHERE a.outcome = 'delivered') AS window_delivered,
        percentile_disc(0.95) WITHIN GROUP (ORDER BY a.latency_ms) AS window_p95
     FROM relayops.delivery_attempts a
     JOIN relayops.deliveries d ON d.tenant_id = a.tenant_id AND d.id = a.delivery_id
     WHERE a.tenant_id = $1 AND a.started_at >= $3
     GROUP BY d.endpoint_id";

/// Each endpoint's latest attempt within the window.
const LATEST: &str = "SELECT DISTINCT ON (d.endpoint_id) d.endpoint_id, a.outcome, a.http_status, a.error, a.started_at
     FROM relayops.delivery_attempts a
     JOIN relayops.deliveries d ON d.tenant_id = a.tenant_id AND d.id = a.delivery_id
     WHERE a.tenant_id = $1 AND a.started_at >= $2
     ORDER BY d.endpoint_id, a.started_at DESC, a.attempt_number DESC";

/// Attempts by endpoint, outcome and bucket (`$3` seconds wide, from `$2`).
const BUCKETS: &str = "SELECT d.endpoint_id,
        date_bin($3::bigint * interval '1 second', a.started_at, $2) AS bucket,
        a.outcome, count(*) AS attempts
     FROM relayops.delivery_attempts a
     JOIN relayops.deliveries d ON d.tenant_id = a.tenant_id AND d.id = a.delivery_id
     WHERE a.tenant_id = $1 AND a.started_at >= $2
     GROUP BY 1, 2, 3";

/// Counts and p95 latency of attempts in a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowStats {
    pub attempts: i64,
    pub delivered: i64,
    pub p95_latency_ms: Option<i32>,
}

impl WindowStats {
    /// Delivered attempts over all attempts, when there were any.
    pub fn success_rate(&self) -> Option<f64> {
        (self.attempts > 0).then(|| self.delivered as f64 / self.attempts as f64)
    }
}

/// One endpoint's attempts over a recent window and a longer one.
#[derive(Debug, Clone)]
pub struct HealthSummary {
    pub endpoint_id: EndpointId,
    pub recent: WindowStats,
    pub window: WindowStats,
}

/// An endpoint's latest attempt.
#[derive(Debug, Clone)]
pub struct LatestAttempt {
    pub endpoint_id: EndpointId,
    pub outcome: String,
    pub http_status: Option<i32>,
    pub error: Option<String>,
    pub started_at: DateTime<Utc>,
}

/// Attempts of one outcome in one time bucket.
#[derive(Debug, Clone)]
pub struct OutcomeBucket {
    pub endpoint_id: EndpointId,
    pub bucket: DateTime<Utc>,
    pub outcome: String,
    pub attempts: i64,
}

/// Per endpoint with attempts since `window_since`: stats since `recent_since`
/// (e.g. the last hour) and since `window_since` (e.g. the last day).
pub async fn summaries(
    client: &impl GenericClient,
    tenant: TenantId,
    recent_since: DateTime<Utc>,
    window_since: DateTime<Utc>,
) -> Result<Vec<HealthSummary>, DbError> {
    let rows = sql::query(client, SUMMARIES, &[&tenant.as_uuid(), &recent_since, &window_since]).await?;
    Ok(rows
        .iter()
        .map(|row| HealthSummary {
            endpoint_id: EndpointId::from_uuid(row.get("endpoint_id")),
            recent: WindowStats {
                attempts: row.get("recent_attempts"),
                delivered: row.get("recent_delivered"),
                p95_latency_ms: row.get("recent_p95"),
            },
            window: WindowStats {
                attempts: row.get("window_attempts"),
                delivered: row.get("window_delivered"),
                p95_latency_ms: row.get("window_p95"),
            },
        })
        .collect())
}

/// Each endpoint's latest attempt since `since`.
pub async fn latest_attempts(
    client: &impl GenericClient,
    tenant: TenantId,
    since: DateTime<Utc>,
) -> Result<Vec<LatestAttempt>, DbError> {
    let rows = sql::query(client, LATEST, &[&tenant.as_uuid(), &since]).await?;
    Ok(rows
        .iter()
        .map(|row| LatestAttempt {
            endpoint_id: EndpointId::from_uuid(row.get("endpoint_id")),
            outcome: row.get("outcome"),
            http_status: row.get("http_status"),
            error: row.get("error"),
            started_at: row.get("started_at"),
        })
        .collect())
}

/// Attempts since `since` by endpoint, outcome and `bucket_secs`-wide bucket
/// (buckets aligned on `since`; empty buckets are absent).
pub async fn outcome_buckets(
    client: &impl GenericClient,
    tenant: TenantId,
    since: DateTime<Utc>,
    bucket_secs: i64,
) -> Result<Vec<OutcomeBucket>, DbError> {
    let rows = sql::query(client, BUCKETS, &[&tenant.as_uuid(), &since, &bucket_secs]).await?;
    Ok(rows
        .iter()
        .map(|row| OutcomeBucket {
            endpoint_id: EndpointId::from_uuid(row.get("endpoint_id")),
            bucket: row.get("bucket"),
            outcome: row.get("outcome"),
            attempts: row.get("attempts"),
        })
        .collect())
}
