//! The publisher Lambda: invoked by an EventBridge schedule (the safety net) or
//! an SQS wake-up; see `lambda::handle`. The pool and the broker session are
//! created once per container and reused across invocations.
use std::sync::Arc;
use std::time::Duration;

use lambda_runtime::{service_fn, Error};
use relayops_publisher::{lambda, Publisher};
use relayops_shared::config::{BrokerConfig, DatabaseConfig, PublisherBudgetConfig, PublisherConfig};
use relayops_shared::{db, telemetry};

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init();
    let pool = db::connect_pool(&DatabaseConfig::lambda_from_env()?)?;
    let publisher = Arc::new(Publisher::new(pool, BrokerConfig::from_env()?, PublisherConfig::from_env()?));
    let budget = Arc::new(PublisherBudgetConfig::from_env()?);
    // Best effort during init (bounded: Lambda allows init 10 s); an invocation
    // reconnects, and reports a failure, itself.
    match tokio::time::timeout(Duration::from_secs(3), publisher.connect()).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(error = %telemetry::error_chain(&error), "broker not reachable at init"),
        Err(_) => tracing::warn!("broker connection at init timed out"),
    }
    lambda_runtime::run(service_fn(move |event| {
        let (publisher, budget) = (Arc::clone(&publisher), Arc::clone(&budget));
        async move { lambda::handle(&publisher, &budget, event).await.map_err(Error::from) }
    }))
    .await
}
