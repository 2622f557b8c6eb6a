//! Dead-letter alerting. The alerter reads dead letters through its OWN
//! quorum queue, `<ns>.dead.alerts`, bound to the `<ns>.dead` fanout exchange:
//! every dead letter reaches both the operators' DLQ (`<ns>.dead`, left
//! untouched for inspection and replay) and this queue. For each one it posts
//! an alert to `RELAYOPS_ALERT_WEBHOOK_URL`, unless the endpoint is within its
//! cool-down ([`cooldown`]), and acks only after the receiver answered 2xx;
//! otherwise it waits `RELAYOPS_ALERT_RETRY_MS` and tries again, holding the
//! message unacked. Prefetch 1: alerts go out one at a time, in order.
//!
//! Invariant: the alerter never reads or writes Postgres and never touches the
//! operators' DLQ; it only turns dead letters into alerts.
pub mod alert;
pub mod cooldown;

use std::time::Instant;

use futures_util::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use relayops_shared::broker::{self, BrokerError, QueueMessage, Topology};
use relayops_shared::config::{AlertConfig, BrokerConfig};
use relayops_shared::observe::names::DEAD_LETTER_ALERTS;
use relayops_shared::telemetry::error_chain;
use tokio::sync::watch;

use cooldown::{Cooldown, Decision};

pub struct Alerter {
    broker: BrokerConfig,
    config: AlertConfig,
    http: reqwest::Client,
    cooldown: tokio::sync::Mutex<Cooldown>,
    consuming: watch::Sender<bool>,
}

impl Alerter {
    pub fn new(broker: BrokerConfig, config: AlertConfig) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            // An operator's URL, but still: a redirect is not an acceptance.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        let cooldown = tokio::sync::Mutex::new(Cooldown::new(config.cooldown));
        Ok(Self { broker, config, http, cooldown, consuming: watch::channel(false).0 })
    }

    /// Whether the alerter is consuming now (for readiness and tests).
    pub fn consuming(&self) -> watch::Receiver<bool> {
        self.consuming.subscribe()
    }

    /// Consumes until the process ends, reconnecting with a growing pause.
    pub async fn run(&self) {
        broker::consume_forever("alerter", &self.consuming, || self.consume()).await
    }

    async fn consume(&self) -> Result<(), BrokerError> {
        let connection = broker::connect(&self.broker, "relayops-alerter").await?;
        let channel = broker::open_channel(&connection).await?;
        let topology = Topology::new(&self.broker);
        topology.declare(&channel).await?;
        topology.declare_alert_queue(&channel).await?;
        let queue = topology.alert_queue();
        // One alert at a time: the cool-down sees them in order.
        channel.basic_qos(1, BasicQosOptions::default()).await.map_err(BrokerError::Channel)?;
        let mut consumer = channel
            .basic_consume(&queue, "relayops-alerter", BasicConsumeOptions::default(), FieldTable::default())
            .await
            .map_err(BrokerError::Channel)?;
        tracing::info!(queue = %queue, "alerter consuming");
        self.consuming.send_replace(true);
        while let Some(next) = consumer.next().await {
            let delivery = next.map_err(BrokerError::Channel)?;
            // Retried in place rather than nacked back to the queue: quorum
            // queues (by default on RabbitMQ 4) drop a message returned too
            // often, and an alert must not vanish because the receiver was
            // down for a while. If the connection drops meanwhile, the broker
            // redelivers the message, and the alert may be sent twice.
            while !self.handle(&delivery.data).await {
                tokio::time::sleep(self.config.retry_pause).await;
            }
            if let Err(error) = delivery.acker.ack(BasicAckOptions::default()).await {
                tracing::warn!(error = %error, "could not settle a dead letter with the broker; it will come back");
            }
        }
        Ok(())
    }

    /// Alerts about one dead letter (or suppresses it). `true` when the
    /// message is dealt with and may be acked.
    async fn handle(&self, body: &[u8]) -> bool {
        let letter = match serde_json::from_slice::<QueueMessage>(body) {
            Ok(QueueMessage::DeadLetterV1(letter)) => Some(letter),
            _ => None,
        };
        let key = letter.as_ref().map_or_else(|| "unreadable".to_owned(), |letter| letter.endpoint_id.to_string());
        let mut cooldown = self.cooldown.lock().await;
        let held_back = match cooldown.decide(&key, Instant::now()) {
            Decision::Suppress => {
                cooldown.held_back(&key);
                metrics::counter!(DEAD_LETTER_ALERTS, "result" => "suppressed").increment(1);
                tracing::info!(endpoint_id = %key, "dead-letter alert suppressed by the cool-down");
                return true;
            }
            Decision::Send { held_back } => held_back,
        };
        let body = match &letter {
            Some(letter) => alert::dead_letter_alert(letter, held_back, self.config.cooldown),
            None => alert::unreadable_alert(body.len(), held_back),
        };
        match alert::post(&self.http, &self.config.webhook_url, &body).await {
            Ok(()) => {
                cooldown.sent(&key, Instant::now());
                metrics::counter!(DEAD_LETTER_ALERTS, "result" => "sent").increment(1);
                tracing::info!(endpoint_id = %key, held_back, "dead-letter alert sent");
                true
            }
            Err(error) => {
                metrics::counter!(DEAD_LETTER_ALERTS, "result" => "failed").increment(1);
                tracing::warn!(endpoint_id = %key, error = %error_chain(&error), "dead-letter alert not accepted; will retry");
                false
            }
        }
    }
}
