//! The AMQP side of the worker: connect, declare the topology, consume every
//! ready shard (each on a channel of its own, with manual acks and its own
//! bounded prefetch, so a shard full of one tenant's backlog never holds back
//! another's messages), and hand each message to a [`Settler`] on its own
//! task (a bundle's deliveries each on a task of their own; at most the
//! concurrency's deliveries under way, the slots shared fairly between
//! tenants and their endpoints: [`FairSlots`]), which acks, delays or requeues it once settled;
//! beside them, parked deliveries are admitted into the same slots
//! ([`Admitter`]).
//! A lost connection is re-established with a growing pause; unacked
//! messages return to their queue by themselves.
use std::sync::Arc;

use futures_util::stream::{self, BoxStream};
use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::Connection;
use relayops_shared::api::PublisherWakeup;
use relayops_shared::broker::{self, BrokerError, Topology, SETUP_TIMEOUT};
use relayops_shared::config::{BrokerConfig, WorkerConfig};
use relayops_shared::db::Pool;
use relayops_shared::task::{never_stopping, stop_requested};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::admission::Admitter;
use crate::delay::DelayPublisher;
use crate::gate::Gate;
use crate::process::Processor;
use crate::sender::{Sender, SenderError};
use crate::settle::Settler;
use crate::slots::FairSlots;
use crate::weights::TenantWeights;

pub struct Worker {
    broker: BrokerConfig,
    config: WorkerConfig,
    processor: Processor,
    /// True while a consumer is registered on the ready queue (for readiness).
    consuming: tokio::sync::watch::Sender<bool>,
    /// Tenants' weights for the fair slots, read while the worker runs.
    weights: Arc<TenantWeights>,
}

impl Worker {
    pub fn new(pool: Pool, broker: BrokerConfig, config: WorkerConfig, gate: Gate) -> Result<Self, SenderError> {
        let sender = Sender::new(&config)?;
        let processor = Processor::new(pool, sender, gate, config.clone());
        let consuming = tokio::sync::watch::channel(false).0;
        Ok(Self { broker, config, processor, consuming, weights: Arc::default() })
    }

    /// This worker wakes the publisher of its own process directly too, not
    /// only through Postgres (`relayops all`): a lane's next delivery is
    /// published without waiting for the `NOTIFY`.
    pub fn waking_publisher(mut self, publisher: Arc<dyn PublisherWakeup>) -> Self {
        self.processor.wake_also(publisher);
        self
    }

    /// Whether the worker is consuming now; changes as it (re)connects.
    pub fn consuming(&self) -> tokio::sync::watch::Receiver<bool> {
        self.consuming.subscribe()
    }

    /// Consumes until the process ends, reconnecting as needed.
    pub async fn run(&self) {
        self.run_until(never_stopping()).await
    }

    /// [`run`](Self::run) until `stopping` turns true (the process is
    /// stopping): then it takes no new message, lets the deliveries under way
    /// finish — request answered, attempt recorded, message acknowledged —
    /// and returns. Without that, they were left leased by a process that is
    /// gone, to be sent again after their leases expired.
    pub async fn run_until(&self, stopping: watch::Receiver<bool>) {
        let weights = Arc::clone(&self.weights).refresh_until(self.processor.pool().clone(), stopping.clone());
        let refreshing = tokio::spawn(weights);
        let consume = || self.consume(stopping.clone());
        broker::consume_until("worker", &self.consuming, stopping.clone(), consume).await;
        refreshing.abort();
    }

