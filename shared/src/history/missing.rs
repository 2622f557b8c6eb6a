//! Missing history partitions, the failure partition maintenance exists to
//! prevent: if it stops for longer than the partitions it keeps ahead, a
//! write for now finds no partition. Writers refuse (ingest: 503 +
//! `Retry-After`, `api::problem`), each refusal is counted
//! (`relayops_history_partitions_missing_total`) and logged at error level
//! at most once per [`LOG_WINDOW`] per process; readiness reports how many
//! partitions are left ahead ([`coverage`]).
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio_postgres::Client;

use crate::db::partitions::{self, now_millis};
use crate::db::DbError;
use crate::observe::names::HISTORY_PARTITIONS_MISSING;
use crate::telemetry::error_chain;

/// One error line per window, however many writes are refused in it.
pub const LOG_WINDOW: Duration = Duration::from_secs(60);

/// When this process last logged a refusal (Unix milliseconds; 0: never).
static LAST_LOGGED_MS: AtomicI64 = AtomicI64::new(0);

/// A write refused for want of a partition: counted, and logged unless this
/// process already logged one within the window.
pub fn refused(error: &DbError) {
    metrics::counter!(HISTORY_PARTITIONS_MISSING).increment(1);
    if take_log_turn(&LAST_LOGGED_MS, now_millis()) {
        tracing::error!(
            error = %error_chain(error),
            "history partitions missing: writes for now are refused; partition maintenance (the publisher's \
             history maintenance) is not running"
        );
    }
}

/// Whether a line may be logged at `now`: none was in the window before it.
/// Of concurrent callers, one wins.
fn take_log_turn(last_logged_ms: &AtomicI64, now: i64) -> bool {
    let last = last_logged_ms.load(Ordering::Relaxed);
    now - last >= LOG_WINDOW.as_millis() as i64
        && last_logged_ms.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
}

/// How the history tables are covered, now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// Some table has no partition for now: its writes are refused.
    Missing,
    /// Now is covered, but no partition after the current one exists (in
    /// some table): maintenance has not run for about the partitions ahead.
    Low,
    /// At least one partition ahead of now in every table.
    Ok { ahead: usize },
}

impl Coverage {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Low => "low",
            Self::Ok { .. } => "ok",
        }
    }
}

/// Counts, per history table, the partitions covering now and those after
/// it; the worst table decides.
pub async fn coverage(client: &Client) -> Result<Coverage, DbError> {
    let now = now_millis();
    let mut fewest_ahead = usize::MAX;
    for table in partitions::TABLES {
        let list = partitions::list(client, table).await?;
        let covered = list.iter().any(|p| p.from_ms.is_none_or(|from| from <= now) && now < p.to_ms);
        if !covered {
            return Ok(Coverage::Missing);
        }
        fewest_ahead = fewest_ahead.min(list.iter().filter(|p| p.from_ms.is_some_and(|from| from > now)).count());
    }
    Ok(if fewest_ahead == 0 { Coverage::Low } else { Coverage::Ok { ahead: fewest_ahead } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_error_line_per_window() {
        let last = AtomicI64::new(0);
        let window = LOG_WINDOW.as_millis() as i64;
        let start = 1_700_000_000_000;
        assert!(take_log_turn(&last, start), "the first refusal is logged");
        assert!(!take_log_turn(&last, start + 1), "not the next");
        assert!(!take_log_turn(&last, start + window - 1), "nor any in the window");
        assert!(take_log_turn(&last, start + window), "the first of the next window is");
    }
}
