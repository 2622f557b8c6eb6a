//! Running a statement, in one of two ways chosen per process:
//!
//! - **cached** (default): through the connection's prepared-statement cache —
//!   one round trip per statement instead of two (parse, then execute), which
//!   on the hot paths is most of the difference. Statements are cached per
//!   connection by their text, as named server-side prepared statements.
//! - **unnamed** (`RELAYOPS_DB_STATEMENT_CACHE=off`): every statement is sent
//!   as parse + bind + execute of the *unnamed* statement in one round trip,
//!   with its parameter types given by the client, so nothing outlives the
//!   statement on the server connection. This is what a transaction-mode
//!   pooler (pgbouncer, RDS Proxy) needs: consecutive statements may run on
//!   different server connections, where a named statement prepared on
//!   another one "does not exist". The server plans each statement anew.
//!
//! The parameter types of an unnamed statement come from the Rust values:
//! each value's `ToSql` accepts one Postgres type (or several with the same
//! encoding, where the first in [`WIRE_TYPES`] is used), so no server round
//! trip is needed to describe the statement.
use std::sync::atomic::{AtomicBool, Ordering};

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use crate::db::DbError;

/// A connection or a transaction the repositories can run statements on.
pub trait GenericClient: deadpool_postgres::GenericClient {
    /// The tokio-postgres handle underneath, for unnamed statements.
    #[doc(hidden)]
    fn unnamed(&self) -> Unnamed<'_>;
}

#[doc(hidden)]
pub enum Unnamed<'a> {
    Client(&'a tokio_postgres::Client),
    Transaction(&'a tokio_postgres::Transaction<'a>),
}

impl GenericClient for deadpool_postgres::Client {
    fn unnamed(&self) -> Unnamed<'_> {
        Unnamed::Client(self)
    }
}

impl GenericClient for deadpool_postgres::Transaction<'_> {
    fn unnamed(&self) -> Unnamed<'_> {
        Unnamed::Transaction(self)
    }
}

static UNNAMED_STATEMENTS: AtomicBool = AtomicBool::new(false);

/// Every later statement of this process is sent unnamed. One-way on purpose:
/// unnamed statements work on any connection, so a process with one pool
/// behind a pooler (and another direct) is correct on both.
pub fn use_unnamed_statements() {
    UNNAMED_STATEMENTS.store(true, Ordering::Relaxed);
}

fn unnamed_statements() -> bool {
    UNNAMED_STATEMENTS.load(Ordering::Relaxed)
}

/// The types a parameter may be sent as, most specific first. Each Rust type we
/// bind accepts exactly one of these, except strings (text first: it converts
/// to varchar and name implicitly) and JSON values (jsonb: the schema has no
/// `json` column).
const WIRE_TYPES: &[Type] = &[
    Type::UUID,
    Type::INT8,
    Type::INT4,
    Type::INT2,
    Type::FLOAT8,
    Type::FLOAT4,
    Type::BOOL,
    Type::TEXT,
    Type::JSONB,
    Type::TIMESTAMPTZ,
    Type::TIMESTAMP,
    Type::BYTEA,
    Type::UUID_ARRAY,
    Type::INT8_ARRAY,
    Type::INT4_ARRAY,
    Type::INT2_ARRAY,
    Type::TEXT_ARRAY,
    Type::JSONB_ARRAY,
    Type::TIMESTAMPTZ_ARRAY,
    Type::BOOL_ARRAY,
    Type::FLOAT8_ARRAY,
    Type::BYTEA_ARRAY,
];

fn wire_type(param: &(dyn ToSql + Sync), position: usize) -> Result<Type, DbError> {
    WIRE_TYPES
        .iter()
        .find(|ty| param.accepts_dyn(ty))
        .cloned()
        .ok_or(DbError::UnknownParameterType { position: position + 1 })
}

trait AcceptsDyn {
    fn accepts_dyn(&self, ty: &Type) -> bool;
}

impl AcceptsDyn for dyn ToSql + Sync + '_ {
    /// `ToSql::accepts` is not object safe; encoding into a scratch buffer
    /// with the type checked is the object-safe way to ask (the value is
    /// small: ids, numbers, short text).
    fn accepts_dyn(&self, ty: &Type) -> bool {
        let mut scratch = bytes::BytesMut::new();
        !matches!(self.to_sql_checked(ty, &mut scratch), Err(error) if error.is::<tokio_postgres::types::WrongType>())
    }
}

