//! The per-endpoint cool-down: after an alert about an endpoint, its further
//! dead letters are counted instead of sent until the cool-down has passed;
//! the next alert for it says how many were held back. One failing endpoint
//! therefore costs at most one alert per cool-down, however many deliveries die.
//!
//! The state is in memory, per alerter process: a restart (or a second
//! replica) may send one extra alert per endpoint, which is the safe side.
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What to do with a dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Send an alert; `held_back` dead letters of this key were suppressed
    /// since its last alert.
    Send { held_back: u64 },
    /// Within the cool-down: count it, do not send.
    Suppress,
}

#[derive(Debug)]
struct KeyState {
    last_sent: Instant,
    held_back: u64,
}

/// Keys are whatever identifies "the same problem" (an endpoint id).
#[derive(Debug)]
pub struct Cooldown {
    period: Duration,
    keys: HashMap<String, KeyState>,
}

/// Keys kept at most; past this, keys with nothing held back whose cool-down
/// is over are forgotten (they would alert anyway).
const MAX_KEYS: usize = 10_000;

impl Cooldown {
    pub fn new(period: Duration) -> Self {
        Self { period, keys: HashMap::new() }
    }

    /// Decides without changing anything: a suppression is recorded with
    /// [`held_back`](Self::held_back), a sent alert with [`sent`](Self::sent).
    pub fn decide(&self, key: &str, now: Instant) -> Decision {
        match self.keys.get(key) {
            Some(state) if now.saturating_duration_since(state.last_sent) < self.period => Decision::Suppress,
            Some(state) => Decision::Send { held_back: state.held_back },
            None => Decision::Send { held_back: 0 },
        }
    }

    /// A dead letter of `key` was suppressed.
    pub fn held_back(&mut self, key: &str) {
        if let Some(state) = self.keys.get_mut(key) {
            state.held_back += 1;
        }
    }

    /// An alert for `key` was accepted by the receiver: the cool-down starts.
    pub fn sent(&mut self, key: &str, now: Instant) {
        if self.keys.len() >= MAX_KEYS {
            let period = self.period;
            self.keys.retain(|_, state| state.held_back > 0 || now.saturating_duration_since(state.last_sent) < period);
        }
        self.keys.insert(key.to_owned(), KeyState { last_sent: now, held_back: 0 });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_alert_per_key_per_period_and_the_next_one_counts_the_rest() {
        let mut cooldown = Cooldown::new(Duration::from_secs(60));
        let start = Instant::now();
        assert_eq!(cooldown.decide("ep_a", start), Decision::Send { held_back: 0 });
        cooldown.sent("ep_a", start);
        for _ in 0..3 {
            assert_eq!(cooldown.decide("ep_a", start + Duration::from_secs(1)), Decision::Suppress);
            cooldown.held_back("ep_a");
        }
        assert_eq!(cooldown.decide("ep_b", start), Decision::Send { held_back: 0 }, "keys are independent");
        let later = start + Duration::from_secs(61);
        assert_eq!(cooldown.decide("ep_a", later), Decision::Send { held_back: 3 });
        cooldown.sent("ep_a", later);
        assert_eq!(cooldown.decide("ep_a", later), Decision::Suppress);
        assert_eq!(cooldown.decide("ep_a", later + Duration::from_secs(61)), Decision::Send { held_back: 0 });
    }

    #[test]
    fn an_alert_that_was_not_accepted_starts_no_cool_down() {
        let cooldown = Cooldown::new(Duration::from_secs(60));
        let now = Instant::now();
        assert_eq!(cooldown.decide("ep_a", now), Decision::Send { held_back: 0 });
        // Not `sent` (the receiver refused): the retry is sent, not suppressed.
        assert_eq!(cooldown.decide("ep_a", now), Decision::Send { held_back: 0 });
    }
}
