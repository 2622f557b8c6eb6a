//! Tenants, for platform operators: create (with the first admin user and an
//! API key, shown once), list, get, suspend, resume, and set ingest limits
//! (retention: `crate::retention`).
//!
//! Suspension refuses the tenant's ingest (`POST /v1/events` and the batch:
//! 403 `tenant-suspended`) within the API-key cache's lifetime (2 s by
//! default). Events accepted before the suspension are still delivered, and
//! retries and replays go on: they are promises already made to the tenant's
//! receivers. The tenant's people can still sign in and read their data.
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use relayops_shared::api::{parse_path_id, ApiError, ApiJson, ApiQuery, ApiState};
use relayops_shared::bootstrap::{bootstrap_tenant, BootstrapError, BootstrapRequest};
use relayops_shared::db::DbError;
use relayops_shared::domain::account::{checked_email, checked_password};
use relayops_shared::domain::ValidationError;
use relayops_shared::ids::{ApiKeyId, TenantId, UserId};
use relayops_shared::repo::tenants::{self, TenantRecord};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::credential::PlatformAdmin;

/// The most a tenant's ingest limit may be set to (events/s and burst).
const MAX_LIMIT: i32 = 1_000_000;

/// A tenant as operators see it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TenantView {
    id: TenantId,
    name: String,
    /// `true` while the tenant's ingest is refused.
    suspended: bool,
    suspended_at: Option<DateTime<Utc>>,
    suspended_reason: Option<String>,
    /// The tenant's own ingest limit; `null` means the platform default.
    ingest_rate_per_sec: Option<i32>,
    ingest_burst: Option<i32>,
    /// Days of finished history kept for this tenant; `null` means the
    /// platform default (`RELAYOPS_RETENTION_DAYS`).
    retention_days: Option<i32>,
    /// Its share of a worker's slots against other tenants waiting for them
    /// (1 to 100; 1 unless set).
    weight: i16,
    created_at: DateTime<Utc>,
}

impl From<TenantRecord> for TenantView {
    fn from(tenant: TenantRecord) -> Self {
        Self {
            id: tenant.id,
            name: tenant.name,
            suspended: tenant.suspended_at.is_some(),
            suspended_at: tenant.suspended_at,
            suspended_reason: tenant.suspended_reason,
            ingest_rate_per_sec: tenant.ingest_rate_per_sec,
            ingest_burst: tenant.ingest_burst,
            retention_days: tenant.retention_days,
            weight: tenant.weight,
            created_at: tenant.created_at,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenantRequest {
    #[schema(min_length = 1, max_length = 200)]
    name: String,
    /// The tenant's first user, an admin.
    #[schema(format = Email)]
    admin_email: String,
    #[schema(min_length = 10, max_length = 1024)]
    admin_password: String,
}

/// The new tenant, its admin user and an admin API key (`api_key` is shown
/// only in this answer; only its hash is stored).
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedTenantView {
    tenant: TenantView,
    user_id: UserId,
    api_key_id: ApiKeyId,
    api_key: String,
}

/// Creates a tenant with its first admin user and an admin API key, in one transaction.
#[utoipa::path(
    post, path = "/admin/v1/tenants", tag = "admin", request_body = CreateTenantRequest,
    security(("admin" = [])),
    responses(
        (status = 201, description = "Created", body = CreatedTenantView),
        (status = 409, description = "A user with this email already exists")
    )
)]
pub async fn create(
    State(state): State<ApiState>,
    _admin: PlatformAdmin,
    ApiJson(body): ApiJson<CreateTenantRequest>,
) -> Result<(StatusCode, Json<CreatedTenantView>), ApiError> {
    let name = body.name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(ValidationError::new("name", "must be 1 to 200 characters").into());
    }
    let request = BootstrapRequest {
        tenant_name: name,
        admin_email: checked_email(&body.admin_email)?,
        admin_password: checked_password(&body.admin_password)?,
    };
    let created = match bootstrap_tenant(&state.pool, &request).await {
        Ok(created) => created,
        Err(BootstrapError::Database(error)) => return Err(error.into()),
        Err(other) => return Err(ApiError::internal(other)),
    };
    let client = state.pool.get().await.map_err(DbError::from)?;
    let tenant = tenants::get_tenant(&client, created.tenant_id).await?.ok_or(ApiError::NotFound("tenant"))?;
    tracing::info!(tenant_id = %created.tenant_id, "tenant created by the platform operator");
    let view = CreatedTenantView {
        tenant: tenant.into(),
        user_id: created.user_id,
        api_key_id: created.api_key_id,
        api_key: created.api_key.expose().to_owned(),
    };
    Ok((StatusCode::CREATED, Json(view)))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// 1 to 1000 (default 100), newest first.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TenantList {
    data: Vec<TenantView>,
}

/// The installation's tenants, newest first.
#[utoipa::path(
    get, path = "/admin/v1/tenants", tag = "admin", params(ListParams),
    security(("admin" = [])),
    responses((status = 200, description = "Tenants, newest first", body = TenantList))
)]
pub async fn list(
    State(state): State<ApiState>,
    _admin: PlatformAdmin,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Json<TenantList>, ApiError> {
    let limit = params.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::BadRequest("limit: must be between 1 and 1000".into()));
    }
    let client = state.pool.get().await.map_err(DbError::from)?;
    let rows = tenants::list_tenants(&client, limit).await?;
    Ok(Json(TenantList { data: rows.into_iter().map(TenantView::from).collect() }))
}

