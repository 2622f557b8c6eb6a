//! Sending a message round again: to a delay queue whose fixed delay is the
//! longest not above the wait, or straight to a ready shard when there is no
//! wait — in both cases back to the ready shard it arrived by, or its
//! tenant's own ([`ReturnTo`], `Topology::return_shard`), never one shared
//! by every tenant's returns. Publishes are confirmed; if one fails, nothing is lost: after a retry
//! the row is `scheduled` in Postgres and the recovery pass re-enqueues it
//! once overdue; a message whose row may still be `pending` is requeued
//! instead of acked. A refusal also renews the channel
//! ([`DelayPublisher::publish`]).
//!
//! A message may be marked to recheck a leased row ([`RECHECK_HEADER`]): one
//! published before the attempt it follows is recorded (an admitted
//! delivery's retry, [`crate::admission`]), which may arrive while the row is
//! still leased and must then come back, not be dropped.
use std::sync::Arc;
use std::time::Duration;

use lapin::message::Delivery;
use lapin::options::BasicPublishOptions;
use lapin::publisher_confirm::Confirmation;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection};
use relayops_shared::broker::{self, BrokerError, Topology, DELAY_HEADER};
use relayops_shared::ids::TenantId;

/// The header of a message that, finding its delivery leased, comes back
/// after this many milliseconds (and twice as many the next time) instead
/// of being dropped.
pub const RECHECK_HEADER: &str = "x-relayops-recheck-ms";
/// The first recheck's wait: the shortest retry queue serves it.
pub const FIRST_RECHECK: Duration = Duration::from_millis(250);
/// Rechecks double up to this (a lease that outlives them all has expired by
/// then, and the row is claimable).
const LONGEST_RECHECK: Duration = Duration::from_secs(30);

/// The recheck wait a message carries ([`RECHECK_HEADER`]), if any.
pub fn recheck_of(delivery: &Delivery) -> Option<Duration> {
    let headers = delivery.properties.headers().as_ref()?;
    match headers.inner().get(RECHECK_HEADER)? {
        AMQPValue::LongLongInt(ms) => u64::try_from(*ms).ok().map(Duration::from_millis),
        _ => None,
    }
}

/// The recheck wait after one of `wait`.
pub fn next_recheck(wait: Duration) -> Duration {
    (wait * 2).min(LONGEST_RECHECK)
}

/// Where a message sent round comes back to: the ready shard it arrived by
/// if it came by one, else its tenant's own (see `Topology::return_shard`).
#[derive(Debug, Clone, Copy)]
pub struct ReturnTo<'a> {
    tenant: Option<TenantId>,
    arrived_by: Option<&'a str>,
}

impl<'a> ReturnTo<'a> {
    /// Back to the shard `message` arrived by (a delivery of `tenant`, if known).
    pub fn arrived(tenant: Option<TenantId>, message: &'a Delivery) -> Self {
        Self { tenant, arrived_by: Some(message.routing_key.as_str()) }
    }

    /// To the tenant's own first shard (a delivery no message brought).
    pub fn tenants_own(tenant: TenantId) -> Self {
        Self { tenant: Some(tenant), arrived_by: None }
    }
}

pub struct DelayPublisher {
    connection: Arc<Connection>,
    /// Replaced after a refusal; each publish uses the one current when it starts.
    channel: tokio::sync::RwLock<Channel>,
    topology: Topology,
}

#[derive(Debug, thiserror::Error)]
pub enum DelayError {
    #[error("publishing to {queue} failed")]
    Publish {
        queue: String,
        #[source]
        source: lapin::Error,
    },
    #[error("the broker did not accept the message for {queue}")]
    Refused { queue: String },
}

impl DelayPublisher {
    pub async fn open(connection: Arc<Connection>, topology: Topology) -> Result<Self, BrokerError> {
        let channel = tokio::sync::RwLock::new(broker::open_confirming_channel(&connection).await?);
        Ok(Self { connection, channel, topology })
    }

    /// Publishes and awaits the broker's confirm. After a refusal the next
    /// publishes go out on a new channel (see [`broker::close_replaced`]).
    pub async fn publish(&self, body: &[u8], wait: Duration, to: ReturnTo<'_>) -> Result<(), DelayError> {
        self.publish_rechecking(body, wait, None, to).await
    }

    /// As [`publish`](Self::publish), the message marked to recheck a leased
    /// row after `recheck` ([`RECHECK_HEADER`]) when given.
    pub async fn publish_rechecking(
        &self,
        body: &[u8],
        wait: Duration,
        recheck: Option<Duration>,
        to: ReturnTo<'_>,
    ) -> Result<(), DelayError> {
        let shard = self.topology.return_shard(to.tenant, to.arrived_by);
        let mut headers = FieldTable::default();
        let (exchange, queue) = if wait.is_zero() {
            (&self.topology.exchange, &shard.queue)
        } else {
            let bucket = self.topology.bucket_for(wait);
            headers.insert(ShortString::from(DELAY_HEADER), AMQPValue::LongString(bucket.key.as_str().into()));
            (&self.topology.delay_exchange, &bucket.queue)
        };
        let error = |source| DelayError::Publish { queue: queue.clone(), source };
        if let Some(recheck) = recheck {
            let ms = AMQPValue::LongLongInt(recheck.as_millis().min(i64::MAX as u128) as i64);
            headers.insert(ShortString::from(RECHECK_HEADER), ms);
        }
        let properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("application/json".into())
            .with_headers(headers);
        let routing_key = &shard.routing_key;
        let options = BasicPublishOptions { mandatory: true, ..Default::default() };
        let channel = self.channel.read().await.clone();
        let confirm = channel.basic_publish(exchange, routing_key, options, body, properties).await.map_err(error)?;
        match confirm.await.map_err(error)? {
            Confirmation::Ack(None) => Ok(()),
            _ => {
                self.renew(&channel).await;
                Err(DelayError::Refused { queue: queue.clone() })
            }
        }
    }

    /// Replaces `refused_on` with a new channel, unless another refusal
    /// already did. Publishes still awaiting a confirm on the old channel
    /// fail when it closes: each is handled as a publish that failed.
    async fn renew(&self, refused_on: &Channel) {
        let mut current = self.channel.write().await;
        if current.id() != refused_on.id() {
            return;
        }
        match broker::open_confirming_channel(&self.connection).await {
            Ok(channel) => {
                let old = std::mem::replace(&mut *current, channel);
                drop(current);
                broker::close_replaced(old).await;
            }
            Err(error) => {
                tracing::warn!(error = %relayops_shared::telemetry::error_chain(&error), "renewing the retry channel failed")
            }
        }
    }
}
