//! What a scenario cost: CPU seconds per 1,000 deliveries (or events, for the
//! ingest-only scenarios), summed over the server side (Postgres, RabbitMQ,
//! Redis and the RelayOps processes, see `proc_cpu`) and split per component,
//! with the bench's own CPU beside it. Issue 18 drives this figure down: it is
//! far steadier than throughput on a shared machine, though it counts whatever
//! else the services do meanwhile (run nothing else for a clean figure).
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::proc_cpu::{self, CpuSample, COMPONENTS};
use crate::scenarios::Target;

#[derive(Debug, Clone, Serialize)]
pub struct Cost {
    /// What the figures are per 1,000 of: `deliveries` or `events`.
    pub per: &'static str,
    pub count: usize,
    pub wall_secs: f64,
    /// Postgres + RabbitMQ + Redis + RelayOps.
    pub server_cpu_secs: f64,
    pub server_cpu_secs_per_1000: f64,
    /// Less the idle platform's CPU over the wall time (`crate::idle`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu_secs_per_1000_less_idle: Option<f64>,
    /// Server CPU seconds per wall second: how many cores the run kept busy.
    pub server_cores_busy: f64,
    /// Per component: CPU seconds per 1,000.
    pub by_component_per_1000: BTreeMap<&'static str, f64>,
    /// Of `postgres`: the backends connected to the bench's database alone
    /// (a lower bound, free of other databases' load; see `proc_cpu`).
    pub postgres_own_database_per_1000: f64,
    /// The load generator and its receiver (not part of the server figure).
    pub bench_cpu_secs_per_1000: f64,
}

/// Started before a scenario's load; `finish` reads the CPU used since.
pub struct Meter {
    started: Instant,
    before: Option<CpuSample>,
}

impl Meter {
    pub fn start() -> Self {
        Self { started: Instant::now(), before: proc_cpu::sample() }
    }

    /// The cost of `count` deliveries or events (`per`); `None` without /proc.
    pub fn finish(self, per: &'static str, count: usize) -> Option<Cost> {
        let (before, after) = (self.before?, proc_cpu::sample()?);
        let wall_secs = self.started.elapsed().as_secs_f64();
        let secs = |ticks: u64| ticks as f64 / after.ticks_per_sec;
        let per_1000 = |ticks: u64| rounded(secs(ticks) * 1000.0 / count.max(1) as f64);
        let used = |component: &str| {
            let at = |sample: &CpuSample| sample.by_component.get(component).copied().unwrap_or(0);
            // A process that ended unreaped takes its time with it: never below zero.
            at(&after).saturating_sub(at(&before))
        };
        let server_ticks: u64 = COMPONENTS.iter().map(|c| used(c)).sum();
        Some(Cost {
            per,
            count,
            wall_secs: rounded(wall_secs),
            server_cpu_secs: secs(server_ticks),
            server_cpu_secs_per_1000: per_1000(server_ticks),
            server_cpu_secs_per_1000_less_idle: None,
            server_cores_busy: rounded(secs(server_ticks) / wall_secs.max(0.001)),
            by_component_per_1000: COMPONENTS.iter().map(|c| (*c, per_1000(used(c)))).collect(),
            postgres_own_database_per_1000: per_1000(
                after.postgres_own_database.saturating_sub(before.postgres_own_database),
            ),
            bench_cpu_secs_per_1000: per_1000(after.bench.saturating_sub(before.bench)),
        })
    }
}

/// To the millisecond: the clock ticks are 10 ms, more digits are noise.
fn rounded(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// One line for the human report: the cost beside a throughput figure.
pub fn describe(cost: &serde_json::Value) -> String {
    let Some(total) = cost["server_cpu_secs_per_1000"].as_f64() else {
        return "cost n/a (CPU time is read from Linux /proc)".to_owned();
    };
    let figure = |key: &str| cost[key].as_f64().unwrap_or(0.0);
    let parts: Vec<String> = COMPONENTS
        .iter()
        .map(|c| match (*c, cost["by_component_per_1000"][*c].as_f64().unwrap_or(0.0)) {
            ("postgres", all) => {
                format!("postgres {all:.2} ({:.2} on the bench's database)", figure("postgres_own_database_per_1000"))
            }
            (c, all) => format!("{c} {all:.2}"),
        })
        .collect();
    format!(
        "cost {total:.2} CPU s per 1,000 {} ({:.2} cores busy): {}; bench {:.2}",
        cost["per"].as_str().unwrap_or("deliveries"),
        figure("server_cores_busy"),
        parts.join(", "),
        figure("bench_cpu_secs_per_1000")
    )
}

impl Target {
    /// Waits (up to 30 s) until the API lists no delivery of the bench's
    /// tenant waiting or being sent, so the work of recording the last
    /// attempts is in the measured window rather than the next scenario's.
    pub async fn await_recorded(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        for status in ["pending", "in_progress"] {
            let url = format!("{}/v1/deliveries?status={status}&limit=1", self.api);
            loop {
                let page: serde_json::Value =
                    self.http.get(&url).bearer_auth(&self.key).send().await?.error_for_status()?.json().await?;
                if page["data"].as_array().is_none_or(Vec::is_empty) || Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }
}
