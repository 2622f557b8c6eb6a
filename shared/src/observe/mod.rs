//! Operations signals beside the logs (`telemetry`): Prometheus metrics for
//! long-lived processes, CloudWatch Embedded Metric Format lines for Lambdas,
//! and the HTTP middleware that gives every request an id and a duration.
//!
//! Invariant: metric labels are bounded enumerations (outcome, reason, route
//! template, status, queue); never tenant, delivery, event or endpoint ids,
//! which would make one time series per id.
pub mod emf;
pub mod gauges;
pub mod http;
pub mod lambda;
pub mod names;
mod prometheus;

pub use prometheus::{install_prometheus, metrics_handler, render, series_sum};
