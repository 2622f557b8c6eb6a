//! Repositories: the only code that runs SQL against business tables. Every
//! function that reads or writes tenant data takes the authenticated
//! [`TenantId`](crate::ids::TenantId) and filters by it, so another tenant's row
//! is simply not found. The exceptions are named as such: the API-key lookup
//! (it is how the tenant is found) and the publisher/worker paths, which act on
//! ids taken from the outbox, never from a client.
//!
//! SQL lives as named constants beside the function that runs it; functions take
//! a generic client so they work inside a caller's transaction.
pub mod api_keys;
pub mod attempts;
pub mod circuits;
pub mod deferred_deliveries;
pub mod deliveries;
pub mod delivery_batches;
pub mod delivery_queries;
pub mod endpoint_health;
pub mod endpoint_stats;
pub mod endpoints;
pub mod event_batches;
pub mod event_queries;
pub mod events;
pub mod lanes;
pub mod login_sessions;
pub mod operational;
pub mod outbox;
pub mod outbox_fanout;
pub mod parked_expiry;
pub mod recovery;
pub mod replay;
pub mod retention;
pub(crate) mod sql;
pub mod tenants;
pub mod users;
pub mod waiting;

pub use sql::GenericClient;
