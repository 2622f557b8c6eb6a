//! One AMQP connection with a confirm-mode channel per [`Lane`] (the drain's
//! batches and the rows ingest hands over publish side by side, neither
//! waiting for the other's confirms), and pipelined publishing;
//! each message to a ready queue goes to one of its tenant's shards, the
//! less loaded (`ShardLoad`: depths sampled a few times a second by a task of
//! the session's own, on a channel of its own, never in a publish's way; plus
//! what this session published to each lately) and, unless its tenant sends
//! more than a shard's worth ([`TenantLoad`]), of the refuge shards
//! (`broker::shards`).
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use lapin::options::BasicPublishOptions;
use lapin::publisher_confirm::Confirmation;
use lapin::{BasicProperties, Channel, Connection};
use relayops_shared::broker::{self, BrokerError, Destination, QueueMessage, ReadyShards, Topology};
use relayops_shared::config::BrokerConfig;
use relayops_shared::db::DbError;
use relayops_shared::failpoint;
use relayops_shared::ids::TenantId;
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

/// Which of the session's channels a batch goes out on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Rows claimed from the outbox.
    Drain = 0,
    /// Rows ingest in this process handed over.
    Handed = 1,
}

pub struct Session {
    connection: Arc<Connection>,
    /// One confirming channel per [`Lane`], each replaced after refusals.
    channels: [Mutex<Channel>; 2],
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

/// What remains of a tenant's sends in [`TenantLoad`] after each sample: a
/// half-life of ~1 s, so a steady rate `r` settles near `1.5 r`.
const TENANT_DECAY: f64 = 0.87;
/// A tenant has a backlog (keeps to its own two shards, never the refuge
/// shards) once its decayed sends reach either figure: about 130
/// deliveries/s or 40 messages/s sustained, or a burst of that size. Well
/// under a shard's worth (a worker's prefetch window on a shard is half its
/// slots, in messages: 128 at the default 256, 8 at 16), so what a tenant
/// sends the refuge shards before it is judged fits in the workers'
/// windows and never queues there in front of a quiet tenant. Judged so
/// wrongly, a tenant loses only the refuge: it still has its own two shards.
const BACKLOG_DELIVERIES: f64 = 200.0;
const BACKLOG_MESSAGES: f64 = 64.0;

/// What one session sent each tenant lately, decayed by [`TENANT_DECAY`] at
/// each sample; a tenant is dropped once what it sent has faded. Whether it
/// has a backlog: from when either figure reaches its threshold until both
/// are under half of it.
#[derive(Debug, Default, Clone, Copy)]
struct TenantLoad {
    deliveries: f64,
    messages: f64,
    backlogged: bool,
}

impl TenantLoad {
    fn sent(&mut self, deliveries: usize) -> bool {
        self.deliveries += deliveries as f64;
        self.messages += 1.0;
        self.backlogged |= self.deliveries >= BACKLOG_DELIVERIES || self.messages >= BACKLOG_MESSAGES;
        self.backlogged
    }

    /// Decays; `false` once nothing is left worth keeping.
    fn decay(&mut self) -> bool {
        self.deliveries *= TENANT_DECAY;
        self.messages *= TENANT_DECAY;
        if self.deliveries < BACKLOG_DELIVERIES / 2.0 && self.messages < BACKLOG_MESSAGES / 2.0 {
            self.backlogged = false;
        }
        self.backlogged || self.messages >= 0.1
    }
}

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
    /// Per tenant that sent lately: whether it has a backlog.
    tenants: HashMap<TenantId, TenantLoad>,
}

impl ShardLoad {
    fn new(shards: usize) -> Self {
        Self { recent: vec![0.0; shards], score: vec![0.0; shards], sampled: vec![0; shards], tenants: HashMap::new() }
    }

