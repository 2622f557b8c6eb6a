//! Per-process limits: what flow control falls back to while Redis cannot be
//! asked, and the per-process concurrency cap that always applies.
//!
//! - Token buckets (same arithmetic as the Redis script, on this process'
//!   monotonic clock) decide tenants' ingest and endpoints' delivery rates
//!   only while the circuit is open; they start full.
//! - In-flight counts per endpoint are held on every request, with or without
//!   Redis: each process never has more than its share of `max_in_flight`
//!   requests open to an endpoint. With Redis the shared lease set also bounds
//!   the sum over processes; without it the sum is at most share × processes —
//!   also in the moments when Redis returns and the lease set does not yet
//!   know the requests that started without it.
//!
//! Each process's share is the shared limit divided by `divisor`
//! (`RELAYOPS_FLOW_LOCAL_DIVISOR`, default 1: every process enforces the full
//! limit, so a single replica behaves exactly as with Redis). Idle entries are
//! forgotten, so this memory stays as small as the set of active keys.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::bucket::{Limit, TokenDecision};

/// Past this many keys, idle ones are dropped.
const PRUNE_ABOVE: usize = 4_096;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

pub(super) struct LocalLimits {
    divisor: u32,
    buckets: Mutex<HashMap<String, Bucket>>,
    in_flight: Mutex<HashMap<String, u32>>,
}

/// One of a process' in-flight slots for a key; given back when dropped (so
/// a task that is cancelled cannot leak it).
pub struct LocalSlot {
    limits: Arc<LocalLimits>,
    key: String,
}

impl std::fmt::Debug for LocalSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSlot").field("key", &self.key).finish()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl LocalLimits {
    pub(super) fn new(divisor: u32) -> Self {
        Self { divisor: divisor.max(1), buckets: Mutex::default(), in_flight: Mutex::default() }
    }

    /// This process' share of a shared limit (never below one).
    pub(super) fn share(&self, shared: u32) -> u32 {
        shared.div_ceil(self.divisor).max(1)
    }

    fn share_of(&self, limit: Limit) -> Limit {
        Limit { per_second: limit.per_second / f64::from(self.divisor), burst: self.share(limit.burst) }
    }

    /// Takes `cost` tokens from this process' bucket `key`.
    pub(super) fn take_tokens(&self, key: &str, limit: Limit, cost: u32) -> TokenDecision {
        let limit = self.share_of(limit);
        let rate = limit.per_second.max(0.001);
        let burst = f64::from(limit.burst.max(1));
        let cost = f64::from(cost.max(1)).min(burst);
        let now = Instant::now();
        let mut buckets = lock(&self.buckets);
        if buckets.len() > PRUNE_ABOVE {
            // A bucket idle long enough to be full again holds no information.
            buckets.retain(|_, bucket| now.duration_since(bucket.at).as_secs_f64() * rate < burst);
        }
        let bucket = buckets.entry(key.to_owned()).or_insert(Bucket { tokens: burst, at: now });
        bucket.tokens = (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * rate).min(burst);
        bucket.at = now;
        if bucket.tokens >= cost {
            bucket.tokens -= cost;
            TokenDecision::Taken
        } else {
            TokenDecision::Wait(Duration::from_secs_f64((cost - bucket.tokens) / rate).max(Duration::from_micros(1)))
        }
    }

    /// Puts one token back into this process' bucket `key` (at most its burst).
    pub(super) fn give_back(&self, key: &str, limit: Limit) {
        let burst = f64::from(self.share_of(limit).burst.max(1));
        if let Some(bucket) = lock(&self.buckets).get_mut(key) {
            bucket.tokens = (bucket.tokens + 1.0).min(burst);
        }
    }

    /// Drops this process' bucket `key`: it starts full next time.
    pub(super) fn forget(&self, key: &str) {
        lock(&self.buckets).remove(key);
    }

    /// One of this process' share of `max_in_flight` slots for `key`, if free.
    pub(super) fn acquire(self: &Arc<Self>, key: &str, max_in_flight: u32) -> Option<LocalSlot> {
        let mut in_flight = lock(&self.in_flight);
        let held = in_flight.entry(key.to_owned()).or_insert(0);
        if *held >= self.share(max_in_flight) {
            return None;
        }
        *held += 1;
        Some(LocalSlot { limits: Arc::clone(self), key: key.to_owned() })
    }

    /// How many slots of `key` this process holds.
    pub(super) fn held(&self, key: &str) -> u32 {
        lock(&self.in_flight).get(key).copied().unwrap_or(0)
    }
}

impl Drop for LocalSlot {
    fn drop(&mut self) {
        let mut in_flight = lock(&self.limits.in_flight);
        if let Some(held) = in_flight.get_mut(&self.key) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                in_flight.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_bucket_gives_the_burst_then_says_how_long_to_wait() {
        let limits = LocalLimits::new(1);
        let limit = Limit { per_second: 10.0, burst: 3 };
        for _ in 0..3 {
            assert_eq!(limits.take_tokens("t", limit, 1), TokenDecision::Taken);
        }
        let TokenDecision::Wait(wait) = limits.take_tokens("t", limit, 1) else { panic!("the burst is spent") };
        assert!(wait <= Duration::from_millis(100), "{wait:?}");
        assert_eq!(limits.take_tokens("other", limit, 1), TokenDecision::Taken, "each key its own bucket");
    }

    #[test]
    fn a_token_given_back_or_a_forgotten_bucket_can_be_taken_again() {
        let limits = LocalLimits::new(1);
        let limit = Limit { per_second: 0.001, burst: 2 };
        assert_eq!(limits.take_tokens("t", limit, 2), TokenDecision::Taken);
        assert!(matches!(limits.take_tokens("t", limit, 1), TokenDecision::Wait(_)));
        limits.give_back("t", limit);
        assert_eq!(limits.take_tokens("t", limit, 1), TokenDecision::Taken, "the token given back");
        assert!(matches!(limits.take_tokens("t", limit, 1), TokenDecision::Wait(_)));
        limits.forget("t");
        assert_eq!(limits.take_tokens("t", limit, 2), TokenDecision::Taken, "full again");
    }

    #[test]
    fn in_flight_slots_are_capped_per_key_and_given_back_on_drop() {
        let limits = Arc::new(LocalLimits::new(1));
        let first = limits.acquire("e", 2);
        let second = limits.acquire("e", 2);
        assert!(first.is_some() && second.is_some());
        assert!(limits.acquire("e", 2).is_none(), "at most max_in_flight per process");
        assert_eq!(limits.held("e"), 2);
        drop(first);
        assert!(limits.acquire("e", 2).is_some(), "a dropped slot is free again");
        drop(second);
        assert_eq!(limits.held("e"), 0);
    }

    #[test]
    fn a_divisor_splits_limits_but_never_below_one() {
        let limits = Arc::new(LocalLimits::new(4));
        assert_eq!(limits.share(10), 3);
        assert_eq!(limits.share(1), 1);
        let _slot = limits.acquire("e", 2);
        assert!(limits.acquire("e", 2).is_none(), "2 / 4 rounds up to one slot");
    }
}
