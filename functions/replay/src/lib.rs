//! The replay function: dead or failed deliveries go back to pending with a new
//! outbox row, in one transaction — one by id (`POST /v1/deliveries/{id}/replay`,
//! which also rescues a stuck `pending` or `scheduled` row; delivered or
//! in-progress is a 409 naming the status), or in bulk by filter (`POST
//! /v1/replays`, with a dry run and a cap per call); and skipping the dead
//! delivery a blocked ordering lane is held on ([`skip`]).
//!
//! Invariant: replay never talks to RabbitMQ; like ingest, its output is the outbox.
mod bulk;
mod skip;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use relayops_shared::api::{not_found_fallback, parse_path_id, ApiError, ApiState, Authenticated};
use relayops_shared::auth::Scope;
use relayops_shared::ids::DeliveryId;
use relayops_shared::repo::replay::{self, ReplayOutcome};
use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

/// The function's routes, for mounting beside others (the local runner).
pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/v1/deliveries/{delivery_id}/replay", post(replay_one))
        .route("/v1/replays", post(bulk::replay_matching))
        .route("/v1/deliveries/{delivery_id}/skip", post(skip::skip))
}

/// The function on its own, as its Lambda serves it.
pub fn router(state: ApiState) -> Router {
    // Request ids, and one CloudWatch EMF line per request (its metrics).
    relayops_shared::observe::lambda::lambda_router(routes().fallback(not_found_fallback).with_state(state), "replay")
}

#[derive(OpenApi)]
#[openapi(
    paths(replay_one, bulk::replay_matching, skip::skip),
    tags((name = "replay", description = "Sending dead or failed deliveries again"))
)]
struct ReplayApi;

/// This function's routes, documented.
pub fn openapi() -> utoipa::openapi::OpenApi {
    ReplayApi::openapi()
}

/// A delivery put back in line.
#[derive(Debug, Serialize, ToSchema)]
struct ReplayedView {
    id: DeliveryId,
    /// `pending`; or `scheduled` for an ordered delivery whose lane had moved
    /// on: it joined the back of its lane and is sent once the deliveries in
    /// flight for its key are terminal.
    status: &'static str,
    /// The status it had: `dead` or `failed` (replayed), `pending` or
    /// `scheduled` (rescued: sent now with a new message).
    previous_status: &'static str,
}

/// Sends a dead or failed delivery again (its attempt numbers keep counting
/// up), or rescues a pending or scheduled one: a new message now, for a
/// delivery that seems stuck or a retry to bring forward. A duplicate message
/// is harmless (the worker's claim absorbs it).
#[utoipa::path(
    post, path = "/v1/deliveries/{delivery_id}/replay", tag = "replay",
    params(("delivery_id" = DeliveryId, Path, description = "The delivery (`dlv_…`)")),
    security(("bearer" = [])),
    responses(
        (status = 202, description = "Back to pending, with a new message", body = ReplayedView),
        (status = 404, description = "No such delivery"),
        (status = 409, description = "The delivery is delivered, in progress under a worker's lease, or waiting in its ordering lane behind an earlier delivery")
    )
)]
async fn replay_one(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(delivery_id): Path<String>,
) -> Result<(StatusCode, Json<ReplayedView>), ApiError> {
    caller.require(Scope::Admin)?;
    let delivery_id: DeliveryId = parse_path_id(&delivery_id)?;
    match replay::replay_one(&state.pool, caller.tenant_id, delivery_id).await? {
        ReplayOutcome::Replayed(previous) => {
            state.wake_publisher();
            tracing::info!(tenant_id = %caller.tenant_id, delivery_id = %delivery_id,
                previous_status = previous.as_str(), "delivery replayed");
            let view = ReplayedView { id: delivery_id, status: "pending", previous_status: previous.as_str() };
            Ok((StatusCode::ACCEPTED, Json(view)))
        }
        ReplayOutcome::Queued(previous) => {
            tracing::info!(tenant_id = %caller.tenant_id, delivery_id = %delivery_id,
                previous_status = previous.as_str(), "delivery replayed to the back of its ordering lane");
            let view = ReplayedView { id: delivery_id, status: "scheduled", previous_status: previous.as_str() };
            Ok((StatusCode::ACCEPTED, Json(view)))
        }
        ReplayOutcome::WaitingInLane => Err(ApiError::Conflict(format!(
            "delivery {delivery_id} waits in its ordering lane behind an earlier delivery of its key; \
             it is sent in its turn"
        ))),
        ReplayOutcome::NotFound => Err(ApiError::NotFound("delivery")),
        ReplayOutcome::NotReplayable(status) => Err(ApiError::Conflict(format!(
            "delivery {delivery_id} is {}; only dead, failed, pending or scheduled deliveries can be replayed \
             (an in-progress one is recovered once its worker's lease expires)",
            status.as_str()
        ))),
    }
}
