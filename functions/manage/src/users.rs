//! A tenant's people: `GET /v1/users`, `POST /v1/users` (email, password,
//! role `admin` or `viewer`), `PATCH /v1/users/{id}` (the role) and
//! `DELETE /v1/users/{id}`, for the tenant's admins. Removing a user ends
//! every session of theirs at once (their sessions go with the row), and a
//! demotion takes effect on their next request (roles are read per
//! request). A tenant always keeps one admin: the last one cannot be removed
//! or demoted (409), checked with the tenant's admins locked, so two
//! concurrent removals cannot leave none.
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use relayops_shared::api::{parse_path_id, ApiError, ApiJson, ApiState, Authenticated, NoQuery};
use relayops_shared::auth::password::hash_password_blocking;
use relayops_shared::auth::Scope;
use relayops_shared::db::DbError;
use relayops_shared::domain::account::{checked_email, checked_password};
use relayops_shared::domain::ValidationError;
use relayops_shared::ids::{TenantId, UserId};
use relayops_shared::repo::tenants::{self, NewUser};
use relayops_shared::repo::users::{self, UserRecord};
use relayops_shared::repo::GenericClient;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A user as the tenant's admins see them (never a password).
#[derive(Debug, Serialize, ToSchema)]
pub struct UserView {
    id: UserId,
    email: String,
    /// `admin` (may change things) or `viewer` (reads only).
    role: String,
    created_at: DateTime<Utc>,
    last_login_at: Option<DateTime<Utc>>,
}

impl From<UserRecord> for UserView {
    fn from(user: UserRecord) -> Self {
        Self {
            id: user.id,
            email: user.email,
            role: user.role,
            created_at: user.created_at,
            last_login_at: user.last_login_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UserList {
    data: Vec<UserView>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUserRequest {
    #[schema(format = Email, max_length = 320)]
    email: String,
    /// 10 to 1024 characters.
    #[schema(min_length = 10, max_length = 1024)]
    password: String,
    /// `admin` or `viewer` (the default).
    #[serde(default)]
    role: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateUserRequest {
    /// `admin` or `viewer`.
    role: String,
}

fn checked_role(role: &str) -> Result<&'static str, ValidationError> {
    match role {
        "admin" => Ok("admin"),
        "viewer" => Ok("viewer"),
        other => Err(ValidationError::new("role", format!("`{other}`: use \"admin\" or \"viewer\""))),
    }
}

/// The tenant's users.
#[utoipa::path(
    get, path = "/v1/users", tag = "identity",
    security(("bearer" = [])),
    responses((status = 200, description = "The tenant's users, oldest first", body = UserList))
)]
pub async fn list(
    State(state): State<ApiState>,
    caller: Authenticated,
    _: NoQuery,
) -> Result<Json<UserList>, ApiError> {
    caller.require(Scope::Admin)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let data = users::list_users(&client, caller.tenant_id).await?.into_iter().map(UserView::from).collect();
    Ok(Json(UserList { data }))
}

/// Adds a person to the tenant; they sign in with this email and password.
#[utoipa::path(
    post, path = "/v1/users", tag = "identity", request_body = CreateUserRequest,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Created", body = UserView),
        (status = 409, description = "The email already has an account"),
        (status = 422, description = "A field breaks the rules")
    )
)]
pub async fn create(
    State(state): State<ApiState>,
    caller: Authenticated,
    ApiJson(request): ApiJson<CreateUserRequest>,
) -> Result<(StatusCode, Json<UserView>), ApiError> {
    caller.require(Scope::Admin)?;
    let email = checked_email(request.email.trim())?;
    checked_password(&request.password)?;
    let role = checked_role(request.role.as_deref().unwrap_or("viewer"))?;
    let password_hash = hash_password_blocking(request.password).await.map_err(ApiError::internal)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let user = NewUser { email, password_hash: &password_hash, role };
    let id = match tenants::insert_user(&client, caller.tenant_id, &user).await {
        Ok(id) => id,
        Err(DbError::UniqueViolation { .. }) => {
            return Err(ApiError::Conflict("this email already has an account".into()));
        }
        Err(other) => return Err(other.into()),
    };
    tracing::info!(tenant_id = %caller.tenant_id, user_id = %id, role, "user added");
    let created = users::get_user(&client, caller.tenant_id, id).await?.ok_or(ApiError::NotFound("user"))?;
    Ok((StatusCode::CREATED, Json(created.into())))
}

/// Refuses (409) to `what` the tenant's last admin: its admins are locked
/// until `tx` ends, so two changes at once cannot leave it with none.
async fn keep_an_admin(tx: &impl GenericClient, tenant: TenantId, user: UserId, what: &str) -> Result<(), ApiError> {
    if users::lock_admins(tx, tenant).await? == [user] {
        return Err(ApiError::Conflict(format!(
            "the tenant's last admin cannot be {what}; make another user admin first"
        )));
    }
    Ok(())
}

/// Changes a user's role (in effect on their next request).
#[utoipa::path(
    patch, path = "/v1/users/{user_id}", tag = "identity", request_body = UpdateUserRequest,
    params(("user_id" = String, Path, description = "The user's id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Changed", body = UserView),
        (status = 404, description = "No such user in this tenant"),
        (status = 409, description = "The tenant's last admin cannot be demoted")
    )
)]
pub async fn update(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(user_id_text): Path<String>,
    ApiJson(request): ApiJson<UpdateUserRequest>,
) -> Result<Json<UserView>, ApiError> {
    caller.require(Scope::Admin)?;
    let id: UserId = parse_path_id(&user_id_text)?;
    let role = checked_role(&request.role)?;
    let mut client = state.pool.get().await.map_err(DbError::from)?;
    let tx = client.transaction().await.map_err(DbError::from)?;
    if role != "admin" {
        keep_an_admin(&tx, caller.tenant_id, id, "demoted").await?;
    }
    let user = users::set_role(&tx, caller.tenant_id, id, role).await?.ok_or(ApiError::NotFound("user"))?;
    tx.commit().await.map_err(DbError::from)?;
    tracing::info!(tenant_id = %caller.tenant_id, user_id = %id, role, "user role changed");
    Ok(Json(user.into()))
}

/// Removes a user: every session of theirs ends at once.
#[utoipa::path(
    delete, path = "/v1/users/{user_id}", tag = "identity",
    params(("user_id" = String, Path, description = "The user's id")),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Removed; their sessions have ended"),
        (status = 404, description = "No such user in this tenant"),
        (status = 409, description = "The tenant's last admin cannot be removed")
    )
)]
pub async fn remove(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(user_id_text): Path<String>,
) -> Result<StatusCode, ApiError> {
    caller.require(Scope::Admin)?;
    let id: UserId = parse_path_id(&user_id_text)?;
    let mut client = state.pool.get().await.map_err(DbError::from)?;
    let tx = client.transaction().await.map_err(DbError::from)?;
    keep_an_admin(&tx, caller.tenant_id, id, "removed").await?;
    if !users::delete_user(&tx, caller.tenant_id, id).await? {
        return Err(ApiError::NotFound("user"));
    }
    tx.commit().await.map_err(DbError::from)?;
    tracing::info!(tenant_id = %caller.tenant_id, user_id = %id, "user removed");
    Ok(StatusCode::NO_CONTENT)
}
