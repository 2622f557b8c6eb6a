//! The query function: read-only, tenant-scoped views of events, deliveries and
//! attempts. Wire types live in [`views`]; database rows never leave this crate
//! as-is.
//!
//! Invariant: query never writes.
mod views;

use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use relayops_shared::api::{not_found_fallback, parse_path_id, ApiError, ApiState, Authenticated};
use relayops_shared::db::DbError;
use relayops_shared::domain::{DeliveryStatus, ValidationError};
use relayops_shared::ids::{DeliveryId, EndpointId, EventId};
use relayops_shared::repo::deliveries::DeliveryFilter;
use relayops_shared::repo::{attempts, deliveries, events};
use serde::Deserialize;

use views::{AttemptView, DeliveryView, EventView, ListView};

/// The function's routes, for mounting beside others (the local runner).
pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/v1/events", get(list_events))
        .route("/v1/events/{event_id}", get(get_event))
        .route("/v1/events/{event_id}/deliveries", get(list_event_deliveries))
        .route("/v1/deliveries", get(list_deliveries))
        .route("/v1/deliveries/{delivery_id}", get(get_delivery))
        .route("/v1/deliveries/{delivery_id}/attempts", get(list_attempts))
}

/// The function on its own, as its Lambda serves it.
pub fn router(state: ApiState) -> Router {
    // Request ids, and one CloudWatch EMF line per request (its metrics).
    relayops_shared::observe::lambda::lambda_router(routes().fallback(not_found_fallback).with_state(state), "query")
}

#[derive(Debug, Deserialize)]
struct ListParams {
    limit: Option<i64>,
}

impl ListParams {
    fn limit(&self) -> Result<i64, ApiError> {
        match self.limit {
            None => Ok(50),
            Some(limit @ 1..=500) => Ok(limit),
            Some(_) => Err(ValidationError::new("limit", "must be between 1 and 500").into()),
        }
    }
}

async fn list_events(
    State(state): State<ApiState>,
    caller: Authenticated,
    Query(params): Query<ListParams>,
) -> Result<Json<ListView<EventView>>, ApiError> {
    let client = state.pool.get().await.map_err(DbError::from)?;
    let rows = events::list_events(&client, caller.tenant_id, params.limit()?).await?;
    Ok(Json(ListView::new(rows.into_iter().map(EventView::from).collect())))
}

async fn get_event(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(event_id): Path<String>,
) -> Result<Json<EventView>, ApiError> {
    let event_id: EventId = parse_path_id(&event_id)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let event = events::get_event(&client, caller.tenant_id, event_id).await?.ok_or(ApiError::NotFound("event"))?;
    Ok(Json(event.into()))
}

async fn list_event_deliveries(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(event_id): Path<String>,
) -> Result<Json<ListView<DeliveryView>>, ApiError> {
    let event_id: EventId = parse_path_id(&event_id)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    events::get_event(&client, caller.tenant_id, event_id).await?.ok_or(ApiError::NotFound("event"))?;
    let rows = deliveries::list_for_event(&client, caller.tenant_id, event_id).await?;
    Ok(Json(ListView::new(rows.into_iter().map(DeliveryView::from).collect())))
}

#[derive(Debug, Deserialize)]
struct DeliveryListParams {
    limit: Option<i64>,
    status: Option<String>,
    endpoint_id: Option<String>,
}

/// `GET /v1/deliveries?status=dead`: the dead-letter view, with each delivery's
/// last HTTP status and error.
async fn list_deliveries(
    State(state): State<ApiState>,
    caller: Authenticated,
    Query(params): Query<DeliveryListParams>,
) -> Result<Json<ListView<DeliveryView>>, ApiError> {
    let limit = ListParams { limit: params.limit }.limit()?;
    let status = match params.status.as_deref() {
        Some(text) => Some(DeliveryStatus::parse(text).ok_or_else(|| {
            ValidationError::new("status", "must be pending, in_progress, scheduled, delivered, failed or dead")
        })?),
        None => None,
    };
    let endpoint = params.endpoint_id.as_deref().map(parse_path_id::<EndpointId>).transpose()?;
    let filter = DeliveryFilter { status, endpoint };
    let client = state.pool.get().await.map_err(DbError::from)?;
    let rows = deliveries::list_deliveries(&client, caller.tenant_id, &filter, limit).await?;
    Ok(Json(ListView::new(rows.into_iter().map(DeliveryView::from).collect())))
}

async fn get_delivery(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(delivery_id): Path<String>,
) -> Result<Json<DeliveryView>, ApiError> {
    let delivery_id: DeliveryId = parse_path_id(&delivery_id)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let delivery = deliveries::get_delivery(&client, caller.tenant_id, delivery_id)
        .await?
        .ok_or(ApiError::NotFound("delivery"))?;
    Ok(Json(delivery.into()))
}

async fn list_attempts(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(delivery_id): Path<String>,
) -> Result<Json<ListView<AttemptView>>, ApiError> {
    let delivery_id: DeliveryId = parse_path_id(&delivery_id)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    deliveries::get_delivery(&client, caller.tenant_id, delivery_id).await?.ok_or(ApiError::NotFound("delivery"))?;
    let rows = attempts::list_attempts(&client, caller.tenant_id, delivery_id).await?;
    Ok(Json(ListView::new(rows.into_iter().map(AttemptView::from).collect())))
}
