//! The partition manager for history (`events`, `deliveries`,
//! `delivery_attempts`; migration 0008 says how each is partitioned): creates
//! the partitions of the next windows ahead of time and drops those whose
//! window ended longer ago than the retention, with `DETACH PARTITION …
//! CONCURRENTLY` then `DROP`, so no long `ACCESS EXCLUSIVE` lock is ever taken
//! on a parent and ingest does not wait.
//!
//! Ids are UUIDv7: the first 48 bits are milliseconds since the epoch, so a
//! window `[from, to)` of time is the uuid range `[floor(from), floor(to))`.
//! The three tables get the same windows. Invariants:
//! - a window's `deliveries` partition is dropped only when it holds no
//!   delivery that is not terminal (checked before the detach, and again on
//!   the detached table, which is attached back if a replay revived a row in
//!   between); its `events` partition goes with it, never before;
//! - attempts (partitioned by their own time, which is after their
//!   delivery's) are dropped only once every delivery partition that began
//!   before their window's end (plus the clock slack: a minute, or one window
//!   if shorter) is gone.
//!
//! One process at a time (a lease row in `maintenance_leases`, which works
//! through transaction-mode poolers; others skip the pass).
//! Each statement commits on its own: a pass interrupted part-way is finished
//! by the next (`DETACH … FINALIZE` for a detach left pending).
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use tokio_postgres::Client;
use uuid::Uuid;

use crate::config::HistoryConfig;
use crate::db::DbError;

pub const EVENTS: &str = "events";
pub const DELIVERIES: &str = "deliveries";
pub const ATTEMPTS: &str = "delivery_attempts";
/// Every partitioned history table, parents before children.
pub const TABLES: [&str; 3] = [EVENTS, DELIVERIES, ATTEMPTS];

/// How far app clocks may be from each other (ids are made by the process
/// that writes them): bounds derived from a time are widened by this much.
pub const CLOCK_SLACK: Duration = Duration::from_secs(60);

/// How long a pass may hold the manager's lease before another may start.
const LEASE: Duration = Duration::from_secs(300);

const TAKE_LEASE: &str = "INSERT INTO relayops.maintenance_leases AS l (name, holder, expires_at)
     VALUES ('partitions', $1, now() + $2::bigint * interval '1 millisecond')
     ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
     WHERE l.expires_at < now()
     RETURNING 1";

const RETURN_LEASE: &str =
    "UPDATE relayops.maintenance_leases SET expires_at = now() WHERE name = 'partitions' AND holder = $1";

/// Runs `pass` holding the manager's lease; `None` when another holds it.
async fn with_lease<T>(
    client: &Client,
    pass: impl std::future::Future<Output = Result<T, DbError>>,
) -> Result<Option<T>, DbError> {
    let holder = Uuid::new_v4().to_string();
    let lease_ms = LEASE.as_millis() as i64;
    if client.query_opt(TAKE_LEASE, &[&holder, &lease_ms]).await?.is_none() {
        return Ok(None);
    }
    let result = pass.await;
    client.execute(RETURN_LEASE, &[&holder]).await?;
    result.map(Some)
}

/// The smallest UUIDv7 of a millisecond (negative times clamp to zero).
pub fn uuid_floor_ms(millis: i64) -> Uuid {
    let millis = millis.clamp(0, (1 << 48) - 1) as u128;
    Uuid::from_u128(millis << 80)
}

/// The smallest UUIDv7 of a time.
pub fn uuid_floor(at: DateTime<Utc>) -> Uuid {
    uuid_floor_ms(at.timestamp_millis())
}

/// The clock slack as a chrono duration.
fn clock_slack() -> chrono::Duration {
    chrono::Duration::from_std(CLOCK_SLACK).unwrap_or_default()
}

/// The smallest id a row made at or after `at` can have, by any app's clock
/// (`at` less the clock slack).
pub fn id_lower_bound(at: DateTime<Utc>) -> Uuid {
    uuid_floor(at - clock_slack())
}

