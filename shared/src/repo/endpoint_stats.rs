//! Endpoint health for the console, aggregated from one tenant's attempt
//! history in ONE statement (one scan of the window's attempts, joined once to
//! their deliveries for the endpoint): per endpoint, the success rate and p95
//! latency over a recent window and a longer one, the latest attempt, and
//! attempts by outcome in time buckets (for a chart).
//!
//! Read-only; filtered by tenant (and optionally one endpoint). The window
//! bounds how many attempts are read (a day's, for the console). Measured at
//! 10k attempts (the BENCHMARKS.md of commit `1e9a367`, "The console at 10k
//! deliveries"): three separate statements took 106 ms a page against this
//! one's 48 ms, each repeating the scan and the join.
use chrono::{DateTime, Utc};

use crate::db::partitions::id_lower_bound;
use crate::db::DbError;
use crate::ids::{EndpointId, TenantId};
use crate::repo::sql;
use crate::repo::GenericClient;

/// $1 tenant, $2 recent since, $3 window since, $4 chart start, $5 bucket
/// seconds, $6 one endpoint or NULL for all, $7 the smallest attempt id the
/// window can hold (its partition bound).
const HEALTH: &str = "WITH a AS MATERIALIZED (
        SELECT d.endpoint_id, a.id, a.outcome, a.latency_ms, a.started_at
        FROM relayops.delivery_attempts a
        JOIN relayops.deliveries d ON d.tenant_id = a.tenant_id AND d.id = a.delivery_id
        WHERE a.tenant_id = $1 AND a.started_at >= $3 AND a.id >= $7 AND ($6::uuid IS NULL OR d.endpoint_id = $6)),
     summary AS (
        SELECT endpoint_id,
            count(*) FILTER (WHERE started_at >= $2) AS recent_attempts,
            count(*) FILTER (WHERE started_at >= $2 AND outcome = 'delivered') AS recent_delivered,
            percentile_disc(0.95) WITHIN GROUP (ORDER BY latency_ms) FILTER (WHERE started_at >= $2) AS recent_p95,
            count(*) AS window_attempts,
            count(*) FILTER (WHERE outcome = 'delivered') AS window_delivered,
            percentile_disc(0.95) WITHIN GROUP (ORDER BY latency_ms) AS window_p95,
            max(started_at) AS latest_at
        FROM a GROUP BY endpoint_id),
     latest AS (
        SELECT DISTINCT ON (s.endpoint_id) s.endpoint_id, a.id
        FROM summary s JOIN a ON a.endpoint_id = s.endpoint_id AND a.started_at = s.latest_at
        ORDER BY s.endpoint_id, a.id DESC),
     buckets AS (
        SELECT endpoint_id, array_agg(bucket) AS bucket_starts, array_agg(outcome) AS bucket_outcomes,
               array_agg(attempts) AS bucket_attempts
        FROM (SELECT endpoint_id, date_bin($5::bigint * interval '1 second', started_at, $4) AS bucket, outcome,
                     count(*) AS attempts
              FROM a WHERE started_at >= $4 GROUP BY 1, 2, 3) per_bucket
        GROUP BY endpoint_id)
     SELECT s.*, la.outcome AS latest_outcome, la.http_status AS latest_http_status, la.error AS latest_error,
            b.bucket_starts, b.bucket_outcomes, b.bucket_attempts
     FROM summary s
     JOIN latest l USING (endpoint_id)
     JOIN relayops.delivery_attempts la ON la.tenant_id = $1 AND la.id = l.id AND la.id >= $7
     LEFT JOIN buckets b USING (endpoint_id)";

/// Which attempts to aggregate, and how to bucket them.
#[derive(Debug, Clone, Copy)]
pub struct HealthWindows {
    /// The recent window (e.g. the last hour).
    pub recent_since: DateTime<Utc>,
    /// The longer window (e.g. the last day); nothing older is read.
    pub window_since: DateTime<Utc>,
    /// The chart's first bucket (at or after `window_since`).
    pub chart_start: DateTime<Utc>,
    pub bucket_secs: i64,
}

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

/// An endpoint's latest attempt.
#[derive(Debug, Clone)]
pub struct LatestAttempt {
    pub outcome: String,
    pub http_status: Option<i32>,
    pub error: Option<String>,
    pub started_at: DateTime<Utc>,
}

/// Attempts of one outcome in one time bucket.
#[derive(Debug, Clone)]
pub struct OutcomeBucket {
    pub bucket: DateTime<Utc>,
    pub outcome: String,
    pub attempts: i64,
}

/// One endpoint's health (only endpoints with attempts in the window have one).
#[derive(Debug, Clone)]
pub struct EndpointHealth {
    pub endpoint_id: EndpointId,
    pub recent: WindowStats,
    pub window: WindowStats,
    pub latest: LatestAttempt,
    pub buckets: Vec<OutcomeBucket>,
}

/// The health of the tenant's endpoints with attempts in the windows (or of
/// `endpoint` alone).
pub async fn load(
    client: &impl GenericClient,
    tenant: TenantId,
    windows: HealthWindows,
    endpoint: Option<EndpointId>,
) -> Result<Vec<EndpointHealth>, DbError> {
    let endpoint = endpoint.map(|id| id.as_uuid());
    // Attempts are partitioned by their id (UUIDv7, made when the attempt
    // starts): this bound lets the planner read only the window's partitions.
    let first_id = id_lower_bound(windows.window_since);
    let rows = sql::query(
        client,
        HEALTH,
        &[
            &tenant.as_uuid(),
            &windows.recent_since,
            &windows.window_since,
            &windows.chart_start,
            &windows.bucket_secs,
            &endpoint,
            &first_id,
        ],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|row| {
            let starts: Vec<DateTime<Utc>> = row.get::<_, Option<_>>("bucket_starts").unwrap_or_default();
            let outcomes: Vec<String> = row.get::<_, Option<_>>("bucket_outcomes").unwrap_or_default();
            let attempts: Vec<i64> = row.get::<_, Option<_>>("bucket_attempts").unwrap_or_default();
            EndpointHealth {
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
                latest: LatestAttempt {
                    outcome: row.get("latest_outcome"),
                    http_status: row.get("latest_http_status"),
                    error: row.get("latest_error"),
                    started_at: row.get("latest_at"),
                },
                buckets: starts
                    .into_iter()
                    .zip(outcomes)
                    .zip(attempts)
                    .map(|((bucket, outcome), attempts)| OutcomeBucket { bucket, outcome, attempts })
                    .collect(),
            }
        })
        .collect())
}
