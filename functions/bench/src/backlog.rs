//! The backlog-drain scenario: events pile up while no worker runs, then a
//! worker process the bench starts itself drains them. Measures the drain rate,
//! the worker's peak memory with its prefetch full, and ingest latency from a
//! light probe running during the drain (ingest must stay responsive).
//!
//! The target must run WITHOUT a worker (`relayops api`, which includes the
//! publisher); the bench starts `<relayops-bin> worker` with the environment it
//! was given.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use relayops_shared::db::Pool;
use serde::Serialize;

use crate::cost::{Cost, Meter};
use crate::scenarios::Target;
use crate::stats::{percentiles, Percentiles};

#[derive(Debug, Serialize)]
pub struct BacklogFigures {
    pub events: usize,
    pub accepted: usize,
    pub worker_prefetch: u32,
    pub drain_secs: f64,
    pub deliveries_per_sec: f64,
    pub complete: bool,
    pub worker_peak_rss_mib: f64,
    /// A probe of 20 events/s (no subscriber) while the worker drains.
    pub ingest_during_drain: Percentiles,
    /// From the worker's start until every delivery is recorded (the probe's
    /// events included).
    pub cost: Option<Cost>,
}

pub struct BacklogRun<'a> {
    pub target: &'a Target,
    pub pool: &'a Pool,
    pub relayops_bin: &'a str,
    pub events: usize,
    pub worker_prefetch: u32,
    pub timeout: Duration,
}

impl BacklogRun<'_> {
    pub async fn run(&self) -> anyhow::Result<BacklogFigures> {
        let target = self.target;
        // The endpoint may have as many requests open as the worker prefetches.
        target.endpoint("hook/backlog-0", "bench.backlog", self.worker_prefetch.min(1000)).await?;
        target.receiver.reset();
        eprintln!("[backlog] queueing {} events with no worker running", self.events);
        let (queued, _) = target.ingest_batches("bench.backlog", self.events, 500, 4).await;
        crate::worker_process::wait_for_published_outbox(self.pool, self.timeout).await?;

        eprintln!("[backlog] starting a worker (prefetch {})", self.worker_prefetch);
        let meter = Meter::start();
        let mut worker = crate::worker_process::spawn_worker(self.relayops_bin, self.worker_prefetch)?;
        let pid = worker.id().unwrap_or_default();
        let started = Instant::now();
        let stop_probe = Arc::new(AtomicBool::new(false));
        let probe = tokio::spawn({
            let (target, stop) = (target.clone(), stop_probe.clone());
            async move {
                let mut latencies = Vec::new();
                let mut ticks = tokio::time::interval(Duration::from_millis(50));
                let mut seq = 0;
                while !stop.load(Ordering::Relaxed) {
                    ticks.tick().await;
                    if let (Ok(posted), _) = target.post_one("bench.none", seq).await {
                        latencies.push(posted.latency_ms);
                    }
                    seq += 1;
                }
                latencies
            }
        });
        let deadline = started + self.timeout;
        let mut last_progress = Instant::now();
        while target.receiver.delivered_to("backlog") < queued.accepted && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if last_progress.elapsed() >= Duration::from_secs(1) {
                eprintln!("[backlog] delivered {}/{}", target.receiver.delivered_to("backlog"), queued.accepted);
                last_progress = Instant::now();
            }
        }
        let delivered = target.receiver.delivered_to("backlog");
        let drain = {
            let arrivals = target.receiver.arrivals.lock().map_err(|_| anyhow::anyhow!("receiver lock"))?;
            let last = arrivals.by_delivery.values().map(|(_, at, _)| *at).max().unwrap_or(started);
            (last - started).as_secs_f64().max(0.001)
        };
        let peak_rss = crate::memory::peak_rss_mib(pid);
        target.await_recorded().await?;
        let cost = meter.finish("deliveries", delivered);
        let _ = worker.kill().await;
        stop_probe.store(true, Ordering::Relaxed);
        let probe_latencies = probe.await.unwrap_or_default();
        Ok(BacklogFigures {
            events: self.events,
            accepted: queued.accepted,
            worker_prefetch: self.worker_prefetch,
            drain_secs: drain,
            deliveries_per_sec: delivered as f64 / drain,
            complete: delivered >= queued.accepted,
            worker_peak_rss_mib: peak_rss,
            ingest_during_drain: percentiles(probe_latencies),
            cost,
        })
    }
}
