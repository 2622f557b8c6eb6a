//! The API and ingest: `AuthConfig`, `LoginThrottleConfig`, `IngestConfig`,
//! `BackpressureConfig`, and the local runner's `ListenConfig`.
use std::time::Duration;

use super::{key, millis, optional_positive, parsed, positive, ConfigError};

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
