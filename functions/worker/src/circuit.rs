//! Endpoint circuits, the worker's side (the states and where parked
//! deliveries wait: `relayops_shared::repo::circuits`). After each attempt:
//!
//! - the circuit's probe closes the circuit when the receiver answered
//!   (anything but a 5xx), and opens it again for twice as long when not;
//! - any other answer while the circuit is open closes it too (a delivery
//!   that was in flight when it opened);
//! - a failure (5xx, timeout, no connection) counts towards the endpoint's
//!   run of failures, kept on the endpoint row and so counted by every
//!   worker alike, and the run reaching [`CircuitConfig::failures`] opens
//!   the circuit (in the same statement); an answer ends the run — written
//!   only when the claim saw a run under way or this process counted a
//!   failure of the endpoint lately ([`RecentFailures`]), so a healthy
//!   endpoint's deliveries write nothing here. (The claim's view alone was
//!   not enough: with many deliveries in flight, answers claimed before a
//!   run began ended nothing, and an endpoint failing every other request
//!   reached a run of 20 and had its circuit opened.)
//!
//! 429 and other 4xx are answers: a receiver that says "not now" or "no" is
//! up, and flow control or the retry policy handles it. Failures are
//! counted only while the circuit is closed, so a failing endpoint costs at
//! most a run's worth of these writes per opening.
//!
//! Circuits are advice, like health: a failed write is logged, the attempt
//! stays recorded, and the next attempt decides again.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use relayops_shared::config::CircuitConfig;
use relayops_shared::db::{DbError, Pool};
use relayops_shared::ids::EndpointId;
use relayops_shared::repo::circuits;
use relayops_shared::repo::deliveries::{CircuitSeen, DeliveryJob};
use relayops_shared::telemetry::error_chain;

use crate::report;
use crate::verdict::SendResult;

/// What an attempt's result says about the receiver.
fn is_down(result: &SendResult) -> Option<bool> {
    match result {
        SendResult::Answered { status, .. } | SendResult::ServiceError { status, .. } => Some(*status >= 500),
        SendResult::NoAnswer { .. } => Some(true),
        SendResult::Blocked => None,
    }
}

/// What changes after an attempt at `job`'s endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// A failure more in the run (it may open the circuit).
    Failed,
    /// The probe failed: open again, for longer.
    Reopen,
    /// An answer while open: closed.
    Close,
    /// An answer ends the run under way.
    EndRun,
}

/// How long after this process counted an endpoint's failure its answers
/// still end the run (whatever their claim saw).
const RECENT: Duration = Duration::from_secs(60);
/// Past this many endpoints remembered, those not failing lately are dropped.
const PRUNE_ABOVE: usize = 4_096;

/// The endpoints this process counted a failure of lately.
#[derive(Default)]
pub struct RecentFailures {
    endpoints: Mutex<HashMap<EndpointId, Instant>>,
}

impl RecentFailures {
    fn failed(&self, endpoint: EndpointId) {
        let now = Instant::now();
        let mut endpoints = self.endpoints.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if endpoints.len() > PRUNE_ABOVE {
            endpoints.retain(|_, at| now.duration_since(*at) < RECENT);
        }
        endpoints.insert(endpoint, now);
    }

    fn lately(&self, endpoint: EndpointId) -> bool {
        let endpoints = self.endpoints.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        endpoints.get(&endpoint).is_some_and(|at| at.elapsed() < RECENT)
    }
}

/// `failing`: the claim saw a run under way, or this process counted a
/// failure of the endpoint lately.
fn change_after(config: &CircuitConfig, circuit: CircuitSeen, failing: bool, down: bool) -> Option<Change> {
    if !down {
        return if circuit.open { Some(Change::Close) } else { failing.then_some(Change::EndRun) };
    }
    if circuit.probe {
        return Some(Change::Reopen);
    }
    (config.failures > 0 && !circuit.open).then_some(Change::Failed)
}

/// Updates the endpoint's circuit after a recorded attempt.
pub async fn after_attempt(
    config: &CircuitConfig,
    recent: &RecentFailures,
    pool: &Pool,
    job: &DeliveryJob,
    result: &SendResult,
) {
    let Some(down) = is_down(result) else { return };
    // (Only an answer asks the memory: a failure counts whatever it says.)
    let failing = job.circuit.failing || (!down && recent.lately(job.endpoint_id));
    let Some(change) = change_after(config, job.circuit, failing, down) else { return };
    if change == Change::Failed {
        recent.failed(job.endpoint_id);
    }
    let (tenant, endpoint) = (job.tenant_id, job.endpoint_id);
    let written = match pool.get().await {
        Ok(client) => match change {
            Change::Failed => circuits::failed(&client, tenant, endpoint, config.failures, config.cooldown).await,
            Change::Reopen => {
                let (first, max) = (config.cooldown, config.max_cooldown);
                circuits::probe_failed(&client, tenant, endpoint, job.delivery_id, first, max).await
            }
            Change::Close => circuits::close(&client, tenant, endpoint).await,
            Change::EndRun => circuits::answered(&client, tenant, endpoint).await.map(|_| false),
        },
        Err(error) => Err(DbError::from(error)),
    };
    let name = match change {
        Change::Failed => "opened",
        Change::Reopen => "reopened",
        Change::Close => "closed",
        Change::EndRun => "run ended",
    };
    match written {
        Ok(true) => {
            report::circuit(name);
            tracing::info!(tenant_id = %tenant, endpoint_id = %endpoint, change = name, "endpoint circuit {name}");
        }
        Ok(false) => {}
        Err(error) => tracing::warn!(tenant_id = %tenant, endpoint_id = %endpoint, change = name,
            error = %error_chain(&error), "endpoint circuit not written"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(open: bool, probe: bool, failing: bool) -> CircuitSeen {
        CircuitSeen { open, probe, failing }
    }

    #[test]
    fn failures_count_while_closed_and_an_answer_ends_a_run_or_closes() {
        let config = CircuitConfig::default();
        let change = |circuit: CircuitSeen, down| change_after(&config, circuit, circuit.failing, down);
        assert_eq!(change(seen(false, false, false), true), Some(Change::Failed));
        assert_eq!(change(seen(true, false, true), true), None, "not counted while open");
        assert_eq!(change(seen(true, true, false), true), Some(Change::Reopen));
        assert_eq!(change(seen(true, false, false), false), Some(Change::Close));
        assert_eq!(change(seen(false, false, true), false), Some(Change::EndRun));
        assert_eq!(change(seen(false, false, false), false), None, "a healthy endpoint writes nothing");
        let answered_after_a_failure_here = change_after(&config, seen(false, false, false), true, false);
        assert_eq!(answered_after_a_failure_here, Some(Change::EndRun), "claimed before the run, still ends it");
        let off = CircuitConfig { failures: 0, ..CircuitConfig::default() };
        assert_eq!(change_after(&off, seen(false, false, false), false, true), None);
    }

    #[test]
    fn an_endpoint_failing_here_is_remembered_for_a_while() {
        let recent = RecentFailures::default();
        let (failed, other) = (EndpointId::new(), EndpointId::new());
        assert!(!recent.lately(failed));
        recent.failed(failed);
        assert!(recent.lately(failed));
        assert!(!recent.lately(other), "only the endpoint that failed");
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
