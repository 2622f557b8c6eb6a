//! The platform operator credential: `Authorization: Bearer <admin token>`,
//! checked against the configured hash in constant time. Tenant API keys and
//! login tokens are never accepted here (and the admin token is no tenant
//! credential: tenant routes refuse it as they refuse any unknown token).
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use relayops_shared::api::{bearer, ApiError, ApiState};
use relayops_shared::auth::admin;

/// A request made with the platform admin token.
#[derive(Debug, Clone, Copy)]
pub struct PlatformAdmin;

impl FromRequestParts<ApiState> for PlatformAdmin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Self::Rejection> {
        let expected = state.admin_token_sha256.as_ref().ok_or_else(|| {
            ApiError::Forbidden(
                "the admin API is not enabled on this installation (RELAYOPS_ADMIN_TOKEN_SHA256)".into(),
            )
        })?;
        let presented = bearer(parts).ok_or(ApiError::Unauthorized)?;
        if admin::matches(presented, expected) {
            Ok(Self)
        } else {
            tracing::warn!("admin API request with a wrong credential");
            Err(ApiError::Unauthorized)
        }
    }
}
