//! The delivery worker: `WorkerConfig`, `CircuitConfig`, and `FlowConfig`
//! (Redis flow control, read by the worker and the API).
use std::time::Duration;

use super::aws_identity::AwsIdentity;
use super::{key, millis, on_off, outbound_allow_from_env, parsed, positive, required, ConfigError};

/// The delivery worker.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// `RELAYOPS_WORKER_CONCURRENCY` (default 256): RabbitMQ prefetch, and so the
    /// most deliveries one worker sends at once.
    pub concurrency: u16,
    /// `RELAYOPS_HTTP_TIMEOUT_MS` (default 15000): whole-request timeout.
    pub request_timeout: Duration,
    /// `RELAYOPS_HTTP_CONNECT_TIMEOUT_MS` (default 5000).
    pub connect_timeout: Duration,
    /// `RELAYOPS_RESPONSE_BODY_LIMIT` (default 4096): bytes of a receiver's
    /// response kept (and read) at most.
    pub response_body_limit: usize,
    /// `RELAYOPS_HTTP_POOL_PER_HOST` (default: the concurrency): idle
    /// connections kept per receiver host. Fewer than the requests a worker
    /// may have in flight to one host means a busy receiver gets a new
    /// connection (and TLS handshake) for every request past that many.
    pub pool_per_host: usize,
    /// `RELAYOPS_LEASE_MS` (default: request timeout + 30 s): how long a claim on
    /// a delivery holds before recovery may take it over.
    pub lease: Duration,
    /// `RELAYOPS_WORKER_ID` (default: host name + random suffix): the lease owner.
    pub worker_id: String,
    /// `RELAYOPS_OUTBOUND_ALLOW_CIDRS` (default empty): special destinations the
    /// worker may nevertheless send to: CIDRs or addresses (any port, e.g.
    /// `127.0.0.0/8`), `address:port` (that port only, for URLs naming the
    /// address) or `host:port` (that name and port only). Empty in production.
    pub outbound_allow: crate::net_policy::AllowList,
    /// `RELAYOPS_OUTBOUND_CA_FILE` and `SSL_CERT_FILE` (default: neither):
    /// PEM files whose certificates receivers' HTTPS certificates may chain to,
    /// besides the built-in public roots (a private CA, a staging receiver).
    pub outbound_ca_files: Vec<std::path::PathBuf>,
    /// `RELAYOPS_WORKER_BATCH_SIZE` (default 128): the most claims, or attempt
    /// records, that share one statement and commit.
    pub batch_size: usize,
    /// `RELAYOPS_WORKER_BATCH_LANES` (default 2): statements of each kind running
    /// at once; batches grow while all lanes are busy.
    pub batch_lanes: usize,
    /// `RELAYOPS_ENDPOINT_DISABLE_AFTER_SECS` (default 432000, 5 days): an
    /// endpoint whose every attempt has failed for this long is disabled
    /// automatically (and `endpoint.disabled` goes to the tenant's
    /// operational endpoints).
    pub endpoint_disable_after: Duration,
    /// Endpoint circuits: when a failing endpoint's deliveries park.
    pub circuit: CircuitConfig,
    /// `RELAYOPS_AWS_DESTINATION_ENDPOINT_URL` (default: none): for tests and
    /// local runs only, where AWS destinations' calls go (moto, LocalStack)
    /// instead of the queue's region's service endpoint.
    pub aws_destination_endpoint: Option<String>,
    /// The worker's own AWS identity for AWS destinations, from the standard
    /// variables (see [`AwsIdentity`]; default: none, and AWS destinations'
    /// attempts then fail, retryable).
    pub aws_identity: Option<AwsIdentity>,
}

