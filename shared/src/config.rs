//! Typed configuration from `RELAYOPS_*` environment variables, validated at
//! start-up. Every key, its default and its meaning is listed in
//! `docs/CONFIGURATION.md`; keep the two in step. Secrets are never logged.
use std::str::FromStr;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
#[error("configuration {key}: {message}")]
pub struct ConfigError {
    key: String,
    message: String,
}

fn key(name: &str) -> String {
    format!("RELAYOPS_{name}")
}

/// A required variable.
fn required(name: &str) -> Result<String, ConfigError> {
    std::env::var(key(name)).map_err(|_| ConfigError { key: key(name), message: "is required".into() })
}

/// An optional variable parsed as `T`, or `default` when unset.
fn parsed<T: FromStr>(name: &str, default: T) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    match std::env::var(key(name)) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|error| ConfigError { key: key(name), message: format!("`{text}` is invalid: {error}") }),
        Err(_) => Ok(default),
    }
}

fn positive<T: FromStr + PartialOrd + Default>(name: &str, default: T) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    let value = parsed(name, default)?;
    if value <= T::default() {
        return Err(ConfigError { key: key(name), message: "must be greater than zero".into() });
    }
    Ok(value)
}

/// [`positive`] when `name` is set, `None` when it is not.
fn optional_positive<T: FromStr + PartialOrd + Default>(name: &str) -> Result<Option<T>, ConfigError>
where
    T::Err: std::fmt::Display,
{
    match std::env::var(key(name)) {
        Ok(_) => positive(name, T::default()).map(Some),
        Err(_) => Ok(None),
    }
}

fn millis(name: &str, default_ms: u64) -> Result<Duration, ConfigError> {
    positive(name, default_ms).map(Duration::from_millis)
}

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
}

impl DatabaseConfig {
    /// A pool of `pool_size` on `url`, statement cache on, LISTEN on the same URL.
    pub fn new(url: impl Into<String>, pool_size: usize) -> Self {
        Self { url: url.into(), pool_size, statement_cache: true, listen_url: None }
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
        })
    }

    /// Where the publisher `LISTEN`s.
    pub fn listen_url(&self) -> &str {
        self.listen_url.as_deref().unwrap_or(&self.url)
    }
}

/// `on`/`off` (also `true`/`false`, `1`/`0`).
fn on_off(name: &str, default: bool) -> Result<bool, ConfigError> {
    match std::env::var(key(name)).map(|text| text.trim().to_ascii_lowercase()) {
        Err(_) => Ok(default),
        Ok(text) => match text.as_str() {
            "on" | "true" | "1" => Ok(true),
            "off" | "false" | "0" => Ok(false),
            _ => Err(ConfigError { key: key(name), message: format!("`{text}` is invalid: use on or off") }),
        },
    }
}

/// RabbitMQ.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// `RELAYOPS_AMQP_URL`, e.g. `amqp://guest:guest@127.0.0.1:5672/%2f`.
    pub url: String,
    /// `RELAYOPS_QUEUE_NAMESPACE` (default `relayops`): prefix of every exchange
    /// and queue name, so several installations (or tests) share one broker.
    pub namespace: String,
    /// `RELAYOPS_QUEUE_EXPIRES_MS` (default unset): deletes queues unused for this
    /// long. Only for throwaway namespaces such as tests.
    pub queue_expires_ms: Option<u32>,
    /// `RELAYOPS_RETRY_DELAYS_MS` (default `250,1000,5000,30000,120000,300000,
    /// 1800000,3600000,7200000,18000000,36000000`): the fixed delays of the retry
    /// queues, ascending. Changing them declares new queues; old ones drain.
    pub retry_delays_ms: Vec<u64>,
    /// `RELAYOPS_READY_SHARDS` (default 8, at most 64): ready queues. With 1,
    /// every message goes to `<ns>.ready`. With more, first attempts go to
    /// `<ns>.ready.1` … `<ns>.ready.<n-1>`, each tenant to the less loaded
    /// of its two (shuffle sharding), and `<ns>.ready` carries what comes back
    /// (retries, postponements); workers consume them all, each with its own
    /// prefetch. See ARCHITECTURE.md, "Fair delivery".
    pub ready_shards: u16,
}

