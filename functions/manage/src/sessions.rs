//! `POST /v1/auth/login` (email + password → a login token naming a login
//! session kept server-side, `repo::login_sessions`), `POST /v1/auth/logout`
//! and `POST /v1/auth/logout-everywhere` (the token's session, or all of its
//! user's, end at once: every request with them is refused from then on), and
//! `POST /v1/bootstrap` (the one-time token from the environment → the first
//! tenant, its admin and an API key). A login is checked in the order that
//! costs a guesser most and the server least: the field sizes (422, before
//! anything else), the throttle (429 per account from one address, per
//! address, and per account from every address unless the browser signed in
//! to it before; see `api::login_throttle`), and only then the password hash.
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use relayops_shared::api::login_throttle::{account_key, LoginSource};
use relayops_shared::api::{bearer, end_sessions, ApiError, ApiJson, ApiState, ClientAddress};
use relayops_shared::auth::password::{decoy_hash, verify_password_blocking};
use relayops_shared::auth::token_hash;
use relayops_shared::auth::ApiKeySecret;
use relayops_shared::bootstrap::{bootstrap_with_token, BootstrapError, BootstrapRequest};
use relayops_shared::db::DbError;
use relayops_shared::domain::ValidationError;
use relayops_shared::ids::{ApiKeyId, TenantId, UserId};
use relayops_shared::repo::login_sessions::{self, SessionLimits};
use relayops_shared::repo::users;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

const BAD_LOGIN: &str = "invalid email or password";

pub fn checked_email(email: &str) -> Result<&str, ValidationError> {
    let valid = (3..=320).contains(&email.len())
        && email.split_once('@').is_some_and(|(user, domain)| !user.is_empty() && domain.contains('.'))
        && !email.chars().any(char::is_whitespace);
    valid.then_some(email).ok_or_else(|| ValidationError::new("email", "must be an email address"))
}

/// What a login may present: bounded before any lookup or hashing (a 1 MB
/// password took 1.9 s of Argon2).
fn login_fields(request: &LoginRequest) -> Result<(), ValidationError> {
    if request.email.is_empty() || request.email.len() > 320 {
        return Err(ValidationError::new("email", "must be 1 to 320 bytes"));
    }
    if request.password.is_empty() || request.password.chars().count() > MAX_PASSWORD_CHARS {
        return Err(ValidationError::new("password", format!("must be 1 to {MAX_PASSWORD_CHARS} characters")));
    }
    Ok(())
}

const MAX_PASSWORD_CHARS: usize = 1024;

pub fn checked_password(password: &str) -> Result<&str, ValidationError> {
    match password.chars().count() {
        10..=MAX_PASSWORD_CHARS => Ok(password),
        _ => Err(ValidationError::new("password", format!("must be 10 to {MAX_PASSWORD_CHARS} characters"))),
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

/// Exchanges a user's email and password for a short-lived token.
#[utoipa::path(
    post, path = "/v1/auth/login", tag = "identity", request_body = LoginRequest,
    responses(
        (status = 200, description = "Logged in", body = LoginResponse),
        (status = 401, description = "Wrong email or password"),
        (status = 403, description = "Login is not enabled on this installation"),
        (status = 422, description = "The email or password is too long (or empty)"),
        (status = 429, description = "Too many failed logins for this account from this address, from this address, or for this account from everywhere (see `Retry-After`), whatever the password")
    )
)]
pub async fn login(
    State(state): State<ApiState>,
    ClientAddress(address): ClientAddress,
    ApiJson(request): ApiJson<LoginRequest>,
) -> Result<Json<LoginResponse>, ApiError> {
    let keys = state
        .jwt
        .clone()
        .ok_or_else(|| ApiError::Forbidden("login is not enabled on this installation (RELAYOPS_JWT_SECRET)".into()))?;
    login_fields(&request)?;
    let known_device = request
        .device
        .as_deref()
        .is_some_and(|token| keys.devices().recognises(token, &account_key(&request.email), Utc::now().timestamp()));
    let admitted = match &state.login_throttle {
        Some(throttle) => Some(throttle.admit(&request.email, LoginSource { address, known_device }).await?),
        None => None,
    };
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
    Ok(Json(LoginResponse { token, token_type: "Bearer", expires_at, tenant_id: user.tenant_id, user_id: user.id }))
}

