//! The migration runner. Migrations are the SQL files in `migrations/`, compiled
//! into the binary, applied in order, each in its own transaction, under an
//! advisory lock so concurrent starters (several replicas, parallel tests) apply
//! each exactly once. An applied migration whose text changed is an error.
//!
//! A migration whose first line is `-- relayops: no transaction` runs one
//! statement at a time, each committing on its own (for `CREATE INDEX
//! CONCURRENTLY` and `VALIDATE CONSTRAINT` on tables in use); such a file must
//! be safe to run again after a failure part-way.
use sha2::{Digest, Sha256};
use tokio_postgres::Client;

use super::DbError;

/// (version, SQL), in the order they apply.
const MIGRATIONS: &[(&str, &str)] = &[
    ("0001_initial_schema", include_str!("../../../migrations/0001_initial_schema.sql")),
    ("0002_outbox_notify", include_str!("../../../migrations/0002_outbox_notify.sql")),
    (
        "0003_outbox_notify_from_the_application",
        include_str!("../../../migrations/0003_outbox_notify_from_the_application.sql"),
    ),
    ("0004_list_indexes", include_str!("../../../migrations/0004_list_indexes.sql")),
    (
        "0005_fewer_indexes_on_the_write_path",
        include_str!("../../../migrations/0005_fewer_indexes_on_the_write_path.sql"),
    ),
    ("0006_pending_sweep_index", include_str!("../../../migrations/0006_pending_sweep_index.sql")),
    ("0007_history_partitioning_prepare", include_str!("../../../migrations/0007_history_partitioning_prepare.sql")),
    ("0008_history_partitioning_swap", include_str!("../../../migrations/0008_history_partitioning_swap.sql")),
    (
        "0009_retention_and_maintenance_lease",
        include_str!("../../../migrations/0009_retention_and_maintenance_lease.sql"),
    ),
    (
        "0010_endpoint_health_and_tenant_admin",
        include_str!("../../../migrations/0010_endpoint_health_and_tenant_admin.sql"),
    ),
    ("0011_outbox_delete_on_publish", include_str!("../../../migrations/0011_outbox_delete_on_publish.sql")),
    ("0012_ingest_key_takeover_check", include_str!("../../../migrations/0012_ingest_key_takeover_check.sql")),
    (
        "0013_key_takeover_sees_committed_events",
        include_str!("../../../migrations/0013_key_takeover_sees_committed_events.sql"),
    ),
    ("0014_ordering_lanes", include_str!("../../../migrations/0014_ordering_lanes.sql")),
    ("0015_dead_letter_lane_policy", include_str!("../../../migrations/0015_dead_letter_lane_policy.sql")),
    ("0016_outbox_event_rows", include_str!("../../../migrations/0016_outbox_event_rows.sql")),
    ("0017_subscriptions_by_pattern", include_str!("../../../migrations/0017_subscriptions_by_pattern.sql")),
    ("0018_patterns_matching_in_plpgsql", include_str!("../../../migrations/0018_patterns_matching_in_plpgsql.sql")),
    (
        "0019_deliveries_written_after_ingest",
        include_str!("../../../migrations/0019_deliveries_written_after_ingest.sql"),
    ),
    (
        "0020_subscription_patterns_looked_up_by_key",
        include_str!("../../../migrations/0020_subscription_patterns_looked_up_by_key.sql"),
    ),
    ("0021_endpoint_circuits", include_str!("../../../migrations/0021_endpoint_circuits.sql")),
    (
        "0022_parked_deliveries_keep_their_policy",
        include_str!("../../../migrations/0022_parked_deliveries_keep_their_policy.sql"),
    ),
    ("0023_ready_queue_sightings", include_str!("../../../migrations/0023_ready_queue_sightings.sql")),
    ("0024_deliveries_wait_for_a_slot", include_str!("../../../migrations/0024_deliveries_wait_for_a_slot.sql")),
    ("0025_login_sessions", include_str!("../../../migrations/0025_login_sessions.sql")),
    ("0026_tenant_weights", include_str!("../../../migrations/0026_tenant_weights.sql")),
    ("0027_outbox_tenant_turns", include_str!("../../../migrations/0027_outbox_tenant_turns.sql")),
    ("0028_endpoint_destinations", include_str!("../../../migrations/0028_endpoint_destinations.sql")),
    ("0029_endpoint_aws_roles", include_str!("../../../migrations/0029_endpoint_aws_roles.sql")),
];

const NO_TRANSACTION: &str = "-- relayops: no transaction";

/// Arbitrary, fixed: the advisory lock key that serialises migrators.
const LOCK_KEY: i64 = 0x7265_6c61_796f_7073;

const CREATE_LEDGER: &str = "CREATE SCHEMA IF NOT EXISTS relayops;
    CREATE TABLE IF NOT EXISTS relayops.schema_migrations (
        version text PRIMARY KEY,
        checksum bytea NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now())";

/// The latest migration version compiled into this binary.
pub fn latest_version() -> &'static str {
    MIGRATIONS.last().map(|(version, _)| *version).unwrap_or("none")
}

/// Applies every pending migration; returns the versions it applied.
pub async fn run(client: &mut Client) -> Result<Vec<String>, DbError> {
    run_through(client, latest_version()).await
}

