//! The AMQP side of the worker: connect, declare the topology, consume the
//! ready queue with manual acks and a bounded prefetch, hand each message to
//! the [`Processor`] on its own task, and ack/nack after it settles. A lost
//! connection is re-established with a growing pause; unacked messages return
//! to the queue by themselves.
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, BasicRejectOptions,
};
use lapin::types::FieldTable;
use lapin::{Connection, Consumer};
use relayops_shared::broker::{self, BrokerError, Topology, SETUP_TIMEOUT};
use relayops_shared::config::{BrokerConfig, WorkerConfig};
use relayops_shared::db::Pool;
use relayops_shared::task::{never_stopping, stop_requested};
use relayops_shared::telemetry::error_chain;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::delay::{DelayPublisher, THROTTLES_HEADER};
use crate::gate::Gate;
use crate::hold::{delivery_count, near_delivery_limit, Backoff};
use crate::process::{Disposition, Processor};
use crate::report;
use crate::sender::{Sender, SenderError};

/// Pause before requeueing after a failure on our side, so a database outage
/// does not become a hot redelivery loop.
const REQUEUE_PAUSE: Duration = Duration::from_millis(500);

pub struct Worker {
    broker: BrokerConfig,
    config: WorkerConfig,
    processor: Processor,
    /// True while a consumer is registered on the ready queue (for readiness).
    consuming: tokio::sync::watch::Sender<bool>,
}

impl Worker {
    pub fn new(pool: Pool, broker: BrokerConfig, config: WorkerConfig, gate: Gate) -> Result<Self, SenderError> {
        let sender = Sender::new(&config)?;
        let processor = Processor::new(pool, sender, gate, config.clone());
        Ok(Self { broker, config, processor, consuming: tokio::sync::watch::channel(false).0 })
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
        let consume = || self.consume(stopping.clone());
        broker::consume_until("worker", &self.consuming, stopping.clone(), consume).await
    }

