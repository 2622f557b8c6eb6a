//! Whether Redis is worth asking: a circuit breaker per [`FlowControl`](super::FlowControl)
//! handle (one per process in practice).
//!
//! After a failed or slow call the circuit opens for `cooldown`: callers are
//! told at once to decide locally, instead of each waiting out the timeout
//! while Redis is down or paused. When the cooldown has passed, exactly one
//! caller probes Redis (the others keep deciding locally meanwhile); its
//! success closes the circuit, its failure opens it again. So a dead Redis
//! costs one timed-out call per cooldown per process, and shared limits
//! resume within a cooldown of Redis answering again.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::observe::names;

pub(super) struct Breaker {
    cooldown: Duration,
    /// `Some(t)`: open (degraded) until `t`, then half-open.
    open_until: Mutex<Option<Instant>>,
    /// A half-open probe is in flight.
    probing: AtomicBool,
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
        Self { cooldown, open_until: Mutex::new(None), probing: AtomicBool::new(false) }
    }

    fn open_until(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.open_until.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn permit(&self) -> Permit {
        match *self.open_until() {
            None => Permit::Ask,
            Some(until) if Instant::now() < until => Permit::Skip,
            Some(_) => {
                if self.probing.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    Permit::Probe
                } else {
                    Permit::Skip
                }
            }
        }
    }

    /// Redis answered in time.
    pub(super) fn succeeded(&self, permit: Permit) {
        let mut open_until = self.open_until();
        if open_until.take().is_some() {
            tracing::warn!("redis answers again; shared flow-control limits resume");
            metrics::gauge!(names::FLOW_DEGRADED).set(0.0);
        }
        if permit == Permit::Probe {
            self.probing.store(false, Ordering::Release);
        }
    }

    /// Redis failed or was too slow.
    pub(super) fn failed(&self, permit: Permit, error: &super::FlowError) {
        let mut open_until = self.open_until();
        if open_until.is_none() {
            tracing::warn!(
                error = %crate::telemetry::error_chain(error),
                "redis unusable; flow control degrades to per-process limits"
            );
            metrics::gauge!(names::FLOW_DEGRADED).set(1.0);
        }
        *open_until = Some(Instant::now() + self.cooldown);
        if permit == Permit::Probe {
            self.probing.store(false, Ordering::Release);
        }
    }

    /// Whether the circuit is open or half-open (limits are per process).
    pub(super) fn is_degraded(&self) -> bool {
        self.open_until().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_skips_redis_until_the_cooldown_then_lets_one_probe_through() {
        let breaker = Breaker::new(Duration::from_millis(30));
        assert_eq!(breaker.permit(), Permit::Ask);
        breaker.failed(Permit::Ask, &super::super::FlowError::Timeout);
        assert!(breaker.is_degraded());
        assert_eq!(breaker.permit(), Permit::Skip, "no caller waits on a Redis that just failed");
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(breaker.permit(), Permit::Probe);
        assert_eq!(breaker.permit(), Permit::Skip, "one probe at a time");
        breaker.failed(Permit::Probe, &super::super::FlowError::Timeout);
        assert_eq!(breaker.permit(), Permit::Skip, "a failed probe opens the circuit again");
        std::thread::sleep(Duration::from_millis(40));
        let probe = breaker.permit();
        assert_eq!(probe, Permit::Probe);
        breaker.succeeded(probe);
        assert!(!breaker.is_degraded());
        assert_eq!(breaker.permit(), Permit::Ask, "a successful probe closes the circuit");
    }
}
