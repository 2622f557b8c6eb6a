//! Postgres plumbing: the connection pool (TLS per the URL: `target`), the migration runner and the one
//! place where SQLSTATEs and constraint names become domain errors.
pub mod batcher;
mod error;
pub mod listen;
pub mod migrate;
pub mod partition_routes;
pub mod partitions;
pub mod reads;
pub mod target;

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, RecyclingMethod, Runtime};

pub use deadpool_postgres::{Object, Pool};
pub use error::DbError;
pub use reads::{ReadClient, Reads};
pub use target::{PgTarget, SslMode};

use crate::config::DatabaseConfig;

/// A pool of Postgres connections, TLS as the URL's `sslmode` says. Waiting
/// for a connection is bounded, so an exhausted pool becomes an error (503)
/// instead of a hung request. With the statement cache off, the whole process
/// sends unnamed statements (`repo::sql`).
pub fn connect_pool(config: &DatabaseConfig) -> Result<Pool, DbError> {
    if !config.statement_cache {
        crate::repo::sql::use_unnamed_statements();
    }
    pool_on(&config.url, config.pool_size, Duration::from_secs(5))
}

/// [`Reads`] over `writer` (from [`connect_pool`]) and, when
/// `RELAYOPS_DATABASE_READ_URL` is set, a reader's pool as [`connect_pool`]
/// makes one with shorter waits: a reader that does not answer sends reads
/// to the writer (`reads`) instead of holding them.
pub fn connect_reads(config: &DatabaseConfig, writer: &Pool) -> Result<Reads, DbError> {
    Ok(match config.read_url.as_deref() {
        Some(url) => Reads::with_reader(writer.clone(), pool_on(url, config.pool_size, Duration::from_secs(2))?),
        None => Reads::writer_only(writer.clone()),
    })
}

fn pool_on(url: &str, size: usize, wait: Duration) -> Result<Pool, DbError> {
    let target = PgTarget::parse(url).map_err(DbError::Target)?;
    let manager =
        Manager::from_config(target.config, target.tls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager)
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(wait))
        .create_timeout(Some(wait))
        .recycle_timeout(Some(wait))
        .build()
        .map_err(|error| DbError::Pool(error.to_string()))
}
