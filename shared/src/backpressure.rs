//! Ingest backpressure. Samplers measure the outbox backlog (rows not yet
//! published) and the ready-queue depth on an interval — never per request —
//! and ingest refuses new events with 503 + `Retry-After` while either is over
//! its threshold.
//!
//! Only Postgres is needed to accept an event (SPEC §3.2): the outbox exists so
//! that ingest outlives a broker outage. So the outbox backlog alone decides
//! when the broker is away — it fails closed (no recent measurement refuses,
//! since the event could not be stored either) — while the ready-queue depth
//! counts only when it could be measured recently. The two are sampled by
//! separate tasks, so a broker that is slow to refuse a connection never delays
//! the outbox measurement.
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::broker::{self, Topology};
use crate::config::{BackpressureConfig, BrokerConfig};
use crate::db::Pool;
use crate::repo::outbox;
use crate::task::AbortOnDrop;

/// The latest measurements; `None` where none was taken recently.
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

/// One measurement and when it was taken (`None`: it failed).
type Reading<T> = RwLock<Option<(Instant, Option<T>)>>;

pub struct Backpressure {
    config: BackpressureConfig,
    outbox_backlog: Reading<i64>,
    ready_depth: Reading<u32>,
}

fn latest<T: Copy>(reading: &Reading<T>) -> Option<T> {
    reading.read().unwrap_or_else(|poisoned| poisoned.into_inner()).and_then(|(_, value)| value)
}

fn store<T>(reading: &Reading<T>, value: Option<T>) {
    *reading.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some((Instant::now(), value));
}

impl Backpressure {
    pub fn new(config: BackpressureConfig) -> Arc<Self> {
        Arc::new(Self { config, outbox_backlog: RwLock::new(None), ready_depth: RwLock::new(None) })
    }

    pub fn record_outbox_backlog(&self, backlog: Option<i64>) {
        store(&self.outbox_backlog, backlog);
    }

    pub fn record_ready_depth(&self, depth: Option<u32>) {
        store(&self.ready_depth, depth);
    }

    /// A reading taken within three sample intervals, as (age-checked) value.
    fn fresh<T: Copy>(&self, reading: &Reading<T>) -> Result<Option<T>, &'static str> {
        match *reading.read().unwrap_or_else(|poisoned| poisoned.into_inner()) {
            None => Err("has not been measured yet"),
            Some((taken_at, _)) if taken_at.elapsed() > self.config.sample_interval * 3 => Err("is stale"),
            Some((_, value)) => Ok(value),
        }
    }

    /// The latest measurements that are still fresh.
    pub fn sample(&self) -> PressureSample {
        PressureSample {
            outbox_backlog: self.fresh(&self.outbox_backlog).ok().flatten(),
            ready_depth: self.fresh(&self.ready_depth).ok().flatten(),
        }
    }

    /// `Ok` when ingest may accept work.
    pub fn check(&self) -> Result<(), Refusal> {
        let refuse = |reason: String| Err(Refusal { reason, retry_after_secs: self.config.retry_after_secs });
        match self.fresh(&self.outbox_backlog) {
            Err(why) => return refuse(format!("the outbox backlog measurement {why}")),
            Ok(None) => return refuse("the outbox backlog cannot be measured".into()),
            Ok(Some(backlog)) if backlog > self.config.max_outbox_backlog => {
                return refuse(format!("outbox backlog {backlog} is over the limit {}", self.config.max_outbox_backlog))
            }
            Ok(Some(_)) => {}
        }
        // An unmeasurable ready queue (the broker is away) is no reason to
        // refuse: the outbox holds the work until it returns.
        match self.fresh(&self.ready_depth) {
            Ok(Some(depth)) if depth > self.config.max_ready_depth => {
                refuse(format!("ready queue depth {depth} is over the limit {}", self.config.max_ready_depth))
            }
            _ => Ok(()),
        }
    }

    /// The latest measurements, however old (for reports).
    fn latest(&self) -> PressureSample {
        PressureSample { outbox_backlog: latest(&self.outbox_backlog), ready_depth: latest(&self.ready_depth) }
    }

    /// The state as readiness reports it: whether ingest accepts (and why
    /// not) and the latest measurements.
    pub fn report(&self) -> serde_json::Value {
        let sample = self.latest();
        let refusal = self.check().err();
        serde_json::json!({
            "accepting": refusal.is_none(),
            "reason": refusal.map(|refusal| refusal.reason),
            "outbox_backlog": sample.outbox_backlog,
            "ready_depth": sample.ready_depth,
            "max_outbox_backlog": self.config.max_outbox_backlog,
            "max_ready_depth": self.config.max_ready_depth,
        })
    }

    /// Takes a first outbox sample, then keeps sampling both on background
    /// tasks; aborting the returned handle stops both.
    pub async fn start_sampler(self: &Arc<Self>, pool: Pool, broker: BrokerConfig) -> tokio::task::JoinHandle<()> {
        self.record_outbox_backlog(outbox_backlog(&pool).await);
        let interval = self.config.sample_interval;
        let this = Arc::clone(self);
        let outbox_sampler = tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                this.record_outbox_backlog(outbox_backlog(&pool).await);
            }
        });
        let this = Arc::clone(self);
        tokio::spawn(async move {
            // Aborting the returned handle ends both samplers.
            let _outbox_sampler = AbortOnDrop(outbox_sampler);
            let mut queue = ReadyQueue { broker, channel: None };
            loop {
                this.record_ready_depth(queue.depth(interval).await);
                tokio::time::sleep(interval).await;
            }
        })
    }
}