impl BrokerConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let expires: u32 = parsed("QUEUE_EXPIRES_MS", 0)?;
        Ok(Self {
            url: required("AMQP_URL")?,
            namespace: parsed("QUEUE_NAMESPACE", "relayops".to_owned())?,
            queue_expires_ms: (expires > 0).then_some(expires),
            retry_delays_ms: retry_delays()?,
            ready_shards: ready_shards()?,
        })
    }
}

fn ready_shards() -> Result<u16, ConfigError> {
    let shards: u16 = positive("READY_SHARDS", crate::broker::DEFAULT_READY_SHARDS)?;
    if shards > crate::broker::MAX_READY_SHARDS {
        let message = format!("must be at most {}", crate::broker::MAX_READY_SHARDS);
        return Err(ConfigError { key: key("READY_SHARDS"), message });
    }
    Ok(shards)
}

fn retry_delays() -> Result<Vec<u64>, ConfigError> {
    let Ok(text) = std::env::var(key("RETRY_DELAYS_MS")) else {
        return Ok(crate::broker::RETRY_DELAYS_MS.to_vec());
    };
    let error = |message: &str| ConfigError { key: key("RETRY_DELAYS_MS"), message: message.to_owned() };
    let delays: Vec<u64> = text
        .split(',')
        .map(|part| part.trim().parse::<u64>())
        .collect::<Result<_, _>>()
        .map_err(|_| error("must be a comma-separated list of milliseconds"))?;
    if delays.is_empty() || delays.contains(&0) || !delays.windows(2).all(|pair| pair[0] < pair[1]) {
        return Err(error("must be positive and strictly ascending"));
    }
    Ok(delays)
}

/// The outbox publisher.
#[derive(Debug, Clone)]
pub struct PublisherConfig {
    /// `RELAYOPS_PUBLISHER_BATCH_SIZE` (default 200): rows claimed per batch
    /// (a batch sends at most ten times as many messages: rows of events with
    /// a large fan-out past that go back for the next batch).
    pub batch_size: i64,
    /// `RELAYOPS_PUBLISHER_CLAIM_TTL_MS` (default 30000): how long a claim holds
    /// before another publisher may take the rows over.
    pub claim_ttl: Duration,
    /// `RELAYOPS_PUBLISHER_IDLE_MS` (default 500): the longest a long-lived
    /// publisher sleeps when nothing woke it.
    pub idle_interval: Duration,
    /// `RELAYOPS_PUBLISHER_CONFIRM_TIMEOUT_MS` (default 10000): a batch whose
    /// confirms do not arrive in time is left claimed and reclaimed later.
    pub confirm_timeout: Duration,
    /// `RELAYOPS_RECOVERY_GRACE_MS` (default 60000): how long after its due time
    /// a scheduled retry may go without being picked up before the recovery pass
    /// re-enqueues it.
    pub recovery_grace: Duration,
    /// Partitions ahead, retention: run by the publisher's recovery pass.
    pub history: HistoryConfig,
}

impl Default for PublisherConfig {
    fn default() -> Self {
        Self {
            batch_size: 200,
            claim_ttl: Duration::from_secs(30),
            idle_interval: Duration::from_millis(500),
            confirm_timeout: Duration::from_secs(10),
            recovery_grace: Duration::from_secs(60),
            history: HistoryConfig::default(),
        }
    }
}

