//! API keys: create (the secret is shown once), list (prefix, name, scopes,
//! created, last used, revoked — never the secret), revoke.
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use relayops_shared::api::{parse_path_id, ApiError, ApiJson, ApiState, Authenticated, NoQuery, Principal};
use relayops_shared::auth::{ApiKeySecret, Scope};
use relayops_shared::db::DbError;
use relayops_shared::domain::ValidationError;
use relayops_shared::ids::ApiKeyId;
use relayops_shared::repo::api_keys::{self, NewApiKey};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKeyRequest {
    #[schema(min_length = 1, max_length = 200)]
    name: String,
    /// `admin` and/or `ingest`.
    #[schema(min_items = 1, value_type = Vec<ScopeDoc>)]
    scopes: Vec<String>,
}

/// What an API key may do (`admin` includes `ingest`).
#[derive(ToSchema)]
#[schema(as = Scope, rename_all = "snake_case")]
#[allow(dead_code)]
enum ScopeDoc {
    Admin,
    Ingest,
}

/// A new key; `key` is shown only in this answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedKeyView {
    id: ApiKeyId,
    name: String,
    prefix: String,
    scopes: Vec<&'static str>,
    /// The secret (`rk_live_…`): store it now, it is not shown again.
    key: String,
}

/// A key as listed: never its secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyView {
    id: ApiKeyId,
    name: String,
    prefix: String,
    scopes: Vec<String>,
    created_at: DateTime<Utc>,
    last_used_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct KeyList {
    data: Vec<KeyView>,
}

/// Creates an API key for the caller's tenant.
#[utoipa::path(
    post, path = "/v1/api-keys", tag = "identity", request_body = CreateKeyRequest,
    security(("bearer" = [])),
    responses((status = 201, description = "Created", body = CreatedKeyView))
)]

pub async fn create(
    State(state): State<ApiState>,
    caller: Authenticated,
    ApiJson(request): ApiJson<CreateKeyRequest>,
) -> Result<(StatusCode, Json<CreatedKeyView>), ApiError> {
    caller.require(Scope::Admin)?;
    let name = request.name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(ValidationError::new("name", "must be 1 to 200 characters").into());
    }
    let scopes: Vec<Scope> = request
        .scopes
        .iter()
        .map(|text| {
            Scope::parse(text)
                .ok_or_else(|| ValidationError::new("scopes", format!("`{text}`: use \"admin\" or \"ingest\"")))
        })
        .collect::<Result<_, _>>()?;
    if scopes.is_empty() {
        return Err(ValidationError::new("scopes", "must list at least one scope").into());
    }
    let secret = ApiKeySecret::generate();
    let created_by = match caller.principal {
        Principal::User(user) => Some(user),
        Principal::ApiKey(_) => None,
    };
    let client = state.pool.get().await.map_err(DbError::from)?;
    let key = NewApiKey { name, secret: &secret, scopes: &scopes, created_by };
    let id = api_keys::insert_api_key(&client, caller.tenant_id, &key).await?;
    tracing::info!(tenant_id = %caller.tenant_id, api_key_id = %id, "API key created");
    let scopes: Vec<&str> = scopes.iter().map(Scope::as_str).collect();
    Ok((
        StatusCode::CREATED,
        Json(CreatedKeyView {
            id,
            name: name.to_owned(),
            prefix: secret.prefix().to_owned(),
            scopes,
            key: secret.expose().to_owned(),
        }),
    ))
}

/// The tenant's API keys (revoked ones included).
#[utoipa::path(
    get, path = "/v1/api-keys", tag = "identity",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every key", body = KeyList),
        (status = 400, description = "A query parameter was given: this list takes none")
    )
)]
pub async fn list(State(state): State<ApiState>, caller: Authenticated, _: NoQuery) -> Result<Json<KeyList>, ApiError> {
    caller.require(Scope::Admin)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let keys = api_keys::list_api_keys(&client, caller.tenant_id).await?;
    let data = keys
        .into_iter()
        .map(|key| KeyView {
            id: key.id,
            name: key.name,
            prefix: key.prefix,
            scopes: key.scopes,
            created_at: key.created_at,
            last_used_at: key.last_used_at,
            revoked_at: key.revoked_at,
        })
        .collect();
    Ok(Json(KeyList { data }))
}

/// Revokes a key at once (idempotent).
#[utoipa::path(
    delete, path = "/v1/api-keys/{key_id}", tag = "identity",
    params(("key_id" = ApiKeyId, Path, description = "The key (`key_…`)")),
    security(("bearer" = [])),
    responses((status = 204, description = "Revoked"), (status = 404, description = "No such key"))
)]
pub async fn revoke(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(key_id): Path<String>,
) -> Result<StatusCode, ApiError> {
    caller.require(Scope::Admin)?;
    let id: ApiKeyId = parse_path_id(&key_id)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    if !api_keys::revoke_api_key(&client, caller.tenant_id, id).await? {
        return Err(ApiError::NotFound("API key"));
    }
    // Refused by this process at once; by others within the key cache's TTL.
    state.api_keys.forget(id);
    tracing::info!(tenant_id = %caller.tenant_id, api_key_id = %id, "API key revoked");
    Ok(StatusCode::NO_CONTENT)
}