/// Endpoint circuits (`repo::circuits`, the worker's `circuit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitConfig {
    /// `RELAYOPS_CIRCUIT_FAILURES` (default 20; 0 turns circuits off): failed
    /// attempts in a row (5xx, timeout, no connection) one worker sees at an
    /// endpoint before it opens the endpoint's circuit.
    pub failures: u32,
    /// `RELAYOPS_CIRCUIT_COOLDOWN_MS` (default 5000): how long a circuit stays
    /// open before its first probe; each failed probe doubles it.
    pub cooldown: Duration,
    /// `RELAYOPS_CIRCUIT_MAX_COOLDOWN_MS` (default 60000): the longest
    /// cooldown, so a dead endpoint is probed at least this often.
    pub max_cooldown: Duration,
}

impl Default for CircuitConfig {
    fn default() -> Self {
        Self { failures: 20, cooldown: Duration::from_secs(5), max_cooldown: Duration::from_secs(60) }
    }
}

impl CircuitConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let defaults = Self::default();
        let cooldown = millis("CIRCUIT_COOLDOWN_MS", defaults.cooldown.as_millis() as u64)?;
        let max_cooldown = millis("CIRCUIT_MAX_COOLDOWN_MS", defaults.max_cooldown.as_millis() as u64)?;
        if max_cooldown < cooldown {
            return Err(ConfigError {
                key: key("CIRCUIT_MAX_COOLDOWN_MS"),
                message: "must be at least RELAYOPS_CIRCUIT_COOLDOWN_MS".into(),
            });
        }
        Ok(Self { failures: parsed("CIRCUIT_FAILURES", defaults.failures)?, cooldown, max_cooldown })
    }
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            concurrency: 256,
            request_timeout: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(5),
            response_body_limit: 4096,
            pool_per_host: 256,
            lease: Duration::from_secs(45),
            worker_id: default_worker_id(),
            outbound_allow: crate::net_policy::AllowList::default(),
            outbound_ca_files: Vec::new(),
            batch_size: 128,
            batch_lanes: 2,
            endpoint_disable_after: DEFAULT_ENDPOINT_DISABLE_AFTER,
            circuit: CircuitConfig::default(),
            aws_destination_endpoint: None,
            aws_identity: None,
        }
    }
}

/// Svix's choice too: five days of nothing but failures.
const DEFAULT_ENDPOINT_DISABLE_AFTER: Duration = Duration::from_secs(5 * 24 * 3600);

fn default_worker_id() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "worker".to_owned());
    format!("{host}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

impl WorkerConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let request_timeout = millis("HTTP_TIMEOUT_MS", 15_000)?;
        let lease_default = request_timeout + Duration::from_secs(30);
        let lease = millis("LEASE_MS", lease_default.as_millis() as u64)?;
        if lease <= request_timeout {
            return Err(ConfigError {
                key: key("LEASE_MS"),
                message: "must be longer than RELAYOPS_HTTP_TIMEOUT_MS".into(),
            });
        }
        let concurrency: u16 = positive("WORKER_CONCURRENCY", 256)?;
        Ok(Self {
            concurrency,
            request_timeout,
            connect_timeout: millis("HTTP_CONNECT_TIMEOUT_MS", 5_000)?,
            response_body_limit: positive("RESPONSE_BODY_LIMIT", 4096)?,
            pool_per_host: positive("HTTP_POOL_PER_HOST", usize::from(concurrency))?,
            lease,
            worker_id: parsed("WORKER_ID", default_worker_id())?,
            outbound_allow: outbound_allow_from_env()?,
            outbound_ca_files: [key("OUTBOUND_CA_FILE"), "SSL_CERT_FILE".to_owned()]
                .iter()
                .filter_map(|name| std::env::var(name).ok().filter(|path| !path.trim().is_empty()))
                .map(std::path::PathBuf::from)
                .collect(),
            batch_size: positive("WORKER_BATCH_SIZE", 128)?,
            batch_lanes: positive("WORKER_BATCH_LANES", 2)?,
            endpoint_disable_after: Duration::from_secs(positive(
                "ENDPOINT_DISABLE_AFTER_SECS",
                DEFAULT_ENDPOINT_DISABLE_AFTER.as_secs(),
            )?),
            circuit: CircuitConfig::from_env()?,
            aws_destination_endpoint: std::env::var(key("AWS_DESTINATION_ENDPOINT_URL"))
                .ok()
                .filter(|url| !url.trim().is_empty()),
            aws_identity: AwsIdentity::from_env()?,
        })
    }
}

