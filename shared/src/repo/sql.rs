//! Running a statement through the connection's prepared-statement cache: one
//! round trip per statement instead of two (parse, then execute), which on the
//! hot paths is most of the difference. Statements are cached per connection
//! by their text.
use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::db::DbError;

pub async fn query(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, DbError> {
    let statement = client.prepare_cached(sql).await?;
    Ok(client.query(&statement, params).await?)
}

pub async fn query_one(client: &impl GenericClient, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row, DbError> {
    let statement = client.prepare_cached(sql).await?;
    Ok(client.query_one(&statement, params).await?)
}

pub async fn query_opt(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Option<Row>, DbError> {
    let statement = client.prepare_cached(sql).await?;
    Ok(client.query_opt(&statement, params).await?)
}

pub async fn execute(client: &impl GenericClient, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, DbError> {
    let statement = client.prepare_cached(sql).await?;
    Ok(client.execute(&statement, params).await?)
}

/// Runs one statement in a transaction of its own whose commit does not wait
/// for the WAL flush (`SET LOCAL synchronous_commit = off`). Only for writes
/// whose loss in a database crash costs a repeat and nothing else — a claim's
/// lease, a "published" mark (a lost one means the message is published again,
/// which the worker's claim absorbs) — never for anything acknowledged to a
/// client or followed by an ack. Any later synchronous commit flushes it too,
/// since the WAL is written in order. It saves a disk flush in the latency of
/// every hop that uses it.
pub async fn query_unflushed(
    client: &mut deadpool_postgres::Object,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, DbError> {
    let tx = client.transaction().await?;
    tx.batch_execute("SET LOCAL synchronous_commit = off").await?;
    let statement = tx.prepare_cached(sql).await?;
    let rows = tx.query(&statement, params).await?;
    tx.commit().await?;
    Ok(rows)
}
