//! Exchange and queue names, and their idempotent declaration. Everything is
//! durable and every queue is a quorum queue (see ARCHITECTURE.md, "Queue
//! topology"):
//!
//! - `<ns>.work` (direct) → `<ns>.ready`: work to do now; with more than one
//!   ready shard, `<ns>.ready.<i>` (routing key `ready.<i>`) take the first
//!   attempts, each tenant's on two of them (`shards`), and what comes back.
//! - `<ns>.delay` (headers) → `<ns>.delay.<ttl>`: one queue per fixed delay
//!   (`x-message-ttl` per queue, never per message, so a long delay cannot hold
//!   up a short one), chosen by the message's [`DELAY_HEADER`]; an expired
//!   message dead-letters to `<ns>.work` under its own routing key: back to
//!   the ready shard it names ([`Topology::return_shard`]), so one tenant's
//!   retries never queue in front of another's.
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

use super::shards::{ReadyShard, ReadyShards};
use super::BrokerError;
use crate::config::BrokerConfig;
use crate::ids::TenantId;

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

/// The header that routes a message on `<ns>.delay` to its delay queue; its
/// routing key is the ready shard it returns to. Not `x-`-prefixed: a
/// headers exchange ignores such headers, and every binding would match.
pub const DELAY_HEADER: &str = "relayops-delay";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryBucket {
    pub delay: Duration,
    pub queue: String,
    /// This queue's [`DELAY_HEADER`] value (`250ms`, `1000ms`, …).
    pub key: String,
}

/// The names of one installation's exchanges and queues.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Direct exchange that routes work to the ready queue.
    pub exchange: String,
    /// Every ready queue (`RELAYOPS_READY_SHARDS`), `<ns>.ready` first.
    pub ready_shards: ReadyShards,
    /// `<ns>.delay`, the headers exchange in front of the delay queues.
    pub delay_exchange: String,
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
                queue: format!("{ns}.delay.{ms}ms"),
                key: format!("{ms}ms"),
            })
            .collect();
        let ready_shards = ReadyShards::new(ns, config.ready_shards);
        Self {
            exchange: format!("{ns}.work"),
            ready_shards,
            delay_exchange: format!("{ns}.delay"),
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

    /// The ready shard a message goes back to: the one it arrived by
    /// (`arrived_by`, its routing key) when that is a ready shard, so a
    /// tenant's retries return to its own shards and a quiet tenant's to the
    /// refuge it took; otherwise its tenant's first own shard; otherwise
    /// (neither known) `<ns>.ready`.
    pub fn return_shard(&self, tenant: Option<TenantId>, arrived_by: Option<&str>) -> &ReadyShard {
        let shards = self.ready_shards.all();
        let arrived = arrived_by.and_then(|key| shards.iter().find(|shard| shard.routing_key == key));
        let own = || tenant.map(|tenant| &shards[self.ready_shards.candidates(tenant).0]);
        arrived.or_else(own).unwrap_or(self.ready_shards.returns())
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
    /// shard their routing key names *at least once*: if it is briefly
    /// unavailable (a broker restart), they wait instead of being dropped.
    /// That strategy needs `reject-publish` overflow. No dead-letter routing
    /// key: each message keeps its own.
    fn retry_arguments(&self, delay: Duration) -> FieldTable {
        let mut arguments = self.quorum_arguments();
        let mut put = |key: &str, value: AMQPValue| arguments.insert(ShortString::from(key), value);
        put("x-message-ttl", AMQPValue::LongLongInt(delay.as_millis() as i64));
        put("x-dead-letter-exchange", AMQPValue::LongString(self.exchange.as_str().into()));
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
        self.bind_with(channel, queue, exchange, key, FieldTable::default()).await
    }

    async fn bind_with(
        &self,
        channel: &Channel,
        queue: &str,
        exchange: &str,
        key: &str,
        arguments: FieldTable,
    ) -> Result<(), BrokerError> {
        channel
            .queue_bind(queue, exchange, key, QueueBindOptions::default(), arguments)
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

        self.exchange(channel, &self.delay_exchange, ExchangeKind::Headers).await?;
        for bucket in &self.retry_buckets {
            self.queue(channel, &bucket.queue, self.retry_arguments(bucket.delay)).await?;
            let mut matching = FieldTable::default();
            matching.insert(ShortString::from("x-match"), AMQPValue::LongString("all".into()));
            matching.insert(ShortString::from(DELAY_HEADER), AMQPValue::LongString(bucket.key.as_str().into()));
            self.bind_with(channel, &bucket.queue, &self.delay_exchange, "", matching).await?;
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
        for exchange in [&self.exchange, &self.delay_exchange, &self.dead_exchange] {
            channel.exchange_delete(exchange, ExchangeDeleteOptions::default()).await.map_err(BrokerError::Topology)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology_config() -> BrokerConfig {
        BrokerConfig {
            url: String::new(),
            namespace: "t".into(),
            queue_expires_ms: None,
            retry_delays_ms: RETRY_DELAYS_MS.to_vec(),
            ready_shards: 1,
        }
    }

    fn topology() -> Topology {
        Topology::new(&topology_config())
    }

    #[test]
    fn a_wait_uses_the_longest_delay_not_above_it() {
        let topology = topology();
        assert_eq!(topology.bucket_for(Duration::from_millis(10)).delay, Duration::from_millis(250));
        assert_eq!(topology.bucket_for(Duration::from_secs(1)).delay, Duration::from_secs(1));
        assert_eq!(topology.bucket_for(Duration::from_secs(299)).delay, Duration::from_secs(120));
        assert_eq!(topology.bucket_for(Duration::from_secs(86_400)).delay, Duration::from_secs(36_000));
        assert_eq!(topology.bucket_for(Duration::from_secs(5)).queue, "t.delay.5000ms");
    }

    #[test]
    fn a_message_returns_to_the_shard_it_arrived_by_else_its_tenants_own() {
        let sharded = Topology::new(&BrokerConfig { ready_shards: 10, ..topology_config() });
        let tenant = TenantId::new();
        let own = &sharded.ready_shards.all()[sharded.ready_shards.candidates(tenant).0].queue;
        assert_eq!(sharded.return_shard(Some(tenant), Some("ready.9")).queue, "t.ready.9", "the refuge it came by");
        assert_eq!(&sharded.return_shard(Some(tenant), None).queue, own);
        assert_eq!(&sharded.return_shard(Some(tenant), Some("1000ms")).queue, own, "not a ready shard's key");
        assert_eq!(sharded.return_shard(None, Some("ready")).queue, "t.ready");
        assert_eq!(sharded.return_shard(None, None).queue, "t.ready");
        let one = topology();
        assert_eq!(one.return_shard(Some(tenant), None).queue, "t.ready", "one shard takes everything");
    }
}
