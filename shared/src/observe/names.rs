//! Every metric's name and its labels, in one place (docs/OPERATIONS.md lists them for
//! operators). Names follow Prometheus conventions: `_total` for counters,
//! base units (`_seconds`) for durations.

/// Events stored (new); no labels.
pub const EVENTS_RECEIVED: &str = "relayops_events_received_total";
/// Idempotent repeats answered with the original event; no labels.
pub const EVENTS_DUPLICATE: &str = "relayops_events_duplicate_total";
/// Ingest requests refused; `reason`: the problem type (`validation`,
/// `bad-request`, `unauthorized`, `conflict`, `payload-too-large`,
/// `rate-limited`, `backpressure`, `unavailable`, …; `batch-item` for items
/// refused inside an accepted batch).
pub const EVENTS_REJECTED: &str = "relayops_events_rejected_total";

/// Delivery attempts; `outcome`: `delivered`, `retry`, `failed`, `dead`,
/// `blocked` (the address is one webhooks may not reach).
pub const DELIVERY_ATTEMPTS: &str = "relayops_delivery_attempts_total";
/// The outbound request's duration; `outcome` as above.
pub const DELIVERY_ATTEMPT_DURATION: &str = "relayops_delivery_attempt_duration_seconds";
/// Deliveries settled without an attempt; `reason`: `endpoint_disabled`.
pub const DELIVERIES_SETTLED_WITHOUT_ATTEMPT: &str = "relayops_deliveries_settled_without_attempt_total";
/// Not counted by this build, whose turned-away deliveries wait parked: a
/// build that sent them round through the retry queues counted each
/// deferral (claimed, then put back) and postponement (sent round
/// unclaimed) here. `relayops-bench` reads them to compare with such a build.
pub const DELIVERIES_DEFERRED: &str = "relayops_deliveries_deferred_total";
/// See [`DELIVERIES_DEFERRED`].
pub const DELIVERIES_POSTPONED: &str = "relayops_deliveries_postponed_total";
/// Deliveries for a full endpoint that waited in the worker for a slot this
/// process freed, instead of going round through the broker; no labels.
pub const DELIVERIES_WAITED_FOR_SLOT: &str = "relayops_deliveries_waited_for_slot_total";
/// Deliveries parked to wait in Postgres, by `reason`: `circuit_open`,
/// `endpoint_full`, `rate_limited`, `behind_parked`, `tenant_share`.
pub const DELIVERIES_PARKED: &str = "relayops_deliveries_parked_total";
pub const DELIVERIES_ADMITTED: &str = "relayops_deliveries_admitted_total";
/// Endpoint circuits changed by a worker, by `change` (`opened`, `reopened`,
/// `closed`).
pub const ENDPOINT_CIRCUITS: &str = "relayops_endpoint_circuit_changes_total";
/// Pauses of messages held through a failure of the worker's database (each
/// held message counts once per pause); no labels.
pub const DELIVERIES_HELD: &str = "relayops_deliveries_held_total";
/// Messages published afresh instead of requeued because they were near the
/// ready queue's delivery limit; no labels.
pub const DELIVERIES_REPUBLISHED: &str = "relayops_deliveries_republished_total";
/// Deliveries that had to go round again (a retry, a deferral, a
/// postponement) whose publish the broker refused or that failed: left to
/// recovery (the row is `scheduled`) or requeued; no labels.
pub const DELIVERIES_NOT_SENT_ROUND: &str = "relayops_deliveries_not_sent_round_total";
/// Endpoint health statements the worker ran after an attempt; `write`:
/// `success`, `failure`, `disabled` (every attempt failed for the window). The
/// ratio to `relayops_delivery_attempts_total` is health's cost on the hot path.
pub const ENDPOINT_HEALTH_WRITES: &str = "relayops_endpoint_health_writes_total";

/// Reads by the Postgres pool that served them; `pool`: `reader` (list and
/// search reads while a reader is configured and answers) or `writer`.
pub const DB_READS: &str = "relayops_db_reads_total";
/// 1 while Redis cannot be asked and flow-control limits are per process
/// (degraded), else 0.
pub const FLOW_DEGRADED: &str = "relayops_flow_degraded";
/// Flow-control decisions taken by this process' own limits because Redis
/// could not be asked; `limit`: `tenant`, `endpoint-lease`, `endpoint-rate`.
pub const FLOW_LOCAL_DECISIONS: &str = "relayops_flow_local_decisions_total";

/// Deliveries published (confirmed by the broker; a message of another kind,
/// a dead letter, counts one); no labels.
pub const OUTBOX_PUBLISHED: &str = "relayops_outbox_published_total";
/// Deliveries written by a publisher for events whose ingest left them to it
/// (more subscribers than `RELAYOPS_DELIVERIES_AT_INGEST_MAX`); no labels.
pub const DEFERRED_DELIVERIES_WRITTEN: &str = "relayops_deferred_deliveries_written_total";
/// Publish failures; `kind`: `refused` (broker nack or unroutable, row
/// released) or `error` (a failed publisher tick).
pub const OUTBOX_PUBLISH_FAILURES: &str = "relayops_outbox_publish_failures_total";
/// Claim-to-settle time of one outbox batch.
pub const OUTBOX_PUBLISH_DURATION: &str = "relayops_outbox_publish_batch_duration_seconds";
/// Recovery actions; `action`: `reclaimed` (expired outbox claims),
/// `requeued` (stranded deliveries).
pub const RECOVERY_ACTIONS: &str = "relayops_recovery_actions_total";

