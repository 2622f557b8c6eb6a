//! Per-endpoint flow control before a request is sent: a concurrency slot
//! (at most `max_in_flight` requests to the endpoint across all workers, and
//! never more than this process' share) and, when the endpoint has a rate
//! limit, a token. Without either the delivery is deferred — back to
//! `scheduled`, no attempt counted — for as long as the token bucket says, or,
//! for slot misses, a wait that grows with each miss. While Redis cannot be
//! asked, `flow` decides with this process' own caps and buckets: delivery
//! goes on, each worker within its share of the limits.
use std::time::Duration;

use rand::Rng;
use relayops_shared::config::{FlowConfig, WorkerConfig};
use relayops_shared::flow::{FlowControl, FlowError, Limit, Slot, TokenDecision};
use relayops_shared::ids::EndpointId;
use relayops_shared::repo::deliveries::DeliveryJob;

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

    /// The flow control this gate asks (for readiness), if any.
    pub fn flow(&self) -> Option<&FlowControl> {
        self.flow.as_ref()
    }

    pub async fn admit(&self, job: &DeliveryJob, misses: u32) -> Admission {
        let Some(flow) = &self.flow else { return Admission::Go(None) };
        let endpoint = job.endpoint_id.to_string();
        let lease_id = format!("{}:{}", job.delivery_id, job.attempt_number);
        let max_in_flight = self.max_in_flight(job);
        // The lease outlives the request by a margin and then expires by itself.
        let timeout = job.timeout_ms.map(|ms| Duration::from_millis(ms.max(1) as u64)).unwrap_or(self.default_timeout);
        let ttl = timeout + Duration::from_secs(5);
        let Some(slot) = flow.acquire_slot(LEASE_KIND, &endpoint, &lease_id, max_in_flight, ttl).await else {
            return Admission::Defer { wait: miss_wait(misses), busy: Busy::Full { max_in_flight } };
        };
        let Some(rate) = job.rate_limit_per_sec else { return Admission::Go(Some(slot)) };
        let limit = Limit { per_second: f64::from(rate), burst: job.rate_limit_burst.unwrap_or(1).max(1) as u32 };
        match flow.take_token(BUCKET_KIND, &endpoint, limit).await {
            TokenDecision::Taken => Admission::Go(Some(slot)),
            TokenDecision::Wait(wait) => {
                self.release(Some(slot)).await;
                Admission::Defer { wait, busy: Busy::Rate { wait } }
            }
        }
    }

    /// The job's endpoint's `max_in_flight` (the default when it sets none).
    pub fn max_in_flight(&self, job: &DeliveryJob) -> u32 {
        job.max_in_flight.map(|n| n.max(1) as u32).unwrap_or(self.default_max_in_flight)
    }

    /// Whether `endpoint` has no free slot right now (its lease set is full,
    /// or this process holds its share).
    pub async fn is_full(&self, endpoint: EndpointId, max_in_flight: u32) -> bool {
        let Some(flow) = &self.flow else { return false };
        flow.is_full(LEASE_KIND, &endpoint.to_string(), max_in_flight).await
    }

    /// Frees the slot; if Redis cannot be told, its lease simply expires.
    pub async fn release(&self, slot: Option<Slot>) {
        if let (Some(flow), Some(slot)) = (&self.flow, slot) {
            flow.release_slot(slot).await;
        }
    }
}
