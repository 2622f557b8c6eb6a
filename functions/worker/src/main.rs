//! The worker on its own: builds its clients once and consumes until stopped
//! (the container runs `relayops worker`, which stops the same way).
use relayops_shared::config::{BrokerConfig, DatabaseConfig, FlowConfig, WorkerConfig};
use relayops_shared::{db, task, telemetry};
use relayops_worker::gate::Gate;
use relayops_worker::Worker;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    telemetry::init();
    let pool = db::connect_pool(&DatabaseConfig::from_env()?)?;
    let config = WorkerConfig::from_env()?;
    let gate = Gate::from_config(&FlowConfig::from_env()?, &config)?;
    let worker = Worker::new(pool, BrokerConfig::from_env()?, config, gate)?;
    // Told to stop (Ctrl-C, SIGTERM), it takes no new message and finishes
    // the deliveries under way, for up to `STOP_GRACE`.
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let run = worker.run_until(stopping);
    tokio::pin!(run);
    tokio::select! {
        _ = &mut run => return Ok(()),
        signal = task::stop_signal() => tracing::info!(signal, "shutting down"),
    }
    stop.send_replace(true);
    if tokio::time::timeout(task::STOP_GRACE, run).await.is_err() {
        tracing::warn!("deliveries still under way when the grace ran out");
    }
    Ok(())
}
