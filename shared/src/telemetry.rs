//! Logging: JSON lines via tracing-subscriber, filtered by `RELAYOPS_LOG`
//! (falling back to `RUST_LOG`, then `info`). Field names are the same
//! everywhere: tenant_id, event_id, delivery_id, endpoint_id, attempt, outcome,
//! http_status, latency_ms; lines written while serving an HTTP request carry
//! its `request_id` (see `observe::http`). Logs go to stderr, so command output on stdout
//! (a bootstrap's API key) stays machine-readable. Secrets, signatures and payload bodies are never logged.
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber once; later calls are no-ops (tests call it freely).
pub fn init() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;

    let filter = std::env::var("RELAYOPS_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info,lapin=warn,h2=warn,hyper=warn".to_owned());
    let json = std::env::var("RELAYOPS_LOG_FORMAT").map(|format| format != "text").unwrap_or(true);
    let layer = tracing_subscriber::fmt::layer().with_target(true).with_writer(std::io::stderr);
    let layer = if json {
        // The current span's fields (an HTTP request's `request_id`) ride along
        // under `span`; the list of enclosing spans does not.
        layer.json().flatten_event(true).with_current_span(true).with_span_list(false).boxed()
    } else {
        layer.compact().boxed()
    };
    let _ = tracing_subscriber::registry()
        .with(EnvFilter::new(filter))
        .with(layer.with_filter(quiet_broker_client_once_closed()))
        .try_init();
}

/// Drops the AMQP client's own events once the process has closed its broker
/// connections at a stop (`broker::close_all`): its I/O threads then report
/// the runtime going away under them, which says nothing about the work —
/// every role had stopped before. Before that, everything it logs is shown.
fn quiet_broker_client_once_closed<S>() -> impl tracing_subscriber::layer::Filter<S> {
    fn broker_client(target: &str) -> bool {
        target.starts_with("lapin") || target.starts_with("pinky_swear")
    }
    tracing_subscriber::filter::DynFilterFn::new(|metadata, _| {
        !(broker_client(metadata.target()) && crate::broker::connections_closed())
    })
    .with_callsite_filter(|metadata| {
        if broker_client(metadata.target()) {
            tracing::subscriber::Interest::sometimes()
        } else {
            tracing::subscriber::Interest::always()
        }
    })
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
