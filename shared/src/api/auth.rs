//! Resolves the caller and its tenant from `Authorization: Bearer <credential>`:
//! an API key (`rk_live_…`) or a user's login token (JWT). No route takes a
//! tenant id from the client: it only ever comes from here.
use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::{ApiError, ApiState};
use crate::auth::{ApiKeySecret, Scope};
use crate::db::DbError;
use crate::ids::{ApiKeyId, TenantId, UserId};
use crate::repo::users::UserPrincipal;
use crate::repo::{api_keys, login_sessions};

/// Who is calling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Principal {
    ApiKey(ApiKeyId),
    User(UserId),
}

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Authenticated {
    pub tenant_id: TenantId,
    pub principal: Principal,
    pub scopes: Vec<Scope>,
    /// The tenant's own ingest limit (requests/s, burst), if it has one.
    pub ingest_limit: (Option<i32>, Option<i32>),
    /// The platform operator suspended the tenant: ingest answers 403.
    pub tenant_suspended: bool,
}

impl Authenticated {
    /// Admin keys may do everything; others need the named scope.
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.scopes.contains(&Scope::Admin) || self.scopes.contains(&scope) {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!("these credentials lack the `{}` scope", scope.as_str())))
        }
    }
}

/// The token of an `Authorization: Bearer …` header (scheme case-insensitive).
pub fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

impl FromRequestParts<ApiState> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Self::Rejection> {
        let token = bearer(parts).ok_or(ApiError::Unauthorized)?;
        if let Some(key) = ApiKeySecret::from_presented(token) {
            return by_api_key(state, &key).await;
        }
        by_login_token(state, token).await
    }
}

async fn by_api_key(state: &ApiState, presented: &ApiKeySecret) -> Result<Authenticated, ApiError> {
    let key = match state.api_keys.get(presented) {
        Some(key) => key,
        None => {
            let client = state.pool.get().await.map_err(DbError::from)?;
            let key = api_keys::verify(&client, presented).await?.ok_or(ApiError::Unauthorized)?;
            state.api_keys.put(presented, &key);
            key
        }
    };
    // Bookkeeping only, at most once a minute per key: never delays or fails
    // the request, and adds no statement to the common request.
    if key.last_used_stale {
        let pool = state.pool.clone();
        let (tenant, id) = (key.tenant_id, key.id);
        tokio::spawn(async move {
            if let Ok(client) = pool.get().await {
                let _ = api_keys::touch_last_used(&client, tenant, id).await;
            }
        });
    }
    Ok(Authenticated {
        tenant_id: key.tenant_id,
        principal: Principal::ApiKey(key.id),
        scopes: key.scopes,
        ingest_limit: (key.ingest_rate_per_sec, key.ingest_burst),
        tenant_suspended: key.tenant_suspended,
    })
}

/// A user's login token (the console's session cookie holds one) → the caller,
/// exactly as `Authorization: Bearer <token>` would resolve it.
pub async fn by_login_token(state: &ApiState, token: &str) -> Result<Authenticated, ApiError> {
    let (owner, user) = live_session(state, token).await?;
    // The role is read from the database, so a demotion takes effect at once.
    let scopes = match user.role.as_str() {
        "admin" => vec![Scope::Admin],
        _ => Vec::new(),
    };
    Ok(Authenticated {
        tenant_id: owner.tenant,
        principal: Principal::User(owner.user),
        scopes,
        ingest_limit: (user.ingest_rate_per_sec, user.ingest_burst),
        tenant_suspended: user.tenant_suspended,
    })
}

/// Whose live login session a token names.
#[derive(Debug, Clone, Copy)]
pub struct SessionOwner {
    pub tenant: TenantId,
    pub user: UserId,
    pub session: uuid::Uuid,
}

/// The owner of the session `token` names and its user, if the session is
/// live (not signed out, not idle past its timeout, not past its lifetime)
/// and its user still exists; 401 otherwise.
async fn live_session(state: &ApiState, token: &str) -> Result<(SessionOwner, UserPrincipal), ApiError> {
    let keys = state.jwt.as_ref().ok_or(ApiError::Unauthorized)?;
    let claims = keys.verify(token).map_err(|_| ApiError::Unauthorized)?;
    let owner =
        SessionOwner { tenant: claims.tid, user: claims.sub, session: claims.sid.ok_or(ApiError::Unauthorized)? };
    let client = state.pool.get().await.map_err(DbError::from)?;
    let user = login_sessions::live_principal(&client, owner.tenant, owner.user, owner.session, keys.idle())
        .await?
        .ok_or(ApiError::Unauthorized)?;
    Ok((owner, user))
}

/// The owner of the live login session `token` names (401 if it is not live).
pub async fn session_owner(state: &ApiState, token: &str) -> Result<SessionOwner, ApiError> {
    Ok(live_session(state, token).await?.0)
}

/// Ends the live login session `token` names (a sign-out), or every live
/// session of its user (`everywhere`); how many ended. A token whose session
/// has ended already is refused as any request with it is (401).
pub async fn end_sessions(state: &ApiState, token: &str, everywhere: bool) -> Result<u64, ApiError> {
    let (owner, _) = live_session(state, token).await?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let ended = match everywhere {
        true => login_sessions::end_all(&client, owner.tenant, owner.user).await?,
        false => u64::from(login_sessions::end(&client, owner.tenant, owner.user, owner.session).await?),
    };
    tracing::info!(tenant_id = %owner.tenant, user_id = %owner.user, ended, everywhere, "signed out");
    Ok(ended)
}
