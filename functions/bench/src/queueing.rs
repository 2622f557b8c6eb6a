//! The API-only scenario, once per subscriber count (`--queueing-subscribers`,
//! 1, 10 and 100 unless told): events posted one per request to an event type
//! with that many endpoints, while no worker runs, timed until the API has
//! answered them all and until the publisher has put every delivery on the
//! broker (the queueing rate an outside comparison measured against Svix);
//! then a worker the bench starts itself drains them (worker-only fan-out).
//! Each phase has its cost: CPU seconds per 1,000 events queued, per 1,000
//! deliveries drained.
//!
//! The target must run WITHOUT a worker (`relayops api`, which includes the
//! publisher), with `RELAYOPS_MAX_READY_DEPTH` above the largest count's
//! deliveries (otherwise ingest refuses with 503 once the ready queue fills:
//! the refusals are retried and reported, and the figure is the backpressure's).
use std::time::Instant;

use serde::Serialize;

use crate::cost::{Cost, Meter};
use crate::scenarios::IngestFigures;
use crate::worker_process::ApiOnly;

#[derive(Debug, Serialize)]
pub struct QueueingFigures {
    pub subscribers: usize,
    /// Posted one per request by `concurrency` clients.
    pub ingest: IngestFigures,
    /// Accepted events per second until the outbox was empty (every delivery
    /// a message on the broker).
    pub queued_events_per_sec: f64,
    pub queued_deliveries_per_sec: f64,
    /// From the first post until the outbox was empty, per 1,000 events.
    pub queueing_cost: Option<Cost>,
    /// The worker's drain of what was queued.
    pub drained_deliveries_per_sec: f64,
    pub drained_complete: bool,
    /// From the worker's start until every delivery was recorded, per 1,000 deliveries.
    pub drain_cost: Option<Cost>,
}

pub struct QueueingRun<'a> {
    pub api_only: ApiOnly<'a>,
    /// Clients posting at once.
    pub concurrency: usize,
}

impl QueueingRun<'_> {
    /// Queues `events` events to `subscribers` endpoints, then drains them.
    pub async fn run(&self, subscribers: usize, events: usize) -> anyhow::Result<QueueingFigures> {
        let (api_only, target) = (&self.api_only, self.api_only.target);
        let event_type = format!("bench.queueing-{subscribers}");
        target.endpoints(&event_type, subscribers).await?;
        target.receiver.reset();
        let label = format!("queueing {subscribers}");

        let meter = Meter::start();
        let started = Instant::now();
        let (ingest, _) = target.ingest(&event_type, events, self.concurrency, &label, None).await;
        api_only.wait_for_published_outbox().await?;
        let queued_secs = started.elapsed().as_secs_f64().max(0.001);
        let queueing_cost = meter.finish("events", ingest.accepted);
        let expected = ingest.accepted * subscribers;

        let prefetch = api_only.worker_prefetch;
        eprintln!("[{label}] {expected} deliveries queued; starting a worker (prefetch {prefetch})");
        let meter = Meter::start();
        let mut worker = api_only.spawn_worker()?;
        let started = Instant::now();
        let hooks = format!("{event_type}-");
        let drained = api_only.await_drain(&hooks, expected, started, &label).await;
        target.await_recorded().await?;
        let drain_cost = meter.finish("deliveries", drained.delivered);
        let _ = worker.kill().await;
        Ok(QueueingFigures {
            subscribers,
            queued_events_per_sec: ingest.accepted as f64 / queued_secs,
            queued_deliveries_per_sec: expected as f64 / queued_secs,
            ingest,
            queueing_cost,
            drained_deliveries_per_sec: drained.delivered as f64 / drained.secs,
            drained_complete: drained.delivered >= expected,
            drain_cost,
        })
    }
}