impl PublisherConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let default = Self::default();
        Ok(Self {
            batch_size: positive("PUBLISHER_BATCH_SIZE", default.batch_size)?,
            claim_ttl: millis("PUBLISHER_CLAIM_TTL_MS", 30_000)?,
            idle_interval: millis("PUBLISHER_IDLE_MS", 500)?,
            confirm_timeout: millis("PUBLISHER_CONFIRM_TIMEOUT_MS", 10_000)?,
            recovery_grace: millis("RECOVERY_GRACE_MS", 60_000)?,
            history: HistoryConfig::from_env()?,
        })
    }
}

/// History (events, deliveries, attempts): time partitions and retention
/// (`db::partitions`, `history`).
#[derive(Debug, Clone)]
pub struct HistoryConfig {
    /// `RELAYOPS_PARTITION_SECONDS` (default 86400, a day): the time window of
    /// one partition. Tests use a minute or less.
    pub partition: Duration,
    /// `RELAYOPS_PARTITIONS_AHEAD` (default 3): partitions kept created ahead
    /// of now, so ingest never waits for one.
    pub ahead: u32,
    /// `RELAYOPS_RETENTION_DAYS` (default 30), or `RELAYOPS_RETENTION_SECONDS`
    /// when set (tests): partitions whose window ended longer ago are dropped
    /// (never while they hold a delivery that is not terminal).
    pub retention: Duration,
    /// `RELAYOPS_HISTORY_MAINTENANCE_MS` (default 60000): how often the
    /// publisher creates, drops and sweeps.
    pub maintenance_interval: Duration,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self {
            partition: Duration::from_secs(86_400),
            ahead: 3,
            retention: Duration::from_secs(30 * 86_400),
            maintenance_interval: Duration::from_secs(60),
        }
    }
}

impl HistoryConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let days: u64 = positive("RETENTION_DAYS", 30)?;
        let retention = Duration::from_secs(optional_positive("RETENTION_SECONDS")?.unwrap_or(days * 86_400));
        Ok(Self {
            partition: Duration::from_secs(positive("PARTITION_SECONDS", 86_400)?),
            ahead: positive("PARTITIONS_AHEAD", 3)?,
            retention,
            maintenance_interval: millis("HISTORY_MAINTENANCE_MS", 60_000)?,
        })
    }
}

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
        })
    }
}

/// `RELAYOPS_RUNTIME_THREADS`: worker threads of the `relayops` process's
/// async runtime (default: one per CPU the process may use, Tokio's own
/// default). On a small host shared with Postgres and RabbitMQ (`relayops
/// all` on two cores) one thread spends less CPU per event: two threads wake
/// each other for every hop of a lone event (commit `c4d70b8`).
pub fn runtime_threads_from_env() -> Result<usize, ConfigError> {
    let cpus = std::thread::available_parallelism().map(usize::from).unwrap_or(1);
    positive("RUNTIME_THREADS", cpus)
}

/// `RELAYOPS_OUTBOUND_ALLOW_CIDRS` (default empty): the special destinations
/// webhooks may nevertheless be sent to. The worker checks each connection
/// against it; the API checks endpoint URLs naming an address when they are
/// set, so both must be given the same value.
pub fn outbound_allow_from_env() -> Result<crate::net_policy::AllowList, ConfigError> {
    crate::net_policy::parse_allow_list(&std::env::var(key("OUTBOUND_ALLOW_CIDRS")).unwrap_or_default())
        .map_err(|message| ConfigError { key: key("OUTBOUND_ALLOW_CIDRS"), message })
}

