//! The query function: read-only, tenant-scoped views of events, deliveries and
//! attempts — keyset pages with opaque cursors ([`cursor`]), filters validated
//! into 400s ([`params`]), a delivery's full attempt history, and an endpoint's
//! deliveries counted by status ([`stats`]), and its ordering lanes blocked on
//! a dead delivery ([`blocked`]). Wire types live in [`views`];
//! database rows never leave this crate as-is.
//!
//! Invariant: query never writes. Its reads may lag: they go to the
//! Postgres reader when one is configured (`db::reads`); a row looked up by
//! id that the reader does not have yet is asked of the writer
//! ([`found`]) before any 404.

mod blocked;
mod cursor;
mod found;
mod lists;
mod params;
mod stats;
mod views;

use axum::routing::get;
use axum::Router;
use relayops_shared::api::{not_found_fallback, ApiState};
use utoipa::OpenApi;

/// The function's routes, for mounting beside others (the local runner).
pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/v1/events", get(lists::list_events))
        .route("/v1/events/{event_id}", get(lists::get_event))
        .route("/v1/events/{event_id}/deliveries", get(lists::list_event_deliveries))
        .route("/v1/deliveries", get(lists::list_deliveries))
        .route("/v1/deliveries/{delivery_id}", get(lists::get_delivery))
        .route("/v1/deliveries/{delivery_id}/attempts", get(lists::list_attempts))
        .route("/v1/endpoints/{endpoint_id}/stats", get(stats::endpoint_stats))
        .route("/v1/endpoints/{endpoint_id}/blocked-lanes", get(blocked::list_blocked_lanes))
}

/// The function on its own, as its Lambda serves it.
pub fn router(state: ApiState) -> Router {
    // Request ids, and one CloudWatch EMF line per request (its metrics).
    relayops_shared::observe::lambda::lambda_router(routes().fallback(not_found_fallback).with_state(state), "query")
}

#[derive(OpenApi)]
#[openapi(
    paths(
        lists::list_events,
        lists::get_event,
        lists::list_event_deliveries,
        lists::list_deliveries,
        lists::get_delivery,
        lists::list_attempts,
        stats::endpoint_stats,
        blocked::list_blocked_lanes,
    ),
    tags((name = "query", description = "Events, deliveries and attempts (read-only)"))
)]
struct QueryApi;

/// This function's routes, documented.
pub fn openapi() -> utoipa::openapi::OpenApi {
    QueryApi::openapi()
}
