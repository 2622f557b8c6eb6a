//! What the scenarios that run against a target without a worker share
//! ([`ApiOnly`]): wait until the publisher has moved every outbox row to the
//! broker, start a `relayops worker` of the bench's own (with the environment
//! the bench was given), and time its drain of what was queued.
use std::process::Stdio;
use std::time::{Duration, Instant};

use relayops_shared::db::Pool;

use crate::scenarios::Target;

/// A target running without a worker (`relayops api`, which includes the
/// publisher), and the worker the bench starts to drain it.
pub struct ApiOnly<'a> {
    pub target: &'a Target,
    pub pool: &'a Pool,
    /// The `relayops` binary the worker runs from.
    pub relayops_bin: &'a str,
    /// The worker's prefetch (deliveries in flight).
    pub worker_prefetch: u32,
    /// How long each wait may take.
    pub timeout: Duration,
}

/// How a worker's drain went: deliveries that arrived at the hooks drained,
/// and the seconds from the worker's start to the last arrival.
pub struct Drained {
    pub delivered: usize,
    pub secs: f64,
}

impl ApiOnly<'_> {
    /// Waits until no outbox row is left to publish: every queued event is
    /// on the broker. (Rows are deleted once published; builds before issue
    /// 16 marked them `published` instead, and the bench also drives those.)
    pub async fn wait_for_published_outbox(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let client = self.pool.get().await?;
            let row = client
                .query_one("SELECT count(*) FROM relayops.outbox_messages WHERE status <> 'published'", &[])
                .await?;
            if row.get::<_, i64>(0) == 0 {
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "the outbox did not drain to the broker in time");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts `<relayops_bin> worker` with the bench's prefetch; it is killed
    /// when the child is dropped.
    pub fn spawn_worker(&self) -> anyhow::Result<tokio::process::Child> {
        let mut command = self.role("worker");
        command.env("RELAYOPS_WORKER_CONCURRENCY", self.worker_prefetch.to_string());
        Ok(command.spawn()?)
    }

    /// Starts `count` processes of `<relayops_bin> <role>` (`worker`,
    /// `publisher`) with the product's defaults and no operations port, so
    /// that several run side by side; each is killed when dropped.
    pub fn spawn_roles(&self, role: &str, count: usize) -> anyhow::Result<Vec<tokio::process::Child>> {
        (0..count).map(|_| Ok(self.role(role).spawn()?)).collect()
    }

    /// Kills the processes [`spawn_roles`](Self::spawn_roles) started and
    /// waits until they are gone.
    pub async fn stop_all(children: Vec<tokio::process::Child>) {
        for mut child in children {
            let _ = child.kill().await;
        }
    }

    /// `<relayops_bin> <role>` with the product's defaults and no operations
    /// port, to be given more environment and spawned.
    pub fn role(&self, role: &str) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(self.relayops_bin);
        command
            .arg(role)
            .env("RELAYOPS_WORKER_HEALTH_LISTEN", "off")
            .env("RELAYOPS_OUTBOUND_ALLOW_CIDRS", "127.0.0.1/32")
            .env("RELAYOPS_LOG", std::env::var("RELAYOPS_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// Waits until `expected` deliveries arrived at the hooks whose names
    /// start with `hooks` (or the timeout passed), with a progress line a
    /// second under `label`; `started` is when the worker started.
    pub async fn await_drain(&self, hooks: &str, expected: usize, started: Instant, label: &str) -> Drained {
        let receiver = &self.target.receiver;
        let deadline = started + self.timeout;
        let mut last_progress = Instant::now();
        while receiver.delivered_to(hooks) < expected && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if last_progress.elapsed() >= Duration::from_secs(1) {
                eprintln!("[{label}] delivered {}/{expected}", receiver.delivered_to(hooks));
                last_progress = Instant::now();
            }
        }
        let last = receiver.last_arrival().unwrap_or(started);
        Drained { delivered: receiver.delivered_to(hooks), secs: (last - started).as_secs_f64().max(0.001) }
    }
}
