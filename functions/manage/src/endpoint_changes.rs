//! Changing an endpoint: `PATCH /v1/endpoints/{id}` (enable/disable, URL,
//! limits, retry policy) and `POST /v1/endpoints/{id}/secret/rotate` (a new
//! signing secret, with the old one still signing beside it for a grace period).
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::Json;
use relayops_shared::api::endpoint_changes::{apply_changes, DEFAULT_GRACE_SECS};
use relayops_shared::api::{parse_path_id, ApiError, ApiJson, ApiState, Authenticated};
use relayops_shared::auth::Scope;
use relayops_shared::db::DbError;
use relayops_shared::domain::{AwsRoleArn, EndpointUrl, SigningSecret, ValidationError};
use relayops_shared::ids::EndpointId;
use relayops_shared::repo::endpoints::{self, EndpointChanges};
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

use crate::endpoints::{in_range, parse_schedule, EndpointView, MAX_CIRCUIT_HOLD_SECS};
use crate::health_view::DeadLetterLaneView;

/// The longest overlap of an old secret with its replacement.
const MAX_GRACE_SECS: i64 = 7 * 24 * 3600;

/// Tells "absent" (leave as is) from `null` (clear) for nullable fields.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(deserializer: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(deserializer).map(Some)
}

/// The fields to change; absent ones stay as they are, `null` clears a limit
/// back to the platform default.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateEndpointRequest {
    /// As at creation: a webhook URL naming a special address is refused
    /// with 422 naming its range; an `aws_sqs` endpoint's must be a queue URL.
    #[serde(default)]
    #[schema(pattern = "^https?://", max_length = 2048)]
    url: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i32>)]
    rate_limit_per_sec: Option<Option<i32>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i32>)]
    rate_limit_burst: Option<Option<i32>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i32>)]
    max_in_flight: Option<Option<i32>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i32>)]
    max_attempts: Option<Option<i32>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<i32>>)]
    retry_schedule_secs: Option<Option<Vec<i32>>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i32>)]
    timeout_ms: Option<Option<i32>>,
    #[serde(default)]
    dead_letter_lane: Option<DeadLetterLaneView>,
    /// As at creation; `null` goes back to the retry policy alone.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i32>)]
    circuit_hold_secs: Option<Option<i32>>,
    /// An AWS destination's role, as at creation; `null`: RelayOps sends as
    /// itself.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    aws_role_arn: Option<Option<String>>,
}

fn checked(
    field: &'static str,
    value: Option<Option<i32>>,
    range: std::ops::RangeInclusive<i32>,
) -> Result<Option<Option<i32>>, ValidationError> {
    match value {
        Some(inner) => in_range(field, inner, range).map(Some),
        None => Ok(None),
    }
}

/// Changes an endpoint (enable/disable, URL, limits, retry policy). Enabling a
/// disabled endpoint clears its failing state; switching it either way sends
/// `endpoint.enabled`/`endpoint.disabled` to the tenant's operational endpoints.
#[utoipa::path(
    patch, path = "/v1/endpoints/{endpoint_id}", tag = "endpoints", params(("endpoint_id" = EndpointId, Path, description = "The endpoint (`ep_…`)")),
    request_body = UpdateEndpointRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The endpoint as changed", body = EndpointView),
        (status = 404, description = "No such endpoint"),
        (status = 422, description = "Invalid: the detail names the field (a special address: its range)")
    )
)]
pub async fn update(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(endpoint_id): Path<String>,
    ApiJson(request): ApiJson<UpdateEndpointRequest>,
) -> Result<Json<EndpointView>, ApiError> {
    caller.require(Scope::Admin)?;
    let id: EndpointId = parse_path_id(&endpoint_id)?;
    let (url, aws_role_arn) = checked_destination(&state, &caller, id, &request).await?;
    if request.description.as_ref().is_some_and(|d| d.chars().count() > 1000) {
        return Err(ValidationError::new("description", "must be at most 1000 characters").into());
    }
    let schedule = match request.retry_schedule_secs {
        Some(schedule) => Some(parse_schedule(schedule)?),
        None => None,
    };
    let changes = EndpointChanges {
        url: url.as_ref(),
        description: request.description.as_deref(),
        enabled: request.enabled,
        rate_limit_per_sec: checked("rate_limit_per_sec", request.rate_limit_per_sec, 1..=10_000)?,
        rate_limit_burst: checked("rate_limit_burst", request.rate_limit_burst, 1..=10_000)?,
        max_in_flight: checked("max_in_flight", request.max_in_flight, 1..=1_000)?,
        max_attempts: checked("max_attempts", request.max_attempts, 1..=50)?,
        retry_schedule_secs: schedule,
        timeout_ms: checked("timeout_ms", request.timeout_ms, 100..=60_000)?,
        dead_letter_lane: request.dead_letter_lane.map(DeadLetterLaneView::domain),
        circuit_hold_secs: checked("circuit_hold_secs", request.circuit_hold_secs, 1..=MAX_CIRCUIT_HOLD_SECS)?,
        aws_role_arn: aws_role_arn.as_ref().map(Option::as_ref),
    };
    let endpoint =
        apply_changes(&state, caller.tenant_id, id, &changes).await?.ok_or(ApiError::NotFound("endpoint"))?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let subscriptions = endpoints::list_subscriptions(&client, caller.tenant_id, id).await?;
    Ok(Json(EndpointView::new(caller.tenant_id, endpoint, &subscriptions)))
}

