//! A signed-in user changes their own password (the current one, then the
//! new one): manage's `POST /v1/auth/password` and the console's account
//! page. The change ends every other session of the user at once — a
//! browser left signed in elsewhere, a copied token — and keeps the one it
//! was made in. The current password is checked
//! through the sign-in throttle (so a stolen session cannot guess it at
//! leisure), the new one by the account rules (10 to 1024 characters).
use std::net::IpAddr;

use serde::Deserialize;
use utoipa::ToSchema;

use super::login_throttle::LoginSource;
use super::{session_owner, ApiError, ApiState};
use crate::auth::password::{hash_password_blocking, verify_password_blocking};
use crate::db::DbError;
use crate::domain::account::{checked_password, presented_password};
use crate::repo::{login_sessions, users};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PasswordChange {
    #[schema(min_length = 1, max_length = 1024)]
    current_password: String,
    /// 10 to 1024 characters.
    #[schema(min_length = 10, max_length = 1024)]
    new_password: String,
}

impl PasswordChange {
    pub fn new(current_password: String, new_password: String) -> Self {
        Self { current_password, new_password }
    }
}

/// Changes the password of the user whose live session `token` names, and
/// ends their other sessions; how many ended. 403 when the current password
/// is wrong, 422 when the new one breaks the rules, 429 when throttled.
pub async fn change_password(
    state: &ApiState,
    token: &str,
    address: Option<IpAddr>,
    change: PasswordChange,
) -> Result<u64, ApiError> {
    let owner = session_owner(state, token).await?;
    presented_password("current_password", &change.current_password)?;
    checked_password(&change.new_password).map_err(|mut error| {
        error.field = "new_password";
        error
    })?;
    let mut client = state.pool.get().await.map_err(DbError::from)?;
    let (email, stored) = users::credentials(&client, owner.tenant, owner.user).await?.ok_or(ApiError::Unauthorized)?;
    // A live session is a better proof of the browser than a device cookie.
    let source = LoginSource { address, known_device: true };
    let admitted = super::login::admit(state, &email, source).await?;
    if !verify_password_blocking(change.current_password, stored).await {
        tracing::info!(tenant_id = %owner.tenant, user_id = %owner.user, "password change refused");
        return Err(ApiError::Forbidden("the current password is wrong".into()));
    }
    if let Some(admitted) = admitted {
        admitted.succeeded().await;
    }
    let hashed = hash_password_blocking(change.new_password).await.map_err(ApiError::internal)?;
    let tx = client.transaction().await.map_err(DbError::from)?;
    users::set_password_hash(&tx, owner.tenant, owner.user, &hashed).await?;
    let ended = login_sessions::end_all_but(&tx, owner.tenant, owner.user, owner.session).await?;
    tx.commit().await.map_err(DbError::from)?;
    tracing::info!(tenant_id = %owner.tenant, user_id = %owner.user, ended, "password changed");
    Ok(ended)
}