/// Writes refused because no history partition covers their time (partition
/// maintenance not running); no labels.
pub const HISTORY_PARTITIONS_MISSING: &str = "relayops_history_partitions_missing_total";

/// Sampled: outbox rows not yet published.
pub const OUTBOX_BACKLOG: &str = "relayops_outbox_backlog";
/// Sampled: messages ready in a queue; `queue`: `ready`, `dead`, or
/// `retry_<ms>ms` (one per configured retry delay).
pub const QUEUE_DEPTH: &str = "relayops_queue_depth";

/// HTTP requests served; `method`, `route` (the route template, or
/// `unmatched`), `status`.
pub const HTTP_REQUEST_DURATION: &str = "relayops_http_request_duration_seconds";

/// Dead-letter alerts; `result`: `sent`, `suppressed` (cool-down),
/// `failed` (the receiver did not accept it; retried).
pub const DEAD_LETTER_ALERTS: &str = "relayops_dead_letter_alerts_total";

/// Histogram buckets for durations, in seconds: 5 ms to 30 s.
pub const DURATION_BUCKETS: [f64; 13] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0];

/// Registers each metric's `# HELP` text with the installed recorder.
pub fn describe_all() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(EVENTS_RECEIVED, "Events stored (new, not idempotent repeats).");
    describe_counter!(EVENTS_DUPLICATE, "Idempotent repeats answered with the original event.");
    describe_counter!(EVENTS_REJECTED, "Ingest requests (or batch items) refused, by reason.");
    describe_counter!(DELIVERY_ATTEMPTS, "Delivery attempts by outcome.");
    describe_histogram!(DELIVERY_ATTEMPT_DURATION, Unit::Seconds, "Outbound webhook request duration by outcome.");
    describe_counter!(DELIVERIES_SETTLED_WITHOUT_ATTEMPT, "Deliveries settled without an attempt, by reason.");
    describe_counter!(
        DELIVERIES_PARKED,
        "Deliveries parked to wait in Postgres, by reason (circuit_open, endpoint_full, rate_limited, behind_parked, tenant_share)."
    );
    describe_counter!(
        DELIVERIES_ADMITTED,
        "Parked deliveries a worker took straight from Postgres into a free slot (and token) of their endpoint."
    );
    describe_counter!(ENDPOINT_CIRCUITS, "Endpoint circuits opened, reopened after a failed probe, or closed.");
    describe_counter!(
        DELIVERIES_WAITED_FOR_SLOT,
        "Deliveries for a full endpoint that waited in the worker for a slot it freed, instead of going round."
    );
    describe_counter!(DELIVERIES_HELD, "Pauses of messages held (not requeued) while the database was failing.");
    describe_counter!(DELIVERIES_REPUBLISHED, "Messages published afresh near the ready queue's delivery limit.");
    describe_counter!(
        DELIVERIES_NOT_SENT_ROUND,
        "Deliveries whose publish to go round again failed or was refused (left to recovery or requeued)."
    );
    describe_counter!(
        ENDPOINT_HEALTH_WRITES,
        "Endpoint health writes after attempts, by kind (most attempts write none)."
    );
    describe_counter!(DB_READS, "Query and console reads by the Postgres pool that served them (reader or writer).");
    describe_gauge!(FLOW_DEGRADED, "1 while Redis is unusable and flow-control limits are per process.");
    describe_counter!(
        FLOW_LOCAL_DECISIONS,
        "Flow-control decisions taken per process because Redis could not be asked."
    );
    describe_counter!(
        OUTBOX_PUBLISHED,
        "Deliveries published and confirmed by the broker (several travel in one message: deliveries.v1 for one event's, deliveries.v2 for several events' of a tenant; a dead letter counts one)."
    );
    describe_counter!(
        DEFERRED_DELIVERIES_WRITTEN,
        "Deliveries a publisher wrote for events with more subscribers than ingest writes itself."
    );
    describe_counter!(OUTBOX_PUBLISH_FAILURES, "Outbox publish failures: refused rows, failed ticks.");
    describe_histogram!(OUTBOX_PUBLISH_DURATION, Unit::Seconds, "Claim-to-settle time of one outbox batch.");
    describe_counter!(RECOVERY_ACTIONS, "Recovery pass actions by kind.");
    describe_counter!(
        HISTORY_PARTITIONS_MISSING,
        "Writes refused because no history partition covers their time (maintenance not running)."
    );
    describe_gauge!(OUTBOX_BACKLOG, "Outbox rows not yet published (sampled).");
    describe_gauge!(QUEUE_DEPTH, "Messages ready in a queue (sampled).");
    describe_histogram!(HTTP_REQUEST_DURATION, Unit::Seconds, "HTTP requests served, by method, route and status.");
    describe_counter!(DEAD_LETTER_ALERTS, "Dead-letter alerts by result.");
}
