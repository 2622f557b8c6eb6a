//! The shared crate: everything the RelayOps functions have in common.
//!
//! - [`domain`]: parsed, trusted domain values (no I/O).
//! - [`ids`]: prefixed ID newtypes (`evt_…`, `dlv_…`).
//! - [`db`]: the Postgres pool and migration runner; [`repo`]: the only code that
//!   runs SQL, every function scoped by tenant.
//! - [`broker`]: RabbitMQ connection, topology and the versioned queue envelope.
//! - [`auth`], [`signing`]: API keys, password hashing, Standard Webhooks signatures.
//! - [`api`]: what every HTTP function shares (state, auth extractor, problem bodies).
//! - [`config`], [`telemetry`]: environment configuration and JSON logs.
pub mod api;
pub mod auth;
pub mod backpressure;
pub mod bootstrap;
pub mod broker;
pub mod config;
pub mod db;
pub mod debounce;
pub mod domain;
pub mod failpoint;
pub mod flow;
pub mod handoff;
pub mod history;
pub mod ids;
pub mod net_policy;
pub mod observe;
pub mod repo;
pub mod signing;
#[cfg(feature = "sqs")]
pub mod sqs_wakeup;
pub mod task;
pub mod telemetry;
pub mod tls;
