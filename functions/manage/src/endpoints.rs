//! Endpoint routes: create (with its subscriptions, in one transaction), list,
//! get, reveal the signing secret, and subscribe to more event types.
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use relayops_shared::api::{parse_path_id, ApiError, ApiJson, ApiState, Authenticated, NoQuery};
use relayops_shared::auth::Scope;
use relayops_shared::db::DbError;
use relayops_shared::domain::operational::check_operational_pattern;
use relayops_shared::domain::{Destination, EndpointKind, EventTypePattern, SigningSecret, ValidationError};
use relayops_shared::ids::{EndpointId, SubscriptionId, TenantId};
use relayops_shared::repo::endpoints::{self, EndpointRecord, NewEndpoint, SubscriptionRecord};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::destination::DestinationView;
use crate::health_view::{DeadLetterLaneView, HealthView, KindView};

const MAX_PATTERNS: usize = 100;

/// An endpoint (a webhook, or an Amazon SQS queue) and the event types it
/// subscribes to.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEndpointRequest {
    /// A webhook's `https://…` or `http://…`. A URL naming a special address
    /// — loopback, private, carrier-grade NAT, link-local (cloud metadata),
    /// multicast, broadcast, reserved, documentation, or one of those inside
    /// IPv6 — is refused with 422 naming its range. A host name is checked on
    /// the addresses it resolves to, when delivering. An `aws_sqs`
    /// destination's queue URL, as AWS gives it.
    #[schema(pattern = "^https?://", max_length = 2048)]
    url: String,
    /// Where deliveries go: `webhook` (default) or `aws_sqs`.
    #[serde(default)]
    destination: DestinationView,
    /// An AWS destination only: a role in the queue owner's account that
    /// RelayOps assumes (`sts:AssumeRole` with `aws_external_id`, the
    /// tenant's id, as `ExternalId`) to send; unset, it sends as itself.
    #[serde(default)]
    #[schema(pattern = "^arn:aws(-cn|-us-gov)?:iam::[0-9]{12}:role/", max_length = 2048)]
    aws_role_arn: Option<String>,
    #[serde(default)]
    #[schema(max_length = 1000)]
    description: String,
    /// Exact types, `prefix.*` or `*`; 1 to 100.
    #[schema(min_items = 1, max_items = 100)]
    event_types: Vec<String>,
    /// Optional: bring your own `whsec_` secret; otherwise one is generated.
    #[serde(default)]
    secret: Option<String>,
    #[serde(default = "enabled_by_default")]
    enabled: bool,
    /// `operational` endpoints receive `endpoint.disabled`, `endpoint.enabled`
    /// and `delivery.dead` about the tenant's other endpoints (subscribe with
    /// those names, `endpoint.*`, `delivery.*` or `*`), never the tenant's events.
    #[serde(default)]
    kind: KindView,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 10000)]
    rate_limit_per_sec: Option<i32>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 10000)]
    rate_limit_burst: Option<i32>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000)]
    max_in_flight: Option<i32>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 50)]
    max_attempts: Option<i32>,
    #[serde(default)]
    #[schema(minimum = 100, maximum = 60000)]
    timeout_ms: Option<i32>,
    /// Seconds to wait before attempt 2, 3, …; the last step repeats.
    #[serde(default)]
    #[schema(min_items = 1, max_items = 49)]
    retry_schedule_secs: Option<Vec<i32>>,
    #[serde(default)]
    dead_letter_lane: DeadLetterLaneView,
    /// Hold deliveries parked behind an open circuit at least this many
    /// seconds (1 to 2592000, 30 days) before they die; unset: they die
    /// when the retry policy's time is up, as if tried on schedule.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 2592000)]
    circuit_hold_secs: Option<i32>,
}

/// The longest `circuit_hold_secs`: 30 days.
pub(crate) const MAX_CIRCUIT_HOLD_SECS: i32 = 30 * 24 * 3600;

fn enabled_by_default() -> bool {
    true
}

pub(crate) fn in_range(
    field: &'static str,
    value: Option<i32>,
    range: std::ops::RangeInclusive<i32>,
) -> Result<Option<i32>, ValidationError> {
    match value {
        Some(number) if !range.contains(&number) => {
            Err(ValidationError::new(field, format!("must be between {} and {}", range.start(), range.end())))
        }
        other => Ok(other),
    }
}

