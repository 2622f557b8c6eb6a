//! Flow control in Redis, shared by every API and worker replica:
//!
//! - [`FlowControl::take_token`]: token buckets (tenant ingest limits, endpoint
//!   delivery limits), one atomic Lua script whose clock is Redis' `TIME`, so
//!   replicas with skewed clocks still share one bucket;
//! - [`FlowControl::acquire_lease`] / [`FlowControl::release_lease`]: at most
//!   `max_in_flight` requests to one endpoint across all workers; a lease
//!   expires by itself if its worker dies.
//!
//! Every call is bounded by a short timeout. When Redis cannot be consulted the
//! caller fails closed: ingest answers 503, the worker delays the delivery
//! rather than send without limits. Keys expire, so idle tenants and endpoints
//! cost nothing.
mod bucket;
mod lease;

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

pub use bucket::{Limit, TokenDecision};

use crate::config::FlowConfig;

#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    #[error("redis is unavailable")]
    Redis(#[from] redis::RedisError),
    #[error("redis did not answer in time")]
    Timeout,
}

/// A handle on the shared limiter state; cheap to clone.
#[derive(Clone)]
pub struct FlowControl {
    connection: ConnectionManager,
    prefix: String,
    timeout: Duration,
}

impl FlowControl {
    /// Does not connect: the first call does, so a process can start (and fail
    /// closed) while Redis is down.
    pub fn new(config: &FlowConfig) -> Result<Self, FlowError> {
        let client = redis::Client::open(config.redis_url.as_str())?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.redis_timeout))
            .set_response_timeout(Some(config.redis_timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(2));
        let connection = client.get_connection_manager_lazy(manager_config)?;
        Ok(Self { connection, prefix: config.key_prefix.clone(), timeout: config.redis_timeout * 2 })
    }

    fn key(&self, kind: &str, id: &str) -> String {
        format!("{}:{kind}:{id}", self.prefix)
    }

    async fn bounded<T>(&self, call: impl std::future::Future<Output = redis::RedisResult<T>>) -> Result<T, FlowError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => Ok(result?),
            Err(_) => Err(FlowError::Timeout),
        }
    }
}

impl FlowControl {
    /// Whether Redis answers (for readiness).
    pub async fn ping(&self) -> Result<(), FlowError> {
        let mut connection = self.connection.clone();
        let _: String = self.bounded(redis::cmd("PING").query_async(&mut connection)).await?;
        Ok(())
    }
}
