//! Ingest backpressure. A sampler measures the outbox backlog (rows not yet
//! published) and the ready-queue depth on an interval — never per request —
//! and ingest refuses new events with 503 + `Retry-After` while either is over
//! its threshold. It fails closed: no recent sample, or a measurement that
//! could not be taken, also refuses, because accepting work we cannot see
//! draining is how queues grow without bound.
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use lapin::options::QueueDeclareOptions;
use serde::Serialize;

use crate::broker::{self, Topology};
use crate::config::{BackpressureConfig, BrokerConfig};
use crate::db::Pool;
use crate::repo::outbox;

/// One measurement; `None` where it could not be taken.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct PressureSample {
    pub outbox_backlog: Option<i64>,
    pub ready_depth: Option<u32>,
}

/// Why ingest is refusing, for the client and for readiness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: String,
    pub retry_after_secs: u64,
}

pub struct Backpressure {
    config: BackpressureConfig,
    latest: RwLock<Option<(Instant, PressureSample)>>,
}

impl Backpressure {
    pub fn new(config: BackpressureConfig) -> Arc<Self> {
        Arc::new(Self { config, latest: RwLock::new(None) })
    }

    pub fn record(&self, sample: PressureSample) {
        *self.latest.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some((Instant::now(), sample));
    }

    fn latest(&self) -> Option<(Instant, PressureSample)> {
        *self.latest.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `Ok` when ingest may accept work.
    pub fn check(&self) -> Result<(), Refusal> {
        let refuse = |reason: String| Err(Refusal { reason, retry_after_secs: self.config.retry_after_secs });
        let Some((taken_at, sample)) = self.latest() else {
            return refuse("backpressure has not been measured yet".into());
        };
        if taken_at.elapsed() > self.config.sample_interval * 3 {
            return refuse("backpressure measurements are stale".into());
        }
        match sample.outbox_backlog {
            None => return refuse("the outbox backlog cannot be measured".into()),
            Some(backlog) if backlog > self.config.max_outbox_backlog => {
                return refuse(format!("outbox backlog {backlog} is over the limit {}", self.config.max_outbox_backlog))
            }
            Some(_) => {}
        }
        match sample.ready_depth {
            None => refuse("the ready queue depth cannot be measured".into()),
            Some(depth) if depth > self.config.max_ready_depth => {
                refuse(format!("ready queue depth {depth} is over the limit {}", self.config.max_ready_depth))
            }
            Some(_) => Ok(()),
        }
    }

    /// The state as readiness reports it.
    pub fn report(&self) -> serde_json::Value {
        let sample = self.latest().map(|(_, sample)| sample).unwrap_or_default();
        serde_json::json!({
            "accepting": self.check().is_ok(),
            "reason": self.check().err().map(|refusal| refusal.reason),
            "outbox_backlog": sample.outbox_backlog,
            "ready_depth": sample.ready_depth,
            "max_outbox_backlog": self.config.max_outbox_backlog,
            "max_ready_depth": self.config.max_ready_depth,
        })
    }

    /// Takes a first sample, then keeps sampling on a background task.
    pub async fn start_sampler(self: &Arc<Self>, pool: Pool, broker: BrokerConfig) -> tokio::task::JoinHandle<()> {
        let mut sampler = Sampler { pool, broker, channel: None };
        self.record(sampler.sample().await);
        let this = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(this.config.sample_interval).await;
                this.record(sampler.sample().await);
            }
        })
    }
}

struct Sampler {
    pool: Pool,
    broker: BrokerConfig,
    channel: Option<(lapin::Connection, lapin::Channel)>,
}

impl Sampler {
    async fn sample(&mut self) -> PressureSample {
        let outbox_backlog = match self.pool.get().await {
            Ok(client) => outbox::backlog(&client).await.ok(),
            Err(_) => None,
        };
        PressureSample { outbox_backlog, ready_depth: self.ready_depth().await }
    }

    async fn ready_depth(&mut self) -> Option<u32> {
        let usable = self
            .channel
            .as_ref()
            .is_some_and(|(connection, channel)| connection.status().connected() && channel.status().connected());
        if !usable {
            self.channel = None;
            let connection = broker::connect(&self.broker, "relayops-backpressure").await.ok()?;
            let channel = broker::open_channel(&connection).await.ok()?;
            Topology::new(&self.broker).declare(&channel).await.ok()?;
            self.channel = Some((connection, channel));
        }
        let (_, channel) = self.channel.as_ref()?;
        let passive = QueueDeclareOptions { passive: true, ..Default::default() };
        let queue = Topology::new(&self.broker).ready_queue;
        match tokio::time::timeout(Duration::from_secs(2), channel.queue_declare(&queue, passive, Default::default()))
            .await
        {
            Ok(Ok(declared)) => Some(declared.message_count()),
            _ => {
                self.channel = None;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauge(interval: Duration) -> Arc<Backpressure> {
        Backpressure::new(BackpressureConfig {
            max_outbox_backlog: 10,
            max_ready_depth: 5,
            sample_interval: interval,
            retry_after_secs: 3,
        })
    }

    fn sample(outbox_backlog: Option<i64>, ready_depth: Option<u32>) -> PressureSample {
        PressureSample { outbox_backlog, ready_depth }
    }

    #[test]
    fn accepts_only_with_a_fresh_sample_under_both_limits() {
        let gauge = gauge(Duration::from_secs(60));
        assert!(gauge.check().is_err(), "no sample yet: closed");
        gauge.record(sample(Some(10), Some(5)));
        assert!(gauge.check().is_ok(), "at the limits: open");
        gauge.record(sample(Some(11), Some(0)));
        assert!(gauge.check().unwrap_err().reason.contains("outbox backlog 11"));
        gauge.record(sample(Some(0), Some(6)));
        assert!(gauge.check().unwrap_err().reason.contains("ready queue depth 6"));
        gauge.record(sample(None, Some(0)));
        assert!(gauge.check().unwrap_err().reason.contains("cannot be measured"), "unmeasurable: closed");
        gauge.record(sample(Some(0), None));
        assert_eq!(gauge.check().unwrap_err().retry_after_secs, 3);
    }

    #[test]
    fn a_stale_sample_fails_closed() {
        let gauge = gauge(Duration::from_millis(1));
        gauge.record(sample(Some(0), Some(0)));
        std::thread::sleep(Duration::from_millis(10));
        assert!(gauge.check().unwrap_err().reason.contains("stale"));
    }
}
