//! The worker container: builds its clients once and consumes until stopped.
use relayops_shared::config::{BrokerConfig, DatabaseConfig, WorkerConfig};
use relayops_shared::{db, telemetry};
use relayops_worker::Worker;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    telemetry::init();
    let pool = db::connect_pool(&DatabaseConfig::from_env()?)?;
    let worker = Worker::new(pool, BrokerConfig::from_env()?, WorkerConfig::from_env()?)?;
    tokio::select! {
        _ = worker.run() => {}
        _ = tokio::signal::ctrl_c() => tracing::info!("shutting down"),
    }
    Ok(())
}