/// An id above every id made before `at`, by any app's clock (`at` plus the
/// clock slack).
pub fn id_upper_bound(at: DateTime<Utc>) -> Uuid {
    uuid_floor(at + clock_slack())
}

/// [`id_lower_bound`] of a millisecond since the epoch.
pub fn id_lower_bound_ms(millis: i64) -> Uuid {
    uuid_floor_ms(millis - CLOCK_SLACK.as_millis() as i64)
}

/// The millisecond a UUIDv7 was made in (its first 48 bits).
pub fn uuid_millis(id: Uuid) -> i64 {
    (id.as_u128() >> 80) as i64
}

/// The millisecond a delivery's event was made in, when the delivery id
/// carries it (UUIDv7, made by `relayops.delivery_id_for`); `None` for the
/// random ids of deliveries made before partitioning.
pub fn delivery_event_millis(delivery: Uuid) -> Option<i64> {
    (delivery.get_version_num() == 7).then(|| uuid_millis(delivery))
}

/// The event ids deliveries `ids` can belong to, as one range `(lowest,
/// highest)` inclusive: from the first event id of the smallest delivery id's
/// millisecond to the last of the largest's (what `relayops.event_id_floor`
/// and `event_id_ceiling` say per id), or every id when one is not a UUIDv7
/// (made before partitioning). Bound to a statement as parameters, it lets
/// Postgres prune the partitions a batch cannot touch before it runs.
pub fn event_id_range(ids: impl IntoIterator<Item = Uuid>) -> (Uuid, Uuid) {
    let mut range: Option<(i64, i64)> = None;
    for id in ids {
        let Some(millis) = delivery_event_millis(id) else {
            return (Uuid::nil(), Uuid::max());
        };
        range = Some(range.map_or((millis, millis), |(low, high)| (low.min(millis), high.max(millis))));
    }
    match range {
        Some((low, high)) => (uuid_floor_ms(low), Uuid::from_u128(uuid_floor_ms(high).as_u128() | ((1 << 80) - 1))),
        None => (Uuid::nil(), Uuid::nil()),
    }
}

/// Now, in milliseconds since the epoch (the unit of partition bounds).
pub fn now_millis() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// One partition of a history table: `[from, to)` in milliseconds; `from` is
/// `None` for a partition open below (`MINVALUE`, the legacy one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub name: String,
    pub from_ms: Option<i64>,
    pub to_ms: i64,
    /// A `DETACH … CONCURRENTLY` was interrupted.
    pub detach_pending: bool,
}

const LIST: &str = "SELECT c.relname::text AS name,
            substring(pg_get_expr(c.relpartbound, c.oid) FROM $$FROM \\('([0-9a-f-]+)'\\)$$) AS from_id,
            substring(pg_get_expr(c.relpartbound, c.oid) FROM $$TO \\('([0-9a-f-]+)'\\)$$) AS to_id,
            i.inhdetachpending AS detach_pending
     FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = ('relayops.' || $1::text)::regclass";

/// The partitions of one history table, oldest first.
pub async fn list(client: &Client, table: &str) -> Result<Vec<Partition>, DbError> {
    let rows = client.query(LIST, &[&table]).await?;
    let millis = |text: Option<String>| text.and_then(|text| Uuid::parse_str(&text).ok()).map(uuid_millis);
    let mut partitions: Vec<Partition> = rows
        .iter()
        .filter_map(|row| {
            Some(Partition {
                name: row.get("name"),
                from_ms: millis(row.get("from_id")),
                to_ms: millis(row.get("to_id"))?,
                detach_pending: row.get("detach_pending"),
            })
        })
        .collect();
    partitions.sort_by_key(|partition| partition.to_ms);
    Ok(partitions)
}

fn partition_name(table: &str, from_ms: i64) -> String {
    let from = DateTime::<Utc>::from_timestamp_millis(from_ms).unwrap_or_default();
    format!("{table}_p{}", from.format("%Y%m%d_%H%M%S"))
}

