//! Outbox rows the long-lived loop published for ingest's hand-off and has
//! not deleted yet. At low rates ingest hands each event over alone, and the
//! delete of its row was a transaction of its own per event, one of the four
//! a lone event costs Postgres (BENCHMARKS.md, session 19). The loop gathers
//! the rows whose messages the broker confirmed and deletes them in one
//! statement once the oldest has waited the delete window
//! (`RELAYOPS_PUBLISHER_DELETE_WINDOW_MS`), once [`DELETE_AT`] rows have
//! gathered, and before it returns. Meanwhile a row stays claimed by this
//! publisher, well within its claim (the window is at most a quarter of it):
//! a process that dies first leaves its rows to be published again when their
//! claims expire, as one dying between the confirm and the delete always did
//! (SPEC §3: a duplicate message, which the worker's claim absorbs).
use std::time::{Duration, Instant};

/// Rows gathered that are deleted at once, whatever their age.
pub(crate) const DELETE_AT: usize = 512;

pub(crate) struct PublishedRows {
    window: Duration,
    ids: Vec<i64>,
    /// When the oldest row gathered was added.
    oldest: Option<Instant>,
}

impl PublishedRows {
    /// `window` is capped at a quarter of `claim_ttl`.
    pub(crate) fn new(window: Duration, claim_ttl: Duration) -> Self {
        Self { window: window.min(claim_ttl / 4), ids: Vec::new(), oldest: None }
    }

    pub(crate) fn add(&mut self, ids: &[i64], now: Instant) {
        if ids.is_empty() {
            return;
        }
        self.oldest.get_or_insert(now);
        self.ids.extend_from_slice(ids);
    }

    /// When the rows gathered are to be deleted: none gathered, never; at
    /// [`DELETE_AT`] rows, now; otherwise when the oldest has waited the window.
    pub(crate) fn due(&self) -> Option<Instant> {
        let oldest = self.oldest?;
        Some(if self.ids.len() >= DELETE_AT { oldest } else { oldest + self.window })
    }

    /// Every row gathered, to be deleted now.
    pub(crate) fn take(&mut self) -> Vec<i64> {
        self.oldest = None;
        std::mem::take(&mut self.ids)
    }

    /// Rows a delete that failed leaves: gathered again, due a window from `now`.
    pub(crate) fn put_back(&mut self, ids: Vec<i64>, now: Instant) {
        self.add(&ids, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_due_a_window_after_the_oldest_or_at_once_when_enough_have_gathered() {
        let start = Instant::now();
        let window = Duration::from_millis(50);
        let mut rows = PublishedRows::new(window, Duration::from_secs(30));
        assert_eq!(rows.due(), None, "nothing gathered, nothing due");
        rows.add(&[], start);
        assert_eq!(rows.due(), None, "an empty batch gathers nothing");
        rows.add(&[1, 2], start);
        rows.add(&[3], start + Duration::from_millis(30));
        assert_eq!(rows.due(), Some(start + window), "the oldest row sets the time");
        assert_eq!(rows.take(), vec![1, 2, 3]);
        assert_eq!(rows.due(), None);

        let many: Vec<i64> = (0..DELETE_AT as i64).collect();
        rows.add(&many, start);
        assert_eq!(rows.due(), Some(start), "enough rows are due at once");
        let failed = rows.take();
        let later = start + Duration::from_secs(1);
        rows.put_back(failed[..10].to_vec(), later);
        assert_eq!(rows.due(), Some(later + window), "rows a failed delete left wait a window again");
    }

    #[test]
    fn the_window_is_at_most_a_quarter_of_the_claim() {
        let start = Instant::now();
        let mut rows = PublishedRows::new(Duration::from_secs(10), Duration::from_secs(2));
        rows.add(&[1], start);
        assert_eq!(rows.due(), Some(start + Duration::from_millis(500)));
    }
}
