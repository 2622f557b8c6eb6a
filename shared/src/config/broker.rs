//! RabbitMQ and the outbox publisher: `BrokerConfig` (every pipeline role),
//! `PublisherConfig` and `PublisherBudgetConfig` (the publisher loop and
//! Lambda), `WakeupQueueConfig` (the ingest and replay Lambdas).
use std::time::Duration;

use super::{key, millis, parsed, positive, required, ConfigError, HistoryConfig};

/// RabbitMQ.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// `RELAYOPS_AMQP_URL`, e.g. `amqp://guest:guest@127.0.0.1:5672/%2f`; a
    /// cluster's nodes as several URLs separated by commas (each is checked at
    /// start-up; see `broker::connect` for the order they are tried in).
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
    /// `RELAYOPS_READY_SHARDS` (default 10, at most 64): ready queues. With 1,
    /// every message goes to `<ns>.ready`. With more, first attempts go to
    /// `<ns>.ready.1` … `<ns>.ready.<n-1>`, each tenant to the less loaded
    /// of its two (shuffle sharding) — from 6 on, the last two are the
    /// refuge shards, where any tenant without a backlog may go — and
    /// `<ns>.ready` carries what comes back (retries, postponements); workers
    /// consume them all, each with its own prefetch. See `broker::shards`
    /// and ARCHITECTURE.md, "Fair delivery".
    pub ready_shards: u16,
}

impl BrokerConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let expires: u32 = parsed("QUEUE_EXPIRES_MS", 0)?;
        let url = required("AMQP_URL")?;
        crate::broker::check_urls(&url)
            .map_err(|error| ConfigError { key: key("AMQP_URL"), message: error.to_string() })?;
        Ok(Self {
            url,
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
