//! The process-wide Prometheus recorder and the `/metrics` handler. The
//! exporter only renders text; we serve it on our own axum routes, so there is
//! no second listener to secure. [`series_sum`] reads such text back (the
//! tests and the bench read a process's figures with it).
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

/// From Prometheus text exposition: the sum of the samples of `name` whose
/// labels include every `(label, value)` given; `None` when no sample of it
/// matches (a counter never incremented is not rendered at all).
pub fn series_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut total = None;
    for line in text.lines().filter(|line| !line.starts_with('#') && !line.trim().is_empty()) {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let (series_name, series_labels) = match series.split_once('{') {
            Some((series_name, rest)) => (series_name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if series_name != name {
            continue;
        }
        let present: Vec<(&str, &str)> = series_labels
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .map(|(key, value)| (key.trim(), value.trim().trim_matches('"')))
            .collect();
        if let (true, Ok(value)) = (labels.iter().all(|wanted| present.contains(wanted)), value.parse::<f64>()) {
            total = Some(total.unwrap_or(0.0) + value);
        }
    }
    total
}
