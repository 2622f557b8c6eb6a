//! What every HTTP function shares: its state, the API-key authentication
//! extractor, the JSON body extractor and RFC 7807 problem responses. Routers
//! themselves live in the function crates.
pub mod account;
mod auth;
mod client_address;
pub mod endpoint_changes;
mod json;
pub mod key_cache;
pub mod lambda;
#[cfg(feature = "lambda")]
pub mod lambda_peer;
pub mod login;
pub mod login_throttle;
pub mod openapi;
mod problem;
mod query;

use std::sync::Arc;

use crate::auth::jwt::JwtKeys;
use crate::backpressure::Backpressure;
use crate::config::AuthConfig;
use crate::db::Pool;
use crate::flow::{FlowControl, Limit, TokenDecision};
use crate::net_policy::{AddressPolicy, AllowList};

pub use auth::{bearer, by_login_token, end_sessions, session_owner, Authenticated, Principal, SessionOwner};
pub use client_address::ClientAddress;
pub use json::ApiJson;
pub use key_cache::KeyCache;
pub use login_throttle::LoginThrottle;
pub use problem::{not_found_fallback, ApiError, ProblemType};
pub use query::{ApiQuery, NoQuery};

/// Asks the outbox publisher to run soon. In-process it is a `Notify`; in AWS it
/// is a debounced SQS message. Best effort: the outbox is the source of truth and
/// the publisher's schedule picks up anything a lost wake-up missed.
pub trait PublisherWakeup: Send + Sync {
    fn wake(&self);
}

impl PublisherWakeup for tokio::sync::Notify {
    fn wake(&self) {
        self.notify_one();
    }
}

/// Several wake-ups at once (in-process, and other processes via Postgres).
pub struct Wakeups(pub Vec<Arc<dyn PublisherWakeup>>);

impl PublisherWakeup for Wakeups {
    fn wake(&self) {
        for wakeup in &self.0 {
            wakeup.wake();
        }
    }
}

/// State shared by the HTTP functions' handlers.
#[derive(Clone)]
pub struct ApiState {
    pub pool: Pool,
    /// Where list and search reads go: a reader when configured (`db::reads`).
    pub reads: crate::db::Reads,
    pub wakeup: Option<Arc<dyn PublisherWakeup>>,
    /// When set, ingest refuses work while the pipeline is backed up.
    pub backpressure: Option<Arc<Backpressure>>,
    /// When set, each tenant's ingest rate is limited (shared across replicas).
    pub ingest_limiter: Option<IngestLimiter>,
    /// When set, users can log in and use their session tokens.
    pub jwt: Option<Arc<JwtKeys>>,
    /// SHA-256 of the configured bootstrap token, when there is one.
    pub bootstrap_token_hash: Option<[u8; 32]>,
    /// Recently verified API keys (see [`key_cache`]).
    pub api_keys: Arc<KeyCache>,
    /// Which endpoint URLs may be stored: the worker's outbound policy, so a
    /// URL naming a special address is refused when it is set (strict unless
    /// `RELAYOPS_OUTBOUND_ALLOW_CIDRS` opens something).
    pub outbound: Arc<AddressPolicy>,
    /// When set, failed logins are counted per account and client address.
    pub login_throttle: Option<LoginThrottle>,
    /// SHA-256 of the platform operators' admin token, when one is configured.
    pub admin_token_sha256: Option<[u8; 32]>,
    /// The platform's history retention (`RELAYOPS_RETENTION_DAYS`): a
    /// tenant's own may only be shorter (the admin API checks it).
    pub platform_retention: std::time::Duration,
    /// Ingest's writes: concurrent events share a statement (group commit).
    pub ingest_writes: crate::repo::event_batches::IngestWrites,
}

/// The tenant ingest limit: the shared token bucket and the default rate.
#[derive(Clone)]
pub struct IngestLimiter {
    pub flow: FlowControl,
    pub default: Limit,
}

impl ApiState {
    pub fn new(pool: Pool) -> Self {
        Self {
            pool: pool.clone(),
            reads: crate::db::Reads::writer_only(pool.clone()),
            wakeup: None,
            backpressure: None,
            ingest_limiter: None,
            jwt: None,
            bootstrap_token_hash: None,
            api_keys: Arc::new(KeyCache::new(key_cache::DEFAULT_TTL)),
            outbound: Arc::new(AddressPolicy::default()),
            login_throttle: None,
            admin_token_sha256: None,
            platform_retention: crate::config::HistoryConfig::default().retention,
            ingest_writes: crate::repo::event_batches::IngestWrites::new(pool.clone()),
        }
    }

    /// List and search reads on `reads` (a reader beside the writer).
    pub fn with_reads(mut self, reads: crate::db::Reads) -> Self {
        self.reads = reads;
        self
    }

    pub fn with_platform_retention(mut self, retention: std::time::Duration) -> Self {
        self.platform_retention = retention;
        self
    }

    pub fn with_login_throttle(mut self, throttle: LoginThrottle) -> Self {
        self.login_throttle = Some(throttle);
        self
    }

    /// Endpoint URLs naming these special destinations may be stored (the
    /// worker's `RELAYOPS_OUTBOUND_ALLOW_CIDRS`).
    pub fn with_outbound_allow(mut self, allow: AllowList) -> Self {
        self.outbound = Arc::new(AddressPolicy::new(allow));
        self
    }