/// User sessions and first-tenant bootstrap (see `auth`).
#[derive(Clone, Default)]
pub struct AuthConfig {
    /// `RELAYOPS_JWT_SECRET` (at least 32 bytes; unset: login is disabled).
    pub jwt_secret: Option<String>,
    /// `RELAYOPS_SESSION_LIFETIME_SECS` (default 43200, 12 h; the older
    /// `RELAYOPS_JWT_TTL_SECS` is read when it is unset): the longest a login
    /// session (console sign-in, API login token) lives, however it is used.
    pub session_lifetime: Duration,
    /// `RELAYOPS_SESSION_IDLE_SECS` (default 1800): a session unused this
    /// long has ended (measured to the minute).
    pub session_idle: Duration,
    /// `RELAYOPS_BOOTSTRAP_TOKEN` (unset: `POST /v1/bootstrap` is disabled). Usable
    /// once: its hash is stored when used.
    pub bootstrap_token: Option<String>,
    /// `RELAYOPS_API_KEY_CACHE_MS` (default 2000; 0 turns it off): how long a
    /// verified API key is trusted without asking the database, i.e. how long
    /// a revocation made by another process may take to apply here.
    pub api_key_cache_ttl: Option<Duration>,
    /// SHA-256 of the platform operators' token for the admin API
    /// (`/admin/v1/…`): `RELAYOPS_ADMIN_TOKEN_SHA256` (64 hex digits, so the
    /// environment never holds the token itself), or `RELAYOPS_ADMIN_TOKEN`
    /// (at least 32 characters; hashed at start, not kept). Neither: the admin
    /// API answers 403 to everyone.
    pub admin_token_sha256: Option<[u8; 32]>,
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("jwt_secret", &self.jwt_secret.as_ref().map(|_| "<set>"))
            .field("session_lifetime", &self.session_lifetime)
            .field("session_idle", &self.session_idle)
            .field("bootstrap_token", &self.bootstrap_token.as_ref().map(|_| "<set>"))
            .field("admin_token_sha256", &self.admin_token_sha256.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl AuthConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let secret = std::env::var(key("JWT_SECRET")).ok().filter(|s| !s.is_empty());
        if secret.as_ref().is_some_and(|s| s.len() < 32) {
            return Err(ConfigError { key: key("JWT_SECRET"), message: "must be at least 32 bytes".into() });
        }
        Ok(Self {
            jwt_secret: secret,
            session_lifetime: Duration::from_secs(match std::env::var(key("SESSION_LIFETIME_SECS")) {
                Ok(_) => positive("SESSION_LIFETIME_SECS", 43_200)?,
                Err(_) => positive("JWT_TTL_SECS", 43_200)?,
            }),
            session_idle: Duration::from_secs(positive("SESSION_IDLE_SECS", 1_800)?),
            bootstrap_token: std::env::var(key("BOOTSTRAP_TOKEN")).ok().filter(|s| !s.is_empty()),
            api_key_cache_ttl: Some(Duration::from_millis(parsed("API_KEY_CACHE_MS", 2_000u64)?)),
            admin_token_sha256: admin_token_sha256()?,
        })
    }
}

