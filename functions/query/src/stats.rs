//! `GET /v1/endpoints/{endpoint_id}/stats`: "is my endpoint healthy" — its
//! deliveries counted by status, optionally within a time window.
use axum::extract::{Path, State};
use axum::Json;
use relayops_shared::api::{parse_path_id, ApiError, ApiQuery, ApiState, Authenticated};
use relayops_shared::ids::EndpointId;
use relayops_shared::repo::delivery_queries;

use crate::found;
use crate::params::{self, StatsParams};
use crate::views::{EndpointStatsView, StatusCounts};

/// An endpoint's deliveries counted by status.
#[utoipa::path(
    get, path = "/v1/endpoints/{endpoint_id}/stats", tag = "query",
    params(("endpoint_id" = EndpointId, Path, description = "The endpoint (`ep_…`)"), StatsParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Counts by status", body = EndpointStatsView),
        (status = 404, description = "No such endpoint")
    )
)]
pub async fn endpoint_stats(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(endpoint_id): Path<String>,
    ApiQuery(query): ApiQuery<StatsParams>,
) -> Result<Json<EndpointStatsView>, ApiError> {
    let endpoint_id: EndpointId = parse_path_id(&endpoint_id)?;
    let (since, until) = params::time_range(query.since, query.until)?;
    let (client, _) = found::endpoint(&state.reads, caller.tenant_id, endpoint_id).await?;
    let mut by_status = StatusCounts::default();
    for (status, count) in
        delivery_queries::count_by_status(&*client, caller.tenant_id, endpoint_id, since, until).await?
    {
        by_status.add(status, count);
    }
    Ok(Json(EndpointStatsView { endpoint_id, since, until, total: by_status.total(), by_status }))
}
