//! What the platform does with nothing to deliver: Postgres rows written and
//! server CPU per second over a short quiet window before the phases (the
//! recovery pass's queue sightings, the outbox watermarks, the admission
//! pass, the services' own housekeeping). A phase's figures per delivery
//! include that background for as long as the phase lasts, which a slow
//! phase (few deliveries a second) spreads over few deliveries; the
//! `less_idle` figures subtract it, so phases of different pace compare.
use std::time::{Duration, Instant};

use serde::Serialize;

use relayops_shared::db::Pool;

use crate::cost::{Cost, Meter};
use crate::pg_writes::{self, PgWrites};

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Idle {
    pub secs: f64,
    pub rows_per_sec: f64,
    pub commits_per_sec: f64,
    pub server_cpu_secs_per_sec: f64,
}

/// Watches the quiet platform for `window`; `None` if a counter could not be read.
pub async fn measure(pool: &Pool, window: Duration) -> Option<Idle> {
    let before = pg_writes::read(pool).await.ok()?;
    let meter = Meter::start();
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let after = pg_writes::read(pool).await.ok()?;
    let secs = started.elapsed().as_secs_f64();
    let writes = pg_writes::between(before, after, 1);
    let cost = meter.finish("seconds", 1)?;
    Some(Idle {
        secs,
        rows_per_sec: writes.rows_written as f64 / secs,
        commits_per_sec: writes.commits as f64 / secs,
        server_cpu_secs_per_sec: cost.server_cpu_secs / secs,
    })
}

impl Idle {
    /// Sets `writes`' and `cost`'s figures less this background over their window.
    pub fn subtract(&self, writes: Option<&mut PgWrites>, cost: Option<&mut Cost>) {
        if let Some(writes) = writes {
            let rows = writes.rows_written as f64 - self.rows_per_sec * writes.window_secs;
            writes.rows_per_delivery_less_idle = Some(round2(rows.max(0.0) / writes.deliveries.max(1) as f64));
        }
        if let Some(cost) = cost {
            let cpu = cost.server_cpu_secs - self.server_cpu_secs_per_sec * cost.wall_secs;
            cost.server_cpu_secs_per_1000_less_idle = Some(round2(cpu.max(0.0) * 1000.0 / cost.count.max(1) as f64));
        }
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