/// A new URL and role, each checked for the endpoint's destination (a
/// webhook's address, or an SQS queue URL; a role for AWS destinations only).
async fn checked_destination(
    state: &ApiState,
    caller: &Authenticated,
    id: EndpointId,
    request: &UpdateEndpointRequest,
) -> Result<(Option<EndpointUrl>, Option<Option<AwsRoleArn>>), ApiError> {
    if request.url.is_none() && request.aws_role_arn.is_none() {
        return Ok((None, None));
    }
    let client = state.pool.get().await.map_err(DbError::from)?;
    let endpoint =
        endpoints::get_endpoint(&client, caller.tenant_id, id).await?.ok_or(ApiError::NotFound("endpoint"))?;
    let url = match request.url.as_deref() {
        Some(text) => Some(crate::destination::destination_url(state, endpoint.destination, text)?),
        None => None,
    };
    let role = match &request.aws_role_arn {
        Some(text) => Some(crate::destination::role_for(endpoint.destination, text.as_deref())?),
        None => None,
    };
    Ok((url, role))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateSecretRequest {
    /// How long the old secret keeps signing beside the new one (default 24 h).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 604800)]
    grace_period_secs: Option<i64>,
    /// Optional: bring your own `whsec_` secret.
    #[serde(default)]
    secret: Option<String>,
}

/// The new secret, and how long the previous one keeps signing beside it.
#[derive(Debug, Serialize, ToSchema)]
pub struct RotatedSecretView {
    secret: String,
    previous_secret_valid_for_secs: i64,
}

/// Replaces the signing secret; the old one keeps signing beside it for the
/// grace period. The body is optional.
#[utoipa::path(
    post, path = "/v1/endpoints/{endpoint_id}/secret/rotate", tag = "endpoints", params(("endpoint_id" = EndpointId, Path, description = "The endpoint (`ep_…`)")),
    request_body(content = Option<RotateSecretRequest>, description = "Optional"),
    security(("bearer" = [])),
    responses((status = 200, description = "Rotated", body = RotatedSecretView), (status = 404, description = "No such endpoint"))
)]
pub async fn rotate_secret(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(endpoint_id): Path<String>,
    body: Bytes,
) -> Result<Json<RotatedSecretView>, ApiError> {
    caller.require(Scope::Admin)?;
    let id: EndpointId = parse_path_id(&endpoint_id)?;
    // The body is optional: no body means the defaults.
    let request: RotateSecretRequest = if body.iter().all(u8::is_ascii_whitespace) {
        RotateSecretRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|error| ValidationError::new("body", error.to_string()))?
    };
    let grace = request.grace_period_secs.unwrap_or(DEFAULT_GRACE_SECS);
    if !(0..=MAX_GRACE_SECS).contains(&grace) {
        return Err(ValidationError::new("grace_period_secs", format!("must be between 0 and {MAX_GRACE_SECS}")).into());
    }
    let secret = match &request.secret {
        Some(text) => SigningSecret::parse(text)?,
        None => SigningSecret::generate(),
    };
    let client = state.pool.get().await.map_err(DbError::from)?;
    if !endpoints::rotate_secret(&client, caller.tenant_id, id, &secret, grace).await? {
        return Err(ApiError::NotFound("endpoint"));
    }
    tracing::info!(tenant_id = %caller.tenant_id, endpoint_id = %id, grace_secs = grace, "endpoint secret rotated");
    Ok(Json(RotatedSecretView { secret: secret.expose().to_owned(), previous_secret_valid_for_secs: grace }))
}