    /// Login tokens, the bootstrap token and the admin token, as configured.
    pub fn with_auth(mut self, config: &AuthConfig) -> Result<Self, crate::auth::jwt::JwtError> {
        if let Some(secret) = &config.jwt_secret {
            self.jwt = Some(Arc::new(JwtKeys::new(secret.as_bytes(), config.session_lifetime, config.session_idle)?));
        }
        self.bootstrap_token_hash = config.bootstrap_token.as_deref().map(crate::auth::token_hash::token_sha256);
        self.admin_token_sha256 = config.admin_token_sha256;
        if let Some(ttl) = config.api_key_cache_ttl {
            self.api_keys = Arc::new(KeyCache::new(ttl));
        }
        Ok(self)
    }

    pub fn with_backpressure(mut self, backpressure: Arc<Backpressure>) -> Self {
        self.backpressure = Some(backpressure);
        self
    }

    pub fn with_ingest_limiter(mut self, limiter: IngestLimiter) -> Self {
        self.ingest_limiter = Some(limiter);
        self
    }

    /// 429 + `Retry-After` when the tenant is over its rate. The rate is the
    /// shared bucket's, or this process' own while Redis cannot be asked
    /// (see `flow`): a Redis outage never refuses ingest.
    pub async fn check_ingest_rate(&self, caller: &Authenticated) -> Result<(), ApiError> {
        self.check_ingest_rate_for(caller, 1).await
    }

    /// As [`check_ingest_rate`](Self::check_ingest_rate), for `events` at once.
    /// A suspended tenant is refused first (403), before any token is taken.
    pub async fn check_ingest_rate_for(&self, caller: &Authenticated, events: u32) -> Result<(), ApiError> {
        if caller.tenant_suspended {
            return Err(ApiError::Suspended);
        }
        let Some(limiter) = &self.ingest_limiter else { return Ok(()) };
        let limit = match caller.ingest_limit {
            (Some(rate), burst) => Limit { per_second: f64::from(rate), burst: burst.unwrap_or(rate).max(1) as u32 },
            (None, _) => limiter.default,
        };
        match limiter.flow.take_tokens("tenant", &caller.tenant_id.to_string(), limit, events).await {
            TokenDecision::Taken => Ok(()),
            TokenDecision::Wait(wait) => Err(ApiError::RateLimited {
                detail: format!(
                    "this tenant may post {} events per second; retry after the given delay",
                    limit.per_second
                ),
                retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
            }),
        }
    }

    /// 503 + `Retry-After` while the outbox or the ready queue is over its limit.
    pub fn check_backpressure(&self) -> Result<(), ApiError> {
        match self.backpressure.as_ref().map(|gauge| gauge.check()) {
            Some(Err(refusal)) => Err(ApiError::Overloaded {
                detail: format!("{}; retry later", refusal.reason),
                retry_after_secs: refusal.retry_after_secs,
            }),
            _ => Ok(()),
        }
    }

    /// How ingest writes deliveries (`RELAYOPS_DELIVERIES_AT_INGEST_MAX`).
    pub fn with_ingest_config(mut self, config: &crate::config::IngestConfig) -> Self {
        self.ingest_writes = self.ingest_writes.with_config(config);
        self
    }

    /// Ingest hands the outbox rows it writes to this process's publisher
    /// (`relayops all`, `relayops api`: see [`handoff`](crate::handoff)).
    pub fn with_handoff(mut self, handoff: crate::handoff::Handoff) -> Self {
        self.ingest_writes = self.ingest_writes.with_handoff(handoff);
        self
    }

    pub fn with_wakeup(mut self, wakeup: Arc<dyn PublisherWakeup>) -> Self {
        self.wakeup = Some(wakeup);
        self
    }

    pub fn wake_publisher(&self) {
        if let Some(wakeup) = &self.wakeup {
            wakeup.wake();
        }
    }
}

/// Splits `limit + 1` fetched rows into the page and whether more follow (the
/// query API's lists and the console's).
pub fn page_of<T>(mut rows: Vec<T>, limit: i64) -> (Vec<T>, bool) {
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    (rows, more)
}

/// Parses a path id; a malformed id is a 400 that says what was expected.
pub fn parse_path_id<T>(text: &str) -> Result<T, ApiError>
where
    T: std::str::FromStr<Err = crate::ids::IdParseError>,
{
    text.parse().map_err(|error: crate::ids::IdParseError| ApiError::BadRequest(error.to_string()))
}

/// The state an HTTP function's Lambda builds once per container: the pool,
/// login tokens, and the tenant ingest limiter (all from the environment).
/// Backpressure sampling is left to long-lived processes.
pub fn state_from_env() -> Result<ApiState, Box<dyn std::error::Error + Send + Sync>> {
    use crate::config::{DatabaseConfig, FlowConfig, LoginThrottleConfig};
    let database = DatabaseConfig::lambda_from_env()?;
    let pool = crate::db::connect_pool(&database)?;
    let reads = crate::db::connect_reads(&database, &pool)?;
    let flow = FlowConfig::from_env()?;
    let flow_control = FlowControl::new(&flow)?;
    let throttle = LoginThrottle::new(flow_control.clone(), LoginThrottleConfig::from_env()?);
    let limiter = IngestLimiter {
        flow: flow_control,
        default: Limit { per_second: flow.tenant_rate_per_sec, burst: flow.tenant_burst },
    };
    let notifier: Arc<dyn PublisherWakeup> = Arc::new(crate::db::listen::PgNotifier::new(pool.clone()));
    Ok(ApiState::new(pool)
        .with_reads(reads)
        .with_auth(&AuthConfig::from_env()?)?
        .with_ingest_limiter(limiter)
        .with_wakeup(notifier)
        .with_outbound_allow(crate::config::outbound_allow_from_env()?)
        .with_login_throttle(throttle)
        .with_platform_retention(crate::config::HistoryConfig::from_env()?.retention)
        .with_ingest_config(&crate::config::IngestConfig::from_env()?))
}
