//! The retry policy: how many attempts, and how long to wait before each retry.
//! The default follows the industry norm (immediately, then 5 s, 5 min, 30 min,
//! 2 h, 5 h, 10 h, 10 h); an endpoint may set its own. Waits get ±20 % jitter so
//! retries of many deliveries do not arrive together, and a receiver's
//! `Retry-After` is honoured up to a cap.
use std::time::Duration;

use rand::Rng;

/// Waits before attempt 2, 3, … in seconds.
pub const DEFAULT_SCHEDULE_SECS: [u32; 7] = [5, 300, 1800, 7200, 18000, 36000, 36000];
/// The longest a `Retry-After` header can push a retry out.
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(6 * 3600);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    schedule_secs: Vec<u32>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_attempts: DEFAULT_SCHEDULE_SECS.len() as u32 + 1, schedule_secs: DEFAULT_SCHEDULE_SECS.to_vec() }
    }
}

impl RetryPolicy {
    /// The endpoint's policy: its own values where set, the default elsewhere.
    pub fn for_endpoint(max_attempts: Option<i32>, schedule_secs: Option<&[i32]>) -> Self {
        let default = Self::default();
        let schedule_secs = match schedule_secs {
            Some(secs) if !secs.is_empty() => secs.iter().map(|&s| s.max(0) as u32).collect(),
            _ => default.schedule_secs,
        };
        let max_attempts = max_attempts.map(|n| n.max(1) as u32).unwrap_or(default.max_attempts);
        Self { max_attempts, schedule_secs }
    }

    /// The wait before the attempt after `attempt_number`, or `None` when the
    /// attempts are used up. The last step of the schedule repeats if needed.
    pub fn next_wait(&self, attempt_number: u32, retry_after: Option<Duration>) -> Option<Duration> {
        if attempt_number >= self.max_attempts {
            return None;
        }
        let index = (attempt_number.max(1) - 1) as usize;
        let step = self.schedule_secs.get(index).or(self.schedule_secs.last()).copied().unwrap_or(5);
        let jittered = jitter(Duration::from_secs(u64::from(step)));
        Some(match retry_after {
            Some(asked) => asked.min(RETRY_AFTER_CAP).max(jittered.min(asked)),
            None => jittered,
        })
    }
}

fn jitter(wait: Duration) -> Duration {
    let factor = rand::thread_rng().gen_range(0.8..=1.2);
    wait.mul_f64(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_schedule_has_eight_attempts_with_jitter() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.max_attempts, 8);
        let first = policy.next_wait(1, None).unwrap();
        assert!(first >= Duration::from_secs(4) && first <= Duration::from_secs(6), "{first:?}");
        assert!(policy.next_wait(8, None).is_none());
        // The claim's parking condition writes the default in SQL.
        assert_eq!(policy.max_attempts, relayops_shared::repo::circuits::DEFAULT_MAX_ATTEMPTS);
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_cap() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.next_wait(1, Some(Duration::from_secs(60))), Some(Duration::from_secs(60)));
        let capped = policy.next_wait(1, Some(Duration::from_secs(100 * 3600))).unwrap();
        assert_eq!(capped, RETRY_AFTER_CAP);
    }

    #[test]
    fn endpoint_policy_overrides_the_default() {
        let policy = RetryPolicy::for_endpoint(Some(2), Some(&[1]));
        let wait = policy.next_wait(1, None).unwrap();
        assert!(wait <= Duration::from_millis(1200));
        assert!(policy.next_wait(2, None).is_none());
    }
}
