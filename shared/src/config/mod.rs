//! Typed configuration from `RELAYOPS_*` environment variables, validated at
//! start-up. Every key, its default and its meaning is listed in
//! `docs/CONFIGURATION.md`; keep the two in step. Secrets are never logged.
//! Submodules by concern: `database`, `broker`, `worker`, `aws_identity`,
//! `api`, `ops`; everything is re-exported here.
use std::str::FromStr;
use std::time::Duration;

mod api;
mod aws_identity;
mod broker;
mod database;
mod ops;
mod worker;

pub use api::{AuthConfig, BackpressureConfig, IngestConfig, ListenConfig, LoginThrottleConfig};
pub use aws_identity::{AwsIdentity, AwsKeys, ContainerToken};
pub use broker::{BrokerConfig, PublisherBudgetConfig, PublisherConfig, WakeupQueueConfig};
pub use database::DatabaseConfig;
pub use ops::{outbound_allow_from_env, runtime_threads_from_env, AlertConfig, HistoryConfig, OpsConfig};
pub use worker::{CircuitConfig, FlowConfig, WorkerConfig};

#[derive(Debug, thiserror::Error)]
#[error("configuration {key}: {message}")]
pub struct ConfigError {
    key: String,
    message: String,
}

fn key(name: &str) -> String {
    format!("RELAYOPS_{name}")
}

/// A required variable.
fn required(name: &str) -> Result<String, ConfigError> {
    std::env::var(key(name)).map_err(|_| ConfigError { key: key(name), message: "is required".into() })
}

/// An optional variable parsed as `T`, or `default` when unset.
fn parsed<T: FromStr>(name: &str, default: T) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    match std::env::var(key(name)) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|error| ConfigError { key: key(name), message: format!("`{text}` is invalid: {error}") }),
        Err(_) => Ok(default),
    }
}

fn positive<T: FromStr + PartialOrd + Default>(name: &str, default: T) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    let value = parsed(name, default)?;
    if value <= T::default() {
        return Err(ConfigError { key: key(name), message: "must be greater than zero".into() });
    }
    Ok(value)
}

/// [`positive`] when `name` is set, `None` when it is not.
fn optional_positive<T: FromStr + PartialOrd + Default>(name: &str) -> Result<Option<T>, ConfigError>
where
    T::Err: std::fmt::Display,
{
    match std::env::var(key(name)) {
        Ok(_) => positive(name, T::default()).map(Some),
        Err(_) => Ok(None),
    }
}

fn millis(name: &str, default_ms: u64) -> Result<Duration, ConfigError> {
    positive(name, default_ms).map(Duration::from_millis)
}

/// `on`/`off` (also `true`/`false`, `1`/`0`).
fn on_off(name: &str, default: bool) -> Result<bool, ConfigError> {
    match std::env::var(key(name)).map(|text| text.trim().to_ascii_lowercase()) {
        Err(_) => Ok(default),
        Ok(text) => match text.as_str() {
            "on" | "true" | "1" => Ok(true),
            "off" | "false" | "0" => Ok(false),
            _ => Err(ConfigError { key: key(name), message: format!("`{text}` is invalid: use on or off") }),
        },
    }
}