/// Login throttling (see `api::login_throttle`): failed logins are counted per
/// account and per client address in Redis-shared buckets; each allowance
/// refills over `window`.
#[derive(Debug, Clone)]
pub struct LoginThrottleConfig {
    /// `RELAYOPS_LOGIN_FAILURES_PER_ACCOUNT` (default 5): failed logins to one
    /// email from one client address before that address's logins to it are
    /// refused (429) until the window refills one.
    pub per_account: u32,
    /// `RELAYOPS_LOGIN_FAILURES_PER_ACCOUNT_ALL_ADDRESSES` (default 100):
    /// failed logins to one email from every address together (guessing
    /// spread over many); a browser that signed in to it before is not held
    /// back by this one.
    pub per_account_all_addresses: u32,
    /// `RELAYOPS_LOGIN_FAILURES_PER_ADDRESS` (default 20): failed logins from one
    /// client address (IPv6: its /64), whatever the accounts.
    pub per_address: u32,
    /// `RELAYOPS_LOGIN_WINDOW_SECS` (default 900): how long a full allowance
    /// takes to refill (5 per 15 min: one more try every 3 min when spent).
    pub window: Duration,
    /// `RELAYOPS_TRUSTED_PROXIES` (default empty): CIDRs of reverse proxies
    /// whose `X-Forwarded-For` names the client. Without it the client is the
    /// connection's peer, and the header is ignored.
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

impl Default for LoginThrottleConfig {
    fn default() -> Self {
        Self {
            per_account: 5,
            per_address: 20,
            per_account_all_addresses: 100,
            window: Duration::from_secs(900),
            trusted_proxies: Vec::new(),
        }
    }
}

impl LoginThrottleConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let proxies = std::env::var(key("TRUSTED_PROXIES")).unwrap_or_default();
        let trusted_proxies = proxies
            .split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(|part| {
                crate::net_policy::parse_net(part).ok_or_else(|| ConfigError {
                    key: key("TRUSTED_PROXIES"),
                    message: format!("`{part}` is not a CIDR"),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            per_account: positive("LOGIN_FAILURES_PER_ACCOUNT", 5)?,
            per_address: positive("LOGIN_FAILURES_PER_ADDRESS", 20)?,
            per_account_all_addresses: positive("LOGIN_FAILURES_PER_ACCOUNT_ALL_ADDRESSES", 100)?,
            window: Duration::from_secs(positive("LOGIN_WINDOW_SECS", 900)?),
            trusted_proxies,
        })
    }
}

/// The admin token's hash, from either variable (never both).
fn admin_token_sha256() -> Result<Option<[u8; 32]>, ConfigError> {
    let read = |name: &str| std::env::var(key(name)).ok().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    match (read("ADMIN_TOKEN_SHA256"), read("ADMIN_TOKEN")) {
        (Some(_), Some(_)) => Err(ConfigError {
            key: key("ADMIN_TOKEN"),
            message: "set RELAYOPS_ADMIN_TOKEN_SHA256 or RELAYOPS_ADMIN_TOKEN, not both".into(),
        }),
        (Some(hex), None) => parse_sha256_hex(&hex)
            .map(Some)
            .ok_or_else(|| ConfigError { key: key("ADMIN_TOKEN_SHA256"), message: "must be 64 hex digits".into() }),
        (None, Some(token)) if token.chars().count() < 32 => {
            Err(ConfigError { key: key("ADMIN_TOKEN"), message: "must be at least 32 characters".into() })
        }
        (None, Some(token)) => Ok(Some(crate::auth::admin::token_sha256(&token))),
        (None, None) => Ok(None),
    }
}

fn parse_sha256_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut hash = [0u8; 32];
    for (byte, pair) in hash.iter_mut().zip(text.as_bytes().chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(hash)
}

/// Flow control in Redis (see `flow`).
#[derive(Debug, Clone)]
pub struct FlowConfig {
    /// `RELAYOPS_REDIS_URL`, e.g. `redis://127.0.0.1:6379`.
    pub redis_url: String,
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
    pub fn from_env() -> Result<Self, ConfigError> {
        Ok(Self {
            redis_url: required("REDIS_URL")?,
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

/// How ingest writes events and an unordered event's deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IngestConfig {
    /// `RELAYOPS_DELIVERIES_AT_INGEST_MAX` (default 16): an unordered event
    /// that matches up to this many endpoints gets its deliveries written by
    /// ingest, in the statement that stores it; one that matches more gets
    /// one outbox row naming them, and a publisher writes its deliveries
    /// moments later, in bulk (`repo::deferred_deliveries`), so
    /// ingest's cost does not grow with the subscribers. `0`: always later.
    pub deliveries_at_ingest_max: i64,
    /// `RELAYOPS_INGEST_LANES` (default 2, at most half the database pool,
    /// at least 1): ingest statements a process runs at once. Concurrent posts share
    /// a statement (group commit) only while every lane is busy: fewer lanes
    /// make bigger batches under load, which cost less per event.
    pub lanes: Option<usize>,
}

impl Default for IngestConfig {
    fn default() -> Self {
        Self { deliveries_at_ingest_max: 16, lanes: None }
    }
}

impl IngestConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let max: i64 = parsed("DELIVERIES_AT_INGEST_MAX", Self::default().deliveries_at_ingest_max)?;
        if max < 0 {
            return Err(ConfigError { key: key("DELIVERIES_AT_INGEST_MAX"), message: "must not be negative".into() });
        }
        Ok(Self { deliveries_at_ingest_max: max, lanes: optional_positive("INGEST_LANES")? })
    }
}

/// Ingest backpressure (see `backpressure`).
#[derive(Debug, Clone)]
pub struct BackpressureConfig {
    /// `RELAYOPS_MAX_OUTBOX_BACKLOG` (default 100000): unpublished outbox rows
    /// above which ingest answers 503 (an unordered event is one row, whatever
    /// its fan-out).
    pub max_outbox_backlog: i64,
    /// `RELAYOPS_MAX_READY_DEPTH` (default 100000): ready-queue messages above
    /// which ingest answers 503 (a message carries 1 to 32 deliveries).
    pub max_ready_depth: u32,
    /// `RELAYOPS_BACKPRESSURE_SAMPLE_MS` (default 1000): how often both are measured.
    pub sample_interval: Duration,
    /// `RELAYOPS_BACKPRESSURE_RETRY_AFTER_SECS` (default 5): the `Retry-After` given.
    pub retry_after_secs: u64,
}

impl Default for BackpressureConfig {
    fn default() -> Self {
        Self {
            max_outbox_backlog: 100_000,
            max_ready_depth: 100_000,
            sample_interval: Duration::from_secs(1),
            retry_after_secs: 5,
        }
    }
}

impl BackpressureConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        Ok(Self {
            max_outbox_backlog: positive("MAX_OUTBOX_BACKLOG", 100_000)?,
            max_ready_depth: positive("MAX_READY_DEPTH", 100_000)?,
            sample_interval: millis("BACKPRESSURE_SAMPLE_MS", 1_000)?,
            retry_after_secs: positive("BACKPRESSURE_RETRY_AFTER_SECS", 5)?,
        })
    }
}

