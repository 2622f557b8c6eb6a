//! Endpoint circuits, the worker's side (the states and where parked
//! deliveries wait: `relayops_shared::repo::circuits`). After each attempt:
//!
//! - the circuit's probe closes the circuit when the receiver answered
//!   (anything but a 5xx), and opens it again for twice as long when not;
//! - any other answer while the circuit is open closes it too (a delivery
//!   that was in flight when it opened);
//! - a failure (5xx, timeout, no connection) counts towards this process's
//!   run of failures at the endpoint, and the run reaching
//!   [`CircuitConfig::failures`] opens the circuit; any answer ends the run.
//!
//! 429 and other 4xx are answers: a receiver that says "not now" or "no" is
//! up, and flow control or the retry policy handles it. Each worker counts
//! its own run (no shared counter on the hot path); the circuit itself is
//! shared through the endpoint row, which every claim reads.
//!
//! Circuits are advice, like health: a failed write is logged, the attempt
//! stays recorded, and the next attempt decides again.
use std::collections::HashMap;
use std::sync::Mutex;

use relayops_shared::config::CircuitConfig;
use relayops_shared::db::{DbError, Pool};
use relayops_shared::ids::EndpointId;
use relayops_shared::repo::circuits;
use relayops_shared::repo::deliveries::DeliveryJob;
use relayops_shared::telemetry::error_chain;

use crate::report;
use crate::verdict::SendResult;

/// Past this many endpoints with a run of failures, the memory starts afresh.
const RUNS_LIMIT: usize = 4_096;

/// This process's run of failures at each endpoint.
#[derive(Default)]
pub struct FailureRuns {
    runs: Mutex<HashMap<EndpointId, u32>>,
}

impl FailureRuns {
    /// Counts a failure; `true` when the run reached `limit` (and starts again).
    fn failed(&self, endpoint: EndpointId, limit: u32) -> bool {
        let mut runs = self.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if runs.len() >= RUNS_LIMIT && !runs.contains_key(&endpoint) {
            runs.clear();
        }
        let run = runs.entry(endpoint).or_default();
        *run += 1;
        if *run >= limit {
            runs.remove(&endpoint);
            return true;
        }
        false
    }

    fn answered(&self, endpoint: EndpointId) {
        self.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&endpoint);
    }
}

/// What an attempt's result says about the receiver.
fn is_down(result: &SendResult) -> Option<bool> {
    match result {
        SendResult::Answered { status, .. } => Some(*status >= 500),
        SendResult::NoAnswer { .. } => Some(true),
        SendResult::Blocked => None,
    }
}

/// What changes after an attempt at `job`'s endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Open,
    Reopen,
    Close,
}

fn change_after(runs: &FailureRuns, config: &CircuitConfig, job: &DeliveryJob, down: bool) -> Option<Change> {
    if !down {
        runs.answered(job.endpoint_id);
        return job.circuit.open.then_some(Change::Close);
    }
    if job.circuit.probe {
        return Some(Change::Reopen);
    }
    let limit_reached = config.failures > 0 && runs.failed(job.endpoint_id, config.failures);
    (limit_reached && !job.circuit.open).then_some(Change::Open)
}

/// Updates the endpoint's circuit after a recorded attempt.
pub async fn after_attempt(
    runs: &FailureRuns,
    config: &CircuitConfig,
    pool: &Pool,
    job: &DeliveryJob,
    result: &SendResult,
) {
    let Some(down) = is_down(result) else { return };
    let Some(change) = change_after(runs, config, job, down) else { return };
    let written = match pool.get().await {
        Ok(client) => match change {
            Change::Open => circuits::open(&client, job.tenant_id, job.endpoint_id, config.cooldown).await,
            Change::Reopen => {
                let (first, max) = (config.cooldown, config.max_cooldown);
                circuits::probe_failed(&client, job.tenant_id, job.endpoint_id, job.delivery_id, first, max).await
            }
            Change::Close => circuits::close(&client, job.tenant_id, job.endpoint_id).await,
        },
        Err(error) => Err(DbError::from(error)),
    };
    let name = match change {
        Change::Open => "opened",
        Change::Reopen => "reopened",
        Change::Close => "closed",
    };
    match written {
        Ok(true) => {
            report::circuit(name);
            tracing::info!(tenant_id = %job.tenant_id, endpoint_id = %job.endpoint_id, change = name,
                "endpoint circuit {name}");
        }
        Ok(false) => {}
        Err(error) => tracing::warn!(tenant_id = %job.tenant_id, endpoint_id = %job.endpoint_id, change = name,
            error = %error_chain(&error), "endpoint circuit not written"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_failures_opens_and_an_answer_ends_the_run() {
        let runs = FailureRuns::default();
        let endpoint = EndpointId::new();
        assert!(!runs.failed(endpoint, 3));
        assert!(!runs.failed(endpoint, 3));
        runs.answered(endpoint);
        assert!(!runs.failed(endpoint, 3));
        assert!(!runs.failed(endpoint, 3));
        assert!(runs.failed(endpoint, 3), "the third failure in a row reaches the limit");
        assert!(!runs.failed(endpoint, 3), "and the run starts again");
    }

    #[test]
    fn answers_that_are_not_server_errors_are_not_failures() {
        assert_eq!(is_down(&SendResult::Answered { status: 503, retry_after: None }), Some(true));
        assert_eq!(is_down(&SendResult::Answered { status: 429, retry_after: None }), Some(false));
        assert_eq!(is_down(&SendResult::Answered { status: 404, retry_after: None }), Some(false));
        assert_eq!(is_down(&SendResult::NoAnswer { timed_out: true }), Some(true));
        assert_eq!(is_down(&SendResult::Blocked), None);
    }
}
