//! Postgres plumbing: the connection pool, the migration runner and the one
//! place where SQLSTATEs and constraint names become domain errors.
pub mod batcher;
mod error;
pub mod listen;
pub mod migrate;

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, RecyclingMethod, Runtime};

pub use deadpool_postgres::Pool;
pub use error::DbError;

use crate::config::DatabaseConfig;

/// A pool of Postgres connections. Waiting for a connection is bounded, so an
/// exhausted pool becomes an error (503) instead of a hung request.
pub fn connect_pool(config: &DatabaseConfig) -> Result<Pool, DbError> {
    let pg_config = tokio_postgres::Config::from_str(&config.url).map_err(DbError::Config)?;
    let manager = Manager::from_config(
        pg_config,
        tokio_postgres::NoTls,
        ManagerConfig { recycling_method: RecyclingMethod::Fast },
    );
    Pool::builder(manager)
        .max_size(config.pool_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(5)))
        .create_timeout(Some(Duration::from_secs(5)))
        .recycle_timeout(Some(Duration::from_secs(5)))
        .build()
        .map_err(|error| DbError::Pool(error.to_string()))
}