/// HTTP listeners of the local runner.
#[derive(Debug, Clone)]
pub struct ListenConfig {
    /// `RELAYOPS_API_LISTEN` (default `127.0.0.1:8080`).
    pub api: std::net::SocketAddr,
    /// `RELAYOPS_SIMULATOR_LISTEN` (default `127.0.0.1:8090`).
    pub simulator: std::net::SocketAddr,
}

impl ListenConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        Ok(Self {
            api: parsed("API_LISTEN", ([127, 0, 0, 1], 8080).into())?,
            simulator: parsed("SIMULATOR_LISTEN", ([127, 0, 0, 1], 8090).into())?,
        })
    }
}

/// Operations endpoints and sampled gauges.
#[derive(Debug, Clone)]
pub struct OpsConfig {
    /// `RELAYOPS_WORKER_HEALTH_LISTEN` (default `127.0.0.1:8081`; `off`
    /// disables): where a worker (or a publisher run on its own) serves
    /// `/health/live`, `/health/ready` and `/metrics`. Port 0 picks a free one.
    pub worker_health_listen: Option<std::net::SocketAddr>,
    /// `RELAYOPS_GAUGE_SAMPLE_MS` (default 5000): how often the outbox backlog
    /// and the queue depths are measured for `/metrics`.
    pub gauge_sample_interval: Duration,
}

impl OpsConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let listen = match std::env::var(key("WORKER_HEALTH_LISTEN")) {
            Ok(text) if text.trim() == "off" => None,
            _ => Some(parsed("WORKER_HEALTH_LISTEN", ([127, 0, 0, 1], 8081).into())?),
        };
        Ok(Self { worker_health_listen: listen, gauge_sample_interval: millis("GAUGE_SAMPLE_MS", 5_000)? })
    }
}

