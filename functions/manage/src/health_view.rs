//! An endpoint's kind, dead-letter lane policy and health as the API shows them (the health record the
//! worker keeps: `failing_since`, the last success and failure). The console
//! classifies differently, from success rates over its recent attempts
//! (the console's `endpoints::Health`).
use chrono::{DateTime, Utc};
use relayops_shared::domain::{DeadLetterLane, EndpointKind};
use relayops_shared::repo::endpoints::EndpointHealth;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What an endpoint receives: the tenant's events (`webhook`, the default) or
/// operational events about the tenant's other endpoints (`operational`:
/// `endpoint.disabled`, `endpoint.enabled`, `delivery.dead`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KindView {
    #[default]
    Webhook,
    Operational,
}

impl KindView {
    pub fn domain(self) -> EndpointKind {
        match self {
            Self::Webhook => EndpointKind::Webhook,
            Self::Operational => EndpointKind::Operational,
        }
    }

    pub fn of(kind: EndpointKind) -> Self {
        match kind {
            EndpointKind::Webhook => Self::Webhook,
            EndpointKind::Operational => Self::Operational,
        }
    }
}

/// What a dead letter does to its ordering lane (events posted with an
/// `ordering_key`): `release` (default) lets the next event of the key go on;
/// `block` holds the lane until the dead delivery is replayed
/// (`POST /v1/deliveries/{id}/replay`) or skipped (`POST /v1/deliveries/{id}/skip`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterLaneView {
    #[default]
    Release,
    Block,
}

impl DeadLetterLaneView {
    pub fn domain(self) -> DeadLetterLane {
        match self {
            Self::Release => DeadLetterLane::Release,
            Self::Block => DeadLetterLane::Block,
        }
    }

    pub fn of(policy: DeadLetterLane) -> Self {
        match policy {
            DeadLetterLane::Release => Self::Release,
            DeadLetterLane::Block => Self::Block,
        }
    }
}

/// `disabled` (by an operator, a 410, or health), `failing` (every attempt
/// since `failing_since` failed), `healthy` (the last attempt succeeded) or
/// `unknown` (no attempt yet, or none since it was re-enabled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    Healthy,
    Failing,
    Disabled,
    Unknown,
}

/// The endpoint's health. Times of the last success and failure are kept to
/// within a minute (they are written at most once a minute per endpoint).
#[derive(Debug, Serialize, ToSchema)]
pub struct HealthView {
    status: HealthStatus,
    /// Since when every attempt has failed; `null` once one succeeds. After
    /// the configured window (default 5 days) the endpoint is disabled.
    failing_since: Option<DateTime<Utc>>,
    last_success_at: Option<DateTime<Utc>>,
    last_failure_at: Option<DateTime<Utc>>,
    circuit: CircuitView,
}

/// `closed` (deliveries are sent), `open` (a run of failed attempts opened
/// it: new and retried deliveries wait `parked`, without attempts, until
/// `open_until`) or `half_open` (one parked delivery is being sent as a
/// probe: its success closes the circuit and the parked deliveries are sent;
/// its failure opens it again, for twice as long, up to a minute by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CircuitState {
    Closed,
    Open,
    HalfOpen,
}

/// The endpoint's circuit.
#[derive(Debug, Serialize, ToSchema)]
pub struct CircuitView {
    state: CircuitState,
    /// While `open`: when the next probe may go.
    open_until: Option<DateTime<Utc>>,
}

impl CircuitView {
    fn new(open_until: Option<DateTime<Utc>>) -> Self {
        let state = match open_until {
            None => CircuitState::Closed,
            Some(until) if until > Utc::now() => CircuitState::Open,
            Some(_) => CircuitState::HalfOpen,
        };
        Self { state, open_until: open_until.filter(|_| state == CircuitState::Open) }
    }
}

impl HealthView {
    pub fn new(enabled: bool, health: EndpointHealth, circuit_open_until: Option<DateTime<Utc>>) -> Self {
        // Re-enabling clears `failing_since`; until the next attempt the last
        // failure is newer than the last success, and nothing is known yet.
        let succeeded_last = match (health.last_success_at, health.last_failure_at) {
            (Some(success), Some(failure)) => success >= failure,
            (success, _) => success.is_some(),
        };
        let status = match (enabled, health.failing_since) {
            (false, _) => HealthStatus::Disabled,
            (true, Some(_)) => HealthStatus::Failing,
            (true, None) if succeeded_last => HealthStatus::Healthy,
            (true, None) => HealthStatus::Unknown,
        };
        Self {
            status,
            failing_since: health.failing_since,
            last_success_at: health.last_success_at,
            last_failure_at: health.last_failure_at,
            circuit: CircuitView::new(circuit_open_until),
        }
    }
}