async fn outbox_backlog(pool: &Pool) -> Option<i64> {
    match pool.get().await {
        Ok(client) => outbox::backlog(&client).await.ok(),
        Err(_) => None,
    }
}

/// The ready queue's depth, over a connection kept between samples.
struct ReadyQueue {
    broker: BrokerConfig,
    channel: Option<(std::sync::Arc<lapin::Connection>, lapin::Channel)>,
}

impl ReadyQueue {
    async fn depth(&mut self, interval: Duration) -> Option<u32> {
        // Bounded, so a broker that never answers cannot stall the sampler.
        let limit = broker::SETUP_TIMEOUT.min(interval * 5).max(Duration::from_secs(2));
        match tokio::time::timeout(limit, self.measure()).await {
            Ok(Some(depth)) => Some(depth),
            _ => {
                self.channel = None;
                None
            }
        }
    }

    async fn measure(&mut self) -> Option<u32> {
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
        // Every ready shard counts: together they are the work waiting.
        let mut depth = 0u32;
        for shard in Topology::new(&self.broker).ready_shards.all() {
            depth = depth.saturating_add(broker::queue_depth(channel, &shard.queue).await.ok()?);
        }
        Some(depth)
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

    #[test]
    fn the_outbox_backlog_decides_and_a_measured_ready_queue_counts() {
        let gauge = gauge(Duration::from_secs(60));
        assert!(gauge.check().unwrap_err().reason.contains("not been measured"), "no sample yet: closed");
        gauge.record_outbox_backlog(Some(10));
        assert!(gauge.check().is_ok(), "at the limit, ready queue never measured: open");
        gauge.record_ready_depth(Some(5));
        assert!(gauge.check().is_ok(), "both at their limits: open");
        gauge.record_outbox_backlog(Some(11));
        assert!(gauge.check().unwrap_err().reason.contains("outbox backlog 11"));
        gauge.record_outbox_backlog(Some(0));
        gauge.record_ready_depth(Some(6));
        assert!(gauge.check().unwrap_err().reason.contains("ready queue depth 6"));
        gauge.record_outbox_backlog(None);
        assert!(gauge.check().unwrap_err().reason.contains("cannot be measured"), "no Postgres: closed");
        assert_eq!(gauge.check().unwrap_err().retry_after_secs, 3);
    }

    #[test]
    fn an_unmeasurable_broker_is_no_reason_to_refuse() {
        let gauge = gauge(Duration::from_secs(60));
        gauge.record_outbox_backlog(Some(3));
        gauge.record_ready_depth(Some(100));
        assert!(gauge.check().is_err());
        gauge.record_ready_depth(None);
        assert!(gauge.check().is_ok(), "the broker is away: the outbox holds the work");
        assert_eq!(gauge.sample(), PressureSample { outbox_backlog: Some(3), ready_depth: None });
    }

    #[test]
    fn a_stale_outbox_sample_fails_closed_and_a_stale_depth_is_ignored() {
        let gauge = gauge(Duration::from_millis(200));
        gauge.record_ready_depth(Some(100));
        gauge.record_outbox_backlog(Some(0));
        std::thread::sleep(Duration::from_millis(700));
        assert!(gauge.check().unwrap_err().reason.contains("stale"));
        gauge.record_outbox_backlog(Some(0));
        assert!(gauge.check().is_ok(), "an old over-limit depth no longer counts");
    }
}
