//! One AMQP connection and confirm-mode channel, and pipelined publishing;
//! each message to a ready queue goes to one of its tenant's shards, the
//! less loaded (`ShardLoad`: depths sampled a few times a second by a task of
//! the session's own, on a channel of its own, never in a publish's way; plus
//! what this session published to each lately).
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use lapin::options::BasicPublishOptions;
use lapin::publisher_confirm::Confirmation;
use lapin::{BasicProperties, Channel, Connection};
use relayops_shared::broker::{self, BrokerError, Destination, QueueMessage, Topology};
use relayops_shared::config::BrokerConfig;
use relayops_shared::db::DbError;
use relayops_shared::failpoint;
use relayops_shared::repo::outbox_fanout::Outgoing;
use relayops_shared::task::AbortOnDrop;
use serde::Deserialize;

use crate::sightings::EmptySightings;

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error(transparent)]
    Database(#[from] DbError),
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

pub struct Session {
    connection: Arc<Connection>,
    channel: Channel,
    topology: Topology,
    load: Arc<Mutex<ShardLoad>>,
    /// Samples the depths while the session lives.
    _sampler: Option<AbortOnDrop>,
}

/// How often the ready shards' depths are sampled, at most.
const DEPTH_SAMPLE_EVERY: Duration = Duration::from_millis(200);
/// What remains of a delivery's weight in `ShardLoad::recent` after each
/// sample: a half-life of ~7 s.
const RECENT_DECAY: f64 = 0.98;

/// How loaded each ready shard is (indexed like `Topology::ready_shards`):
/// its ready messages as last sampled, plus the deliveries this session
/// sent it lately. The depth alone misses a shard whose messages all sit in
/// a worker's prefetch window, unacknowledged (a bundle is acknowledged only
/// when all its deliveries are settled, which at a slow receiver takes
/// seconds): it reads 0 while a message sent there waits behind the whole
/// window. What was sent lately still counts such a shard as busy; counted
/// in deliveries, another tenant's backlog outweighs a quiet tenant's own
/// steady trickle (20 events/s settle near 200).
#[derive(Debug)]
struct ShardLoad {
    recent: Vec<f64>,
    /// Sampled depth + `recent`, kept up to date by both.
    score: Vec<f64>,
    sampled: Vec<u32>,
}

impl ShardLoad {
    fn new(shards: usize) -> Self {
        Self { recent: vec![0.0; shards], score: vec![0.0; shards], sampled: vec![0; shards] }
    }

    fn sent(&mut self, shard: usize, deliveries: usize) {
        self.recent[shard] += deliveries as f64;
        self.score[shard] += deliveries as f64;
    }

    fn sampled(&mut self, depths: impl Iterator<Item = Option<u32>>) {
        for (shard, depth) in depths.enumerate() {
            if let Some(depth) = depth {
                self.sampled[shard] = depth;
            }
            self.recent[shard] *= RECENT_DECAY;
            self.score[shard] = f64::from(self.sampled[shard]) + self.recent[shard];
        }
    }
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
    pub async fn open(config: &BrokerConfig, sightings: Arc<EmptySightings>) -> Result<Self, PublishError> {
        match tokio::time::timeout(broker::SETUP_TIMEOUT, Self::open_untimed(config, sightings)).await {
            Ok(session) => session,
            Err(_) => Err(BrokerError::SetupTimeout(broker::SETUP_TIMEOUT).into()),
        }
    }

    async fn open_untimed(config: &BrokerConfig, sightings: Arc<EmptySightings>) -> Result<Self, PublishError> {
        let connection = broker::connect(config, "relayops-publisher").await?;
        let channel = broker::open_confirming_channel(&connection).await?;
        let topology = Topology::new(config);
        topology.declare(&channel).await?;
        let load = Arc::new(Mutex::new(ShardLoad::new(topology.ready_shards.all().len())));
        // A passive declare that fails closes its channel: never the publishing one.
        let sampling = broker::open_channel(&connection).await?;
        let task = sample_depths(sampling, topology.clone(), Arc::clone(&load), sightings);
        Ok(Self { connection, channel, topology, load, _sampler: Some(AbortOnDrop(tokio::spawn(task))) })
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
    fn route(&self, message: &Outgoing) -> (&str, &str) {
        match QueueMessage::deserialize(&message.envelope).map(|queued| queued.destination()) {
            Ok(Destination::Ready { tenant }) => {
                let shards = &self.topology.ready_shards;
                let mut load = self.load.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                let chosen = shards.choose(tenant, &load.score);
                load.sent(chosen, message.rows.iter().map(|(_, deliveries)| deliveries).sum());
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
            let (exchange, routing_key) = self.route(message);
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
/// session's own drop ends it sooner): for the choice of shard, and for the
/// recovery pass's sightings of empty queues. A failed or slow sample keeps
/// the previous figures: the choice of shard is a preference, never a
/// condition for publishing; a missed sighting only delays recovery.
async fn sample_depths(
    channel: Channel,
    topology: Topology,
    load: Arc<Mutex<ShardLoad>>,
    sightings: Arc<EmptySightings>,
) {
    while channel.status().connected() {
        let started = Instant::now();
        let shards = topology.ready_shards.all();
        let sampled = join_all(shards.iter().map(|shard| broker::queue_depth(&channel, &shard.queue)));
        if let Ok(sampled) = tokio::time::timeout(Duration::from_secs(1), sampled).await {
            let depths: Vec<Option<u32>> = sampled.into_iter().map(Result::ok).collect();
            // The depths were read after `started`: a queue read empty was
            // empty at some moment after it, so `started` is a safe time.
            sightings.sampled(&depths, started);
            let mut load = load.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            load.sampled(depths.into_iter());
        }
        tokio::time::sleep(DEPTH_SAMPLE_EVERY.saturating_sub(started.elapsed())).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_read_empty_still_counts_what_was_sent_it_lately() {
        let mut load = ShardLoad::new(3);
        load.sent(1, 1_000);
        load.sent(2, 1);
        // The busy shard's messages all sit in a worker's prefetch window: 0 ready.
        load.sampled([Some(0), Some(0), Some(0)].into_iter());
        assert!(load.score[1] > 900.0 && load.score[2] < 1.0, "{:?}", load.score);
        load.sampled([Some(0), None, Some(7)].into_iter());
        assert_eq!(load.sampled, [0, 0, 7], "an unread shard keeps its last depth");
        assert!(load.score[2] > 7.0 && load.score[2] < 8.0, "{:?}", load.score);
    }
}
