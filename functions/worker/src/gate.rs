//! Per-endpoint flow control before a request is sent: a concurrency lease
//! (at most `max_in_flight` requests to the endpoint across all workers) and,
//! when the endpoint has a rate limit, a token. Without either the delivery is
//! deferred — back to `scheduled`, no attempt counted — for as long as the token
//! bucket says, or, for lease misses, a wait that grows with each miss. If Redis
//! cannot be consulted the delivery is deferred too: never sent without limits.
use std::time::Duration;

use rand::Rng;
use relayops_shared::config::{FlowConfig, WorkerConfig};
use relayops_shared::flow::{FlowControl, FlowError, Limit, TokenDecision};
use relayops_shared::ids::EndpointId;
use relayops_shared::repo::deliveries::DeliveryJob;
use relayops_shared::telemetry::error_chain;

use crate::saturation::Busy;

const LEASE_KIND: &str = "endpoint-lease";
const BUCKET_KIND: &str = "endpoint-rate";
/// The first wait after a lease miss; it doubles per miss up to `MAX_MISS_WAIT`.
const FIRST_MISS_WAIT: Duration = Duration::from_millis(250);
const MAX_MISS_WAIT: Duration = Duration::from_secs(8);

#[derive(Clone)]
pub struct Gate {
    flow: Option<FlowControl>,
    default_max_in_flight: u32,
    default_timeout: Duration,
}

/// The slot a request holds; give it back with [`Gate::release`].
pub struct Slot {
    endpoint: String,
    lease_id: String,
}

pub enum Admission {
    Go(Option<Slot>),
    /// Not now; ask again after `wait`.
    Defer {
        wait: Duration,
        busy: Busy,
    },
}

/// 250 ms, 500 ms, 1 s, … 8 s, ±20 %.
pub fn miss_wait(misses: u32) -> Duration {
    let base = FIRST_MISS_WAIT.saturating_mul(2u32.saturating_pow(misses.min(5))).min(MAX_MISS_WAIT);
    base.mul_f64(rand::thread_rng().gen_range(0.8..=1.2))
}

impl Gate {
    /// The production gate: Redis as configured, defaults from the config.
    pub fn from_config(flow: &FlowConfig, worker: &WorkerConfig) -> Result<Self, FlowError> {
        Ok(Self::new(Some(FlowControl::new(flow)?), flow.endpoint_max_in_flight, worker.request_timeout))
    }

    /// `flow: None` turns flow control off (a worker without Redis configured).
    pub fn new(flow: Option<FlowControl>, default_max_in_flight: u32, default_timeout: Duration) -> Self {
        Self { flow, default_max_in_flight, default_timeout }
    }

    pub async fn admit(&self, job: &DeliveryJob, misses: u32) -> Admission {
        let Some(flow) = &self.flow else { return Admission::Go(None) };
        let endpoint = job.endpoint_id.to_string();
        let lease_id = format!("{}:{}", job.delivery_id, job.attempt_number);
        let max_in_flight = job.max_in_flight.map(|n| n.max(1) as u32).unwrap_or(self.default_max_in_flight);
        // The lease outlives the request by a margin and then expires by itself.
        let timeout = job.timeout_ms.map(|ms| Duration::from_millis(ms.max(1) as u64)).unwrap_or(self.default_timeout);
        let ttl = timeout + Duration::from_secs(5);
        match flow.acquire_lease(LEASE_KIND, &endpoint, &lease_id, max_in_flight, ttl).await {
            Ok(true) => {}
            Ok(false) => return Admission::Defer { wait: miss_wait(misses), busy: Busy::Full { max_in_flight } },
            Err(error) => {
                tracing::warn!(error = %error_chain(&error), "flow control unavailable; delivery deferred");
                return Admission::Defer { wait: miss_wait(misses), busy: Busy::Unknown };
            }
        }
        let slot = Slot { endpoint, lease_id };
        let Some(rate) = job.rate_limit_per_sec else { return Admission::Go(Some(slot)) };
        let limit = Limit { per_second: f64::from(rate), burst: job.rate_limit_burst.unwrap_or(1).max(1) as u32 };
        let decision = flow.take_token(BUCKET_KIND, &slot.endpoint, limit).await;
        match decision {
            Ok(TokenDecision::Taken) => Admission::Go(Some(slot)),
            Ok(TokenDecision::Wait(wait)) => {
                self.release(Some(slot)).await;
                Admission::Defer { wait, busy: Busy::Rate { wait } }
            }
            Err(error) => {
                tracing::warn!(error = %error_chain(&error), "flow control unavailable; delivery deferred");
                self.release(Some(slot)).await;
                Admission::Defer { wait: miss_wait(misses), busy: Busy::Unknown }
            }
        }
    }

    /// Whether `endpoint` has `max_in_flight` requests in flight right now
    /// (false when Redis cannot say: the full path decides then).
    pub async fn is_full(&self, endpoint: EndpointId, max_in_flight: u32) -> bool {
        let Some(flow) = &self.flow else { return false };
        match flow.live_leases(LEASE_KIND, &endpoint.to_string()).await {
            Ok(live) => live >= max_in_flight.max(1),
            Err(_) => false,
        }
    }

    /// Frees the slot; if this fails the lease simply expires.
    pub async fn release(&self, slot: Option<Slot>) {
        if let (Some(flow), Some(slot)) = (&self.flow, slot) {
            if let Err(error) = flow.release_lease(LEASE_KIND, &slot.endpoint, &slot.lease_id).await {
                tracing::debug!(error = %error_chain(&error), "lease release failed; it will expire");
            }
        }
    }
}
