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
