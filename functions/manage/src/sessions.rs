//! `POST /v1/auth/login` (email + password → a login token naming a login
//! session kept server-side, `repo::login_sessions`), `POST /v1/auth/logout`
//! and `POST /v1/auth/logout-everywhere` (the token's session, or all of its
//! user's, end at once: every request with them is refused from then on), and
//! `POST /v1/bootstrap` (the one-time token from the environment → the first
//! tenant, its admin and an API key). A login itself is
//! `relayops_shared::api::login::log_in`, which the console's sign-in calls too.
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::Json;
use relayops_shared::api::login::{log_in, LoginRequest, LoginResponse};
use relayops_shared::api::{bearer, end_sessions, ApiError, ApiJson, ApiState, ClientAddress};
use relayops_shared::auth::token_hash;
use relayops_shared::auth::ApiKeySecret;
use relayops_shared::bootstrap::{bootstrap_with_token, BootstrapError, BootstrapRequest};
use relayops_shared::domain::account::{checked_email, checked_password};
use relayops_shared::domain::ValidationError;
use relayops_shared::ids::{ApiKeyId, TenantId, UserId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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
    Ok(Json(log_in(&state, address, request).await?))
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
