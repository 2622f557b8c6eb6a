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

use serde::Serialize;

use crate::cost::{Cost, Meter};
use crate::stats::{percentiles, Percentiles};
use crate::worker_process::ApiOnly;

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
    pub api_only: ApiOnly<'a>,
    pub events: usize,
}

impl BacklogRun<'_> {
    pub async fn run(&self) -> anyhow::Result<BacklogFigures> {
        let (api_only, target) = (&self.api_only, self.api_only.target);
        let prefetch = api_only.worker_prefetch;
        // The endpoint may have as many requests open as the worker prefetches.
        target.endpoint("hook/backlog-0", "bench.backlog", prefetch.min(1000)).await?;
        target.receiver.reset();
        eprintln!("[backlog] queueing {} events with no worker running", self.events);
        let (queued, _) = target.ingest_batches("bench.backlog", self.events, 500, 4).await;
        api_only.wait_for_published_outbox().await?;

        eprintln!("[backlog] starting a worker (prefetch {prefetch})");
        let meter = Meter::start();
        let mut worker = api_only.spawn_worker()?;
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
        let drained = api_only.await_drain("backlog", queued.accepted, started, "backlog").await;
        let peak_rss = crate::memory::peak_rss_mib(pid);
        target.await_recorded().await?;
        let cost = meter.finish("deliveries", drained.delivered);
        let _ = worker.kill().await;
        stop_probe.store(true, Ordering::Relaxed);
        let probe_latencies = probe.await.unwrap_or_default();
        Ok(BacklogFigures {
            events: self.events,
            accepted: queued.accepted,
            worker_prefetch: prefetch,
            drain_secs: drained.secs,
            deliveries_per_sec: drained.delivered as f64 / drained.secs,
            complete: drained.delivered >= queued.accepted,
            worker_peak_rss_mib: peak_rss,
            ingest_during_drain: percentiles(probe_latencies),
            cost,
        })
    }
}
