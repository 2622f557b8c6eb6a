//! A tenant's weight, for platform operators: among tenants whose deliveries
//! wait for a worker's slots, each gets slots in proportion to its weight
//! (default 1; `worker::slots`). Work-conserving: a weight only matters while
//! tenants compete; a tenant alone still gets every slot it may hold.
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

/// The largest weight: a hundred times a default tenant's share.
pub const MAX_WEIGHT: i64 = 100;

/// The tenant's weight.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WeightRequest {
    /// 1 (every tenant's default) to 100.
    #[schema(minimum = 1, maximum = 100)]
    weight: i64,
}

fn checked_weight(weight: i64) -> Result<i16, ValidationError> {
    if (1..=MAX_WEIGHT).contains(&weight) {
        Ok(weight as i16)
    } else {
        Err(ValidationError::new("weight", format!("{weight} is out of range: use 1 to {MAX_WEIGHT}")))
    }
}

/// Sets the tenant's weight. Workers apply it within
/// `worker::weights::REFRESH` (5 s).
#[utoipa::path(
    put, path = "/admin/v1/tenants/{tenant_id}/weight", tag = "admin",
    params(("tenant_id" = TenantId, Path, description = "The tenant (`ten_…`)")),
    request_body = WeightRequest,
    security(("admin" = [])),
    responses(
        (status = 200, description = "The tenant with its new weight", body = TenantView),
        (status = 404, description = "No such tenant"),
        (status = 422, description = "Below 1 or above 100")
    )
)]
pub async fn set_weight(
    State(state): State<ApiState>,
    _admin: PlatformAdmin,
    Path(tenant_id): Path<String>,
    ApiJson(body): ApiJson<WeightRequest>,
) -> Result<Json<TenantView>, ApiError> {
    let id: TenantId = parse_path_id(&tenant_id)?;
    let weight = checked_weight(body.weight)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let tenant = tenants::set_weight(&client, id, weight).await?.ok_or(ApiError::NotFound("tenant"))?;
    tracing::info!(tenant_id = %id, weight, "tenant weight set by the platform operator");
    Ok(Json(tenant.into()))
}

#[cfg(test)]
mod tests {
    use super::checked_weight;

    #[test]
    fn a_weight_is_one_to_a_hundred() {
        assert_eq!(checked_weight(1).unwrap(), 1);
        assert_eq!(checked_weight(100).unwrap(), 100);
        for refused in [0, -1, 101, i64::MAX] {
            let error = checked_weight(refused).unwrap_err();
            assert!(error.to_string().contains("weight"), "{error}");
        }
    }
}