pub(crate) fn parse_schedule(schedule: Option<Vec<i32>>) -> Result<Option<Vec<i32>>, ValidationError> {
    let field = "retry_schedule_secs";
    match schedule {
        Some(steps) if steps.is_empty() || steps.len() > 49 => {
            Err(ValidationError::new(field, "must list 1 to 49 waits"))
        }
        Some(steps) if steps.iter().any(|step| !(0..=86_400).contains(step)) => {
            Err(ValidationError::new(field, "each wait must be between 0 and 86400 seconds"))
        }
        other => Ok(other),
    }
}

fn parse_patterns(texts: &[String]) -> Result<Vec<EventTypePattern>, ValidationError> {
    if texts.is_empty() || texts.len() > MAX_PATTERNS {
        return Err(ValidationError::new("event_types", format!("must list 1 to {MAX_PATTERNS} event types")));
    }
    texts.iter().map(|text| EventTypePattern::parse(text)).collect()
}

/// An operational endpoint subscribes to operational event types only.
fn check_patterns_for(kind: EndpointKind, patterns: &[EventTypePattern]) -> Result<(), ValidationError> {
    if kind == EndpointKind::Operational {
        patterns.iter().try_for_each(check_operational_pattern)?;
    }
    Ok(())
}

/// A webhook endpoint (never its secret).
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointView {
    id: EndpointId,
    kind: KindView,
    destination: DestinationView,
    /// An AWS destination's role in the queue owner's account, if it names one.
    aws_role_arn: Option<String>,
    /// An AWS destination's `ExternalId` when RelayOps assumes its role (the
    /// tenant's id): the role's trust policy requires it.
    aws_external_id: Option<String>,
    url: String,
    description: String,
    enabled: bool,
    disabled_reason: Option<String>,
    rate_limit_per_sec: Option<i32>,
    rate_limit_burst: Option<i32>,
    max_in_flight: Option<i32>,
    max_attempts: Option<i32>,
    timeout_ms: Option<i32>,
    retry_schedule_secs: Option<Vec<i32>>,
    dead_letter_lane: DeadLetterLaneView,
    /// Parked deliveries are held at least this long while the circuit is
    /// open (`null`: the retry policy decides when they die).
    circuit_hold_secs: Option<i32>,
    event_types: Vec<String>,
    health: HealthView,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl EndpointView {
    pub(crate) fn new(tenant: TenantId, endpoint: EndpointRecord, subscriptions: &[SubscriptionRecord]) -> Self {
        let aws = endpoint.destination != Destination::Webhook;
        Self {
            id: endpoint.id,
            kind: KindView::of(endpoint.kind),
            destination: DestinationView::of(endpoint.destination),
            aws_role_arn: endpoint.aws_role_arn.clone(),
            aws_external_id: aws.then(|| tenant.to_string()),
            health: HealthView::new(endpoint.enabled, endpoint.health, endpoint.circuit_open_until),
            url: endpoint.url,
            description: endpoint.description,
            enabled: endpoint.enabled,
            disabled_reason: endpoint.disabled_reason,
            rate_limit_per_sec: endpoint.rate_limit_per_sec,
            rate_limit_burst: endpoint.rate_limit_burst,
            max_in_flight: endpoint.max_in_flight,
            max_attempts: endpoint.max_attempts,
            timeout_ms: endpoint.timeout_ms,
            retry_schedule_secs: endpoint.retry_schedule_secs,
            dead_letter_lane: DeadLetterLaneView::of(endpoint.dead_letter_lane),
            circuit_hold_secs: endpoint.circuit_hold_secs,
            event_types: subscriptions.iter().map(|sub| sub.event_type_pattern.clone()).collect(),
            created_at: endpoint.created_at,
            updated_at: endpoint.updated_at,
        }
    }
}

/// An endpoint as created, with its signing secret (shown here and by
/// `GET /v1/endpoints/{endpoint_id}/secret` only).
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedEndpointView {
    #[serde(flatten)]
    endpoint: EndpointView,
    /// The signing secret (`whsec_…`).
    secret: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointList {
    data: Vec<EndpointView>,
}

/// The signing secret deliveries are signed with.
#[derive(Debug, Serialize, ToSchema)]
pub struct SecretView {
    secret: String,
}

/// Creates an endpoint with its subscriptions, in one transaction.
#[utoipa::path(
    post, path = "/v1/endpoints", tag = "endpoints", request_body = CreateEndpointRequest,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Created", body = CreatedEndpointView),
        (status = 422, description = "Invalid: the detail names the field (a special address: its range)")
    )
)]
pub async fn create(
    State(state): State<ApiState>,
    caller: Authenticated,
    ApiJson(request): ApiJson<CreateEndpointRequest>,
) -> Result<(StatusCode, Json<CreatedEndpointView>), ApiError> {
    caller.require(Scope::Admin)?;
    let destination = request.destination.domain();
    let url = crate::destination::destination_url(&state, destination, &request.url)?;
    let aws_role_arn = crate::destination::role_for(destination, request.aws_role_arn.as_deref())?;
    if request.description.chars().count() > 1000 {
        return Err(ValidationError::new("description", "must be at most 1000 characters").into());
    }
    let patterns = parse_patterns(&request.event_types)?;
    check_patterns_for(request.kind.domain(), &patterns)?;
    let secret = match &request.secret {
        Some(text) => SigningSecret::parse(text)?,
        None => SigningSecret::generate(),
    };
    let new_endpoint = NewEndpoint {
        kind: request.kind.domain(),
        destination,
        aws_role_arn: aws_role_arn.as_ref(),
        url: &url,
        description: &request.description,
        secret: &secret,
        enabled: request.enabled,
        rate_limit_per_sec: in_range("rate_limit_per_sec", request.rate_limit_per_sec, 1..=10_000)?,
        rate_limit_burst: in_range("rate_limit_burst", request.rate_limit_burst, 1..=10_000)?,
        max_in_flight: in_range("max_in_flight", request.max_in_flight, 1..=1_000)?,
        max_attempts: in_range("max_attempts", request.max_attempts, 1..=50)?,
        timeout_ms: in_range("timeout_ms", request.timeout_ms, 100..=60_000)?,
        retry_schedule_secs: parse_schedule(request.retry_schedule_secs)?,
        dead_letter_lane: request.dead_letter_lane.domain(),
        circuit_hold_secs: in_range("circuit_hold_secs", request.circuit_hold_secs, 1..=MAX_CIRCUIT_HOLD_SECS)?,
    };

    let mut client = state.pool.get().await.map_err(DbError::from)?;
    let tx = client.transaction().await.map_err(DbError::from)?;
    let endpoint = endpoints::insert_endpoint(&tx, caller.tenant_id, &new_endpoint).await?;
    for pattern in &patterns {
        endpoints::insert_subscription(&tx, caller.tenant_id, endpoint.id, pattern).await?;
    }
    let subscriptions = endpoints::list_subscriptions(&tx, caller.tenant_id, endpoint.id).await?;
    tx.commit().await.map_err(DbError::from)?;

    // The secret is part of the creation response so the caller can configure
    // its receiver; afterwards it is only shown by the dedicated route.
    let body = CreatedEndpointView {
        endpoint: EndpointView::new(caller.tenant_id, endpoint, &subscriptions),
        secret: secret.expose().to_owned(),
    };
    Ok((StatusCode::CREATED, Json(body)))
}