/// Flow control in Redis (see `flow`).
#[derive(Debug, Clone)]
pub struct FlowConfig {
    /// `RELAYOPS_REDIS_URL`, e.g. `redis://127.0.0.1:6379`; for a cluster in
    /// cluster mode, its configuration endpoint or several nodes separated by
    /// commas (see [`redis_urls`](Self::redis_urls)).
    pub redis_url: String,
    /// `RELAYOPS_REDIS_CLUSTER` (default: on when `RELAYOPS_REDIS_URL` lists
    /// several nodes): Redis runs in cluster mode (ElastiCache cluster mode).
    pub redis_cluster: bool,
    /// `RELAYOPS_REDIS_PREFIX` (default `relayops`): prefix of every key.
    pub key_prefix: String,
    /// `RELAYOPS_REDIS_TIMEOUT_MS` (default 250): the longest one Redis call
    /// may take; past it the decision is taken locally and Redis is left
    /// alone for `redis_retry`.
    pub redis_timeout: Duration,
    /// `RELAYOPS_REDIS_RETRY_MS` (default 1000): after Redis failed or was
    /// slow, how long limits stay per process before one call asks it again.
    pub redis_retry: Duration,
    /// `RELAYOPS_FLOW_LOCAL_DIVISOR` (default 1): each process' share of a
    /// shared limit is the limit divided by this (rounded up, at least 1).
    /// It caps each worker's requests to an endpoint always, and rates while
    /// Redis cannot be asked. 1: every process enforces the full limit, so
    /// with Redis down the total is at most limit × processes; set it to the
    /// number of replicas to keep the total near the limit instead.
    pub local_divisor: u32,
    /// `RELAYOPS_TENANT_RATE_PER_SEC` (default 1000): ingest limit for tenants
    /// without their own.
    pub tenant_rate_per_sec: f64,
    /// `RELAYOPS_TENANT_BURST` (default 2000).
    pub tenant_burst: u32,
    /// `RELAYOPS_ENDPOINT_MAX_IN_FLIGHT` (default 10): concurrent requests to one
    /// endpoint across all workers, for endpoints without their own value.
    pub endpoint_max_in_flight: u32,
}

impl FlowConfig {
    /// The node URLs `RELAYOPS_REDIS_URL` lists (one unless a cluster's).
    pub fn redis_urls(&self) -> Vec<&str> {
        self.redis_url.split(',').map(str::trim).collect()
    }

    pub fn from_env() -> Result<Self, ConfigError> {
        let redis_url = required("REDIS_URL")?;
        let several_nodes = redis_url.contains(',');
        let redis_cluster = on_off("REDIS_CLUSTER", several_nodes)?;
        if several_nodes && !redis_cluster {
            return Err(ConfigError {
                key: key("REDIS_URL"),
                message: "lists several nodes, which only a cluster in cluster mode has \
                          (RELAYOPS_REDIS_CLUSTER is off)"
                    .into(),
            });
        }
        if redis_url.split(',').any(|url| url.trim().is_empty()) {
            return Err(ConfigError { key: key("REDIS_URL"), message: "lists an empty address".into() });
        }
        Ok(Self {
            redis_url,
            redis_cluster,
            key_prefix: parsed("REDIS_PREFIX", "relayops".to_owned())?,
            redis_timeout: millis("REDIS_TIMEOUT_MS", 250)?,
            redis_retry: millis("REDIS_RETRY_MS", 1_000)?,
            local_divisor: positive("FLOW_LOCAL_DIVISOR", 1)?,
            tenant_rate_per_sec: positive("TENANT_RATE_PER_SEC", 1000.0)?,
            tenant_burst: positive("TENANT_BURST", 2000)?,
            endpoint_max_in_flight: positive("ENDPOINT_MAX_IN_FLIGHT", 10)?,
        })
    }
}
