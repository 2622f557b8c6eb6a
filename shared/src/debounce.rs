//! At most one action per interval, lock-free: the publisher wake-ups (the
//! Postgres `NOTIFY` and the SQS message) call it on every ingest.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub struct Debounce {
    started: Instant,
    /// Milliseconds since `started`, plus one interval, of the last slot taken.
    last_ms: AtomicU64,
    interval: Duration,
}

impl Debounce {
    pub fn new(interval: Duration) -> Self {
        Self { started: Instant::now(), last_ms: AtomicU64::new(0), interval }
    }

    /// True (and the interval restarted) when no slot was taken within it; of
    /// concurrent callers, one wins.
    pub fn take_slot(&self) -> bool {
        let interval_ms = self.interval.as_millis() as u64;
        // Offset by one interval so that the very first call is always due.
        let now_ms = self.started.elapsed().as_millis() as u64 + interval_ms;
        let last = self.last_ms.load(Ordering::Relaxed);
        now_ms.saturating_sub(last) >= interval_ms
            && self.last_ms.compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_slot_per_interval() {
        let debounce = Debounce::new(Duration::from_secs(60));
        assert!(debounce.take_slot(), "the first call is due");
        assert!(!debounce.take_slot(), "a second within the interval is not");
        let always = Debounce::new(Duration::ZERO);
        assert!(always.take_slot() && always.take_slot());
    }
}