/// The tenant's endpoints (up to 500).
#[utoipa::path(
    get, path = "/v1/endpoints", tag = "endpoints",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every endpoint", body = EndpointList),
        (status = 400, description = "A query parameter was given: this list takes none")
    )
)]
pub async fn list(
    State(state): State<ApiState>,
    caller: Authenticated,
    _: NoQuery,
) -> Result<Json<EndpointList>, ApiError> {
    caller.require(Scope::Admin)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let rows = endpoints::list_endpoints(&client, caller.tenant_id, 500).await?;
    let mut views = Vec::with_capacity(rows.len());
    for endpoint in rows {
        let subscriptions = endpoints::list_subscriptions(&client, caller.tenant_id, endpoint.id).await?;
        views.push(EndpointView::new(caller.tenant_id, endpoint, &subscriptions));
    }
    Ok(Json(EndpointList { data: views }))
}

async fn load(state: &ApiState, caller: &Authenticated, id: &str) -> Result<EndpointView, ApiError> {
    let id: EndpointId = parse_path_id(id)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let endpoint =
        endpoints::get_endpoint(&client, caller.tenant_id, id).await?.ok_or(ApiError::NotFound("endpoint"))?;
    let subscriptions = endpoints::list_subscriptions(&client, caller.tenant_id, id).await?;
    Ok(EndpointView::new(caller.tenant_id, endpoint, &subscriptions))
}