/// Applies the pending migrations up to and including `last` (upgrade tests
/// build a database as an older release left it).
pub async fn run_through(client: &mut Client, last: &str) -> Result<Vec<String>, DbError> {
    client.execute("SELECT pg_advisory_lock($1)", &[&LOCK_KEY]).await?;
    let result = apply_pending(client, last).await;
    // Release even on failure; a dropped connection releases it too.
    client.execute("SELECT pg_advisory_unlock($1)", &[&LOCK_KEY]).await?;
    result
}

async fn apply_pending(client: &mut Client, last: &str) -> Result<Vec<String>, DbError> {
    client.batch_execute(CREATE_LEDGER).await?;
    let mut applied = Vec::new();
    let through = MIGRATIONS.iter().position(|(version, _)| *version == last).map_or(MIGRATIONS.len(), |at| at + 1);
    for (version, sql) in &MIGRATIONS[..through] {
        let checksum = Sha256::digest(sql.as_bytes()).to_vec();
        let existing =
            client.query_opt("SELECT checksum FROM relayops.schema_migrations WHERE version = $1", &[version]).await?;
        if let Some(row) = existing {
            let stored: Vec<u8> = row.get(0);
            if stored != checksum {
                return Err(DbError::Migration {
                    version: (*version).to_owned(),
                    message: "already applied with different contents".into(),
                });
            }
            continue;
        }
        let failed = |error: tokio_postgres::Error| DbError::Migration {
            version: (*version).to_owned(),
            message: error.as_db_error().map(|db| db.message().to_owned()).unwrap_or_else(|| error.to_string()),
        };
        let tx = if sql.starts_with(NO_TRANSACTION) {
            for statement in statements(sql) {
                client.batch_execute(&statement).await.map_err(failed)?;
            }
            client.transaction().await?
        } else {
            let tx = client.transaction().await?;
            tx.batch_execute(sql).await.map_err(failed)?;
            tx
        };
        tx.execute("INSERT INTO relayops.schema_migrations (version, checksum) VALUES ($1, $2)", &[version, &checksum])
            .await?;
        tx.commit().await?;
        applied.push((*version).to_owned());
    }
    Ok(applied)
}

/// The statements of a script, split at each `;` that ends a line outside a
/// dollar-quoted body (`$$ … $$`), without comment-only pieces.
fn statements(sql: &str) -> Vec<String> {
    let mut statements = Vec::new();
    let mut current = String::new();
    let mut in_body = false;
    for line in sql.lines() {
        if line.trim_start().starts_with("--") && current.trim().is_empty() {
            continue;
        }
        in_body ^= line.matches("$$").count() % 2 == 1;
        current.push_str(line);
        current.push('\n');
        if !in_body && line.trim_end().ends_with(';') {
            statements.push(std::mem::take(&mut current));
        }
    }
    if !current.trim().is_empty() {
        statements.push(current);
    }
    statements
}

/// True when the database has every migration this binary knows.
pub async fn is_current(client: &Client) -> Result<bool, DbError> {
    let row = client
        .query_opt("SELECT 1 FROM pg_tables WHERE schemaname = 'relayops' AND tablename = 'schema_migrations'", &[])
        .await?;
    if row.is_none() {
        return Ok(false);
    }
    let row = client
        .query_one("SELECT count(*) FROM relayops.schema_migrations WHERE version = $1", &[&latest_version()])
        .await?;
    Ok(row.get::<_, i64>(0) == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_splits_at_statement_ends_but_not_inside_bodies() {
        let script = "-- comment\nCREATE TABLE a (x int);\n\nDO $$\nBEGIN\n  PERFORM 1;\nEND $$;\nSELECT\n  1;\n";
        let parts = statements(script);
        assert_eq!(parts.len(), 3, "{parts:?}");
        assert!(parts[1].contains("PERFORM 1;") && parts[1].trim_end().ends_with("END $$;"));
        assert_eq!(parts[2].trim(), "SELECT\n  1;");
    }

    /// A migration applied anywhere must never change: the runner refuses a
    /// database where a version was applied with other contents ("already
    /// applied with different contents"), so an edited migration stops every
    /// deployment (and the demo, and the bench) that had run it. Change the
    /// schema with a new migration; add its line to `migrations/released.sha256`
    /// (`sha256sum 0*.sql` in `migrations/`).
    #[test]
    fn every_migration_keeps_the_contents_it_was_released_with() {
        let released: std::collections::HashMap<&str, &str> = include_str!("../../../migrations/released.sha256")
            .lines()
            .filter_map(|line| line.split_once("  "))
            .map(|(sum, file)| (file.trim_end_matches(".sql"), sum))
            .collect();
        for (version, sql) in MIGRATIONS {
            let sum: String = Sha256::digest(sql.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect();
            match released.get(version) {
                Some(expected) => assert_eq!(
                    &sum, expected,
                    "migration {version} changed after its release: put the change in a new migration"
                ),
                None => panic!("migration {version} is not in migrations/released.sha256: add `{sum}  {version}.sql`"),
            }
        }
        assert_eq!(released.len(), MIGRATIONS.len(), "released.sha256 names a migration that is not compiled in");
    }
}
