//! One AMQP connection and confirm-mode channel, and pipelined publishing;
//! each message to a ready queue goes to one of its tenant's shards, the
//! shallower (depths sampled a few times a second by a task of the session's
//! own, on a channel of its own, never in a publish's way; plus what this
//! session published since: `ShardDepths`).
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::publisher_confirm::Confirmation;
use lapin::{BasicProperties, Channel, Connection};
use relayops_shared::broker::{self, BrokerError, Destination, QueueMessage, Topology};
use relayops_shared::config::BrokerConfig;
use relayops_shared::db::DbError;
use relayops_shared::failpoint;
use relayops_shared::repo::outbox_fanout::Outgoing;
use relayops_shared::task::AbortOnDrop;
use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error(transparent)]
    Database(#[from] DbError),
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

pub struct Session {
    connection: Connection,
    channel: Channel,
    topology: Topology,
    depths: Arc<Mutex<ShardDepths>>,
    /// Samples the depths while the session lives.
    _sampler: Option<AbortOnDrop>,
}

/// How often the ready shards' depths are sampled, at most.
const DEPTH_SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// The ready shards' depths as last sampled, plus the messages this session
/// sent each since: where a tenant's next message goes.
#[derive(Debug)]
struct ShardDepths {
    messages: Vec<u32>,
}

/// Crash point: half of a batch's messages sent and confirmed, the rest not
/// sent (an event's deliveries published in part).
const HALF_PUBLISHED: &str = "publisher.after_half_published";

/// How a batch came out, one entry per message (its outbox row's id): the
/// confirmed, the refused, and whether the channel broke (messages in neither
/// list were lost with it).
#[derive(Debug, Default)]
pub struct BatchResults {
    /// Messages (indexes into the batch sent) the broker confirmed.
    pub confirmed: Vec<usize>,
    /// Messages it refused.
    pub refused: Vec<usize>,
    pub broken: bool,
}

impl Session {
    /// Connects, enables confirms and declares the topology, within
    /// [`broker::SETUP_TIMEOUT`] (a broker that never answers becomes an error
    /// the caller retries, not a publisher stuck with a claimed batch).
    pub async fn open(config: &BrokerConfig) -> Result<Self, PublishError> {
        match tokio::time::timeout(broker::SETUP_TIMEOUT, Self::open_untimed(config)).await {
            Ok(session) => session,
            Err(_) => Err(BrokerError::SetupTimeout(broker::SETUP_TIMEOUT).into()),
        }
    }

    async fn open_untimed(config: &BrokerConfig) -> Result<Self, PublishError> {
        let connection = broker::connect(config, "relayops-publisher").await?;
        let channel = broker::open_confirming_channel(&connection).await?;
        let topology = Topology::new(config);
        topology.declare(&channel).await?;
        let depths = Arc::new(Mutex::new(ShardDepths { messages: vec![0; topology.ready_shards.all().len()] }));
        // Only with first-attempt shards to choose between.
        let sampler = match topology.ready_shards.all().len() > 2 {
            true => {
                // A passive declare that fails closes its channel: never the publishing one.
                let sampling = broker::open_channel(&connection).await?;
                let task = sample_depths(sampling, topology.clone(), Arc::clone(&depths));
                Some(AbortOnDrop(tokio::spawn(task)))
            }
            false => None,
        };
        Ok(Self { connection, channel, topology, depths, _sampler: sampler })
    }

    /// Publishes on a new channel from now on, after the broker refused
    /// messages (see [`broker::close_replaced`]); the old one, whose
    /// confirms were all awaited, is closed.
    pub async fn renew_channel(&mut self) -> Result<(), PublishError> {
        let channel = broker::open_confirming_channel(&self.connection).await?;
        broker::close_replaced(std::mem::replace(&mut self.channel, channel)).await;
        Ok(())
    }

    pub fn is_usable(&self) -> bool {
        self.connection.status().connected() && self.channel.status().connected()
    }

    /// Work goes to the shallower of its tenant's ready shards, dead letters
    /// to the operations DLQ. An envelope this version cannot read (a newer
    /// writer) goes to the DLQ too, where operators see it, rather than
    /// looping here.
    fn route(&self, envelope: &serde_json::Value) -> (&str, &str) {
        match QueueMessage::deserialize(envelope).map(|message| message.destination()) {
            Ok(Destination::Ready { tenant }) => {
                let shards = &self.topology.ready_shards;
                let Ok(mut depths) = self.depths.lock() else {
                    return (&self.topology.exchange, &shards.for_tenant(tenant, &[]).routing_key);
                };
                let chosen = shards.choose(tenant, &depths.messages);
                depths.messages[chosen] = depths.messages[chosen].saturating_add(1);
                (&self.topology.exchange, &shards.all()[chosen].routing_key)
            }
            Ok(Destination::DeadLetters) | Err(_) => (&self.topology.dead_exchange, ""),
        }
    }

    /// Sends every message, then awaits the confirms together.
    pub async fn publish_confirmed(&self, messages: &[Outgoing], confirm_timeout: Duration) -> BatchResults {
        let mut results = BatchResults::default();
        let mut pending = Vec::with_capacity(messages.len());
        for (index, message) in messages.iter().enumerate() {
            if index > 0 && index == messages.len() / 2 && failpoint::is_armed(HALF_PUBLISHED) {
                // The first half reaches the broker before the process dies.
                join_all(pending.drain(..).map(|(_, confirm)| confirm)).await;
                failpoint::crash_if_armed(HALF_PUBLISHED);
            }
            let body = serde_json::to_vec(&message.envelope).unwrap_or_default();
            let properties = BasicProperties::default()
                // 2 = persistent: the broker writes it to disk before confirming.
                .with_delivery_mode(2)
                .with_content_type("application/json".into())
                // (The first outbox row it carries: for tracing a message back.)
                .with_message_id(message.rows.first().map_or(0, |(row, _)| *row).to_string().into());
            // mandatory: an unroutable message comes back instead of vanishing.
            let options = BasicPublishOptions { mandatory: true, ..Default::default() };
            let (exchange, routing_key) = self.route(&message.envelope);
            match self.channel.basic_publish(exchange, routing_key, options, &body, properties).await {
                Ok(confirm) => pending.push((index, confirm)),
                Err(error) => {
                    tracing::warn!(error = %error, "publish failed; channel considered broken");
                    results.broken = true;
                    break;
                }
            }
        }
        let confirms = tokio::time::timeout(
            confirm_timeout,
            join_all(pending.into_iter().map(|(id, confirm)| async move { (id, confirm.await) })),
        )
        .await;
        let Ok(confirms) = confirms else {
            tracing::warn!("publisher confirms timed out; rows stay claimed until reclaimed");
            results.broken = true;
            return results;
        };
        for (id, confirmation) in confirms {
            match confirmation {
                Ok(Confirmation::Ack(None)) | Ok(Confirmation::NotRequested) => results.confirmed.push(id),
                Ok(Confirmation::Ack(Some(_))) | Ok(Confirmation::Nack(_)) => results.refused.push(id),
                Err(error) => {
                    tracing::warn!(error = %error, "confirm failed");
                    results.broken = true;
                }
            }
        }
        results
    }
}

/// Samples the ready shards' depths every [`DEPTH_SAMPLE_EVERY`] on
/// `channel` until it closes (the session's connection went away; the
/// session's own drop ends it sooner). A failed or slow sample keeps the
/// previous figures: the choice of shard is a preference, never a condition
/// for publishing.
async fn sample_depths(channel: Channel, topology: Topology, depths: Arc<Mutex<ShardDepths>>) {
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    while channel.status().connected() {
        let started = Instant::now();
        let declared = join_all(
            topology
                .ready_shards
                .all()
                .iter()
                .map(|shard| channel.queue_declare(&shard.queue, passive, Default::default())),
        );
        if let Ok(declared) = tokio::time::timeout(Duration::from_secs(1), declared).await {
            if let Ok(mut depths) = depths.lock() {
                for (slot, declared) in depths.messages.iter_mut().zip(declared) {
                    if let Ok(queue) = declared {
                        *slot = queue.message_count();
                    }
                }
            }
        }
        tokio::time::sleep(DEPTH_SAMPLE_EVERY.saturating_sub(started.elapsed())).await;
    }
}
