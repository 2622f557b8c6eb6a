//! Flow control, shared by every API and worker replica through Redis, and
//! degrading to per-process limits when Redis cannot be asked:
//!
//! - [`FlowControl::take_tokens`]: token buckets (tenant ingest limits, endpoint
//!   delivery limits), one atomic Lua script whose clock is Redis' `TIME`, so
//!   replicas with skewed clocks still share one bucket;
//! - [`FlowControl::acquire_slot`] / [`FlowControl::release_slot`]: at most
//!   `max_in_flight` requests to one endpoint across all workers (a Redis
//!   lease, which expires by itself if its worker dies) and, always, at most
//!   this process' share of them ([`local`]);
//! - [`FlowControl::give_back_token`] / [`FlowControl::refill`]: buckets used
//!   as counters of failures (login throttling, `api::login_throttle`): a
//!   token is taken up front, given back or the bucket refilled when the
//!   attempt turns out not to count.
//!
//! Availability comes first (SPEC §3.2): Redis being down, paused or slow
//! never stops ingest or delivery. Every Redis call is bounded by
//! `RELAYOPS_REDIS_TIMEOUT_MS`; a failure opens a circuit ([`breaker`]) and,
//! until a probe succeeds, decisions are taken by this process' own buckets
//! and caps at once, without waiting on Redis. The `relayops_flow_degraded`
//! gauge and readiness (`"redis": "degraded"`, still ready) say so. Keys
//! expire, so idle tenants and endpoints cost nothing.
mod breaker;
mod bucket;
mod connection;
mod lease;
mod local;

use std::sync::Arc;
use std::time::Duration;

pub use bucket::{Limit, TokenDecision};
pub use local::LocalSlot;

use crate::config::FlowConfig;
use crate::observe::names;
use breaker::{Breaker, Permit};
use connection::RedisConnection;
use local::LocalLimits;