/// The login token a request presents (`Authorization: Bearer`); an API key
/// has no session to end (401).
pub struct LoginSession(pub String);

impl FromRequestParts<ApiState> for LoginSession {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &ApiState) -> Result<Self, Self::Rejection> {
        let token = bearer(parts).ok_or(ApiError::Unauthorized)?;
        if ApiKeySecret::from_presented(token).is_some() {
            return Err(ApiError::Unauthenticated("an API key has no session to end; revoke the key instead".into()));
        }
        Ok(Self(token.to_owned()))
    }
}

/// Ends the session of the login token presented: from now on it is refused
/// everywhere (the console's cookie holding it too).
#[utoipa::path(
    post, path = "/v1/auth/logout", tag = "identity",
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Signed out: the token no longer works"),
        (status = 401, description = "No live login session: no token, an API key, or a session that has ended")
    )
)]
pub async fn logout(State(state): State<ApiState>, LoginSession(token): LoginSession) -> Result<StatusCode, ApiError> {
    end_sessions(&state, &token, false).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Ends every live session of the token's user (this one included), in every
/// browser and client: signing out everywhere.
#[utoipa::path(
    post, path = "/v1/auth/logout-everywhere", tag = "identity",
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Every session of the user ended"),
        (status = 401, description = "No live login session: no token, an API key, or a session that has ended")
    )
)]
pub async fn logout_everywhere(
    State(state): State<ApiState>,
    LoginSession(token): LoginSession,
) -> Result<StatusCode, ApiError> {
    end_sessions(&state, &token, true).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The first tenant, from the installation's one-time bootstrap token.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BootstrapBody {
    /// `RELAYOPS_BOOTSTRAP_TOKEN`.
    token: String,
    tenant_name: String,
    #[schema(format = Email)]
    admin_email: String,
    #[schema(min_length = 10, max_length = 1024)]
    admin_password: String,
}

/// The tenant, its admin and an admin API key (shown only here).
#[derive(Debug, Serialize, ToSchema)]
pub struct BootstrapResponse {
    tenant_id: TenantId,
    user_id: UserId,
    api_key_id: ApiKeyId,
    /// The key itself (`rk_live_…`); it is not shown again.
    api_key: String,
}

/// Creates the first tenant with the one-time bootstrap token (404 when the
/// installation has none).
#[utoipa::path(
    post, path = "/v1/bootstrap", tag = "identity", request_body = BootstrapBody,
    responses(
        (status = 201, description = "Created", body = BootstrapResponse),
        (status = 401, description = "Wrong bootstrap token"),
        (status = 404, description = "No bootstrap token is configured"),
        (status = 409, description = "The token was already used")
    )
)]
pub async fn bootstrap(
    State(state): State<ApiState>,
    ApiJson(body): ApiJson<BootstrapBody>,
) -> Result<(StatusCode, Json<BootstrapResponse>), ApiError> {
    let expected = state.bootstrap_token_hash.ok_or(ApiError::NotFound("route"))?;
    if !token_hash::matches(&body.token, &expected) {
        return Err(ApiError::Unauthenticated("invalid bootstrap token".into()));
    }
    let name = body.tenant_name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(ValidationError::new("tenant_name", "must be 1 to 200 characters").into());
    }
    let request = BootstrapRequest {
        tenant_name: name,
        admin_email: checked_email(&body.admin_email)?,
        admin_password: checked_password(&body.admin_password)?,
    };
    let created = match bootstrap_with_token(&state.pool, &expected, &request).await {
        Ok(created) => created,
        Err(BootstrapError::TokenUsed) => {
            return Err(ApiError::Conflict("this bootstrap token has already been used".into()))
        }
        Err(BootstrapError::Database(error)) => return Err(error.into()),
        Err(other) => return Err(ApiError::internal(other)),
    };
    tracing::info!(tenant_id = %created.tenant_id, "tenant bootstrapped");
    Ok((
        StatusCode::CREATED,
        Json(BootstrapResponse {
            tenant_id: created.tenant_id,
            user_id: created.user_id,
            api_key_id: created.api_key_id,
            api_key: created.api_key.expose().to_owned(),
        }),
    ))
}