/// Dead-letter alerting (the `alerter` role).
#[derive(Debug, Clone)]
pub struct AlertConfig {
    /// `RELAYOPS_ALERT_WEBHOOK_URL` (unset: no alerter): where each alert is
    /// POSTed as JSON (a Slack incoming webhook, or anything accepting JSON).
    pub webhook_url: url::Url,
    /// `RELAYOPS_ALERT_COOLDOWN_MS` (default 300000): after an alert about an
    /// endpoint, further dead letters of that endpoint are counted, not sent,
    /// for this long; the next alert reports how many were held back.
    pub cooldown: Duration,
    /// `RELAYOPS_ALERT_TIMEOUT_MS` (default 5000): the alert request's timeout.
    pub timeout: Duration,
    /// `RELAYOPS_ALERT_RETRY_MS` (default 5000): pause before an alert that was
    /// not accepted is tried again (its dead letter stays unacked meanwhile).
    pub retry_pause: Duration,
}

impl AlertConfig {
    /// `None` when `RELAYOPS_ALERT_WEBHOOK_URL` is unset or empty.
    pub fn from_env() -> Result<Option<Self>, ConfigError> {
        let Some(text) = std::env::var(key("ALERT_WEBHOOK_URL")).ok().filter(|text| !text.trim().is_empty()) else {
            return Ok(None);
        };
        let webhook_url = url::Url::parse(text.trim())
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https"))
            .ok_or_else(|| ConfigError { key: key("ALERT_WEBHOOK_URL"), message: "must be an http(s) URL".into() })?;
        Ok(Some(Self {
            webhook_url,
            cooldown: millis("ALERT_COOLDOWN_MS", 300_000)?,
            timeout: millis("ALERT_TIMEOUT_MS", 5_000)?,
            retry_pause: millis("ALERT_RETRY_MS", 5_000)?,
        }))
    }
}

/// The SQS publisher wake-up sent by the ingest and replay Lambdas.
#[derive(Debug, Clone)]
pub struct WakeupQueueConfig {
    /// `RELAYOPS_WAKEUP_QUEUE_URL` (default unset = no SQS wake-up): the queue
    /// whose event source is the publisher Lambda.
    pub queue_url: String,
    /// `RELAYOPS_WAKEUP_DEBOUNCE_MS` (default 100): at most one wake-up per warm
    /// container in this interval.
    pub debounce: Duration,
    /// `RELAYOPS_WAKEUP_TIMEOUT_MS` (default 1000): connect and send timeout;
    /// a response waits at most this long for its wake-up.
    pub send_timeout: Duration,
}

impl WakeupQueueConfig {
    /// `None` when no queue is configured.
    pub fn from_env() -> Result<Option<Self>, ConfigError> {
        let Some(queue_url) = std::env::var(key("WAKEUP_QUEUE_URL")).ok().filter(|url| !url.trim().is_empty()) else {
            return Ok(None);
        };
        Ok(Some(Self {
            queue_url: queue_url.trim().to_owned(),
            debounce: millis("WAKEUP_DEBOUNCE_MS", 100)?,
            send_timeout: millis("WAKEUP_TIMEOUT_MS", 1000)?,
        }))
    }
}

/// The publisher Lambda's time budget.
#[derive(Debug, Clone)]
pub struct PublisherBudgetConfig {
    /// `RELAYOPS_PUBLISHER_BUDGET_MS` (default 50000): how long one invocation
    /// drains when the runtime's deadline is unusable (missing or already past,
    /// as under `cargo lambda watch`).
    pub budget: Duration,
    /// `RELAYOPS_PUBLISHER_SAFETY_MARGIN_MS` (default 5000): kept free before
    /// the invocation's deadline.
    pub safety_margin: Duration,
}

impl Default for PublisherBudgetConfig {
    fn default() -> Self {
        Self { budget: Duration::from_secs(50), safety_margin: Duration::from_secs(5) }
    }
}

impl PublisherBudgetConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let default = Self::default();
        Ok(Self {
            budget: millis("PUBLISHER_BUDGET_MS", default.budget.as_millis() as u64)?,
            safety_margin: millis("PUBLISHER_SAFETY_MARGIN_MS", default.safety_margin.as_millis() as u64)?,
        })
    }
}
