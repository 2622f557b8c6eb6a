//! Operations and settings shared across roles: `OpsConfig` (health and
//! metrics), `AlertConfig` (the alerter), `HistoryConfig` (partitions and
//! retention: migrate, the publisher, the API), the runtime's threads and the
//! outbound allow-list (the worker and the API).
use std::time::Duration;

use super::{key, millis, optional_positive, parsed, positive, ConfigError};

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
