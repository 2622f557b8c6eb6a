//! The scale-out scenario (`scale-out`): what more processes buy against one
//! API and one Postgres writer.
//!
//! - **Workers** (`--scale-workers`, 1, 2 and 4 unless told): events to one
//!   fast endpoint are queued while no worker runs, then that many `relayops
//!   worker` processes (the product's defaults) drain them together: the
//!   drain's deliveries/s and its CPU per 1,000 deliveries, per component.
//!   Postgres' share is the writer's: where it nears the cores the machine
//!   has, more workers stop adding deliveries.
//! - **Publishers** (`--scale-publishers`, 1 and 2): the whole pipeline
//!   under a flat-out batch load with two workers running: the API's own
//!   publisher alone, then with `relayops publisher` processes beside it:
//!   deliveries/s from the first post to the last arrival, and the cost.
//!
//! Each run also reports the writer's statement time per 1,000 deliveries
//! (`pg_stat_database.active_time` of the bench's database: every backend's
//! time in statements, read once the backends have flushed their counters):
//! the sizing rule's figure (ARCHITECTURE.md, "Past one machine").
//!
//! The target must run WITHOUT a worker (`relayops api`, which includes the
//! publisher); the bench starts the other processes itself.
use std::time::{Duration, Instant};

use relayops_shared::db::Pool;
use serde::Serialize;

use crate::cost::{Cost, Meter};
use crate::worker_process::ApiOnly;

/// Events per batch request, and clients posting batches at once.
const BATCH: usize = 500;
const BATCH_CLIENTS: usize = 4;
/// Workers running in the publishers' runs.
const PUBLISHER_RUN_WORKERS: usize = 2;

#[derive(Debug, Serialize)]
pub struct WorkersFigures {
    pub workers: usize,
    pub deliveries: usize,
    pub drain_secs: f64,
    pub deliveries_per_sec: f64,
    pub complete: bool,
    /// From the workers' start until every delivery was recorded.
    pub cost: Option<Cost>,
    /// Postgres time in statements per 1,000 deliveries, ms.
    pub writer_statement_ms_per_1000: f64,
}

#[derive(Debug, Serialize)]
pub struct PublishersFigures {
    pub publishers: usize,
    pub workers: usize,
    pub accepted: usize,
    pub ingest_events_per_sec: f64,
    /// From the first post until the last delivery arrived.
    pub deliveries_per_sec: f64,
    pub complete: bool,
    pub cost: Option<Cost>,
    /// Postgres time in statements per 1,000 deliveries, ms (ingest included).
    pub writer_statement_ms_per_1000: f64,
}

pub struct ScaleOutRun<'a> {
    pub api_only: ApiOnly<'a>,
    /// Events each run posts (one delivery each).
    pub events: usize,
}

impl ScaleOutRun<'_> {
    /// Queues the events, then drains them with `workers` worker processes.
    pub async fn workers(&self, workers: usize) -> anyhow::Result<WorkersFigures> {
        let (api_only, target) = (&self.api_only, self.api_only.target);
        let label = format!("scale-out {workers} worker(s)");
        let hooks = format!("scale-w{workers}-");
        let event_type = format!("bench.scale-w{workers}");
        target.endpoint(&format!("hook/{hooks}0"), &event_type, 1000).await?;
        target.receiver.reset();
        eprintln!("[{label}] queueing {} events with no worker running", self.events);
        let (queued, _) = target.ingest_batches(&event_type, self.events, BATCH, BATCH_CLIENTS).await;
        api_only.wait_for_published_outbox().await?;

        eprintln!("[{label}] starting the workers");
        let statements = StatementTime::start(api_only.pool).await?;
        let meter = Meter::start();
        let started = Instant::now();
        let children = api_only.spawn_roles("worker", workers)?;
        let drained = api_only.await_drain(&hooks, queued.accepted, started, &label).await;
        target.await_recorded().await?;
        let cost = meter.finish("deliveries", drained.delivered);
        ApiOnly::stop_all(children).await;
        Ok(WorkersFigures {
            workers,
            deliveries: drained.delivered,
            drain_secs: drained.secs,
            deliveries_per_sec: drained.delivered as f64 / drained.secs,
            complete: drained.delivered >= queued.accepted,
            cost,
            writer_statement_ms_per_1000: statements.per_1000(api_only.pool, drained.delivered).await?,
        })
    }

    /// The whole pipeline with `publishers` publishers (the API's and
    /// `publishers - 1` processes) and two workers, under batch load.
    pub async fn publishers(&self, publishers: usize) -> anyhow::Result<PublishersFigures> {
        let (api_only, target) = (&self.api_only, self.api_only.target);
        let label = format!("scale-out {publishers} publisher(s)");
        let hooks = format!("scale-p{publishers}-");
        let event_type = format!("bench.scale-p{publishers}");
        target.endpoint(&format!("hook/{hooks}0"), &event_type, 1000).await?;
        target.receiver.reset();
        let mut children = api_only.spawn_roles("publisher", publishers - 1)?;
        children.extend(api_only.spawn_roles("worker", PUBLISHER_RUN_WORKERS)?);
        eprintln!("[{label}] posting {} events with {PUBLISHER_RUN_WORKERS} workers running", self.events);
        let statements = StatementTime::start(api_only.pool).await?;
        let meter = Meter::start();
        let started = Instant::now();
        let (posted, _) = target.ingest_batches(&event_type, self.events, BATCH, BATCH_CLIENTS).await;
        let drained = api_only.await_drain(&hooks, posted.accepted, started, &label).await;
        target.await_recorded().await?;
        let cost = meter.finish("deliveries", drained.delivered);
        ApiOnly::stop_all(children).await;
        Ok(PublishersFigures {
            publishers,
            workers: PUBLISHER_RUN_WORKERS,
            accepted: posted.accepted,
            ingest_events_per_sec: posted.events_per_sec,
            deliveries_per_sec: drained.delivered as f64 / drained.secs,
            complete: drained.delivered >= posted.accepted,
            cost,
            writer_statement_ms_per_1000: statements.per_1000(api_only.pool, drained.delivered).await?,
        })
    }
}

/// The bench database's `pg_stat_database.active_time` (ms in statements,
/// summed over its backends) at a run's start.
struct StatementTime {
    before_ms: f64,
}

impl StatementTime {
    async fn start(pool: &Pool) -> anyhow::Result<Self> {
        Ok(Self { before_ms: active_ms(pool).await? })
    }

    /// Statement ms per 1,000 of `count`, once the backends flushed their
    /// counters (each does within a second of its last statement, or when
    /// it goes idle; up to 10 s for one that stays busy).
    async fn per_1000(&self, pool: &Pool, count: usize) -> anyhow::Result<f64> {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let used = active_ms(pool).await? - self.before_ms;
        Ok((used * 1000.0 / count.max(1) as f64 * 10.0).round() / 10.0)
    }
}

async fn active_ms(pool: &Pool) -> anyhow::Result<f64> {
    let client = pool.get().await?;
    let row =
        client.query_one("SELECT active_time FROM pg_stat_database WHERE datname = current_database()", &[]).await?;
    Ok(row.get::<_, f64>(0))
}
