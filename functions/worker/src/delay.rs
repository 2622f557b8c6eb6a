//! Sending a message round again: to a retry queue whose fixed delay is the
//! longest not above the wait, or straight to the ready queue when there is no
//! wait. Publishes are confirmed; if one fails, nothing is lost: after a retry
//! the row is `scheduled` in Postgres and the recovery pass re-enqueues it
//! once overdue; a message whose row may still be `pending` is requeued
//! instead of acked. A refusal also renews the channel
//! ([`DelayPublisher::publish`]).
use std::sync::Arc;
use std::time::Duration;

use lapin::options::BasicPublishOptions;
use lapin::publisher_confirm::Confirmation;
use lapin::{BasicProperties, Channel, Connection};
use relayops_shared::broker::{self, BrokerError, Topology};

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
    pub async fn publish(&self, body: &[u8], wait: Duration) -> Result<(), DelayError> {
        let (exchange, routing_key, queue) = if wait.is_zero() {
            (&self.topology.exchange, &self.topology.ready_routing_key, &self.topology.ready_queue)
        } else {
            let bucket = self.topology.bucket_for(wait);
            (&self.topology.retry_exchange, &bucket.routing_key, &bucket.queue)
        };
        let error = |source| DelayError::Publish { queue: queue.clone(), source };
        let properties = BasicProperties::default().with_delivery_mode(2).with_content_type("application/json".into());
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
