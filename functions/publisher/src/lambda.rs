//! The publisher as a Lambda: one invocation — from the EventBridge schedule
//! (the safety net) or an SQS wake-up — runs the recovery pass when due and
//! drains the outbox in batches until it is empty or the time left is under
//! the safety margin; it never starts a batch it cannot expect to finish.
//! `main.rs` hands [`handle`] to lambda_runtime; tests call it directly.
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lambda_runtime::LambdaEvent;
use relayops_shared::config::PublisherBudgetConfig;
use serde::Serialize;
use serde_json::Value;

use crate::{PublishError, PublishReport, Publisher};

/// What started an invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// An EventBridge rule or Scheduler tick.
    Schedule,
    /// SQS wake-up messages (their number; they only say "the outbox has work").
    Sqs { messages: usize },
    /// Anything else (a manual `cargo lambda invoke`, a test).
    Manual,
}

impl Trigger {
    pub fn of(payload: &Value) -> Self {
        if let Some(records) = payload.get("Records").and_then(Value::as_array) {
            if !records.is_empty() && records.iter().all(|record| record["eventSource"] == "aws:sqs") {
                return Self::Sqs { messages: records.len() };
            }
        }
        let source = payload.get("source").and_then(Value::as_str).unwrap_or_default();
        if matches!(source, "aws.events" | "aws.scheduler" | "relayops.schedule")
            || payload.get("detail-type").and_then(Value::as_str) == Some("Scheduled Event")
        {
            return Self::Schedule;
        }
        Self::Manual
    }
}

/// What an invocation did (the Lambda's response, and its log line).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct InvocationReport {
    pub trigger: Trigger,
    /// The time this invocation allowed itself.
    pub budget_ms: u64,
    pub elapsed_ms: u64,
    #[serde(flatten)]
    pub report: PublishReport,
}

/// The drain budget for an invocation whose runtime deadline is
/// `deadline_epoch_ms`: the time left minus the safety margin. A deadline
/// already past (missing, or bogus as under `cargo lambda watch`, which sends
/// one in 1970) means "use the configured budget".
pub fn budget(deadline_epoch_ms: u64, now: SystemTime, config: &PublisherBudgetConfig) -> Duration {
    let now_ms = now.duration_since(UNIX_EPOCH).map(|since| since.as_millis() as u64).unwrap_or(0);
    if deadline_epoch_ms <= now_ms {
        return config.budget;
    }
    let remaining = Duration::from_millis(deadline_epoch_ms - now_ms);
    // A function timeout shorter than the margin still leaves half its time.
    remaining.saturating_sub(config.safety_margin).max(remaining / 2)
}

/// One invocation: drain within the budget, report what was done. A failure
/// (database or broker unreachable) is the invocation's error, so SQS retries
/// the wake-up and the schedule tries again; nothing panics.
pub async fn handle(
    publisher: &Publisher,
    config: &PublisherBudgetConfig,
    event: LambdaEvent<Value>,
) -> Result<InvocationReport, PublishError> {
    let started = Instant::now();
    let trigger = Trigger::of(&event.payload);
    let budget = budget(event.context.deadline, SystemTime::now(), config);
    let result = publisher.drain(Some(started + budget)).await;
    // One CloudWatch EMF line per invocation: the Lambda's metrics.
    let elapsed = started.elapsed();
    crate::figures::emit_invocation(&result.as_ref().copied().unwrap_or_default(), elapsed, result.is_err());
    let elapsed_ms = elapsed.as_millis() as u64;
    match result {
        Ok(report) => {
            let invocation = InvocationReport { trigger, budget_ms: budget.as_millis() as u64, elapsed_ms, report };
            tracing::info!(?invocation, "publisher invocation done");
            Ok(invocation)
        }
        Err(error) => {
            tracing::warn!(?trigger, elapsed_ms, error = %relayops_shared::telemetry::error_chain(&error), "publisher invocation failed");
            Err(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> PublisherBudgetConfig {
        PublisherBudgetConfig { budget: Duration::from_secs(50), safety_margin: Duration::from_secs(5) }
    }

    #[test]
    fn a_past_deadline_uses_the_configured_budget() {
        // `cargo lambda watch` sends a deadline ~600 s after the epoch.
        let now = SystemTime::now();
        assert_eq!(budget(600_000, now, &config()), Duration::from_secs(50));
        assert_eq!(budget(0, now, &config()), Duration::from_secs(50));
    }

    #[test]
    fn a_real_deadline_keeps_the_safety_margin() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let deadline_ms = 1_800_000_000_000 + 60_000;
        assert_eq!(budget(deadline_ms, now, &config()), Duration::from_secs(55));
        // Shorter than twice the margin: half of what is left.
        assert_eq!(budget(1_800_000_000_000 + 6_000, now, &config()), Duration::from_secs(3));
    }

    #[test]
    fn triggers_are_told_apart() {
        let schedule = serde_json::json!({ "source": "aws.events", "detail-type": "Scheduled Event", "detail": {} });
        assert_eq!(Trigger::of(&schedule), Trigger::Schedule);
        let sqs = serde_json::json!({ "Records": [
            { "eventSource": "aws:sqs", "body": "{}" }, { "eventSource": "aws:sqs", "body": "{}" }
        ] });
        assert_eq!(Trigger::of(&sqs), Trigger::Sqs { messages: 2 });
        assert_eq!(Trigger::of(&serde_json::json!({})), Trigger::Manual);
    }

    #[test]
    fn odd_payloads_are_manual_invocations() {
        assert_eq!(Trigger::of(&serde_json::json!({ "Records": [] })), Trigger::Manual);
        let mixed = serde_json::json!({ "Records": [
            { "eventSource": "aws:sqs", "body": "{}" }, { "eventSource": "aws:s3" }
        ] });
        assert_eq!(Trigger::of(&mixed), Trigger::Manual);
        assert_eq!(Trigger::of(&serde_json::json!("not an object")), Trigger::Manual);
    }
}
