//! Postgres plumbing: the connection pool (TLS per the URL: `target`), the migration runner and the one
//! place where SQLSTATEs and constraint names become domain errors.
pub mod batcher;
mod error;
pub mod listen;
pub mod migrate;
pub mod partition_routes;
pub mod partitions;
pub mod target;

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, RecyclingMethod, Runtime};

pub use deadpool_postgres::{Object, Pool};
pub use error::DbError;
pub use target::{PgTarget, SslMode};

use crate::config::DatabaseConfig;

/// A pool of Postgres connections, TLS as the URL's `sslmode` says. Waiting
/// for a connection is bounded, so an exhausted pool becomes an error (503)
/// instead of a hung request. With the statement cache off, the whole process
/// sends unnamed statements (`repo::sql`).
pub fn connect_pool(config: &DatabaseConfig) -> Result<Pool, DbError> {
    let target = PgTarget::parse(&config.url).map_err(DbError::Target)?;
    if !config.statement_cache {
        crate::repo::sql::use_unnamed_statements();
    }
    let manager =
        Manager::from_config(target.config, target.tls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager)
        .max_size(config.pool_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(5)))
        .create_timeout(Some(Duration::from_secs(5)))
        .recycle_timeout(Some(Duration::from_secs(5)))
        .build()
        .map_err(|error| DbError::Pool(error.to_string()))
}
