//! Signing in: email and password → a login token naming a login session
//! kept server-side (`repo::login_sessions`). A login is checked in the order
//! that costs a guesser most and the server least: the field sizes (422,
//! before anything else), the throttle (429 per account from one address,
//! per address, and per account from every address unless the browser signed
//! in to it before; see [`super::login_throttle`]), and only then the
//! password hash. The manage function's `POST /v1/auth/login` and the
//! console's sign-in form both call [`log_in`].
use std::net::IpAddr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::login_throttle::{account_key, Admitted, LoginSource};
use super::{ApiError, ApiState};
use crate::auth::password::{decoy_hash, verify_password_blocking};
use crate::db::DbError;
use crate::domain::account::presented_password;
use crate::domain::ValidationError;
use crate::ids::{TenantId, UserId};
use crate::repo::login_sessions::{self, SessionLimits};
use crate::repo::users;

const BAD_LOGIN: &str = "invalid email or password";

/// What a login may present: bounded before any lookup or hashing.
fn login_fields(request: &LoginRequest) -> Result<(), ValidationError> {
    if request.email.is_empty() || request.email.len() > 320 {
        return Err(ValidationError::new("email", "must be 1 to 320 bytes"));
    }
    presented_password("password", &request.password)?;
    Ok(())
}

/// Counts a sign-in attempt at `email` up front, when the installation
/// throttles them (see [`super::login_throttle`]); 429 when refused.
pub(super) async fn admit<'a>(
    state: &'a ApiState,
    email: &str,
    source: LoginSource,
) -> Result<Option<Admitted<'a>>, ApiError> {
    match &state.login_throttle {
        Some(throttle) => Ok(Some(throttle.admit(email, source).await?)),
        None => Ok(None),
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    #[schema(format = Email, max_length = 320)]
    email: String,
    /// At most 1024 characters (longer is 422, before any check).
    #[schema(min_length = 1, max_length = 1024)]
    password: String,
    /// A known-device token the browser presented (the console's cookie;
    /// see `auth::device`), never part of the JSON body.
    #[serde(skip)]
    device: Option<String>,
}

impl LoginRequest {
    /// A login as a form other than the API's JSON body supplies it (the
    /// console's), with the known-device token its browser holds, if any.
    pub fn new(email: String, password: String, device: Option<String>) -> Self {
        Self { email, password, device }
    }
}

/// A login token: send it as `Authorization: Bearer <token>`. It works until
/// `expires_at`, or until its session ends first (sign-out, "sign out
/// everywhere", or unused for the installation's idle timeout).
#[derive(Debug, Serialize, ToSchema)]
pub struct LoginResponse {
    token: String,
    /// Always `Bearer`.
    token_type: &'static str,
    expires_at: DateTime<Utc>,
    tenant_id: TenantId,
    user_id: UserId,
}

impl LoginResponse {
    pub fn token(&self) -> &str {
        &self.token
    }

    pub fn expires_at(&self) -> DateTime<Utc> {
        self.expires_at
    }
}

/// Signs a user in (see the module); the token and when it ends.
pub async fn log_in(
    state: &ApiState,
    address: Option<IpAddr>,
    request: LoginRequest,
) -> Result<LoginResponse, ApiError> {
    let keys = state
        .jwt
        .clone()
        .ok_or_else(|| ApiError::Forbidden("login is not enabled on this installation (RELAYOPS_JWT_SECRET)".into()))?;
    login_fields(&request)?;
    let known_device = request
        .device
        .as_deref()
        .is_some_and(|token| keys.devices().recognises(token, &account_key(&request.email), Utc::now().timestamp()));
    let admitted = admit(state, &request.email, LoginSource { address, known_device }).await?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let candidate = users::find_by_email(&client, &request.email).await?;
    // Unknown emails cost the same hash check as known ones.
    let stored = candidate.as_ref().map(|c| c.password_hash.clone()).unwrap_or_else(|| decoy_hash().to_owned());
    let matches = verify_password_blocking(request.password, stored).await;
    let Some(user) = candidate.filter(|_| matches) else {
        tracing::info!("login refused");
        return Err(ApiError::Unauthenticated(BAD_LOGIN.into()));
    };
    if let Some(admitted) = admitted {
        admitted.succeeded().await;
    }
    users::touch_login(&client, user.tenant_id, user.id).await?;
    let limits = SessionLimits { idle: keys.idle(), lifetime: keys.lifetime() };
    let (session, expires_at) = login_sessions::start(&client, user.tenant_id, user.id, limits).await?;
    let token = keys.issue(user.id, user.tenant_id, &user.role, session, expires_at).map_err(ApiError::internal)?;
    tracing::info!(tenant_id = %user.tenant_id, user_id = %user.id, "login");
    Ok(LoginResponse { token, token_type: "Bearer", expires_at, tenant_id: user.tenant_id, user_id: user.id })
}