    async fn consume(&self, mut stopping: watch::Receiver<bool>) -> Result<(), BrokerError> {
        // Every setup step waits for a broker reply; a reply that never comes
        // (an overloaded broker, a lost frame) must become a reconnect, not a
        // worker that silently never consumes.
        let setup = tokio::time::timeout(SETUP_TIMEOUT, self.subscribe()).await;
        let Subscription { _connection, shards, delays, topology } =
            setup.map_err(|_| BrokerError::SetupTimeout(SETUP_TIMEOUT))??;
        tracing::info!(
            queues = topology.ready_shards.all().len(),
            prefetch = prefetch_per_shard(self.config.concurrency, topology.ready_shards.all().len()),
            "worker consuming"
        );
        self.consuming.send_replace(true);
        let mut in_flight = JoinSet::new();
        let slots = FairSlots::new(usize::from(self.config.concurrency), Arc::clone(&self.weights));
        let settlers: Vec<Settler> = shards
            .iter()
            .map(|shard| {
                let (processor, channel) = (self.processor.clone(), shard.channel.clone());
                Settler::new(processor, delays.clone(), channel, Arc::clone(&slots), stopping.clone())
            })
            .collect();
        // Parked deliveries admitted into slots as they free, beside the messages.
        let admitter = Admitter::new(
            self.processor.clone(),
            Arc::clone(&delays),
            Arc::clone(&slots),
            shards[0].channel.clone(),
            stopping.clone(),
        );
        in_flight.spawn(admitter.run());
        let mut messages = merged(&shards);
        // One wait for the stop for the whole loop, not one per message.
        let stop = stop_requested(&mut stopping);
        tokio::pin!(stop);
        let ended = loop {
            tokio::select! {
                next = messages.next() => {
                    let (shard, delivery) = match next {
                        Some((shard, Some(Ok(delivery)))) => (shard, delivery),
                        Some((_, Some(Err(error)))) => break Err(BrokerError::Channel(error)),
                        // One shard's consumer ended (its channel closed): reconnect all.
                        Some((_, None)) | None => break Ok(()),
                    };
                    let settler = settlers[shard].clone();
                    in_flight.spawn(async move { settler.settle(delivery).await });
                }
                Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
                _ = &mut stop => {
                    // The broker sends these consumers nothing more; what it
                    // sent that no task took yet goes back to the queues when
                    // the connection closes with the process.
                    for shard in &shards {
                        if let Err(error) = shard.channel.basic_cancel(&shard.tag, BasicCancelOptions::default()).await {
                            tracing::warn!(error = %error, "cancelling a consumer while stopping failed");
                        }
                    }
                    tracing::info!(in_flight = in_flight.len(), "worker stopping: finishing the deliveries under way");
                    while in_flight.join_next().await.is_some() {}
                    break Ok(());
                }
            }
        };
        // The connection is gone, but requests already sent must still be
        // recorded: the tasks finish on their own (their acks fail, and the
        // broker redelivers those messages to a claim that finds the row
        // settled or leased). Dropping them would leave receivers with requests
        // the attempt history does not show.
        in_flight.detach_all();
        ended
    }
}

/// Each shard's prefetch window: half the worker's concurrency (all of it
/// with one ready queue), so that a tenant's two shards together can fill
/// every slot (work-conserving: a tenant alone is not held back), while the
/// messages held at once are bounded by the concurrency (five times it with
/// the default ten shards), not by shards × concurrency — a bundle message carries an event's deliveries,
/// and a fan-out held that many times over was most of the worker's memory.
/// A delivery for a full endpoint does not hold its message while it waits:
/// it is parked and acked ([`crate::admission`]).
fn prefetch_per_shard(concurrency: u16, shards: usize) -> u16 {
    if shards <= 1 {
        concurrency
    } else {
        concurrency.div_ceil(2).max(1)
    }
}

/// Every shard's messages as one stream, each with its shard's index; a
/// shard's consumer that ends gives `(index, None)` once.
fn merged(shards: &[ShardConsumer]) -> BoxStream<'static, (usize, Option<lapin::Result<Delivery>>)> {
    let streams = shards.iter().enumerate().map(|(index, shard)| {
        let ended = stream::once(async move { (index, None) });
        shard.consumer.clone().map(move |delivery| (index, Some(delivery))).chain(ended).boxed()
    });
    stream::select_all(streams).boxed()
}

/// One ready shard being consumed: its channel (which also tells held
/// messages whether they still belong to the broker) and consumer.
struct ShardConsumer {
    channel: lapin::Channel,
    consumer: lapin::Consumer,
    tag: String,
}

/// What consuming needs, and the connection and channels it must keep open.
struct Subscription {
    _connection: Arc<Connection>,
    shards: Vec<ShardConsumer>,
    delays: Arc<DelayPublisher>,
    topology: Topology,
}

impl Worker {
    /// Connects, declares the topology, opens the retry publisher and starts
    /// consuming every ready shard, each on its own channel with the
    /// configured prefetch.
    async fn subscribe(&self) -> Result<Subscription, BrokerError> {
        let connection = broker::connect(&self.broker, "relayops-worker").await?;
        let channel = broker::open_channel(&connection).await?;
        let topology = Topology::new(&self.broker);
        topology.declare(&channel).await?;
        let delays = Arc::new(DelayPublisher::open(connection.clone(), topology.clone()).await?);
        let shard_count = topology.ready_shards.all().len();
        let mut shards = Vec::with_capacity(shard_count);
        for (index, shard) in topology.ready_shards.all().iter().enumerate() {
            let channel = if index == 0 { channel.clone() } else { broker::open_channel(&connection).await? };
            // Prefetch bounds the messages in flight per shard, so each shard
            // keeps its own window whatever the others hold.
            channel
                .basic_qos(prefetch_per_shard(self.config.concurrency, shard_count), BasicQosOptions::default())
                .await
                .map_err(BrokerError::Channel)?;
            let tag = format!("{}.{index}", self.config.worker_id);
            let consumer = channel
                .basic_consume(
                    &shard.queue,
                    &tag,
                    BasicConsumeOptions::default(), // manual acks: no_ack = false
                    FieldTable::default(),
                )
                .await
                .map_err(BrokerError::Channel)?;
            shards.push(ShardConsumer { channel, consumer, tag });
        }
        Ok(Subscription { _connection: connection, shards, delays, topology })
    }
}
