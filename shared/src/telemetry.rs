//! Logging: JSON lines via tracing-subscriber, filtered by `RELAYOPS_LOG`
//! (falling back to `RUST_LOG`, then `info`). Field names are the same
//! everywhere: tenant_id, event_id, delivery_id, endpoint_id, attempt, outcome,
//! http_status, latency_ms; lines written while serving an HTTP request carry
//! its `request_id` (see `observe::http`). Logs go to stderr, so command output on stdout
//! (a bootstrap's API key) stays machine-readable. Secrets, signatures and payload bodies are never logged.
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber once; later calls are no-ops (tests call it freely).
pub fn init() {
    let filter = std::env::var("RELAYOPS_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info,lapin=warn,h2=warn,hyper=warn".to_owned());
    let json = std::env::var("RELAYOPS_LOG_FORMAT").map(|format| format != "text").unwrap_or(true);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(filter))
        .with_target(true)
        .with_writer(std::io::stderr);
    let _ = if json {
        // The current span's fields (an HTTP request's `request_id`) ride along
        // under `span`; the list of enclosing spans does not.
        builder.json().flatten_event(true).with_current_span(true).with_span_list(false).try_init()
    } else {
        builder.compact().try_init()
    };
}

/// Target of the hop trace: one event per step an event takes between its
/// commit and its delivery (`ingest.committed`, `publish.claimed`,
/// `publish.confirmed`, `worker.consumed` (its message in hand),
/// `worker.received` (a slot too), `worker.claimed`, `worker.admitted`,
/// `worker.answered`), each with `at_us` (microseconds
/// since the Unix epoch, comparable across processes on one host) and the
/// event's id (the worker's first two with its tenant's). Off unless asked for (`RELAYOPS_LOG=info,relayops::hops=trace`):
/// a disabled callsite costs one check, and its fields are never computed.
/// `scripts/hops-summary.py` reads it (BENCHMARKS.md, "What is measured
/// and how to reproduce it").
pub const HOPS_TARGET: &str = "relayops::hops";

/// Now, in microseconds since the Unix epoch (for the hop trace).
pub fn micros_now() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    now.as_micros().min(i64::MAX as u128) as i64
}

/// Whether the hop trace is on (to skip loops that only feed it).
pub fn hops_enabled() -> bool {
    tracing::enabled!(target: "relayops::hops", tracing::Level::TRACE)
}

/// One step of an event's way, on the hop trace (see [`HOPS_TARGET`]):
/// `hop!("publish.claimed", event_id = %id)`.
#[macro_export]
macro_rules! hop {
    ($name:literal $(, $($field:tt)*)?) => {
        ::tracing::trace!(
            target: "relayops::hops",
            hop = $name,
            at_us = $crate::telemetry::micros_now()
            $(, $($field)*)?
        )
    };
}

/// An error and its causes on one line, for logs (`a: b: c`).
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
