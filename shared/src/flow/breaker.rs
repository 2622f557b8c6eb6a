//! Whether Redis is worth asking: circuit breakers per [`FlowControl`](super::FlowControl)
//! handle (one per process in practice), one per circuit: the whole server
//! for one Redis, each hash slot for a cluster, so a shard that fails
//! degrades the keys it holds and no others.
//!
//! After a failed or slow call a circuit opens for `cooldown`: callers are
//! told at once to decide locally, instead of each waiting out the timeout
//! while Redis is down or paused. When the cooldown has passed, exactly one
//! caller probes Redis (the others keep deciding locally meanwhile); its
//! success closes the circuit, its failure opens it again. So a dead Redis
//! costs one timed-out call per cooldown per circuit and process, and shared
//! limits resume within a cooldown of Redis answering again. Only open
//! circuits are kept, so closed ones cost nothing.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::observe::names;

/// A circuit: the whole Redis (always 0 for one server) or a hash slot.
pub(super) type Circuit = u16;

pub(super) struct Breaker {
    cooldown: Duration,
    /// The open (degraded) circuits.
    open: Mutex<HashMap<Circuit, Open>>,
}

struct Open {
    /// Open until then, half-open after.
    until: Instant,
    /// A half-open probe is in flight.
    probing: bool,
}

/// What a caller may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Permit {
    /// Closed: ask Redis.
    Ask,
    /// Half-open: ask Redis as the one probe; report the outcome.
    Probe,
    /// Open: decide locally without asking.
    Skip,
}

impl Breaker {
    pub(super) fn new(cooldown: Duration) -> Self {
        Self { cooldown, open: Mutex::new(HashMap::new()) }
    }

    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<Circuit, Open>> {
        self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn permit(&self, circuit: Circuit) -> Permit {
        match self.open().get_mut(&circuit) {
            None => Permit::Ask,
            Some(open) if Instant::now() < open.until || open.probing => Permit::Skip,
            Some(open) => {
                open.probing = true;
                Permit::Probe
            }
        }
    }

    /// Redis answered in time.
    pub(super) fn succeeded(&self, circuit: Circuit) {
        let mut open = self.open();
        if open.remove(&circuit).is_some() && open.is_empty() {
            resumed();
        }
    }

    /// Redis failed or was too slow.
    pub(super) fn failed(&self, circuit: Circuit, error: &super::FlowError) {
        let mut open = self.open();
        self.forget_unasked(&mut open);
        if open.is_empty() {
            tracing::warn!(
                error = %crate::telemetry::error_chain(error),
                "redis unusable; flow control degrades to per-process limits"
            );
            metrics::gauge!(names::FLOW_DEGRADED).set(1.0);
        }
        open.insert(circuit, Open { until: Instant::now() + self.cooldown, probing: false });
    }

    /// Whether a circuit failed within the last two cooldowns (some limits
    /// are per process).
    pub(super) fn is_degraded(&self) -> bool {
        let mut open = self.open();
        let was_open = !open.is_empty();
        self.forget_unasked(&mut open);
        if was_open && open.is_empty() {
            resumed();
        }
        !open.is_empty()
    }

    /// Forgets circuits half-open for a whole cooldown without a probe
    /// answering (a key used once, e.g. one login's throttle, or a probe
    /// whose caller gave up): they would otherwise say "degraded" for ever.
    /// The next call on such a key simply asks Redis.
    fn forget_unasked(&self, open: &mut HashMap<Circuit, Open>) {
        let now = Instant::now();
        open.retain(|_, circuit| now < circuit.until + self.cooldown);
    }
}

fn resumed() {
    tracing::warn!("redis answers again; shared flow-control limits resume");
    metrics::gauge!(names::FLOW_DEGRADED).set(0.0);
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: Circuit = 0;

    #[test]
    fn a_failure_skips_redis_until_the_cooldown_then_lets_one_probe_through() {
        let breaker = Breaker::new(Duration::from_millis(30));
        assert_eq!(breaker.permit(SERVER), Permit::Ask);
        breaker.failed(SERVER, &super::super::FlowError::Timeout);
        assert!(breaker.is_degraded());
        assert_eq!(breaker.permit(SERVER), Permit::Skip, "no caller waits on a Redis that just failed");
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(breaker.permit(SERVER), Permit::Probe);
        assert_eq!(breaker.permit(SERVER), Permit::Skip, "one probe at a time");
        breaker.failed(SERVER, &super::super::FlowError::Timeout);
        assert_eq!(breaker.permit(SERVER), Permit::Skip, "a failed probe opens the circuit again");
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(breaker.permit(SERVER), Permit::Probe);
        breaker.succeeded(SERVER);
        assert!(!breaker.is_degraded());
        assert_eq!(breaker.permit(SERVER), Permit::Ask, "a successful probe closes the circuit");
    }

    #[test]
    fn a_failed_slot_leaves_the_other_slots_asking_redis() {
        let breaker = Breaker::new(Duration::from_secs(60));
        breaker.failed(7, &super::super::FlowError::Timeout);
        breaker.failed(9, &super::super::FlowError::Timeout);
        assert_eq!(breaker.permit(7), Permit::Skip);
        assert_eq!(breaker.permit(8), Permit::Ask, "a slot of a shard that answers is still shared");
        breaker.succeeded(7);
        assert!(breaker.is_degraded(), "slot 9 is still open");
        breaker.succeeded(9);
        assert!(!breaker.is_degraded());
    }

    #[test]
    fn a_circuit_nobody_asks_again_stops_saying_degraded_after_two_cooldowns() {
        let breaker = Breaker::new(Duration::from_millis(20));
        breaker.failed(3, &super::super::FlowError::Timeout);
        assert!(breaker.is_degraded());
        std::thread::sleep(Duration::from_millis(50));
        assert!(!breaker.is_degraded(), "a key used once does not keep the process degraded");
        assert_eq!(breaker.permit(3), Permit::Ask);
    }
}
