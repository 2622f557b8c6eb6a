//! Events, deliveries and attempts: single rows and keyset pages. Each page
//! fetches one row more than asked, so the last page says so (null
//! `next_cursor`) without another round trip.
use axum::extract::{Path, State};
use axum::Json;
use relayops_shared::api::{page_of, parse_path_id, ApiError, ApiQuery, ApiState, Authenticated};
use relayops_shared::ids::{DeliveryId, EndpointId, EventId};
use relayops_shared::read_may_lag;
use relayops_shared::repo::delivery_queries::{self, DeliveryFilter, TimeKey};
use relayops_shared::repo::event_queries::{self, EventFilter};
use relayops_shared::repo::{attempts, deliveries};

use crate::cursor::{self, CursorKind};
use crate::found;
use crate::params::{self, DeliveryListParams, EventListParams, PageParams};
use crate::views::{AttemptPage, AttemptView, DeliveryPage, DeliveryView, EventPage, EventView};

/// Events the tenant posted, newest first.
#[utoipa::path(
    get, path = "/v1/events", tag = "query", params(EventListParams),
    security(("bearer" = [])),
    responses((status = 200, description = "A page of events", body = EventPage))
)]
pub async fn list_events(
    State(state): State<ApiState>,
    caller: Authenticated,
    ApiQuery(query): ApiQuery<EventListParams>,
) -> Result<Json<EventPage>, ApiError> {
    let limit = params::limit(query.limit)?;
    let (since, until) = params::time_range(query.since, query.until)?;
    let filter = EventFilter {
        event_type: params::event_type(query.event_type.as_deref())?,
        ordering_key: params::ordering_key(query.ordering_key.as_deref())?,
        since,
        until,
    };
    let after = query.cursor.as_deref().map(|text| cursor::decode_time_key(CursorKind::Events, text)).transpose()?;
    let tenant = caller.tenant_id;
    let rows =
        read_may_lag!(state.reads, |db| event_queries::list_events(&*db, tenant, &filter, after, limit + 1).await?);
    let (rows, more) = page_of(rows, limit);
    let next_cursor = rows.last().filter(|_| more).map(|last| {
        cursor::encode_time_key(CursorKind::Events, TimeKey { at: last.received_at, id: last.id.as_uuid() })
    });
    Ok(Json(EventPage { data: rows.into_iter().map(EventView::from).collect(), next_cursor }))
}

/// One event, with its payload.
#[utoipa::path(
    get, path = "/v1/events/{event_id}", tag = "query",
    params(("event_id" = EventId, Path, description = "The event (`evt_…`)")),
    security(("bearer" = [])),
    responses((status = 200, description = "The event", body = EventView), (status = 404, description = "No such event"))
)]
pub async fn get_event(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(event_id): Path<String>,
) -> Result<Json<EventView>, ApiError> {
    let event_id: EventId = parse_path_id(&event_id)?;
    let (_, event) = found::event(&state.reads, caller.tenant_id, event_id).await?;
    Ok(Json(event.into()))
}

/// The deliveries an event fanned out to (one per endpoint), in one page.
#[utoipa::path(
    get, path = "/v1/events/{event_id}/deliveries", tag = "query",
    params(("event_id" = EventId, Path, description = "The event (`evt_…`)")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every delivery of the event", body = DeliveryPage),
        (status = 404, description = "No such event")
    )
)]
pub async fn list_event_deliveries(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(event_id): Path<String>,
) -> Result<Json<DeliveryPage>, ApiError> {
    let event_id: EventId = parse_path_id(&event_id)?;
    let (client, _) = found::event(&state.reads, caller.tenant_id, event_id).await?;
    let rows = deliveries::list_for_event(&*client, caller.tenant_id, event_id).await?;
    Ok(Json(DeliveryPage { data: rows.into_iter().map(DeliveryView::from).collect(), next_cursor: None }))
}

