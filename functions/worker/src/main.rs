//! The worker container: builds its clients once and consumes until stopped.
use relayops_shared::config::{BrokerConfig, DatabaseConfig, FlowConfig, WorkerConfig};
use relayops_shared::{db, telemetry};
use relayops_worker::gate::Gate;
use relayops_worker::Worker;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    telemetry::init();
    let pool = db::connect_pool(&DatabaseConfig::from_env()?)?;
    let config = WorkerConfig::from_env()?;
    let gate = Gate::from_config(&FlowConfig::from_env()?, &config)?;
    let worker = Worker::new(pool, BrokerConfig::from_env()?, config, gate)?;
    tokio::select! {
        _ = worker.run() => {}
        _ = tokio::signal::ctrl_c() => tracing::info!("shutting down"),
    }
    Ok(())
}