/// One tenant.
#[utoipa::path(
    get, path = "/admin/v1/tenants/{tenant_id}", tag = "admin",
    params(("tenant_id" = TenantId, Path, description = "The tenant (`ten_…`)")),
    security(("admin" = [])),
    responses((status = 200, description = "The tenant", body = TenantView), (status = 404, description = "No such tenant"))
)]
pub async fn get_one(
    State(state): State<ApiState>,
    _admin: PlatformAdmin,
    Path(tenant_id): Path<String>,
) -> Result<Json<TenantView>, ApiError> {
    let id: TenantId = parse_path_id(&tenant_id)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let tenant = tenants::get_tenant(&client, id).await?.ok_or(ApiError::NotFound("tenant"))?;
    Ok(Json(tenant.into()))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SuspendRequest {
    /// Why (kept with the tenant; shown to operators).
    #[schema(min_length = 1, max_length = 1000)]
    reason: String,
}

/// Suspends a tenant: its ingest is refused with 403 `tenant-suspended` until
/// it is resumed; accepted events are still delivered.
#[utoipa::path(
    post, path = "/admin/v1/tenants/{tenant_id}/suspend", tag = "admin",
    params(("tenant_id" = TenantId, Path, description = "The tenant (`ten_…`)")),
    request_body = SuspendRequest,
    security(("admin" = [])),
    responses((status = 200, description = "Suspended", body = TenantView), (status = 404, description = "No such tenant"))
)]
pub async fn suspend(
    State(state): State<ApiState>,
    _admin: PlatformAdmin,
    Path(tenant_id): Path<String>,
    ApiJson(body): ApiJson<SuspendRequest>,
) -> Result<Json<TenantView>, ApiError> {
    let id: TenantId = parse_path_id(&tenant_id)?;
    let reason = body.reason.trim();
    if reason.is_empty() || reason.chars().count() > 1000 {
        return Err(ValidationError::new("reason", "must be 1 to 1000 characters").into());
    }
    set_suspended(&state, id, Some(reason)).await
}

/// Resumes a suspended tenant (a no-op for one that is not).
#[utoipa::path(
    post, path = "/admin/v1/tenants/{tenant_id}/resume", tag = "admin",
    params(("tenant_id" = TenantId, Path, description = "The tenant (`ten_…`)")),
    security(("admin" = [])),
    responses((status = 200, description = "Resumed", body = TenantView), (status = 404, description = "No such tenant"))
)]
pub async fn resume(
    State(state): State<ApiState>,
    _admin: PlatformAdmin,
    Path(tenant_id): Path<String>,
) -> Result<Json<TenantView>, ApiError> {
    let id: TenantId = parse_path_id(&tenant_id)?;
    set_suspended(&state, id, None).await
}

async fn set_suspended(state: &ApiState, id: TenantId, reason: Option<&str>) -> Result<Json<TenantView>, ApiError> {
    let client = state.pool.get().await.map_err(DbError::from)?;
    let tenant = tenants::set_suspended(&client, id, reason).await?.ok_or(ApiError::NotFound("tenant"))?;
    tracing::warn!(tenant_id = %id, suspended = reason.is_some(), "tenant suspension changed by the platform operator");
    Ok(Json(tenant.into()))
}

/// The tenant's ingest limit; `null` (or absent) means the platform default.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsRequest {
    /// Events per second (token bucket rate).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000000)]
    ingest_rate_per_sec: Option<i32>,
    /// Bucket size (default: the rate); needs `ingest_rate_per_sec`.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000000)]
    ingest_burst: Option<i32>,
}

fn checked_limit(field: &'static str, value: Option<i32>) -> Result<Option<i32>, ValidationError> {
    match value {
        Some(value) if !(1..=MAX_LIMIT).contains(&value) => {
            Err(ValidationError::new(field, format!("must be between 1 and {MAX_LIMIT}")))
        }
        other => Ok(other),
    }
}

/// Sets the tenant's ingest limit (replacing it; `null` fields go back to the
/// platform default). Applies within the API-key cache's lifetime.
#[utoipa::path(
    put, path = "/admin/v1/tenants/{tenant_id}/limits", tag = "admin",
    params(("tenant_id" = TenantId, Path, description = "The tenant (`ten_…`)")),
    request_body = LimitsRequest,
    security(("admin" = [])),
    responses((status = 200, description = "The tenant with its new limits", body = TenantView), (status = 404, description = "No such tenant"))
)]
pub async fn set_limits(
    State(state): State<ApiState>,
    _admin: PlatformAdmin,
    Path(tenant_id): Path<String>,
    ApiJson(body): ApiJson<LimitsRequest>,
) -> Result<Json<TenantView>, ApiError> {
    let id: TenantId = parse_path_id(&tenant_id)?;
    let rate = checked_limit("ingest_rate_per_sec", body.ingest_rate_per_sec)?;
    let burst = checked_limit("ingest_burst", body.ingest_burst)?;
    if rate.is_none() && burst.is_some() {
        return Err(
            ValidationError::new("ingest_burst", "needs ingest_rate_per_sec (a burst alone has no rate)").into()
        );
    }
    let client = state.pool.get().await.map_err(DbError::from)?;
    let tenant = tenants::set_ingest_limit(&client, id, rate, burst).await?.ok_or(ApiError::NotFound("tenant"))?;
    tracing::info!(tenant_id = %id, ?rate, ?burst, "tenant ingest limit set by the platform operator");
    Ok(Json(tenant.into()))
}
