//! `GET /v1/endpoints/{endpoint_id}/blocked-lanes`: the ordering lanes of an
//! endpoint whose `dead_letter_lane` is `block` that are held on a dead
//! delivery — what to replay (`POST /v1/deliveries/{id}/replay`) or skip
//! (`POST /v1/deliveries/{id}/skip`).
use axum::extract::{Path, State};
use axum::Json;
use chrono::{DateTime, Utc};
use relayops_shared::api::{page_of, parse_path_id, ApiError, ApiQuery, ApiState, Authenticated};
use relayops_shared::ids::{DeliveryId, EndpointId, EventId};
use relayops_shared::repo::delivery_queries::TimeKey;
use relayops_shared::repo::lanes::{self, BlockedLane};
use serde::Serialize;
use utoipa::ToSchema;

use crate::cursor::{self, CursorKind};
use crate::found;
use crate::params::{self, PageParams};

/// An ordering lane held on a dead delivery.
#[derive(Debug, Serialize, ToSchema)]
pub struct BlockedLaneView {
    ordering_key: String,
    /// The dead delivery holding the lane: replay it (sent again, the lane
    /// goes on once it is terminal) or skip it (the lane goes on at once).
    delivery_id: DeliveryId,
    event_id: EventId,
    blocked_since: DateTime<Utc>,
    /// Deliveries of this key waiting behind it.
    waiting: i64,
}

impl From<BlockedLane> for BlockedLaneView {
    fn from(lane: BlockedLane) -> Self {
        Self {
            ordering_key: lane.ordering_key,
            delivery_id: lane.delivery_id,
            event_id: lane.event_id,
            blocked_since: lane.blocked_since,
            waiting: lane.waiting,
        }
    }
}

/// A page of blocked lanes, most recently blocked first.
#[derive(Debug, Serialize, ToSchema)]
pub struct BlockedLanePage {
    data: Vec<BlockedLaneView>,
    /// Pass as `cursor` for the next page; `null` on the last.
    next_cursor: Option<String>,
}

/// The endpoint's ordering lanes blocked on a dead delivery (only with
/// `dead_letter_lane: block`), most recently blocked first.
#[utoipa::path(
    get, path = "/v1/endpoints/{endpoint_id}/blocked-lanes", tag = "query",
    params(("endpoint_id" = EndpointId, Path, description = "The endpoint (`ep_…`)"), PageParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A page of blocked lanes", body = BlockedLanePage),
        (status = 404, description = "No such endpoint")
    )
)]
pub async fn list_blocked_lanes(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(endpoint_id): Path<String>,
    ApiQuery(query): ApiQuery<PageParams>,
) -> Result<Json<BlockedLanePage>, ApiError> {
    let endpoint_id: EndpointId = parse_path_id(&endpoint_id)?;
    let limit = params::limit(query.limit)?;
    let after =
        query.cursor.as_deref().map(|text| cursor::decode_time_key(CursorKind::BlockedLanes, text)).transpose()?;
    let (client, _) = found::endpoint(&state.reads, caller.tenant_id, endpoint_id).await?;
    let rows = lanes::list_blocked(&*client, caller.tenant_id, endpoint_id, after, limit + 1).await?;
    let (rows, more) = page_of(rows, limit);
    let next_cursor = rows.last().filter(|_| more).map(|last| {
        let key = TimeKey { at: last.blocked_since, id: last.delivery_id.as_uuid() };
        cursor::encode_time_key(CursorKind::BlockedLanes, key)
    });
    Ok(Json(BlockedLanePage { data: rows.into_iter().map(BlockedLaneView::from).collect(), next_cursor }))
}
