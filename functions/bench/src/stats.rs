//! Latency samples and their percentiles.
use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

pub fn percentiles(mut samples: Vec<f64>) -> Percentiles {
    if samples.is_empty() {
        return Percentiles::default();
    }
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1];
    Percentiles { p50_ms: at(0.50), p95_ms: at(0.95), p99_ms: at(0.99), max_ms: samples[samples.len() - 1] }
}
