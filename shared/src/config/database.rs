//! Postgres (`DatabaseConfig`): read by every role that touches the database.
use super::{key, on_off, positive, required, ConfigError};

/// Postgres.
#[derive(Debug, Clone)]
pub struct DatabaseConfig {
    /// `RELAYOPS_DATABASE_URL`, e.g. `postgres://relayops:relayops@127.0.0.1:5432/relayops`,
    /// with `?sslmode=verify-full&sslrootcert=/path/ca.pem` for TLS (see `db::target`).
    pub url: String,
    /// `RELAYOPS_DB_POOL_SIZE` (default 16 for long-lived processes, 2 in a
    /// Lambda function): connections per process.
    pub pool_size: usize,
    /// `RELAYOPS_DB_STATEMENT_CACHE` (`on` by default; `off` behind a
    /// transaction-mode pooler such as pgbouncer or RDS Proxy): whether
    /// statements are prepared once per connection and cached by name, or sent
    /// unnamed each time.
    pub statement_cache: bool,
    /// `RELAYOPS_DATABASE_LISTEN_URL` (default: `RELAYOPS_DATABASE_URL`): a
    /// direct connection (not through a transaction-mode pooler) for the
    /// publisher's `LISTEN`.
    pub listen_url: Option<String>,
    /// `RELAYOPS_DATABASE_READ_URL` (default: none): a reader (an RDS or
    /// Aurora reader endpoint, a streaming standby) for list and search
    /// reads (`db::reads`); the pool has `pool_size` connections too.
    pub read_url: Option<String>,
}

impl DatabaseConfig {
    /// A pool of `pool_size` on `url`, statement cache on, LISTEN on the same URL.
    pub fn new(url: impl Into<String>, pool_size: usize) -> Self {
        Self { url: url.into(), pool_size, statement_cache: true, listen_url: None, read_url: None }
    }

    /// For long-lived processes (the local runner, the worker container).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_env_with_pool(16)
    }

    /// For a Lambda function: one request at a time per execution environment
    /// needs one connection (two for a wake-up NOTIFY or a pipelined batch
    /// beside it), so that reserved concurrency × 2 stays under the
    /// database's (or RDS Proxy's) connection limit.
    pub fn lambda_from_env() -> Result<Self, ConfigError> {
        Self::from_env_with_pool(2)
    }

    fn from_env_with_pool(default_pool: usize) -> Result<Self, ConfigError> {
        Ok(Self {
            url: required("DATABASE_URL")?,
            pool_size: positive("DB_POOL_SIZE", default_pool)?,
            statement_cache: on_off("DB_STATEMENT_CACHE", true)?,
            listen_url: std::env::var(key("DATABASE_LISTEN_URL")).ok().filter(|url| !url.trim().is_empty()),
            read_url: std::env::var(key("DATABASE_READ_URL")).ok().filter(|url| !url.trim().is_empty()),
        })
    }

    /// Where the publisher `LISTEN`s.
    pub fn listen_url(&self) -> &str {
        self.listen_url.as_deref().unwrap_or(&self.url)
    }
}
