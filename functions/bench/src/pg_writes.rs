//! What was written to Postgres per delivery: the bench's database's own
//! counters (rows inserted, updated and deleted in its tables,
//! `pg_stat_user_tables` — not the catalogs, which a partition created
//! meanwhile would swell —, and transactions committed, `pg_stat_database`)
//! read twice, the increase divided by the
//! deliveries that arrived in between. Postgres publishes a backend's
//! counts at most once a second, so a window of a few seconds or more reads
//! within a second's work of the truth. Counts everything on the database
//! in the window: the bench's own setup writes are before it.
use serde::Serialize;

use relayops_shared::db::Pool;

/// One read of the database's counters.
#[derive(Debug, Clone, Copy)]
pub struct PgCounters {
    rows_written: i64,
    commits: i64,
    at: std::time::Instant,
}

/// Reads the counters of the database `pool` connects to (fresh: the
/// snapshot a transaction may cache is cleared first).
pub async fn read(pool: &Pool) -> anyhow::Result<PgCounters> {
    let client = pool.get().await?;
    client.batch_execute("SELECT pg_stat_clear_snapshot()").await?;
    let row = client
        .query_one(
            "SELECT (SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables)::bigint,
                    (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())::bigint",
            &[],
        )
        .await?;
    Ok(PgCounters { rows_written: row.get(0), commits: row.get(1), at: std::time::Instant::now() })
}

#[derive(Debug, Serialize)]
pub struct PgWrites {
    /// Rows inserted, updated and deleted in the window.
    pub rows_written: i64,
    pub commits: i64,
    pub deliveries: usize,
    pub rows_per_delivery: f64,
    pub commits_per_delivery: f64,
    /// Between the two reads.
    pub window_secs: f64,
    /// Less the idle platform's rows over the window (`crate::idle`), per delivery.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows_per_delivery_less_idle: Option<f64>,
}

/// The increase from `before` to `after`, per delivery of the `deliveries` between.
pub fn between(before: PgCounters, after: PgCounters, deliveries: usize) -> PgWrites {
    let rows_written = (after.rows_written - before.rows_written).max(0);
    let commits = (after.commits - before.commits).max(0);
    let per = |n: i64| (n as f64 / deliveries.max(1) as f64 * 100.0).round() / 100.0;
    PgWrites {
        rows_written,
        commits,
        deliveries,
        rows_per_delivery: per(rows_written),
        commits_per_delivery: per(commits),
        window_secs: after.at.saturating_duration_since(before.at).as_secs_f64(),
        rows_per_delivery_less_idle: None,
    }
}
