//! `POST /v1/auth/password` (`relayops_shared::api::account`): a signed-in
//! user changes their own password; every other session of theirs ends.
use axum::extract::State;
use axum::http::StatusCode;
use relayops_shared::api::account::{change_password, PasswordChange};
use relayops_shared::api::{ApiError, ApiJson, ApiState, ClientAddress};

use crate::sessions::LoginSession;

/// Changes the caller's password; every other session of theirs ends.
#[utoipa::path(
    post, path = "/v1/auth/password", tag = "identity", request_body = PasswordChange,
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Changed: every other session of the user has ended, this one goes on"),
        (status = 401, description = "No live login session (an API key has no password)"),
        (status = 403, description = "The current password is wrong"),
        (status = 422, description = "The new password breaks the rules (10 to 1024 characters)"),
        (status = 429, description = "Too many wrong current passwords (see `Retry-After`)")
    )
)]
pub async fn password(
    State(state): State<ApiState>,
    ClientAddress(address): ClientAddress,
    LoginSession(token): LoginSession,
    ApiJson(change): ApiJson<PasswordChange>,
) -> Result<StatusCode, ApiError> {
    change_password(&state, &token, address, change).await?;
    Ok(StatusCode::NO_CONTENT)
}
