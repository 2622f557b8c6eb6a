//! Per-endpoint flow control before a request is sent: a concurrency slot
//! (at most `max_in_flight` requests to the endpoint across all workers, and
//! never more than this process' share) and, when the endpoint has a rate
//! limit, a token. Without either the delivery is parked — `parked`, no
//! attempt counted — until a worker admits it ([`crate::admission`]), which
//! asks the gate first and leases a parked delivery only into a slot (and
//! with a token) it already holds. While Redis cannot be asked, `flow`
//! decides with this process' own caps and buckets: delivery goes on, each
//! worker within its share of the limits.
use std::time::Duration;

use relayops_shared::config::{FlowConfig, WorkerConfig};
use relayops_shared::flow::{FlowControl, FlowError, Limit, Slot, TokenDecision};
use relayops_shared::ids::EndpointId;
use relayops_shared::repo::deliveries::DeliveryJob;

use crate::saturation::Busy;

const LEASE_KIND: &str = "endpoint-lease";
const BUCKET_KIND: &str = "endpoint-rate";
/// How long a slot's lease outlives the request it was taken for, at most.
const LEASE_MARGIN: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Gate {
    flow: Option<FlowControl>,
    default_max_in_flight: u32,
    default_timeout: Duration,
}

pub enum Admission {
    Go(Option<Slot>),
    /// Not now: no free slot, or no token yet.
    Defer {
        busy: Busy,
    },
}

/// What flow control needs to know of an endpoint to admit one of its
/// deliveries (from any of its jobs, [`Gate::limits`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EndpointLimits {
    pub endpoint: EndpointId,
    pub max_in_flight: u32,
    /// How long a slot's lease lives: the request's timeout and a margin.
    lease_ttl: Duration,
    rate: Option<Limit>,
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

    /// The limits of `job`'s endpoint as flow control counts them (its
    /// `max_in_flight`, or the default when it sets none).
    pub fn limits(&self, job: &DeliveryJob) -> EndpointLimits {
        let timeout = job.timeout_ms.map(|ms| Duration::from_millis(ms.max(1) as u64)).unwrap_or(self.default_timeout);
        let rate = job
            .rate_limit_per_sec
            .map(|rate| Limit { per_second: f64::from(rate), burst: job.rate_limit_burst.unwrap_or(1).max(1) as u32 });
        EndpointLimits {
            endpoint: job.endpoint_id,
            max_in_flight: job.max_in_flight.map(|n| n.max(1) as u32).unwrap_or(self.default_max_in_flight),
            lease_ttl: timeout + LEASE_MARGIN,
            rate,
        }
    }

    /// A slot (and a token) for `job`.
    pub async fn admit(&self, job: &DeliveryJob) -> Admission {
        let lease_id = format!("{}:{}", job.delivery_id, job.attempt_number);
        self.reserve(&self.limits(job), &lease_id).await
    }

    /// A slot of the endpoint, held under `lease_id`, and one of its rate
    /// limit's tokens when it has one — for a delivery not chosen yet (an
    /// admission), or for `job` ([`admit`](Self::admit)). A slot without a
    /// token is given back at once.
    pub async fn reserve(&self, limits: &EndpointLimits, lease_id: &str) -> Admission {
        let Some(flow) = &self.flow else { return Admission::Go(None) };
        let endpoint = limits.endpoint.to_string();
        let max_in_flight = limits.max_in_flight;
        let Some(slot) = flow.acquire_slot(LEASE_KIND, &endpoint, lease_id, max_in_flight, limits.lease_ttl).await
        else {
            return Admission::Defer { busy: Busy::Full { max_in_flight } };
        };
        let Some(rate) = limits.rate else { return Admission::Go(Some(slot)) };
        match flow.take_token(BUCKET_KIND, &endpoint, rate).await {
            TokenDecision::Taken => Admission::Go(Some(slot)),
            TokenDecision::Wait(wait) => {
                self.release(Some(slot)).await;
                Admission::Defer { busy: Busy::Rate { wait } }
            }
        }
    }

    /// Gives back what [`reserve`](Self::reserve) took for a delivery that
    /// was not there (nothing left to admit): the slot, and the token.
    pub async fn give_back(&self, limits: &EndpointLimits, slot: Option<Slot>) {
        self.release(slot).await;
        if let (Some(flow), Some(rate)) = (&self.flow, limits.rate) {
            flow.give_back_token(BUCKET_KIND, &limits.endpoint.to_string(), rate).await;
        }
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
