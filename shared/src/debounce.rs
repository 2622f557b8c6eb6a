//! At most one action per interval, lock-free: the publisher wake-ups (the
//! Postgres `NOTIFY` and the SQS message) call it on every commit that leaves
//! work in the outbox. [`Debounce::take_slot`] loses none (the `NOTIFY`);
//! [`Debounce::take_slot_if_due`] is for a caller that can only act at once
//! (the SQS message, which a Lambda's answer must not wait for).
//!
//! With `take_slot`, a call inside the interval of the last slot is not
//! dropped: it gets the next slot, one interval after the last
//! ([`Slot::After`]), unless a later slot is already taken ([`Slot::Covered`]:
//! that action runs after this call, so it covers it). Dropping it instead
//! lost wake-ups: a commit 5 ms after the previous one, whose rows the woken
//! publisher had already missed, waited for the publisher's idle interval
//! (500 ms; a minute in AWS). An ordering lane moves one delivery per such
//! commit, so one key moved at about 4 deliveries a second.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub struct Debounce {
    started: Instant,
    /// Milliseconds since `started`, plus one interval, of the last slot taken
    /// (in the future while a later slot waits).
    last_ms: AtomicU64,
    interval: Duration,
}

/// When the caller's action should run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Now: no slot was taken within the interval.
    Now,
    /// After this long: the slot at the end of the current interval is the
    /// caller's to run.
    After(Duration),
    /// Not at all: a slot later than this call is already taken, and its
    /// action will run after it.
    Covered,
}

impl Debounce {
    pub fn new(interval: Duration) -> Self {
        Self { started: Instant::now(), last_ms: AtomicU64::new(0), interval }
    }

    /// True (and the interval restarted) when a slot is free now; false
    /// otherwise, reserving nothing: for a caller that can only act at once,
    /// and accepts that a call inside the interval does nothing.
    pub fn take_slot_if_due(&self) -> bool {
        let (now_ms, interval_ms) = self.now_ms();
        let last = self.last_ms.load(Ordering::Relaxed);
        now_ms.saturating_sub(last) >= interval_ms
            && self.last_ms.compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }

    /// The caller's slot (and the interval restarted from it); of concurrent
    /// callers, one wins each slot and the others are covered by it.
    pub fn take_slot(&self) -> Slot {
        let (now_ms, interval_ms) = self.now_ms();
        let mut last = self.last_ms.load(Ordering::Relaxed);
        loop {
            let (slot, at) = if now_ms.saturating_sub(last) >= interval_ms {
                (Slot::Now, now_ms)
            } else if last > now_ms {
                return Slot::Covered;
            } else {
                let at = last + interval_ms;
                (Slot::After(Duration::from_millis(at - now_ms)), at)
            };
            match self.last_ms.compare_exchange(last, at, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return slot,
                Err(current) => last = current,
            }
        }
    }

    /// Now and the interval, in milliseconds; now is offset by one interval
    /// so that the very first call is always due.
    fn now_ms(&self) -> (u64, u64) {
        let interval_ms = self.interval.as_millis() as u64;
        (self.started.elapsed().as_millis() as u64 + interval_ms, interval_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_inside_the_interval_gets_the_next_slot_and_later_ones_are_covered_by_it() {
        let debounce = Debounce::new(Duration::from_secs(60));
        assert_eq!(debounce.take_slot(), Slot::Now, "the first call is due");
        let Slot::After(wait) = debounce.take_slot() else {
            panic!("a second within the interval waits for the next slot")
        };
        assert!(wait > Duration::from_secs(59) && wait <= Duration::from_secs(60), "{wait:?}");
        assert_eq!(debounce.take_slot(), Slot::Covered, "a third runs before the waiting slot's action");
        let always = Debounce::new(Duration::ZERO);
        assert_eq!((always.take_slot(), always.take_slot()), (Slot::Now, Slot::Now));
    }

    #[test]
    fn a_caller_that_acts_only_at_once_reserves_nothing() {
        let debounce = Debounce::new(Duration::from_secs(60));
        assert!(debounce.take_slot_if_due(), "the first call is due");
        assert!(!debounce.take_slot_if_due(), "a second within the interval is not");
        let Slot::After(wait) = debounce.take_slot() else { panic!("the next slot is still free to wait for") };
        assert!(wait > Duration::from_secs(59), "{wait:?}");
    }
}
