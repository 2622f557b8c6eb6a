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
    #[error("Redis TLS: cannot read the CA file {path} (`ssl_ca_certs=` in RELAYOPS_REDIS_URL)")]
    CaFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
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
    /// `rediss://` URLs connect over TLS (rustls), verifying the chain and the
    /// host name against the system store (`SSL_CERT_FILE` replaces it), or
    /// against the CA file the URL names with `ssl_ca_certs=` (redis-py's name).
    pub fn new(config: &FlowConfig) -> Result<Self, FlowError> {
        crate::tls::install_crypto_provider();
        let client = match ca_file(&config.redis_url) {
            None => redis::Client::open(config.redis_url.as_str())?,
            Some(path) => {
                let root_cert = std::fs::read(&path).map_err(|source| FlowError::CaFile { path, source })?;
                let certificates = redis::TlsCertificates { client_tls: None, root_cert: Some(root_cert) };
                redis::Client::build_with_tls(config.redis_url.as_str(), certificates)?
            }
        };
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

/// The CA file a `rediss://` URL names with `ssl_ca_certs=`.
fn ca_file(url: &str) -> Option<String> {
    let url = url::Url::parse(url).ok()?;
    url.query_pairs().find(|(key, _)| key == "ssl_ca_certs").map(|(_, value)| value.into_owned())
}

impl FlowControl {
    /// Whether Redis answers (for readiness).
    pub async fn ping(&self) -> Result<(), FlowError> {
        let mut connection = self.connection.clone();
        let _: String = self.bounded(redis::cmd("PING").query_async(&mut connection)).await?;
        Ok(())
    }
}
