//! The publisher Lambda: invoked by an EventBridge schedule (the safety net) or
//! an SQS wake-up; each invocation reclaims expired claims and drains the outbox
//! within its time budget. Clients are created once per container.
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lambda_runtime::{service_fn, Error, LambdaEvent};
use relayops_publisher::{PublishReport, Publisher};
use relayops_shared::config::{BrokerConfig, DatabaseConfig, PublisherConfig};
use relayops_shared::{db, telemetry};
use serde_json::Value;

/// Kept free at the end of an invocation so it never runs into the hard timeout.
const SAFETY_MARGIN: Duration = Duration::from_secs(5);
/// Used when the runtime's deadline is missing or already past (as under
/// `cargo lambda watch`, which sends a bogus deadline).
const FALLBACK_BUDGET: Duration = Duration::from_secs(50);

fn deadline_from(context_deadline_ms: u64) -> Instant {
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let remaining = Duration::from_millis(context_deadline_ms.saturating_sub(now_ms));
    let budget = if remaining > SAFETY_MARGIN { remaining - SAFETY_MARGIN } else { FALLBACK_BUDGET };
    Instant::now() + budget
}

async fn handle(publisher: &Publisher, event: LambdaEvent<Value>) -> Result<PublishReport, Error> {
    let source = event.payload.get("source").and_then(Value::as_str).unwrap_or("unknown").to_owned();
    let started = Instant::now();
    let drained = publisher.drain(Some(deadline_from(event.context.deadline))).await;
    // One CloudWatch EMF line per invocation: the Lambda's metrics.
    relayops_publisher::figures::emit_invocation(
        &drained.as_ref().copied().unwrap_or_default(),
        started.elapsed(),
        drained.is_err(),
    );
    let report = drained?;
    tracing::info!(source, ?report, "publisher invocation done");
    Ok(report)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init();
    let pool = db::connect_pool(&DatabaseConfig::from_env()?)?;
    let publisher = Arc::new(Publisher::new(pool, BrokerConfig::from_env()?, PublisherConfig::from_env()?));
    lambda_runtime::run(service_fn(move |event| {
        let publisher = Arc::clone(&publisher);
        async move { handle(&publisher, event).await }
    }))
    .await
}
