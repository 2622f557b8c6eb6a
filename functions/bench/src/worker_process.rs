//! What the scenarios that run against a target without a worker share: wait
//! until the publisher has moved every outbox row to the broker, and start a
//! `relayops worker` of the bench's own (with the environment the bench was
//! given) to drain what was queued.
use std::process::Stdio;
use std::time::{Duration, Instant};

use relayops_shared::db::Pool;

/// Waits until no outbox row is left to publish: every queued event is on the
/// broker. (Rows are deleted once published; builds before issue 16 marked
/// them `published` instead, and the bench also drives those.)
pub async fn wait_for_published_outbox(pool: &Pool, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let client = pool.get().await?;
        let row =
            client.query_one("SELECT count(*) FROM relayops.outbox_messages WHERE status <> 'published'", &[]).await?;
        if row.get::<_, i64>(0) == 0 {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "the outbox did not drain to the broker in time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts `<relayops_bin> worker` with `prefetch` deliveries in flight; it is
/// killed when the child is dropped.
pub fn spawn_worker(relayops_bin: &str, prefetch: u32) -> anyhow::Result<tokio::process::Child> {
    Ok(tokio::process::Command::new(relayops_bin)
        .arg("worker")
        .env("RELAYOPS_WORKER_CONCURRENCY", prefetch.to_string())
        .env("RELAYOPS_OUTBOUND_ALLOW_CIDRS", "127.0.0.1/32")
        .env("RELAYOPS_LOG", std::env::var("RELAYOPS_LOG").unwrap_or_else(|_| "warn".into()))
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()?)
}
