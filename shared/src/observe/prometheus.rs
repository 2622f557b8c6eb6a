//! The process-wide Prometheus recorder and the `/metrics` handler. The
//! exporter only renders text; we serve it on our own axum routes, so there is
//! no second listener to secure.
use std::sync::OnceLock;
use std::time::Duration;

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use super::names::DURATION_BUCKETS;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the Prometheus recorder as the global `metrics` recorder (once per
/// process; later calls return the same handle). Durations are real
/// histograms (`_bucket`/`_sum`/`_count`), so they aggregate across replicas.
/// Must run inside a tokio runtime: it spawns the recorder's upkeep.
pub fn install_prometheus() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &DURATION_BUCKETS)
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics stays empty");
            }
            super::names::describe_all();
            let upkeep = handle.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    loop {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        upkeep.run_upkeep();
                    }
                });
            }
            handle
        })
        .clone()
}

/// The exposition text of everything recorded so far (empty before install).
pub fn render() -> String {
    HANDLE.get().map(PrometheusHandle::render).unwrap_or_default()
}

/// `GET /metrics`: Prometheus text format 0.0.4.
pub async fn metrics_handler() -> Response {
    let mut response = render().into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    response
}