/// Deliveries, newest first, filtered (`status=dead` is the dead-letter view,
/// with each delivery's last HTTP status and error).
#[utoipa::path(
    get, path = "/v1/deliveries", tag = "query", params(DeliveryListParams),
    security(("bearer" = [])),
    responses((status = 200, description = "A page of deliveries", body = DeliveryPage))
)]
pub async fn list_deliveries(
    State(state): State<ApiState>,
    caller: Authenticated,
    ApiQuery(query): ApiQuery<DeliveryListParams>,
) -> Result<Json<DeliveryPage>, ApiError> {
    let limit = params::limit(query.limit)?;
    let (since, until) = params::time_range(query.since, query.until)?;
    let endpoint = query
        .endpoint_id
        .as_deref()
        .map(|text| {
            parse_path_id::<EndpointId>(text).map_err(|error| ApiError::BadRequest(format!("`endpoint_id`: {error}")))
        })
        .transpose()?;
    let filter = DeliveryFilter {
        status: params::status(query.status.as_deref())?,
        endpoint,
        event_type: params::event_type(query.event_type.as_deref())?,
        ordering_key: params::ordering_key(query.ordering_key.as_deref())?,
        since,
        until,
    };
    let after =
        query.cursor.as_deref().map(|text| cursor::decode_time_key(CursorKind::Deliveries, text)).transpose()?;
    let tenant = caller.tenant_id;
    let rows =
        read_may_lag!(state.reads, |db| delivery_queries::list_deliveries(&*db, tenant, &filter, after, limit + 1)
            .await?);
    let (rows, more) = page_of(rows, limit);
    let next_cursor = rows.last().filter(|_| more).map(|last| {
        cursor::encode_time_key(CursorKind::Deliveries, TimeKey { at: last.created_at, id: last.id.as_uuid() })
    });
    Ok(Json(DeliveryPage { data: rows.into_iter().map(DeliveryView::from).collect(), next_cursor }))
}

/// One delivery and where it stands.
#[utoipa::path(
    get, path = "/v1/deliveries/{delivery_id}", tag = "query",
    params(("delivery_id" = DeliveryId, Path, description = "The delivery (`dlv_…`)")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The delivery", body = DeliveryView),
        (status = 404, description = "No such delivery")
    )
)]
pub async fn get_delivery(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(delivery_id): Path<String>,
) -> Result<Json<DeliveryView>, ApiError> {
    let delivery_id: DeliveryId = parse_path_id(&delivery_id)?;
    let (_, delivery) = found::delivery(&state.reads, caller.tenant_id, delivery_id).await?;
    Ok(Json(delivery.into()))
}

/// A delivery's attempt history, oldest first: the headers sent, the status
/// and start of the body that came back, the latency and the error.
#[utoipa::path(
    get, path = "/v1/deliveries/{delivery_id}/attempts", tag = "query",
    params(("delivery_id" = DeliveryId, Path, description = "The delivery (`dlv_…`)"), PageParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A page of attempts", body = AttemptPage),
        (status = 404, description = "No such delivery")
    )
)]
pub async fn list_attempts(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(delivery_id): Path<String>,
    ApiQuery(query): ApiQuery<PageParams>,
) -> Result<Json<AttemptPage>, ApiError> {
    let delivery_id: DeliveryId = parse_path_id(&delivery_id)?;
    let limit = params::limit(query.limit)?;
    let after = query.cursor.as_deref().map(cursor::decode_attempt).transpose()?.unwrap_or(0);
    let (client, _) = found::delivery(&state.reads, caller.tenant_id, delivery_id).await?;
    let rows = attempts::list_attempts(&*client, caller.tenant_id, delivery_id, after, limit + 1).await?;
    let (rows, more) = page_of(rows, limit);
    let next_cursor = rows.last().filter(|_| more).map(|last| cursor::encode_attempt(last.attempt_number));
    Ok(Json(AttemptPage { data: rows.into_iter().map(AttemptView::from).collect(), next_cursor }))
}
