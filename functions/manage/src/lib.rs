//! The manage function: identity (login and sign-out, password change,
//! first-tenant bootstrap, the tenant's users, API keys) and
//! webhook endpoints with their subscriptions and secrets. Every route except
//! login and bootstrap needs admin credentials and acts only within the
//! caller's tenant.
//!
//! Invariant: manage never touches events, deliveries or the outbox, except to
//! emit an operational event (`endpoint.enabled`/`endpoint.disabled` when a
//! PATCH or the console's form switches an endpoint) through
//! `repo::operational::emit`, in the change's transaction
//! (`relayops_shared::api::endpoint_changes::apply_changes`).
mod account;
mod api_keys;
mod destination;
mod endpoint_changes;
mod endpoints;
mod health_view;
mod sessions;
mod users;

use axum::routing::{get, post};
use axum::Router;
use relayops_shared::api::{not_found_fallback, ApiState};
use utoipa::OpenApi;

/// The function's routes, for mounting beside others (the local runner).
pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/v1/auth/login", post(sessions::login))
        .route("/v1/auth/logout", post(sessions::logout))
        .route("/v1/auth/logout-everywhere", post(sessions::logout_everywhere))
        .route("/v1/auth/password", post(account::password))
        .route("/v1/users", post(users::create).get(users::list))
        .route("/v1/users/{user_id}", axum::routing::patch(users::update).delete(users::remove))
        .route("/v1/bootstrap", post(sessions::bootstrap))
        .route("/v1/api-keys", post(api_keys::create).get(api_keys::list))
        .route("/v1/api-keys/{key_id}", axum::routing::delete(api_keys::revoke))
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
    // Request ids, and one CloudWatch EMF line per request (its metrics).
    relayops_shared::observe::lambda::lambda_router(routes().fallback(not_found_fallback).with_state(state), "manage")
}

#[derive(OpenApi)]
#[openapi(
    paths(
        sessions::login,
        sessions::logout,
        sessions::logout_everywhere,
        account::password,
        sessions::bootstrap,
        users::list,
        users::create,
        users::update,
        users::remove,
        api_keys::create,
        api_keys::list,
        api_keys::revoke,
        endpoints::create,
        endpoints::list,
        endpoints::get_one,
        endpoint_changes::update,
        endpoints::get_secret,
        endpoint_changes::rotate_secret,
        endpoints::add_subscription,
        endpoints::list_subscriptions,
    ),
    tags(
        (name = "identity", description = "Login and sign-out, password change, first-tenant bootstrap, the tenant's users and API keys"),
        (name = "endpoints", description = "Webhook endpoints, their subscriptions and secrets")
    )
)]
struct ManageApi;

/// This function's routes, documented.
pub fn openapi() -> utoipa::openapi::OpenApi {
    ManageApi::openapi()
}
