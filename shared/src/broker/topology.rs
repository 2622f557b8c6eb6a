//! Exchange and queue names, and their idempotent declaration. Everything is
//! durable and every queue is a quorum queue (see ARCHITECTURE.md, "Queue
//! topology"):
//!
//! - `<ns>.work` (direct) → `<ns>.ready`: work to do now; with more than one
//!   ready shard, `<ns>.ready` takes what comes back through the retry queues
//!   and `<ns>.ready.<i>` (routing key `ready.<i>`) the first attempts, each
//!   tenant's on two of them (`shards`).
//! - `<ns>.retry` (direct) → `<ns>.retry.<ttl>`: one queue per fixed delay
//!   (`x-message-ttl` per queue, never per message, so a long delay cannot hold
//!   up a short one); expired messages dead-letter back to `<ns>.work` / `ready`.
//! - `<ns>.dead` (fanout) → `<ns>.dead`: the operations dead-letter queue.
//!
//! No broker plugin is needed (the delayed-message plugin is absent on managed
//! brokers and loses messages on node failure).
use std::time::Duration;

use lapin::options::{
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, ExchangeKind};

use super::shards::ReadyShards;
use super::BrokerError;
use crate::config::BrokerConfig;

/// The default retry delays (`RELAYOPS_RETRY_DELAYS_MS` overrides them). A wait
/// is served by the longest delay not above it (so a message is never late by
/// more than re-routing); a message that comes back before its due time is sent
/// round again for what remains.
pub const RETRY_DELAYS_MS: [u64; 11] =
    [250, 1_000, 5_000, 30_000, 120_000, 300_000, 1_800_000, 3_600_000, 7_200_000, 18_000_000, 36_000_000];

/// A message redelivered this many times without an ack is dropped by the
/// broker (a poison message cannot loop forever). The worker never lets its own
/// requeues get there (it holds messages through database outages and
/// publishes a fresh copy near the limit), and recovery re-enqueues the
/// `pending` row of a message dropped anyway.
pub const DELIVERY_LIMIT: i64 = 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryBucket {
    pub delay: Duration,
    pub queue: String,
    pub routing_key: String,
}

/// The names of one installation's exchanges and queues.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Direct exchange that routes work to the ready queue.
    pub exchange: String,
    /// `<ns>.ready`: everything with one shard; what comes back through the
    /// retry queues (which dead-letter to `ready_routing_key`) with more.
    pub ready_queue: String,
    pub ready_routing_key: String,
    /// Every ready queue (`RELAYOPS_READY_SHARDS`), `<ns>.ready` first.
    pub ready_shards: ReadyShards,
    pub retry_exchange: String,
    pub retry_buckets: Vec<RetryBucket>,
    pub dead_exchange: String,
    pub dead_queue: String,
    queue_expires_ms: Option<u32>,
}

impl Topology {
    pub fn new(config: &BrokerConfig) -> Self {
        let ns = &config.namespace;
        let retry_buckets = config
            .retry_delays_ms
            .iter()
            .map(|&ms| RetryBucket {
                delay: Duration::from_millis(ms),
                queue: format!("{ns}.retry.{ms}ms"),
                routing_key: format!("{ms}ms"),
            })
            .collect();
        let ready_shards = ReadyShards::new(ns, config.ready_shards);
        Self {
            exchange: format!("{ns}.work"),
            ready_queue: ready_shards.returns().queue.clone(),
            ready_routing_key: ready_shards.returns().routing_key.clone(),
            ready_shards,
            retry_exchange: format!("{ns}.retry"),
            retry_buckets,
            dead_exchange: format!("{ns}.dead"),
            dead_queue: format!("{ns}.dead"),
            queue_expires_ms: config.queue_expires_ms,
        }
    }

    /// The dead-letter alerter's own queue, bound to the dead fanout.
    pub fn alert_queue(&self) -> String {
        format!("{}.alerts", self.dead_queue)
    }

    /// The bucket for a wait: the longest delay not above it, or the shortest.
    pub fn bucket_for(&self, wait: Duration) -> &RetryBucket {
        self.retry_buckets.iter().rev().find(|bucket| bucket.delay <= wait).unwrap_or(&self.retry_buckets[0])
    }

    fn quorum_arguments(&self) -> FieldTable {
        let mut arguments = FieldTable::default();
        arguments.insert(ShortString::from("x-queue-type"), AMQPValue::LongString("quorum".into()));
        if let Some(expires) = self.queue_expires_ms {
            arguments.insert(ShortString::from("x-expires"), AMQPValue::LongUInt(expires));
        }
        arguments
    }

    /// Retry buckets are quorum queues whose expired messages move to the ready
    /// queue *at least once*: if the ready queue is briefly unavailable (a
    /// broker restart), they wait instead of being dropped. That strategy needs
    /// `reject-publish` overflow.
    fn retry_arguments(&self, delay: Duration) -> FieldTable {
        let mut arguments = self.quorum_arguments();
        let mut put = |key: &str, value: AMQPValue| arguments.insert(ShortString::from(key), value);
        put("x-message-ttl", AMQPValue::LongLongInt(delay.as_millis() as i64));
        put("x-dead-letter-exchange", AMQPValue::LongString(self.exchange.as_str().into()));
        put("x-dead-letter-routing-key", AMQPValue::LongString(self.ready_routing_key.as_str().into()));
        put("x-dead-letter-strategy", AMQPValue::LongString("at-least-once".into()));
        put("x-overflow", AMQPValue::LongString("reject-publish".into()));
        arguments
    }

