//! The admin function: the platform operators' API (`/admin/v1/…`), so a
//! multi-tenant installation is run without database access. Every route
//! needs the platform admin token ([`credential`]); tenants' API keys and
//! login tokens never reach it.
//!
//! Invariant: admin acts on tenants, their users and API keys only (through
//! `repo::tenants` and `bootstrap`); it never touches events, deliveries,
//! endpoints or the outbox.
pub mod credential;
mod retention;
mod tenants;
mod weight;

use axum::routing::{get, post, put};
use axum::Router;
use relayops_shared::api::{not_found_fallback, ApiState};
use utoipa::OpenApi;

/// The function's routes, for mounting beside others (the local runner).
pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/admin/v1/tenants", post(tenants::create).get(tenants::list))
        .route("/admin/v1/tenants/{tenant_id}", get(tenants::get_one))
        .route("/admin/v1/tenants/{tenant_id}/suspend", post(tenants::suspend))
        .route("/admin/v1/tenants/{tenant_id}/resume", post(tenants::resume))
        .route("/admin/v1/tenants/{tenant_id}/limits", put(tenants::set_limits))
        .route("/admin/v1/tenants/{tenant_id}/retention", put(retention::set_retention))
        .route("/admin/v1/tenants/{tenant_id}/weight", put(weight::set_weight))
}

/// The function on its own, as its Lambda serves it.
pub fn router(state: ApiState) -> Router {
    relayops_shared::observe::lambda::lambda_router(routes().fallback(not_found_fallback).with_state(state), "admin")
}

#[derive(OpenApi)]
#[openapi(
    paths(
        tenants::create,
        tenants::list,
        tenants::get_one,
        tenants::suspend,
        tenants::resume,
        tenants::set_limits,
        retention::set_retention,
        weight::set_weight
    ),
    tags((name = "admin", description = "Platform operators: tenants, suspension, limits, retention and weights (the platform admin token)"))
)]
struct AdminApi;

/// This function's routes, documented.
pub fn openapi() -> utoipa::openapi::OpenApi {
    AdminApi::openapi()
}