    async fn consume(&self, mut stopping: watch::Receiver<bool>) -> Result<(), BrokerError> {
        // Every setup step waits for a broker reply; a reply that never comes
        // (an overloaded broker, a lost frame) must become a reconnect, not a
        // worker that silently never consumes.
        let setup = tokio::time::timeout(SETUP_TIMEOUT, self.subscribe()).await;
        let Subscription { _connection, channel, delays, mut consumer, topology } =
            setup.map_err(|_| BrokerError::SetupTimeout(SETUP_TIMEOUT))??;
        tracing::info!(queue = %topology.ready_queue, prefetch = self.config.concurrency, "worker consuming");
        self.consuming.send_replace(true);
        let mut in_flight = JoinSet::new();
        // One wait for the stop for the whole loop, not one per message.
        let stop = stop_requested(&mut stopping);
        tokio::pin!(stop);
        let ended = loop {
            tokio::select! {
                next = consumer.next() => {
                    let delivery = match next {
                        Some(Ok(delivery)) => delivery,
                        Some(Err(error)) => break Err(BrokerError::Channel(error)),
                        None => break Ok(()),
                    };
                    let processor = self.processor.clone();
                    let delays = Arc::clone(&delays);
                    let channel = channel.clone();
                    in_flight.spawn(async move { settle(&processor, &delays, &channel, delivery).await });
                }
                Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
                _ = &mut stop => {
                    // The broker sends this consumer nothing more; what it sent
                    // that no task took yet goes back to the queue when the
                    // connection closes with the process.
                    let tag = consumer.tag();
                    if let Err(error) = channel.basic_cancel(tag.as_str(), BasicCancelOptions::default()).await {
                        tracing::warn!(error = %error, "cancelling the consumer while stopping failed");
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

/// What consuming needs, and the connection and channel it must keep open.
struct Subscription {
    _connection: Connection,
    /// Also tells held messages whether they still belong to the broker.
    channel: lapin::Channel,
    delays: Arc<DelayPublisher>,
    consumer: Consumer,
    topology: Topology,
}

impl Worker {
    /// Connects, declares the topology, opens the retry publisher and starts
    /// consuming the ready queue with the configured prefetch.
    async fn subscribe(&self) -> Result<Subscription, BrokerError> {
        let connection = broker::connect(&self.broker, "relayops-worker").await?;
        let channel = broker::open_channel(&connection).await?;
        let topology = Topology::new(&self.broker);
        topology.declare(&channel).await?;
        let delays = Arc::new(DelayPublisher::open(&connection, topology.clone()).await?);
        // Prefetch bounds the messages (and so the HTTP requests) in flight per worker.
        channel.basic_qos(self.config.concurrency, BasicQosOptions::default()).await.map_err(BrokerError::Channel)?;
        let consumer = channel
            .basic_consume(
                &topology.ready_queue,
                &self.config.worker_id,
                BasicConsumeOptions::default(), // manual acks: no_ack = false
                FieldTable::default(),
            )
            .await
            .map_err(BrokerError::Channel)?;
        Ok(Subscription { _connection: connection, channel, delays, consumer, topology })
    }
}

/// How many times in a row flow control deferred this message (a header the
/// worker sets when it sends a message round).
fn throttles(delivery: &Delivery) -> u32 {
    let value = delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|headers| headers.inner().get(THROTTLES_HEADER).and_then(|value| value.as_long_long_int()));
    value.unwrap_or(0).clamp(0, i64::from(u32::MAX)) as u32
}

/// Processes a message until it has a disposition other than [`Disposition::Hold`]:
/// through a database outage the message is kept (see [`crate::hold`]) while
/// its channel lives; a channel that closed has given it back already.
async fn process_holding(
    processor: &Processor,
    channel: &lapin::Channel,
    delivery: &Delivery,
    throttles: u32,
) -> Disposition {
    let mut backoff = Backoff::default();
    loop {
        match processor.process(&delivery.data, throttles).await {
            Disposition::Hold => match backoff.next_pause() {
                Some(pause) if channel.status().connected() => {
                    report::held();
                    tokio::time::sleep(pause).await;
                }
                _ => return Disposition::Requeue,
            },
            other => return other,
        }
    }
}

async fn settle(processor: &Processor, delays: &DelayPublisher, channel: &lapin::Channel, delivery: Delivery) {
    let throttles = throttles(&delivery);
    let disposition = match process_holding(processor, channel, &delivery, throttles).await {
        // Its row was not touched (it may be `pending`): ack only once the
        // message is back in a queue, keep it otherwise.
        Disposition::Postpone { wait } => match delays.publish(&delivery.data, wait, throttles.saturating_add(1)).await
        {
            Ok(()) => Disposition::Ack,
            Err(error) => {
                tracing::warn!(error = %error_chain(&error), "postponed message not published; requeued");
                Disposition::Requeue
            }
        },
        // One more requeue could reach the ready queue's delivery limit, where
        // the broker drops the message: send a fresh copy round instead.
        Disposition::Requeue if near_delivery_limit(delivery_count(&delivery)) => {
            match delays.publish(&delivery.data, REQUEUE_PAUSE, throttles).await {
                Ok(()) => {
                    report::republished();
                    tracing::warn!(
                        redeliveries = delivery_count(&delivery),
                        "message near the delivery limit re-published"
                    );
                    Disposition::Ack
                }
                Err(error) => {
                    tracing::warn!(error = %error_chain(&error), "message near the delivery limit not re-published; requeued");
                    Disposition::Requeue
                }
            }
        }
        other => other,
    };
    let result = match disposition {
        Disposition::Ack => delivery.acker.ack(BasicAckOptions::default()).await,
        Disposition::Delay { wait, throttled } => {
            let throttles = if throttled { throttles.saturating_add(1) } else { 0 };
            if let Err(error) = delays.publish(&delivery.data, wait, throttles).await {
                // The row is scheduled in Postgres; recovery re-enqueues it when overdue.
                tracing::warn!(error = %error_chain(&error), "retry message not published; left to recovery");
            }
            delivery.acker.ack(BasicAckOptions::default()).await
        }
        // (A postponement was resolved into `Ack` or `Requeue` above, a hold
        // into another disposition or `Requeue`.)
        Disposition::Requeue | Disposition::Postpone { .. } | Disposition::Hold => {
            tokio::time::sleep(REQUEUE_PAUSE).await;
            delivery.acker.nack(BasicNackOptions { requeue: true, ..Default::default() }).await
        }
        Disposition::Reject => delivery.acker.reject(BasicRejectOptions { requeue: false }).await,
    };
    if let Err(error) = result {
        // The channel is gone; the broker will redeliver the message.
        tracing::warn!(error = %error, ?disposition, "could not settle message with the broker");
    }
}