    async fn exchange(&self, channel: &Channel, name: &str, kind: ExchangeKind) -> Result<(), BrokerError> {
        let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
        channel.exchange_declare(name, kind, durable, FieldTable::default()).await.map_err(BrokerError::Topology)
    }

    async fn queue(&self, channel: &Channel, name: &str, arguments: FieldTable) -> Result<(), BrokerError> {
        let durable = QueueDeclareOptions { durable: true, ..Default::default() };
        channel.queue_declare(name, durable, arguments).await.map_err(BrokerError::Topology)?;
        Ok(())
    }

    async fn bind(&self, channel: &Channel, queue: &str, exchange: &str, key: &str) -> Result<(), BrokerError> {
        channel
            .queue_bind(queue, exchange, key, QueueBindOptions::default(), FieldTable::default())
            .await
            .map_err(BrokerError::Topology)
    }

    /// Declares everything; safe to call from every process at every start.
    pub async fn declare(&self, channel: &Channel) -> Result<(), BrokerError> {
        self.exchange(channel, &self.exchange, ExchangeKind::Direct).await?;
        for shard in self.ready_shards.all() {
            let mut ready_arguments = self.quorum_arguments();
            ready_arguments.insert(ShortString::from("x-delivery-limit"), AMQPValue::LongLongInt(DELIVERY_LIMIT));
            self.queue(channel, &shard.queue, ready_arguments).await?;
            self.bind(channel, &shard.queue, &self.exchange, &shard.routing_key).await?;
        }

        self.exchange(channel, &self.retry_exchange, ExchangeKind::Direct).await?;
        for bucket in &self.retry_buckets {
            self.queue(channel, &bucket.queue, self.retry_arguments(bucket.delay)).await?;
            self.bind(channel, &bucket.queue, &self.retry_exchange, &bucket.routing_key).await?;
        }

        self.exchange(channel, &self.dead_exchange, ExchangeKind::Fanout).await?;
        self.queue(channel, &self.dead_queue, self.quorum_arguments()).await?;
        self.bind(channel, &self.dead_queue, &self.dead_exchange, "").await?;
        Ok(())
    }

    /// The alerter's queue (a quorum queue like the others) bound to the dead
    /// fanout; only the alerter declares it, so it exists only where alerting
    /// runs.
    pub async fn declare_alert_queue(&self, channel: &Channel) -> Result<(), BrokerError> {
        let queue = self.alert_queue();
        self.queue(channel, &queue, self.quorum_arguments()).await?;
        self.bind(channel, &queue, &self.dead_exchange, "").await
    }

    /// Deletes every queue (with its messages) and exchange of this namespace,
    /// the alerter's queue included; names that do not exist are skipped. For
    /// short-lived namespaces (tests): deleting explicitly is cheap, whereas
    /// hundreds of quorum queues expiring together through `x-expires` stall
    /// RabbitMQ 3.10 for up to a minute (see ARCHITECTURE.md, "Queue topology").
    pub async fn delete(&self, channel: &Channel) -> Result<(), BrokerError> {
        let queues = [self.dead_queue.clone(), self.alert_queue()]
            .into_iter()
            .chain(self.ready_shards.all().iter().map(|shard| shard.queue.clone()))
            .chain(self.retry_buckets.iter().map(|bucket| bucket.queue.clone()));
        for queue in queues {
            channel.queue_delete(&queue, QueueDeleteOptions::default()).await.map_err(BrokerError::Topology)?;
        }
        for exchange in [&self.exchange, &self.retry_exchange, &self.dead_exchange] {
            channel.exchange_delete(exchange, ExchangeDeleteOptions::default()).await.map_err(BrokerError::Topology)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology() -> Topology {
        Topology::new(&BrokerConfig {
            url: String::new(),
            namespace: "t".into(),
            queue_expires_ms: None,
            retry_delays_ms: RETRY_DELAYS_MS.to_vec(),
            ready_shards: 1,
        })
    }

    #[test]
    fn a_wait_uses_the_longest_delay_not_above_it() {
        let topology = topology();
        assert_eq!(topology.bucket_for(Duration::from_millis(10)).delay, Duration::from_millis(250));
        assert_eq!(topology.bucket_for(Duration::from_secs(1)).delay, Duration::from_secs(1));
        assert_eq!(topology.bucket_for(Duration::from_secs(299)).delay, Duration::from_secs(120));
        assert_eq!(topology.bucket_for(Duration::from_secs(86_400)).delay, Duration::from_secs(36_000));
        assert_eq!(topology.bucket_for(Duration::from_secs(5)).queue, "t.retry.5000ms");
    }
}
