//! The publisher's figures: Prometheus counters and the batch-latency
//! histogram for long-lived publishers, and one CloudWatch EMF line per Lambda
//! invocation (nothing scrapes a Lambda). Both come from [`PublishReport`].
use std::time::Duration;

use relayops_shared::observe::emf::{self, Unit};
use relayops_shared::observe::names::{
    DEFERRED_DELIVERIES_WRITTEN, OUTBOX_PUBLISHED, OUTBOX_PUBLISH_DURATION, OUTBOX_PUBLISH_FAILURES, RECOVERY_ACTIONS,
};

use crate::PublishReport;

/// After a batch was settled (published rows deleted, refused ones released).
pub(crate) fn batch(report: &PublishReport, elapsed: Duration) {
    metrics::counter!(OUTBOX_PUBLISHED).increment(report.published);
    if report.released > 0 {
        metrics::counter!(OUTBOX_PUBLISH_FAILURES, "kind" => "refused").increment(report.released);
    }
    metrics::histogram!(OUTBOX_PUBLISH_DURATION).record(elapsed.as_secs_f64());
}

/// After deliveries of events whose ingest left them to a publisher were written.
pub(crate) fn deferred_written(deliveries: u64) {
    metrics::counter!(DEFERRED_DELIVERIES_WRITTEN).increment(deliveries);
}

/// After a recovery pass.
pub(crate) fn recovery(report: &PublishReport) {
    for (action, count) in [
        ("reclaimed", report.reclaimed),
        ("requeued", report.requeued),
        ("unparked", report.unparked),
        ("gave_up", report.gave_up),
    ] {
        if count > 0 {
            metrics::counter!(RECOVERY_ACTIONS, "action" => action).increment(count);
        }
    }
}

/// A publisher tick that failed (database or broker unavailable).
pub(crate) fn tick_failed() {
    metrics::counter!(OUTBOX_PUBLISH_FAILURES, "kind" => "error").increment(1);
}

/// The Lambda invocation's EMF line: what it published, refused and
/// recovered, and how long it took (`failed`: the drain ended in an error).
pub fn emit_invocation(report: &PublishReport, elapsed: Duration, failed: bool) {
    emf::emit(
        &[("Function", "publisher")],
        &[
            ("OutboxPublished", report.published as f64, Unit::Count),
            ("OutboxPublishRefused", report.released as f64, Unit::Count),
            ("OutboxPublishErrors", f64::from(u8::from(failed)), Unit::Count),
            ("RecoveryReclaimed", report.reclaimed as f64, Unit::Count),
            ("RecoveryRequeued", report.requeued as f64, Unit::Count),
            ("RecoveryUnparked", report.unparked as f64, Unit::Count),
            ("RecoveryGaveUp", report.gave_up as f64, Unit::Count),
            ("DeferredDeliveriesWritten", report.deliveries_written as f64, Unit::Count),
            ("PublishLatency", elapsed.as_secs_f64() * 1000.0, Unit::Milliseconds),
        ],
    );
}
