//! Exchange and queue names, and their idempotent declaration. Everything is
//! durable. The ready queue is a quorum queue: it is replicated on a cluster,
//! confirms only after the write is on a majority, and bounds redelivery of a
//! poison message (`x-delivery-limit`). See ARCHITECTURE.md for the choice.
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, ExchangeKind};

use super::BrokerError;
use crate::config::BrokerConfig;

/// The names of one installation's exchanges and queues.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Direct exchange that routes work to the ready queue.
    pub exchange: String,
    pub ready_queue: String,
    pub ready_routing_key: String,
    queue_expires_ms: Option<u32>,
}

/// A message redelivered this many times without an ack (a worker crashing on
/// it every time) is dropped by the broker; the delivery row stays recoverable.
const DELIVERY_LIMIT: i64 = 20;

impl Topology {
    pub fn new(config: &BrokerConfig) -> Self {
        let ns = &config.namespace;
        Self {
            exchange: format!("{ns}.work"),
            ready_queue: format!("{ns}.ready"),
            ready_routing_key: "ready".to_owned(),
            queue_expires_ms: config.queue_expires_ms,
        }
    }

    fn queue_arguments(&self) -> FieldTable {
        let mut arguments = FieldTable::default();
        arguments.insert(
            ShortString::from("x-queue-type"),
            AMQPValue::LongString("quorum".into()),
        );
        arguments.insert(
            ShortString::from("x-delivery-limit"),
            AMQPValue::LongLongInt(DELIVERY_LIMIT),
        );
        if let Some(expires) = self.queue_expires_ms {
            arguments.insert(ShortString::from("x-expires"), AMQPValue::LongUInt(expires));
        }
        arguments
    }

    /// Declares everything; safe to call from every process at every start.
    pub async fn declare(&self, channel: &Channel) -> Result<(), BrokerError> {
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        channel
            .exchange_declare(
                &self.exchange,
                ExchangeKind::Direct,
                durable,
                FieldTable::default(),
            )
            .await
            .map_err(BrokerError::Topology)?;
        channel
            .queue_declare(
                &self.ready_queue,
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                self.queue_arguments(),
            )
            .await
            .map_err(BrokerError::Topology)?;
        channel
            .queue_bind(
                &self.ready_queue,
                &self.exchange,
                &self.ready_routing_key,
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(BrokerError::Topology)?;
        Ok(())
    }
}