#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    #[error("redis is unavailable")]
    Redis(#[from] redis::RedisError),
    #[error("redis did not answer in time")]
    Timeout,
    #[error("redis failed recently; not asked until its retry time")]
    CircuitOpen,
    #[error("Redis TLS: cannot read the CA file {path} (`ssl_ca_certs=` in RELAYOPS_REDIS_URL)")]
    CaFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// A handle on the limiter state; cheap to clone (clones share the circuit
/// and the per-process limits).
#[derive(Clone)]
pub struct FlowControl {
    connection: RedisConnection,
    prefix: String,
    timeout: Duration,
    breaker: Arc<Breaker>,
    local: Arc<LocalLimits>,
}

/// A request's place among an endpoint's `max_in_flight`; give it back with
/// [`FlowControl::release_slot`] (dropping it frees the local part only, and
/// the Redis lease then expires by itself).
#[derive(Debug)]
pub struct Slot {
    _local: LocalSlot,
    /// The Redis lease set and lease id, when Redis granted one.
    shared: Option<(String, String)>,
}

impl FlowControl {
    /// Does not connect: the first call does, so a process can start (under
    /// per-process limits) while Redis is down. `rediss://` URLs connect over
    /// TLS (rustls), verifying the chain and the host name against the system
    /// store (`SSL_CERT_FILE` replaces it), or against the CA file the URL
    /// names with `ssl_ca_certs=` (redis-py's name). A cluster in cluster mode
    /// (`RELAYOPS_REDIS_CLUSTER`) is reached through the nodes the URL lists.
    pub fn new(config: &FlowConfig) -> Result<Self, FlowError> {
        crate::tls::install_crypto_provider();
        let connection = RedisConnection::open(config)?;
        metrics::gauge!(names::FLOW_DEGRADED).set(0.0);
        Ok(Self {
            connection,
            prefix: config.key_prefix.clone(),
            timeout: config.redis_timeout,
            breaker: Arc::new(Breaker::new(config.redis_retry)),
            local: Arc::new(LocalLimits::new(config.local_divisor)),
        })
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

    /// Runs a Redis call on `key` if its circuit allows it, and feeds its
    /// outcome back.
    async fn ask<T>(
        &self,
        key: &str,
        call: impl std::future::Future<Output = Result<T, FlowError>>,
    ) -> Result<T, FlowError> {
        let circuit = self.connection.circuit(key);
        if self.breaker.permit(circuit) == Permit::Skip {
            return Err(FlowError::CircuitOpen);
        }
        let result = call.await;
        match &result {
            Ok(_) => self.breaker.succeeded(circuit),
            Err(error) => self.breaker.failed(circuit, error),
        }
        result
    }

    /// Whether limits are per process right now (Redis failed and has not
    /// answered a probe since).
    pub fn is_degraded(&self) -> bool {
        self.breaker.is_degraded()
    }

    /// Whether Redis answers (for readiness); asks only when the circuit allows.
    pub async fn ping(&self) -> Result<(), FlowError> {
        let mut connection = self.connection.clone();
        // A cluster answers PING from any node; the circuit is slot 0's.
        self.ask("", async {
            let _: String = self.bounded(redis::cmd("PING").query_async(&mut connection)).await?;
            Ok(())
        })
        .await
    }

    /// Takes one token from the bucket `kind:id` (e.g. `tenant:<id>`).
    pub async fn take_token(&self, kind: &'static str, id: &str, limit: Limit) -> TokenDecision {
        self.take_tokens(kind, id, limit, 1).await
    }

    /// Takes `cost` tokens at once (never more than the burst): from the shared
    /// bucket, or from this process' own while Redis cannot be asked.
    pub async fn take_tokens(&self, kind: &'static str, id: &str, limit: Limit, cost: u32) -> TokenDecision {
        let key = self.key(kind, id);
        match self.ask(&key, self.shared_take_tokens(key.clone(), limit, cost)).await {
            Ok(decision) => decision,
            Err(error) => {
                tracing::debug!(kind, error = %crate::telemetry::error_chain(&error), "token decided locally");
                metrics::counter!(names::FLOW_LOCAL_DECISIONS, "limit" => kind).increment(1);
                self.local.take_tokens(&key, limit, cost)
            }
        }
    }

    /// Puts one token back into the bucket `kind:id` (a reservation that did
    /// not count): the shared bucket, or this process' own while Redis cannot
    /// be asked.
    pub async fn give_back_token(&self, kind: &'static str, id: &str, limit: Limit) {
        let key = self.key(kind, id);
        if let Err(error) = self.ask(&key, self.shared_give_back(key.clone(), limit)).await {
            tracing::debug!(kind, error = %crate::telemetry::error_chain(&error), "token given back locally");
            self.local.give_back(&key, limit);
        }
    }

    /// Refills the bucket `kind:id` (forgets it), shared and in this process.
    pub async fn refill(&self, kind: &'static str, id: &str) {
        let key = self.key(kind, id);
        self.local.forget(&key);
        if let Err(error) = self.ask(&key, self.shared_forget(key.clone())).await {
            tracing::debug!(kind, error = %crate::telemetry::error_chain(&error), "bucket refilled locally only");
        }
    }

    /// One of `kind:id`'s `max_in_flight` slots, held for at most `ttl` in
    /// Redis; `None` when this process already holds its share, or Redis says
    /// every slot is taken. While Redis cannot be asked only the process'
    /// share applies.
    pub async fn acquire_slot(
        &self,
        kind: &'static str,
        id: &str,
        lease_id: &str,
        max_in_flight: u32,
        ttl: Duration,
    ) -> Option<Slot> {
        let key = self.key(kind, id);
        let local = self.local.acquire(&key, max_in_flight)?;
        match self.ask(&key, self.shared_acquire_lease(key.clone(), lease_id, max_in_flight, ttl)).await {
            Ok(true) => Some(Slot { _local: local, shared: Some((key, lease_id.to_owned())) }),
            Ok(false) => None,
            Err(error) => {
                tracing::debug!(kind, error = %crate::telemetry::error_chain(&error), "slot decided locally");
                metrics::counter!(names::FLOW_LOCAL_DECISIONS, "limit" => kind).increment(1);
                Some(Slot { _local: local, shared: None })
            }
        }
    }

    /// Gives the slot back; if Redis cannot be told, its lease expires.
    pub async fn release_slot(&self, slot: Slot) {
        if let Some((key, lease_id)) = &slot.shared {
            if let Err(error) = self.ask(key, self.shared_release_lease(key, lease_id)).await {
                tracing::debug!(error = %crate::telemetry::error_chain(&error), "lease release failed; it will expire");
            }
        }
    }

    /// Whether `kind:id` has no free slot right now: its shared lease set is
    /// full, or (while Redis cannot be asked) this process holds its share.
    pub async fn is_full(&self, kind: &'static str, id: &str, max_in_flight: u32) -> bool {
        let key = self.key(kind, id);
        if self.local.held(&key) >= self.local.share(max_in_flight) {
            return true;
        }
        match self.ask(&key, self.shared_live_leases(key.clone())).await {
            Ok(live) => live >= max_in_flight.max(1),
            Err(_) => false,
        }
    }
}