async fn run_unnamed(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, DbError> {
    let typed = params
        .iter()
        .enumerate()
        .map(|(position, param)| Ok((*param, wire_type(*param, position)?)))
        .collect::<Result<Vec<_>, DbError>>()?;
    Ok(match client.unnamed() {
        Unnamed::Client(client) => client.query_typed(sql, &typed).await?,
        Unnamed::Transaction(tx) => tx.query_typed(sql, &typed).await?,
    })
}

pub async fn query(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, DbError> {
    if unnamed_statements() {
        return run_unnamed(client, sql, params).await;
    }
    let statement = client.prepare_cached(sql).await?;
    Ok(client.query(&statement, params).await?)
}

pub async fn query_one(client: &impl GenericClient, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row, DbError> {
    if unnamed_statements() {
        let mut rows = run_unnamed(client, sql, params).await?;
        return match rows.len() {
            1 => Ok(rows.remove(0)),
            count => Err(DbError::RowCount { expected: "exactly one", count }),
        };
    }
    let statement = client.prepare_cached(sql).await?;
    Ok(client.query_one(&statement, params).await?)
}

pub async fn query_opt(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Option<Row>, DbError> {
    if unnamed_statements() {
        let mut rows = run_unnamed(client, sql, params).await?;
        return match rows.len() {
            0 => Ok(None),
            1 => Ok(Some(rows.remove(0))),
            count => Err(DbError::RowCount { expected: "at most one", count }),
        };
    }
    let statement = client.prepare_cached(sql).await?;
    Ok(client.query_opt(&statement, params).await?)
}

pub async fn execute(client: &impl GenericClient, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, DbError> {
    if unnamed_statements() {
        // Every statement run through `execute` is a write without RETURNING.
        let rows = run_unnamed_execute(client, sql, params).await?;
        return Ok(rows);
    }
    let statement = client.prepare_cached(sql).await?;
    Ok(client.execute(&statement, params).await?)
}

async fn run_unnamed_execute(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, DbError> {
    use futures_util::TryStreamExt;
    let typed = params
        .iter()
        .enumerate()
        .map(|(position, param)| Ok((*param, wire_type(*param, position)?)))
        .collect::<Result<Vec<_>, DbError>>()?;
    let stream = match client.unnamed() {
        Unnamed::Client(client) => client.query_typed_raw(sql, typed).await?,
        Unnamed::Transaction(tx) => tx.query_typed_raw(sql, typed).await?,
    };
    futures_util::pin_mut!(stream);
    while stream.try_next().await?.is_some() {}
    Ok(stream.rows_affected().unwrap_or(0))
}

/// The plan of a query (`EXPLAIN`, one line per row), as it would run with
/// these parameters.
pub async fn explain(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<String>, DbError> {
    let rows = query(client, &format!("EXPLAIN {sql}"), params).await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// Runs one statement in a transaction of its own whose commit does not wait
/// for the WAL flush (`SET LOCAL synchronous_commit = off`). Only for writes
/// whose loss in a database crash costs a repeat and nothing else — a claim's
/// lease, the delete of a published outbox row (a lost one means the message is
/// published again, which the worker's claim absorbs) — never for anything acknowledged to a
/// client or followed by an ack. Any later synchronous commit flushes it too,
/// since the WAL is written in order. It saves a disk flush in the latency of
/// every hop that uses it.
///
/// Like [`query_on_generic_plan`], it plans by [`BY_KEY_PLANS`], and the
/// whole transaction is one round trip.
pub async fn query_unflushed(
    client: &deadpool_postgres::Client,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, DbError> {
    in_own_transaction(client, Commit::Unflushed, sql, params).await
}

/// Runs one statement in a transaction of its own, committed synchronously,
/// under [`BY_KEY_PLANS`]: on its generic plan when it is prepared, and with
/// every row found by key. For the hot statements on partitioned tables
/// that find every row by key: their partitions are pruned at run time from
/// the parameters, and the planner's default — a custom plan at every run,
/// since the generic one looks costlier — spent more on planning than on
/// running them. With 95 partitions the worker's claim of one delivery took
/// ~2.5 ms to plan and ~0.6 ms to run (the BENCHMARKS.md of commit `1e9a367`,
/// "An event that arrives alone"); the attempt record of one delivery spent
/// 1.5 ms planning and 0.45 ms running at 200 events/s (the same file, "Where
/// Postgres's time went per delivery, and the before/after").
///
/// One round trip: `BEGIN; SET LOCAL …`, the statement and `COMMIT` are sent
/// together (each request goes out on its future's first poll, and
/// [`join3`](futures_util::future::join3) polls them in this order), where a
/// transaction object would wait for each in turn. If the statement fails,
/// the server ends the transaction and answers the `COMMIT` with a rollback;
/// its error is returned. (In the cached mode a statement not yet prepared on
/// this connection is prepared first.)
pub async fn query_on_generic_plan(
    client: &deadpool_postgres::Client,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, DbError> {
    in_own_transaction(client, Commit::Flushed, sql, params).await
}

/// The setting that makes a prepared statement run on its generic plan.
macro_rules! generic_plan {
    () => {
        "SET LOCAL plan_cache_mode = force_generic_plan; "
    };
}

/// Runs one statement inside the caller's transaction on its generic plan
/// (planned once per connection), and only it: the setting is set before it
/// and put back to the default after it, the three sent together (one round
/// trip). For a statement whose planning costs more than its run and whose
/// generic plan is safe for every parameter value.
pub async fn query_on_generic_plan_in_transaction(
    tx: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, DbError> {
    between(tx, |_| generic_plan!(), sql, params, "SET LOCAL plan_cache_mode TO DEFAULT").await
}

/// Runs `sql` between `before` (chosen by whether the statement is prepared)
/// and `after`, the three sent together: one round trip. The statement is
/// prepared first, so that it is sent between the two.
async fn between(
    client: &impl GenericClient,
    before: impl FnOnce(bool) -> &'static str,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    after: &'static str,
) -> Result<Vec<Row>, DbError> {
    let statement = if unnamed_statements() { None } else { Some(client.prepare_cached(sql).await?) };
    let run = async {
        match &statement {
            Some(statement) => Ok(client.query(statement, params).await?),
            None => run_unnamed(client, sql, params).await,
        }
    };
    let before = before(statement.is_some());
    let (began, rows, ended) =
        futures_util::future::join3(client.batch_execute(before), run, client.batch_execute(after)).await;
    began?;
    let rows = rows?;
    ended?;
    Ok(rows)
}

/// The settings of [`BY_KEY_PLANS`] that price out everything but index
/// lookups. Alone (without forcing the generic plan) for an unnamed
/// statement: it is planned at every run anyway, and there a custom plan
/// (pruned to the parameters' partitions) is the cheaper one to make.
macro_rules! by_key_settings {
    () => {
        "SET LOCAL enable_seqscan = off; SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off"
    };
}

/// How [`query_on_generic_plan`] and [`query_unflushed`] plan: a generic
/// plan (planned once per connection, pruned at run time), and one that finds
/// every row by key whatever the statistics say. A generic plan is made
/// without the parameters' values, so for a batch it guesses the size; with
/// the statistics of a partition that is filling up and was never analyzed
/// (every new partition starts so) it joined the locked rows back to
/// `deliveries` by hashing a scan of every partition — O(partition) per
/// claim (11,000 rows read to claim one delivery on a bench database). With
/// sequential scans, hash and merge joins priced out, only index lookups are
/// left; the statements that run so find all their rows by key (tests:
/// `batching::…_plan_finds_deliveries_by_key…`, through
/// [`explain_on_generic_plan`]).
pub const BY_KEY_PLANS: &str = concat!(generic_plan!(), by_key_settings!());

/// Whether a transaction's commit waits for the WAL flush.
#[derive(Clone, Copy)]
enum Commit {
    Flushed,
    Unflushed,
}

/// What opens a transaction of [`in_own_transaction`]: a fixed string for each
/// of the four cases, so the hot statements allocate nothing for it.
fn begin_statement(commit: Commit, prepared: bool) -> &'static str {
    match (commit, prepared) {
        (Commit::Flushed, true) => {
            concat!("BEGIN; ", generic_plan!(), by_key_settings!())
        }
        (Commit::Flushed, false) => concat!("BEGIN; ", by_key_settings!()),
        (Commit::Unflushed, true) => {
            concat!("BEGIN; SET LOCAL synchronous_commit = off; ", generic_plan!(), by_key_settings!())
        }
        (Commit::Unflushed, false) => concat!("BEGIN; SET LOCAL synchronous_commit = off; ", by_key_settings!()),
    }
}

async fn in_own_transaction(
    client: &deadpool_postgres::Client,
    commit: Commit,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, DbError> {
    between(client, |prepared| begin_statement(commit, prepared), sql, params, "COMMIT").await
}

/// `EXPLAIN (ANALYZE, FORMAT JSON)` of `sql` as [`query_on_generic_plan`] and
/// [`query_unflushed`] run it — its generic plan under [`BY_KEY_PLANS`] —
/// with `params` (of the Postgres `types`, in order), in a transaction that is
/// rolled back. Postgres 15 has no `EXPLAIN (GENERIC_PLAN)`, and an `EXPLAIN`
/// with bound parameters shows a custom plan, which is not the one that runs;
/// so the statement is `PREPARE`d and explained through `EXECUTE`, each
/// parameter handed over as a transaction-local setting (bound, never
/// written into the SQL). For tests and benchmarks.
pub async fn explain_on_generic_plan(
    client: &mut deadpool_postgres::Object,
    sql: &str,
    types: &[&str],
    params: &[&(dyn ToSql + Sync)],
) -> Result<serde_json::Value, DbError> {
    let tx = client.transaction().await?;
    tx.batch_execute(BY_KEY_PLANS).await?;
    let mut arguments = Vec::with_capacity(types.len());
    for (position, (ty, param)) in types.iter().zip(params).enumerate() {
        let name = format!("relayops.explain_{position}");
        tx.query(&format!("SELECT set_config('{name}', $1::{ty}::text, true)"), &[*param]).await?;
        arguments.push(format!("current_setting('{name}')::{ty}"));
    }
    tx.batch_execute(&format!("PREPARE relayops_explained({}) AS {sql}", types.join(", "))).await?;
    let explain = format!("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE relayops_explained({})", arguments.join(", "));
    let rows = tx.query(&explain, &[]).await?;
    tx.batch_execute("DEALLOCATE relayops_explained").await?;
    tx.rollback().await?;
    Ok(rows.first().map(|row| row.get(0)).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_rust_type_gets_the_wire_type_it_encodes_as() {
        let uuid = uuid::Uuid::nil();
        let text = "x";
        let owned = String::from("x");
        let json = serde_json::json!({"a": 1});
        let now = chrono::Utc::now();
        let ids = vec![uuid];
        let none: Option<i64> = None;
        let cases: [(&(dyn ToSql + Sync), Type); 10] = [
            (&uuid, Type::UUID),
            (&1i64, Type::INT8),
            (&1i32, Type::INT4),
            (&1.5f64, Type::FLOAT8),
            (&text, Type::TEXT),
            (&owned, Type::TEXT),
            (&json, Type::JSONB),
            (&now, Type::TIMESTAMPTZ),
            (&ids, Type::UUID_ARRAY),
            (&none, Type::INT8),
        ];
        for (position, (value, expected)) in cases.into_iter().enumerate() {
            assert_eq!(wire_type(value, position).unwrap(), expected, "case {position}");
        }
    }

    #[test]
    fn a_prepared_statements_transaction_opens_with_the_by_key_plans_and_only_the_unflushed_skips_the_flush() {
        assert_eq!(begin_statement(Commit::Flushed, true), format!("BEGIN; {BY_KEY_PLANS}"));
        assert_eq!(
            begin_statement(Commit::Unflushed, true),
            format!("BEGIN; SET LOCAL synchronous_commit = off; {BY_KEY_PLANS}")
        );
        for prepared in [true, false] {
            assert!(!begin_statement(Commit::Flushed, prepared).contains("synchronous_commit"));
        }
        // Unnamed statements are planned at every run: the by-key settings
        // without forcing a generic plan.
        for commit in [Commit::Flushed, Commit::Unflushed] {
            let begin = begin_statement(commit, false);
            assert!(begin.ends_with(by_key_settings!()) && !begin.contains("plan_cache_mode"), "{begin}");
        }
    }
}
