//! What the worker tells operators about each delivery attempt: one log line
//! and the attempt metrics, from one place so the two never disagree.
//!
//! The line carries tenant_id, delivery_id, event_id, endpoint_id, attempt,
//! outcome, http_status, latency_ms (and the error text when there is one).
//! Never the payload, the signing secret, the signature headers or the
//! response body: the [`AttemptReport`] does not even hold them.
use relayops_shared::domain::AttemptOutcome;
use relayops_shared::observe::names::{
    DELIVERIES_ADMITTED, DELIVERIES_HELD, DELIVERIES_NOT_SENT_ROUND, DELIVERIES_PARKED, DELIVERIES_REPUBLISHED,
    DELIVERIES_SETTLED_WITHOUT_ATTEMPT, DELIVERIES_WAITED_FOR_SLOT, DELIVERY_ATTEMPTS, DELIVERY_ATTEMPT_DURATION,
    ENDPOINT_CIRCUITS, ENDPOINT_HEALTH_WRITES,
};
use relayops_shared::repo::deliveries::DeliveryJob;

use crate::sender::Exchange;
use crate::verdict::SendResult;

/// One attempt, as reported.
pub struct AttemptReport<'a> {
    pub job: &'a DeliveryJob,
    pub exchange: &'a Exchange,
    pub outcome: AttemptOutcome,
}

impl AttemptReport<'_> {
    /// The outcome class for metrics: the outcome, except that a request
    /// refused by the outbound filter is `blocked` (an endpoint to fix, not a
    /// receiver's answer).
    pub fn class(&self) -> &'static str {
        match self.exchange.result {
            SendResult::Blocked => "blocked",
            _ => self.outcome.as_str(),
        }
    }

    fn http_status(&self) -> Option<u16> {
        self.exchange.result.status()
    }
}

/// Logs the attempt and counts it.
pub fn attempt(report: &AttemptReport<'_>) {
    let job = report.job;
    let latency = report.exchange.latency;
    tracing::info!(
        tenant_id = %job.tenant_id,
        delivery_id = %job.delivery_id,
        event_id = %job.event_id,
        endpoint_id = %job.endpoint_id,
        attempt = job.attempt_number,
        outcome = report.outcome.as_str(),
        http_status = report.http_status(),
        latency_ms = latency.as_millis() as u64,
        error = report.exchange.error.as_deref(),
        "delivery attempt"
    );
    let class = report.class();
    metrics::counter!(DELIVERY_ATTEMPTS, "outcome" => class).increment(1);
    metrics::histogram!(DELIVERY_ATTEMPT_DURATION, "outcome" => class).record(latency.as_secs_f64());
}

/// A delivery for a full endpoint waited in the worker for a slot this
/// process freed, instead of going round through the broker.
pub fn waited_for_slot() {
    metrics::counter!(DELIVERIES_WAITED_FOR_SLOT).increment(1);
}

/// A delivery parked to wait in Postgres: its endpoint's circuit is open
/// (`circuit_open`), it had no free slot (`endpoint_full`), its rate
/// limit no token (`rate_limited`), or its endpoint's parked deliveries were
/// being admitted (`behind_parked`).
pub fn parked(reason: &'static str) {
    metrics::counter!(DELIVERIES_PARKED, "reason" => reason).increment(1);
}

/// A parked delivery taken straight from Postgres into a free slot.
pub fn admitted() {
    metrics::counter!(DELIVERIES_ADMITTED).increment(1);
}

/// An endpoint's circuit changed (`opened`, `reopened`, `closed`).
pub fn circuit(change: &'static str) {
    metrics::counter!(ENDPOINT_CIRCUITS, "change" => change).increment(1);
}

/// A message kept through a database failure, before its next try.
pub fn held() {
    metrics::counter!(DELIVERIES_HELD).increment(1);
}

/// A delivery that had to go round again, whose publish failed or was refused.
pub fn not_sent_round() {
    metrics::counter!(DELIVERIES_NOT_SENT_ROUND).increment(1);
}

/// A message near the delivery limit published afresh instead of requeued.
pub fn republished() {
    metrics::counter!(DELIVERIES_REPUBLISHED).increment(1);
}

/// A delivery failed without an attempt because its endpoint is disabled.
pub fn endpoint_disabled(job: &DeliveryJob) {
    tracing::info!(
        tenant_id = %job.tenant_id,
        delivery_id = %job.delivery_id,
        event_id = %job.event_id,
        endpoint_id = %job.endpoint_id,
        outcome = "failed",
        "endpoint disabled; delivery failed without an attempt"
    );
    metrics::counter!(DELIVERIES_SETTLED_WITHOUT_ATTEMPT, "reason" => "endpoint_disabled").increment(1);
}

/// An endpoint health statement run after an attempt (`success`, `failure`,
/// `disabled`).
pub fn health_write(write: &'static str) {
    metrics::counter!(ENDPOINT_HEALTH_WRITES, "write" => write).increment(1);
}
