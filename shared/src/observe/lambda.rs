//! Metrics in the HTTP Lambdas. The same `metrics::counter!`/`histogram!`
//! calls the long-lived processes make land in an in-memory recorder here,
//! and after each request a layer prints everything recorded since the last
//! request as one CloudWatch EMF line ([`super::emf`]). A Lambda execution
//! environment serves one request at a time, so the line is that request's.
//!
//! Labels are folded into the metric name (`name:label=value,…`): an EMF
//! document has one dimension set for all its metrics, and the label values
//! are bounded, so the number of CloudWatch metrics stays bounded too.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString};
use serde_json::json;

use super::emf::{self, Figure, Unit};
use super::http::REQUEST_ID_HEADER;

/// EMF allows at most 100 values per metric in one document.
const MAX_VALUES: usize = 100;

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        let mut samples = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if samples.len() < MAX_VALUES {
            samples.push(value);
        }
    }
}

/// Counters and histograms since the last flush; gauges are not kept (a
/// Lambda samples nothing).
#[derive(Default)]
pub struct EmfRecorder {
    counters: Mutex<HashMap<Key, Arc<AtomicU64>>>,
    histograms: Mutex<HashMap<Key, Arc<Samples>>>,
}

fn figure_name(key: &Key) -> String {
    let labels: Vec<String> = key.labels().map(|label| format!("{}={}", label.key(), label.value())).collect();
    if labels.is_empty() {
        key.name().to_owned()
    } else {
        format!("{}:{}", key.name(), labels.join(","))
    }
}

impl EmfRecorder {
    /// Everything recorded since the last call, and resets it.
    pub fn take_figures(&self) -> Vec<Figure> {
        let mut figures = Vec::new();
        for (key, counter) in self.counters.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).iter() {
            let count = counter.swap(0, Ordering::Relaxed);
            if count > 0 {
                figures.push(Figure { name: figure_name(key), value: json!(count), unit: Unit::Count });
            }
        }
        for (key, samples) in self.histograms.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).iter() {
            let values = std::mem::take(&mut *samples.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
            if !values.is_empty() {
                let unit = if key.name().ends_with("_seconds") { Unit::Seconds } else { Unit::Count };
                figures.push(Figure { name: figure_name(key), value: json!(values), unit });
            }
        }
        figures.sort_by(|a, b| a.name.cmp(&b.name));
        figures
    }
}

impl Recorder for EmfRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<metrics::Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<metrics::Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<metrics::Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.counters.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        Counter::from_arc(Arc::clone(counters.entry(key.clone()).or_default()))
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut histograms = self.histograms.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        Histogram::from_arc(Arc::clone(histograms.entry(key.clone()).or_default()))
    }
}

static RECORDER: OnceLock<Option<Arc<EmfRecorder>>> = OnceLock::new();

/// Installs the EMF recorder as the global one (once); `None` when another
/// recorder was installed first (the local runner's Prometheus one).
fn installed() -> Option<&'static Arc<EmfRecorder>> {
    RECORDER
        .get_or_init(|| {
            let recorder = Arc::new(EmfRecorder::default());
            metrics::set_global_recorder(Arc::clone(&recorder)).ok().map(|()| recorder)
        })
        .as_ref()
}

/// A function's router as its Lambda serves it: request ids and durations
/// ([`super::http::observe`]) and one EMF line per request, dimension
/// `Function` = `function`.
pub fn lambda_router(router: Router, function: &'static str) -> Router {
    installed();
    router
        .layer(axum::middleware::from_fn(super::http::observe))
        .layer(axum::middleware::from_fn(move |request: Request, next: Next| flush_after(function, request, next)))
}

async fn flush_after(function: &'static str, request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    if let Some(recorder) = installed() {
        let request_id = response.headers().get(REQUEST_ID_HEADER).and_then(|value| value.to_str().ok());
        let properties = [("request_id", json!(request_id)), ("status", json!(response.status().as_u16()))];
        let now = chrono::Utc::now().timestamp_millis();
        let line = emf::document_with(&[("Function", function)], &recorder.take_figures(), &properties, now);
        println!("{line}");
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_since_the_last_flush_with_labels_folded_into_names() {
        let recorder = EmfRecorder::default();
        metrics::with_local_recorder(&recorder, || {
            metrics::counter!("relayops_events_received_total").increment(2);
            metrics::counter!("relayops_events_rejected_total", "reason" => "validation").increment(1);
            metrics::histogram!("relayops_http_request_duration_seconds", "status" => "201").record(0.25);
        });
        let figures = recorder.take_figures();
        let names: Vec<&str> = figures.iter().map(|figure| figure.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "relayops_events_received_total",
                "relayops_events_rejected_total:reason=validation",
                "relayops_http_request_duration_seconds:status=201"
            ]
        );
        assert_eq!(figures[0].value, json!(2));
        assert_eq!(figures[2].value, json!([0.25]));
        assert_eq!(figures[2].unit, Unit::Seconds);
        assert!(recorder.take_figures().is_empty(), "a flush resets");
    }
}