/// One endpoint.
#[utoipa::path(
    get, path = "/v1/endpoints/{endpoint_id}", tag = "endpoints", params(("endpoint_id" = EndpointId, Path, description = "The endpoint (`ep_…`)")),
    security(("bearer" = [])),
    responses((status = 200, description = "The endpoint", body = EndpointView), (status = 404, description = "No such endpoint"))
)]
pub async fn get_one(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(endpoint_id): Path<String>,
) -> Result<Json<EndpointView>, ApiError> {
    caller.require(Scope::Admin)?;
    Ok(Json(load(&state, &caller, &endpoint_id).await?))
}

/// The endpoint's current signing secret.
#[utoipa::path(
    get, path = "/v1/endpoints/{endpoint_id}/secret", tag = "endpoints", params(("endpoint_id" = EndpointId, Path, description = "The endpoint (`ep_…`)")),
    security(("bearer" = [])),
    responses((status = 200, description = "The secret", body = SecretView), (status = 404, description = "No such endpoint"))
)]
pub async fn get_secret(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(endpoint_id): Path<String>,
) -> Result<Json<SecretView>, ApiError> {
    caller.require(Scope::Admin)?;
    let id: EndpointId = parse_path_id(&endpoint_id)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let secret = endpoints::get_secret(&client, caller.tenant_id, id).await?.ok_or(ApiError::NotFound("endpoint"))?;
    Ok(Json(SecretView { secret }))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddSubscriptionRequest {
    /// An exact type, `prefix.*` or `*`.
    #[schema(pattern = r"^(\*|[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*(\.\*)?)$", min_length = 1, max_length = 128)]
    event_type: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriptionView {
    id: SubscriptionId,
    event_type: String,
    created_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriptionList {
    data: Vec<SubscriptionView>,
}

fn subscription_views(rows: Vec<SubscriptionRecord>) -> SubscriptionList {
    let views: Vec<SubscriptionView> = rows
        .into_iter()
        .map(|row| SubscriptionView { id: row.id, event_type: row.event_type_pattern, created_at: row.created_at })
        .collect();
    SubscriptionList { data: views }
}

/// Subscribes the endpoint to one more event type; answers every subscription.
#[utoipa::path(
    post, path = "/v1/endpoints/{endpoint_id}/subscriptions", tag = "endpoints", params(("endpoint_id" = EndpointId, Path, description = "The endpoint (`ep_…`)")),
    request_body = AddSubscriptionRequest,
    security(("bearer" = [])),
    responses((status = 201, description = "The endpoint's subscriptions", body = SubscriptionList), (status = 404, description = "No such endpoint"))
)]
pub async fn add_subscription(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(endpoint_id): Path<String>,
    ApiJson(request): ApiJson<AddSubscriptionRequest>,
) -> Result<(StatusCode, Json<SubscriptionList>), ApiError> {
    caller.require(Scope::Admin)?;
    let id: EndpointId = parse_path_id(&endpoint_id)?;
    let pattern = EventTypePattern::parse(&request.event_type)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let endpoint =
        endpoints::get_endpoint(&client, caller.tenant_id, id).await?.ok_or(ApiError::NotFound("endpoint"))?;
    check_patterns_for(endpoint.kind, std::slice::from_ref(&pattern))?;
    endpoints::insert_subscription(&client, caller.tenant_id, id, &pattern).await?;
    let rows = endpoints::list_subscriptions(&client, caller.tenant_id, id).await?;
    Ok((StatusCode::CREATED, Json(subscription_views(rows))))
}

/// The endpoint's subscriptions.
#[utoipa::path(
    get, path = "/v1/endpoints/{endpoint_id}/subscriptions", tag = "endpoints", params(("endpoint_id" = EndpointId, Path, description = "The endpoint (`ep_…`)")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The endpoint's subscriptions", body = SubscriptionList),
        (status = 400, description = "A query parameter was given: this list takes none"),
        (status = 404, description = "No such endpoint")
    )
)]
pub async fn list_subscriptions(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(endpoint_id): Path<String>,
    _: NoQuery,
) -> Result<Json<SubscriptionList>, ApiError> {
    caller.require(Scope::Admin)?;
    let id: EndpointId = parse_path_id(&endpoint_id)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    endpoints::get_endpoint(&client, caller.tenant_id, id).await?.ok_or(ApiError::NotFound("endpoint"))?;
    Ok(Json(subscription_views(endpoints::list_subscriptions(&client, caller.tenant_id, id).await?)))
}
