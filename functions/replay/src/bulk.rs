//! `POST /v1/replays`: replay every dead/failed delivery matching a filter,
//! oldest first, at most `limit` per call (the answer says how many remain, so a
//! client loops until none do). `dry_run` only counts.
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use relayops_shared::api::{ApiError, ApiJson, ApiState, Authenticated};
use relayops_shared::auth::Scope;
use relayops_shared::db::DbError;
use relayops_shared::domain::{DeliveryStatus, EventType, ValidationError};
use relayops_shared::ids::{DeliveryId, EndpointId};
use relayops_shared::repo::replay::{self, ReplayFilter, MAX_PER_CALL};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The statuses a replay can start from.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)]
enum ReplayableStatus {
    Dead,
    Failed,
}

/// Which dead/failed deliveries to replay (every field optional).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkReplayRequest {
    /// `dead`, `failed`, or both (the default).
    #[serde(default)]
    #[schema(min_items = 1, value_type = Option<Vec<ReplayableStatus>>)]
    statuses: Option<Vec<String>>,
    #[serde(default)]
    endpoint_id: Option<EndpointId>,
    #[serde(default)]
    event_type: Option<String>,
    #[serde(default)]
    since: Option<DateTime<Utc>>,
    #[serde(default)]
    until: Option<DateTime<Utc>>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BulkReplayResponse {
    dry_run: bool,
    /// Matching deliveries before this call.
    matched: i64,
    replayed: usize,
    /// Matching deliveries left for another call.
    remaining: i64,
    delivery_ids: Vec<DeliveryId>,
}

impl BulkReplayRequest {
    fn filter(&self) -> Result<ReplayFilter, ValidationError> {
        let statuses = match &self.statuses {
            None => vec![DeliveryStatus::Dead, DeliveryStatus::Failed],
            Some(texts) if texts.is_empty() => {
                return Err(ValidationError::new("statuses", "must list \"dead\" and/or \"failed\""))
            }
            Some(texts) => texts
                .iter()
                .map(|text| match DeliveryStatus::parse(text) {
                    Some(status @ (DeliveryStatus::Dead | DeliveryStatus::Failed)) => Ok(status),
                    _ => {
                        Err(ValidationError::new("statuses", format!("`{text}`: only dead or failed can be replayed")))
                    }
                })
                .collect::<Result<_, _>>()?,
        };
        if let (Some(since), Some(until)) = (self.since, self.until) {
            if since >= until {
                return Err(ValidationError::new("since", "must be before `until`"));
            }
        }
        let event_type = self.event_type.as_deref().map(EventType::parse).transpose()?;
        Ok(ReplayFilter {
            statuses,
            endpoint: self.endpoint_id,
            event_type: event_type.map(|t| t.as_str().to_owned()),
            since: self.since,
            until: self.until,
        })
    }

    fn limit(&self) -> Result<i64, ValidationError> {
        match self.limit {
            None => Ok(MAX_PER_CALL),
            Some(limit @ 1..=MAX_PER_CALL) => Ok(limit),
            Some(_) => Err(ValidationError::new("limit", format!("must be between 1 and {MAX_PER_CALL}"))),
        }
    }
}

/// Replays every dead/failed delivery matching the filter, oldest first, at
/// most `limit` (≤ 1000) per call; `dry_run` only counts.
#[utoipa::path(
    post, path = "/v1/replays", tag = "replay", request_body = BulkReplayRequest,
    security(("bearer" = [])),
    responses(
        (status = 202, description = "Replayed (`remaining` says whether to call again)", body = BulkReplayResponse),
        (status = 200, description = "Dry run: counted only", body = BulkReplayResponse)
    )
)]
pub async fn replay_matching(
    State(state): State<ApiState>,
    caller: Authenticated,
    ApiJson(request): ApiJson<BulkReplayRequest>,
) -> Result<(StatusCode, Json<BulkReplayResponse>), ApiError> {
    caller.require(Scope::Admin)?;
    let filter = request.filter()?;
    let limit = request.limit()?;
    if request.dry_run {
        let client = state.pool.get().await.map_err(DbError::from)?;
        let matched = replay::count_matching(&client, caller.tenant_id, &filter).await?;
        let response =
            BulkReplayResponse { dry_run: true, matched, replayed: 0, remaining: matched, delivery_ids: Vec::new() };
        return Ok((StatusCode::OK, Json(response)));
    }
    let (matched, replayed) = replay::replay_bulk(&state.pool, caller.tenant_id, &filter, limit).await?;
    if !replayed.is_empty() {
        state.wake_publisher();
    }
    tracing::info!(tenant_id = %caller.tenant_id, replayed = replayed.len(), "bulk replay");
    let response = BulkReplayResponse {
        dry_run: false,
        matched,
        replayed: replayed.len(),
        remaining: (matched - replayed.len() as i64).max(0),
        delivery_ids: replayed,
    };
    Ok((StatusCode::ACCEPTED, Json(response)))
}
