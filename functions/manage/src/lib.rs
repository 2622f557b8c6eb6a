//! The manage function: webhook endpoints and their subscriptions (identity
//! routes join it later). Every route needs an admin key and acts only within
//! the caller's tenant.
//!
//! Invariant: manage never touches events, deliveries or the outbox.
mod endpoint_changes;
mod endpoints;

use axum::routing::{get, post};
use axum::Router;
use relayops_shared::api::{not_found_fallback, ApiState};

/// The function's routes, for mounting beside others (the local runner).
pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/v1/endpoints", post(endpoints::create).get(endpoints::list))
        .route("/v1/endpoints/{endpoint_id}", get(endpoints::get_one).patch(endpoint_changes::update))
        .route("/v1/endpoints/{endpoint_id}/secret", get(endpoints::get_secret))
        .route("/v1/endpoints/{endpoint_id}/secret/rotate", post(endpoint_changes::rotate_secret))
        .route(
            "/v1/endpoints/{endpoint_id}/subscriptions",
            post(endpoints::add_subscription).get(endpoints::list_subscriptions),
        )
}

/// The function on its own, as its Lambda serves it.
pub fn router(state: ApiState) -> Router {
    routes().fallback(not_found_fallback).with_state(state)
}
