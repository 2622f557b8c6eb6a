//! A tenant's retention, for platform operators: how many days of its
//! finished history (terminal deliveries, their attempts and events) are
//! kept, at most the platform default (`RELAYOPS_RETENTION_DAYS`). The
//! publisher's history maintenance (`repo::retention`) removes older rows in
//! bounded batches; `null` goes back to the platform default.
use axum::extract::{Path, State};
use axum::Json;
use relayops_shared::api::{parse_path_id, ApiError, ApiJson, ApiState};
use relayops_shared::db::DbError;
use relayops_shared::domain::ValidationError;
use relayops_shared::ids::TenantId;
use relayops_shared::repo::tenants;
use serde::Deserialize;
use utoipa::ToSchema;

use crate::credential::PlatformAdmin;
use crate::tenants::TenantView;

/// The tenant's retention; `null` (or absent) means the platform default.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetentionRequest {
    /// Days of finished history kept: 1 to the platform default.
    #[serde(default)]
    #[schema(minimum = 1)]
    retention_days: Option<i32>,
}

/// A shorter retention only: the platform's partitions are dropped after
/// its own default, so a longer one could not be honoured.
fn checked_days(days: Option<i32>, platform_days: i64) -> Result<Option<i32>, ValidationError> {
    match days {
        Some(days) if days < 1 => Err(ValidationError::new("retention_days", "must be at least 1")),
        Some(days) if i64::from(days) > platform_days => Err(ValidationError::new(
            "retention_days",
            format!(
                "{days} is above the platform default of {platform_days} days (RELAYOPS_RETENTION_DAYS): \
                 a tenant's retention can only be shorter"
            ),
        )),
        other => Ok(other),
    }
}

/// Sets the tenant's retention (replacing it; `null` goes back to the
/// platform default). Rows older than it go at the next history maintenance.
#[utoipa::path(
    put, path = "/admin/v1/tenants/{tenant_id}/retention", tag = "admin",
    params(("tenant_id" = TenantId, Path, description = "The tenant (`ten_…`)")),
    request_body = RetentionRequest,
    security(("admin" = [])),
    responses(
        (status = 200, description = "The tenant with its new retention", body = TenantView),
        (status = 404, description = "No such tenant"),
        (status = 422, description = "Below 1 day, or above the platform default")
    )
)]
pub async fn set_retention(
    State(state): State<ApiState>,
    _admin: PlatformAdmin,
    Path(tenant_id): Path<String>,
    ApiJson(body): ApiJson<RetentionRequest>,
) -> Result<Json<TenantView>, ApiError> {
    let id: TenantId = parse_path_id(&tenant_id)?;
    let platform_days = (state.platform_retention.as_secs() / 86_400) as i64;
    let days = checked_days(body.retention_days, platform_days)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let tenant = tenants::set_retention(&client, id, days).await?.ok_or(ApiError::NotFound("tenant"))?;
    tracing::info!(tenant_id = %id, ?days, "tenant retention set by the platform operator");
    Ok(Json(tenant.into()))
}

#[cfg(test)]
mod tests {
    use super::checked_days;

    #[test]
    fn a_retention_is_one_day_to_the_platform_default_or_cleared() {
        assert_eq!(checked_days(Some(1), 30).unwrap(), Some(1));
        assert_eq!(checked_days(Some(30), 30).unwrap(), Some(30));
        assert_eq!(checked_days(None, 30).unwrap(), None);
        assert!(checked_days(Some(0), 30).is_err());
        assert!(checked_days(Some(31), 30).unwrap_err().to_string().contains("above the platform default"));
    }
}
