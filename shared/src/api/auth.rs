//! Resolves the caller's tenant from `Authorization: Bearer <api key>`. No route
//! takes a tenant id from the client: it only ever comes from here.
use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::{ApiError, ApiState};
use crate::auth::{ApiKeySecret, Scope};
use crate::ids::{ApiKeyId, TenantId};
use crate::repo::api_keys;

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Authenticated {
    pub tenant_id: TenantId,
    pub key_id: ApiKeyId,
    pub scopes: Vec<Scope>,
    /// The tenant's own ingest limit (requests/s, burst), if it has one.
    pub ingest_limit: (Option<i32>, Option<i32>),
}

impl Authenticated {
    /// Admin keys may do everything; others need the named scope.
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.scopes.contains(&Scope::Admin) || self.scopes.contains(&scope) {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!("this API key lacks the `{}` scope", scope.as_str())))
        }
    }
}

impl FromRequestParts<ApiState> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Self::Rejection> {
        let presented = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .and_then(|token| ApiKeySecret::from_presented(token.trim()))
            .ok_or(ApiError::Unauthorized)?;
        let client = state.pool.get().await.map_err(crate::db::DbError::from)?;
        let key = api_keys::verify(&client, &presented).await?.ok_or(ApiError::Unauthorized)?;
        drop(client);
        // Bookkeeping only: never delays or fails the request.
        let pool = state.pool.clone();
        let (tenant, id) = (key.tenant_id, key.id);
        tokio::spawn(async move {
            if let Ok(client) = pool.get().await {
                let _ = api_keys::touch_last_used(&client, tenant, id).await;
            }
        });
        Ok(Self {
            tenant_id: key.tenant_id,
            key_id: key.id,
            scopes: key.scopes,
            ingest_limit: (key.ingest_rate_per_sec, key.ingest_burst),
        })
    }
}
