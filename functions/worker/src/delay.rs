//! Sending a message round again: to a retry queue whose fixed delay is the
//! longest not above the wait, or straight to the ready queue when there is no
//! wait. Publishes are confirmed; if one fails, nothing is lost: after a retry
//! or a deferral the row is `scheduled` in Postgres and the recovery pass
//! re-enqueues it once overdue; a postponed message (row untouched) is
//! requeued instead of acked.
use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::publisher_confirm::Confirmation;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection};
use relayops_shared::broker::{self, BrokerError, Topology};

/// How many times in a row flow control deferred the message.
pub const THROTTLES_HEADER: &str = "x-relayops-throttles";

pub struct DelayPublisher {
    channel: Channel,
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
    pub async fn open(connection: &Connection, topology: Topology) -> Result<Self, BrokerError> {
        let channel = broker::open_channel(connection).await?;
        channel.confirm_select(ConfirmSelectOptions::default()).await.map_err(BrokerError::Channel)?;
        Ok(Self { channel, topology })
    }

    pub async fn publish(&self, body: &[u8], wait: Duration, throttles: u32) -> Result<(), DelayError> {
        let (exchange, routing_key, queue) = if wait.is_zero() {
            (&self.topology.exchange, &self.topology.ready_routing_key, &self.topology.ready_queue)
        } else {
            let bucket = self.topology.bucket_for(wait);
            (&self.topology.retry_exchange, &bucket.routing_key, &bucket.queue)
        };
        let error = |source| DelayError::Publish { queue: queue.clone(), source };
        let mut headers = FieldTable::default();
        headers.insert(THROTTLES_HEADER.into(), AMQPValue::LongLongInt(i64::from(throttles)));
        let properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("application/json".into())
            .with_headers(headers);
        let options = BasicPublishOptions { mandatory: true, ..Default::default() };
        let confirm =
            self.channel.basic_publish(exchange, routing_key, options, body, properties).await.map_err(error)?;
        match confirm.await.map_err(error)? {
            Confirmation::Ack(None) => Ok(()),
            _ => Err(DelayError::Refused { queue: queue.clone() }),
        }
    }
}
