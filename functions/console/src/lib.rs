//! The console function: the tenant console, server-rendered HTML under
//! `/console/…` — sign in, endpoints with their health, the delivery log, a
//! delivery's attempts, dead letters with replay (single and bulk, dry-run
//! count first), blocked ordering lanes with skip, events, API keys, the
//! account (password change, sign out everywhere). No JavaScript; charts are
//! inline SVG.
//!
//! It is one more HTTP function over the same state and repositories as the
//! API: the session cookie holds the API's own login token (resolved by
//! `shared::api::by_login_token`, like a bearer token), and every read or
//! write calls the same `repo` functions with the session's tenant.
//!
//! Invariants: every value reaches HTML through maud, which escapes it; every
//! state-changing request is a POST carrying the session's CSRF token
//! ([`session::ConsoleForm`]); every response carries a Content-Security-Policy
//! that allows no script at all ([`security_headers`]). The console never
//! talks to RabbitMQ (replays write the outbox, like the replay function).
mod account;
mod api_keys;
mod chart;
mod dead_letters;
mod deliveries;
mod delivery_page;
mod endpoint_page;
mod endpoints;
mod error;
mod events;
mod filters;
mod lanes;
mod layout;
mod session;

use axum::extract::Request;
use axum::http::header::{self, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{any, get, post};
use axum::Router;
use relayops_shared::api::ApiState;

/// Scripts: none at all. Styles: only the console's own stylesheet (no inline
/// `style`). Forms post only back here; no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'none'; style-src 'self'; \
     img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const STYLESHEET: &str = include_str!("../assets/console.css");

const FAVICON: &str = include_str!("../assets/favicon.svg");

/// The function's routes, for mounting beside others (the local runner).
pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/console", get(|| async { Redirect::to("/console/endpoints") }))
        .route("/console/", get(|| async { Redirect::to("/console/endpoints") }))
        .route("/console/assets/console.css", get(stylesheet))
        .route("/console/assets/favicon.svg", get(favicon))
        .route("/console/login", get(session::login_page).post(session::login))
        .route("/console/logout", post(session::logout))
        .route("/console/logout-everywhere", post(session::logout_everywhere))
        .route("/console/endpoints", get(endpoints::list))
        .route("/console/endpoints/{endpoint_id}", get(endpoint_page::show))
        .route("/console/endpoints/{endpoint_id}/enabled", post(endpoint_page::set_enabled))
        .route("/console/endpoints/{endpoint_id}/rotate-secret", post(endpoint_page::rotate_secret))
        .route("/console/deliveries", get(deliveries::list))
        .route("/console/deliveries/{delivery_id}", get(delivery_page::show))
        .route("/console/deliveries/{delivery_id}/replay", post(delivery_page::replay))
        .route("/console/deliveries/{delivery_id}/skip", post(lanes::skip))
        .route("/console/dead-letters", get(dead_letters::list))
        .route("/console/dead-letters/replay-preview", post(dead_letters::preview))
        .route("/console/dead-letters/replay", post(dead_letters::replay))
        .route("/console/events", get(events::list))
        .route("/console/events/{event_id}", get(events::show))
        .route("/console/api-keys", get(api_keys::list).post(api_keys::create))
        .route("/console/api-keys/{key_id}/revoke", post(api_keys::revoke))
        .route("/console/account", get(account::show))
        .route("/console/account/password", post(account::change_password))
        // Any other path under /console/: the console's own 404 page, with
        // its headers, wherever the routes are mounted (the local runner
        // merges them with the API, whose fallback answers JSON).
        .route("/console/{*unknown}", any(error::not_found_page))
        .layer(axum::middleware::from_fn(security_headers))
}

/// The function on its own, as its Lambda serves it.
pub fn router(state: ApiState) -> Router {
    relayops_shared::observe::lambda::lambda_router(
        routes().fallback(error::not_found_page).with_state(state),
        "console",
    )
}

async fn stylesheet() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8"), (header::CACHE_CONTROL, "max-age=300")], STYLESHEET)
        .into_response()
}

async fn favicon() -> Response {
    ([(header::CONTENT_TYPE, "image/svg+xml"), (header::CACHE_CONTROL, "max-age=86400")], FAVICON).into_response()
}

/// The headers every console response carries: the CSP, no sniffing, no
/// referrer outside, and no caching of pages that show tenant data.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}
