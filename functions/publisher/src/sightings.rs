//! When each ready queue was last seen empty, from the session's depth
//! samples (a passive declare of every ready queue a few times a second):
//! the recovery pass records them (`repo::recovery::record_empty_sightings`)
//! so that it re-enqueues only what the broker may really have lost, never a
//! message still waiting its turn on a long queue.
//!
//! Shared by the sessions a publisher opens in turn (a session's sampler
//! writes, the recovery pass reads), so a broken session loses nothing seen.
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub(crate) struct EmptySightings {
    /// Per ready queue (indexed like `ReadyShards::all`): when it was last
    /// seen empty and not yet recorded.
    last_empty: Mutex<Vec<Option<Instant>>>,
}

impl EmptySightings {
    pub(crate) fn new(queues: usize) -> Self {
        Self { last_empty: Mutex::new(vec![None; queues]) }
    }

    /// One sample: each queue's depth, `None` where it could not be read.
    pub(crate) fn sampled(&self, depths: &[Option<u32>], at: Instant) {
        let mut last = self.last_empty.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for (seen, depth) in last.iter_mut().zip(depths) {
            if *depth == Some(0) {
                *seen = Some(at);
            }
        }
    }

    /// How long ago each queue was last seen empty since the last call
    /// (`None`: not seen empty since).
    pub(crate) fn take(&self) -> Vec<Option<Duration>> {
        let mut last = self.last_empty.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        last.iter_mut().map(|seen| seen.take().map(|at| at.elapsed())).collect()
    }

    /// Gives back what [`take`](Self::take) took and could not be recorded
    /// (the database was away), unless a newer sighting came meanwhile.
    pub(crate) fn restore(&self, ages: &[Option<Duration>]) {
        let now = Instant::now();
        let mut last = self.last_empty.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for (seen, age) in last.iter_mut().zip(ages) {
            if let (None, Some(age)) = (*seen, age) {
                *seen = now.checked_sub(*age);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_empty_queue_is_a_sighting_and_each_is_taken_once() {
        let sightings = EmptySightings::new(3);
        let at = Instant::now();
        sightings.sampled(&[Some(0), Some(5), None], at);
        let ages = sightings.take();
        assert!(ages[0].is_some() && ages[1].is_none() && ages[2].is_none(), "{ages:?}");
        assert!(sightings.take().iter().all(Option::is_none), "taken once");
        sightings.restore(&ages);
        assert!(sightings.take()[0].is_some(), "given back when it could not be recorded");
    }
}
