//! A per-process memory of endpoints that flow control recently turned away,
//! so that a message for an endpoint that is still saturated is parked
//! without a claim that would only be turned away again (one write; a
//! worker admits it when the endpoint can take it, [`crate::admission`]).
//!
//! The memory only says whom to ask, never decides on a guess: a message is
//! parked while its endpoint's rate-limit wait lasts (no token can exist
//! before then), or when flow control says the endpoint has no free slot
//! right now. Nothing depends on it either: a delivery claimed as usual is
//! turned away by the gate and parked the same way.
//!
//! A remembered endpoint also carries a signal for each slot this process
//! frees ([`Saturation::slot_freed`]): a delivery for a full endpoint waits a
//! moment for one ([`Saturation::wait_for_freed_slot`]), where waiting costs
//! nothing, before it is parked — a fast receiver's slots free within
//! milliseconds.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use relayops_shared::ids::EndpointId;
use tokio::sync::Notify;

/// How long after it was last turned away an endpoint is remembered.
pub const MEMORY: Duration = Duration::from_secs(10);
/// Past this many remembered endpoints, stale entries are dropped.
const PRUNE_ABOVE: usize = 1_024;

/// Why flow control turned a delivery away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// Its endpoint had `max_in_flight` requests in flight.
    Full { max_in_flight: u32 },
    /// Its endpoint's rate limit has no token for this long.
    Rate { wait: Duration },
}

/// What the memory says about a message's endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recall {
    /// Nothing: claim as usual.
    Claim,
    /// Its rate-limit wait has not passed: park.
    RateLimited,
    /// It was full recently: park if its lease set is still full.
    WasFull { max_in_flight: u32 },
}

#[derive(Debug, Clone)]
struct Entry {
    max_in_flight: Option<u32>,
    rate_until: Option<Instant>,
    seen: Instant,
    /// Notified once per slot of the endpoint this process frees.
    freed: Arc<Notify>,
}

#[derive(Default)]
pub struct Saturation {
    endpoints: Mutex<HashMap<EndpointId, Entry>>,
}

impl Saturation {
    /// Flow control turned a delivery to `endpoint` away.
    pub fn remember(&self, endpoint: EndpointId, busy: Busy) {
        let now = Instant::now();
        let mut map = self.endpoints.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if map.len() > PRUNE_ABOVE {
            map.retain(|_, entry| now.duration_since(entry.seen) < MEMORY);
        }
        let entry = map.entry(endpoint).or_insert_with(|| Entry {
            max_in_flight: None,
            rate_until: None,
            seen: now,
            freed: Arc::default(),
        });
        entry.seen = now;
        match busy {
            Busy::Full { max_in_flight } => entry.max_in_flight = Some(max_in_flight),
            Busy::Rate { wait } => entry.rate_until = Some(now + wait),
        }
    }

    /// This process freed a slot of `endpoint`: one delivery waiting in
    /// [`wait_for_freed_slot`](Self::wait_for_freed_slot) for it is woken
    /// (nothing, for an endpoint not remembered).
    pub fn slot_freed(&self, endpoint: EndpointId) {
        let map = self.endpoints.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(entry) = map.get(&endpoint) {
            entry.freed.notify_one();
        }
    }

    /// Waits up to `limit` for this process to free a slot of a remembered
    /// `endpoint`; whether one was freed (another process's are not seen).
    pub async fn wait_for_freed_slot(&self, endpoint: EndpointId, limit: Duration) -> bool {
        let freed = {
            let map = self.endpoints.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let Some(entry) = map.get(&endpoint) else { return false };
            Arc::clone(&entry.freed)
        };
        tokio::time::timeout(limit, freed.notified()).await.is_ok()
    }

    /// What to do with a message for `endpoint`.
    pub fn recall(&self, endpoint: EndpointId) -> Recall {
        let now = Instant::now();
        let map = self.endpoints.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(entry) = map.get(&endpoint).filter(|entry| now.duration_since(entry.seen) < MEMORY) else {
            return Recall::Claim;
        };
        if entry.rate_until.is_some_and(|until| until > now) {
            return Recall::RateLimited;
        }
        match entry.max_in_flight {
            Some(max_in_flight) => Recall::WasFull { max_in_flight },
            None => Recall::Claim,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_endpoint_is_remembered_with_its_limit() {
        let saturation = Saturation::default();
        let (full, other) = (EndpointId::new(), EndpointId::new());
        assert_eq!(saturation.recall(full), Recall::Claim, "nothing remembered yet");
        saturation.remember(full, Busy::Full { max_in_flight: 3 });
        assert_eq!(saturation.recall(full), Recall::WasFull { max_in_flight: 3 });
        assert_eq!(saturation.recall(other), Recall::Claim, "only the endpoint turned away");
    }

    #[tokio::test]
    async fn a_delivery_waiting_for_a_full_endpoint_wakes_when_this_process_frees_a_slot() {
        let saturation = Arc::new(Saturation::default());
        let (full, forgotten) = (EndpointId::new(), EndpointId::new());
        let short = Duration::from_millis(20);
        assert!(!saturation.wait_for_freed_slot(forgotten, short).await, "not remembered: no wait");
        saturation.remember(full, Busy::Full { max_in_flight: 1 });
        assert!(!saturation.wait_for_freed_slot(full, short).await, "nothing freed: the wait runs out");
        let waiting = tokio::spawn({
            let saturation = Arc::clone(&saturation);
            async move { saturation.wait_for_freed_slot(full, Duration::from_secs(5)).await }
        });
        tokio::task::yield_now().await;
        saturation.slot_freed(forgotten);
        saturation.slot_freed(full);
        assert!(waiting.await.unwrap(), "woken by the freed slot");
    }

    #[test]
    fn a_rate_wait_parks_until_it_has_passed() {
        let saturation = Saturation::default();
        let (waiting, passed) = (EndpointId::new(), EndpointId::new());
        saturation.remember(waiting, Busy::Rate { wait: Duration::from_secs(60) });
        saturation.remember(passed, Busy::Rate { wait: Duration::ZERO });
        assert_eq!(saturation.recall(waiting), Recall::RateLimited);
        assert_eq!(saturation.recall(passed), Recall::Claim);
    }
}