/// The windows to create so that `table` is covered from its last partition
/// (or the window before now, when it has none) to `ahead` windows past now.
fn windows_to_create(last_to_ms: Option<i64>, now_ms: i64, window_ms: i64, ahead: u32) -> Vec<(i64, i64)> {
    let aligned_now = now_ms.div_euclid(window_ms) * window_ms;
    let mut from = last_to_ms.unwrap_or(aligned_now - window_ms);
    let until = aligned_now + window_ms * (i64::from(ahead) + 1);
    let mut windows = Vec::new();
    while from < until {
        let to = (from.div_euclid(window_ms) + 1) * window_ms;
        windows.push((from, to));
        from = to;
    }
    windows
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PartitionReport {
    pub created: Vec<String>,
    pub dropped: Vec<String>,
    /// Partitions past the retention kept because they hold a delivery that
    /// is not terminal.
    pub kept: Vec<String>,
    /// Another process held the manager's lock; nothing was done.
    pub skipped: bool,
}

/// Creates partitions ahead and drops expired ones, under the manager's lease.
pub async fn maintain(client: &Client, config: &HistoryConfig) -> Result<PartitionReport, DbError> {
    let pass = async {
        let mut report = PartitionReport::default();
        ensure_unlocked(client, config, &mut report).await?;
        drop_expired_unlocked(client, config, &mut report).await?;
        ensure_delivery_id_keys(client).await?;
        Ok(report)
    };
    Ok(with_lease(client, pass).await?.unwrap_or(PartitionReport { skipped: true, ..PartitionReport::default() }))
}

/// Creates the partitions ahead only (start-up, right after migrating);
/// nothing when another process is maintaining them at that moment.
pub async fn ensure(client: &Client, config: &HistoryConfig) -> Result<Vec<String>, DbError> {
    let pass = async {
        let mut report = PartitionReport::default();
        ensure_unlocked(client, config, &mut report).await?;
        ensure_delivery_id_keys(client).await?;
        Ok(report.created)
    };
    Ok(with_lease(client, pass).await?.unwrap_or_default())
}

/// The `deliveries` partitions without a valid unique index on `id` alone
/// (partitions made before it existed, or a build that was interrupted).
const WITHOUT_ID_KEY: &str = "SELECT c.relname AS name
     FROM pg_inherits i
     JOIN pg_class c ON c.oid = i.inhrelid
     JOIN pg_class p ON p.oid = i.inhparent
     JOIN pg_namespace n ON n.oid = p.relnamespace
     WHERE n.nspname = 'relayops' AND p.relname = 'deliveries'
       AND NOT EXISTS (SELECT 1 FROM pg_index x
                       WHERE x.indrelid = c.oid AND x.indisunique AND x.indisvalid
                         AND x.indnkeyatts = 1 AND x.indkey[0] = (SELECT attnum FROM pg_attribute
                                                                   WHERE attrelid = c.oid AND attname = 'id'))
     ORDER BY c.relname";

/// The statement that gives `deliveries` partition `name` its unique index on
/// `id` (`mode`: `CONCURRENTLY` on a partition in use, empty on a new one).
fn create_id_key(name: &str, mode: &str) -> String {
    format!("CREATE UNIQUE INDEX {mode} IF NOT EXISTS {name}_id_unique ON relayops.{name} (id)")
}

/// Gives every `deliveries` partition a unique index on `id` alone. The
/// parent's keys must hold the partition key (`(id, event_id)`), which tells
/// the planner nothing about one id; with this index it knows `id = $1` is
/// one row whether or not the partition was analyzed yet, so the worker's
/// lookups by id stay index probes in a partition that is filling up (without
/// it, a fresh partition's claims were planned as scans: issue 14's
/// regression). New partitions get it empty, before they are attached; a
/// partition from before this index (an upgrade) gets it `CONCURRENTLY`, so
/// writes go on while it builds. A build that fails is logged and tried
/// again on the next pass.
async fn ensure_delivery_id_keys(client: &Client) -> Result<(), DbError> {
    for row in client.query(WITHOUT_ID_KEY, &[]).await? {
        let name: String = row.get("name");
        // One statement per call: CONCURRENTLY refuses the implicit
        // transaction of a multi-statement query.
        let build = async {
            client.batch_execute(&format!("DROP INDEX CONCURRENTLY IF EXISTS relayops.{name}_id_unique")).await?;
            client.batch_execute(&create_id_key(&name, "CONCURRENTLY")).await
        };
        if let Err(error) = build.await {
            tracing::warn!(partition = %name, error = %crate::telemetry::error_chain(&error), "delivery id index not built; tried again next pass");
        }
    }
    Ok(())
}

async fn ensure_unlocked(client: &Client, config: &HistoryConfig, report: &mut PartitionReport) -> Result<(), DbError> {
    let window_ms = config.partition.as_millis().max(1000) as i64;
    for table in TABLES {
        let last_to = list(client, table).await?.iter().map(|partition| partition.to_ms).max();
        for (from, to) in windows_to_create(last_to, now_millis(), window_ms, config.ahead) {
            let name = partition_name(table, from);
            // Created alone, then attached: ATTACH takes only SHARE UPDATE
            // EXCLUSIVE on the parent (CREATE … PARTITION OF would take
            // ACCESS EXCLUSIVE and queue behind every running query).
            client
                .batch_execute(&format!(
                    "CREATE TABLE IF NOT EXISTS relayops.{name}
                         (LIKE relayops.{table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
                ))
                .await?;
            if table == DELIVERIES {
                // Empty yet: built at once (see `ensure_delivery_id_keys`).
                client.batch_execute(&create_id_key(&name, "")).await?;
            }
            client
                .batch_execute(&format!(
                    "ALTER TABLE relayops.{table} ATTACH PARTITION relayops.{name} FOR VALUES FROM ('{}') TO ('{}')",
                    uuid_floor_ms(from),
                    uuid_floor_ms(to)
                ))
                .await?;
            report.created.push(name);
        }
    }
    Ok(())
}

const HOLDS_UNFINISHED: &str = "SELECT EXISTS (SELECT 1 FROM relayops.{name}
                                WHERE status IN ('pending', 'in_progress', 'scheduled', 'parked'))";

async fn holds_unfinished(client: &Client, name: &str) -> Result<bool, DbError> {
    Ok(client.query_one(&HOLDS_UNFINISHED.replace("{name}", name), &[]).await?.get(0))
}

async fn detach(client: &Client, table: &str, partition: &Partition) -> Result<(), DbError> {
    let mode = if partition.detach_pending { "FINALIZE" } else { "CONCURRENTLY" };
    client
        .batch_execute(&format!("ALTER TABLE relayops.{table} DETACH PARTITION relayops.{} {mode}", partition.name))
        .await?;
    Ok(())
}

async fn detach_and_drop(client: &Client, table: &str, partition: &Partition) -> Result<(), DbError> {
    detach(client, table, partition).await?;
    client.batch_execute(&format!("DROP TABLE relayops.{}", partition.name)).await?;
    Ok(())
}

fn bound_sql(ms: Option<i64>) -> String {
    ms.map(|ms| format!("'{}'", uuid_floor_ms(ms))).unwrap_or_else(|| "MINVALUE".into())
}

async fn drop_expired_unlocked(
    client: &Client,
    config: &HistoryConfig,
    report: &mut PartitionReport,
) -> Result<(), DbError> {
    let cutoff = now_millis() - config.retention.as_millis() as i64;
    for deliveries in list(client, DELIVERIES).await? {
        if deliveries.to_ms > cutoff {
            break;
        }
        if !deliveries.detach_pending && holds_unfinished(client, &deliveries.name).await? {
            report.kept.push(deliveries.name.clone());
            continue;
        }
        detach(client, DELIVERIES, &deliveries).await?;
        // A replay may have revived a row between the check and the detach.
        if holds_unfinished(client, &deliveries.name).await? {
            client
                .batch_execute(&format!(
                    "ALTER TABLE relayops.{DELIVERIES} ATTACH PARTITION relayops.{} FOR VALUES FROM ({}) TO ({})",
                    deliveries.name,
                    bound_sql(deliveries.from_ms),
                    bound_sql(Some(deliveries.to_ms))
                ))
                .await?;
            report.kept.push(deliveries.name.clone());
            continue;
        }
        client.batch_execute(&format!("DROP TABLE relayops.{}", deliveries.name)).await?;
        report.dropped.push(deliveries.name.clone());
    }
    // Events go with their window's deliveries (also when a pass stopped
    // between the two).
    let deliveries = list(client, DELIVERIES).await?;
    for partition in list(client, EVENTS).await? {
        let window_kept = deliveries.iter().any(|d| d.from_ms == partition.from_ms && d.to_ms == partition.to_ms);
        if partition.to_ms > cutoff {
            break;
        }
        if !window_kept {
            detach_and_drop(client, EVENTS, &partition).await?;
            report.dropped.push(partition.name.clone());
        }
    }
    // Attempts go once no remaining delivery can be older than their window.
    let oldest_delivery = deliveries.first().map(|partition| partition.from_ms);
    // The clock slack, but never more than a window (tests use seconds).
    let slack = CLOCK_SLACK.min(config.partition).as_millis() as i64;
    let delivery_floor = match oldest_delivery {
        Some(Some(from)) => from - slack,
        Some(None) => i64::MIN,
        None => i64::MAX,
    };
    for attempts in list(client, ATTEMPTS).await? {
        if attempts.to_ms > cutoff || attempts.to_ms > delivery_floor {
            break;
        }
        detach_and_drop(client, ATTEMPTS, &attempts).await?;
        report.dropped.push(attempts.name.clone());
    }
    Ok(())
}

/// Table and index bytes of every partition of the history tables.
pub async fn storage_bytes(client: &Client) -> Result<i64, DbError> {
    let row = client
        .query_one(
            "SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0)::bigint
             FROM pg_inherits i
             WHERE i.inhparent IN ('relayops.events'::regclass, 'relayops.deliveries'::regclass,
                                   'relayops.delivery_attempts'::regclass)",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuid_v7_bound_holds_its_millisecond() {
        let id = Uuid::now_v7();
        let ms = uuid_millis(id);
        assert!(uuid_floor_ms(ms) <= id && id < uuid_floor_ms(ms + 1));
        assert_eq!(delivery_event_millis(id), Some(ms));
        assert_eq!(delivery_event_millis(Uuid::new_v4()), None);
    }

    #[test]
    fn a_batch_range_holds_every_event_id_its_deliveries_can_belong_to() {
        let delivery_at = |millis: i64| Uuid::from_u128(((millis as u128) << 80) | (7 << 76) | 0xabc);
        let (low, high) = event_id_range([delivery_at(1_000), delivery_at(900), delivery_at(1_005)]);
        assert_eq!(low, uuid_floor_ms(900));
        assert_eq!(high, Uuid::from_u128(uuid_floor_ms(1_006).as_u128() - 1), "the last id of the last millisecond");
        // An id from before partitioning may be in any partition.
        assert_eq!(event_id_range([delivery_at(1_000), Uuid::new_v4()]), (Uuid::nil(), Uuid::max()));
    }

    #[test]
    fn windows_continue_from_the_last_partition_and_align() {
        let minute = 60_000;
        // None yet: from the window before now to `ahead` windows past it.
        let windows = windows_to_create(None, 10 * minute + 5, minute, 2);
        assert_eq!(windows.first(), Some(&(9 * minute, 10 * minute)));
        assert_eq!(windows.last(), Some(&(12 * minute, 13 * minute)));
        // A legacy partition ending mid-window: the first new one is short.
        let windows = windows_to_create(Some(10 * minute + 30_000), 10 * minute + 31_000, minute, 1);
        assert_eq!(windows, vec![(10 * minute + 30_000, 11 * minute), (11 * minute, 12 * minute)]);
        // Already far enough ahead: nothing.
        assert!(windows_to_create(Some(13 * minute), 10 * minute, minute, 2).is_empty());
    }
}