    /// The shard a message of `deliveries` for `tenant` goes to, counted as sent.
    fn route(&mut self, shards: &ReadyShards, tenant: TenantId, deliveries: usize) -> usize {
        let backlogged = self.tenants.entry(tenant).or_default().sent(deliveries);
        let chosen = shards.choose(tenant, backlogged, &self.score);
        self.sent(chosen, deliveries);
        chosen
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
        self.tenants.retain(|_, tenant| tenant.decay());
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
        let handed = broker::open_confirming_channel(&connection).await?;
        let load = Arc::new(Mutex::new(ShardLoad::new(topology.ready_shards.all().len())));
        // A passive declare that fails closes its channel: never the publishing one.
        let sampling = broker::open_channel(&connection).await?;
        let task = sample_depths(sampling, topology.clone(), Arc::clone(&load), sightings);
        let channels = [Mutex::new(channel), Mutex::new(handed)];
        Ok(Self { connection, channels, topology, load, _sampler: Some(AbortOnDrop(tokio::spawn(task))) })
    }

    fn channel(&self, lane: Lane) -> Channel {
        self.channels[lane as usize].lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// `lane` publishes on a new channel from now on, after the broker
    /// refused messages (see [`broker::close_replaced`]); the old one, whose
    /// confirms were all awaited, is closed.
    pub async fn renew_channel(&self, lane: Lane) -> Result<(), PublishError> {
        let channel = broker::open_confirming_channel(&self.connection).await?;
        let old = std::mem::replace(
            &mut *self.channels[lane as usize].lock().unwrap_or_else(|poisoned| poisoned.into_inner()),
            channel,
        );
        broker::close_replaced(old).await;
        Ok(())
    }

    pub fn is_usable(&self) -> bool {
        self.connection.status().connected()
            && [Lane::Drain, Lane::Handed].iter().all(|lane| self.channel(*lane).status().connected())
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
                let chosen = load.route(shards, tenant, message.rows.iter().map(|(_, deliveries)| deliveries).sum());
                (&self.topology.exchange, &shards.all()[chosen].routing_key)
            }
            Ok(Destination::DeadLetters) | Err(_) => (&self.topology.dead_exchange, ""),
        }
    }

    /// Sends every message on `lane`'s channel, then awaits the confirms together.
    pub async fn publish_confirmed(
        &self,
        lane: Lane,
        messages: &[Outgoing],
        confirm_timeout: Duration,
    ) -> BatchResults {
        let channel = self.channel(lane);
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
            match channel.basic_publish(exchange, routing_key, options, &body, properties).await {
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

    #[test]
    fn a_tenant_sending_more_than_a_shards_worth_keeps_to_its_own_shards_until_it_calms_down() {
        let shards = ReadyShards::new("t", broker::DEFAULT_READY_SHARDS);
        let mut load = ShardLoad::new(shards.all().len());
        let (busy, quiet) = (TenantId::new(), TenantId::new());
        let own = shards.candidates(busy);
        let refuge = shards.refuge();
        // A 500-event batch travels as 16 messages of up to 32 deliveries:
        // the first spread over its own shards and the refuge shards.
        let first: Vec<usize> = (0..6).map(|_| load.route(&shards, busy, 32)).collect();
        assert!(first.iter().any(|shard| refuge.contains(shard)), "{first:?}");
        // Past 200 deliveries, only its own two.
        let later: Vec<usize> = (0..58).map(|_| load.route(&shards, busy, 32)).collect();
        assert!(later.iter().all(|shard| [own.0, own.1].contains(shard)), "{later:?}");
        // Four seconds after it stops (twenty samples), still judged by what it sent…
        for _ in 0..20 {
            load.sampled(std::iter::empty());
        }
        assert!(load.tenants[&busy].backlogged);
        // …five seconds after, it may take refuge again.
        for _ in 0..5 {
            load.sampled(std::iter::empty());
        }
        assert!(!load.tenants[&busy].backlogged);
        // A tenant posting one event at a time, 20 a second, never has a
        // backlog: with its own shards the busier, it takes refuge.
        for _ in 0..50 {
            for _ in 0..4 {
                let shard = load.route(&shards, quiet, 1);
                let (a, b) = shards.candidates(quiet);
                assert!(refuge.contains(&shard) || [a, b].contains(&shard));
            }
            load.sampled(
                [Some(0), Some(0), Some(0), Some(0), Some(0), Some(0), Some(0), Some(0), Some(0), Some(0)].into_iter(),
            );
            assert!(!load.tenants[&quiet].backlogged);
        }
        for _ in 0..100 {
            load.sampled(std::iter::empty());
        }
        assert!(load.tenants.is_empty(), "faded tenants are forgotten: {}", load.tenants.len());
    }
}
