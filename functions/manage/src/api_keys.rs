//! API keys: create (the secret is shown once), list (prefix, name, scopes,
//! created, last used, revoked — never the secret), revoke.
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use relayops_shared::api::{parse_path_id, ApiError, ApiJson, ApiState, Authenticated, Principal};
use relayops_shared::auth::{ApiKeySecret, Scope};
use relayops_shared::db::DbError;
use relayops_shared::domain::ValidationError;
use relayops_shared::ids::ApiKeyId;
use relayops_shared::repo::api_keys::{self, NewApiKey};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateKeyRequest {
    name: String,
    scopes: Vec<String>,
}

pub async fn create(
    State(state): State<ApiState>,
    caller: Authenticated,
    ApiJson(request): ApiJson<CreateKeyRequest>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
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
        Json(json!({ "id": id, "name": name, "prefix": secret.prefix(), "scopes": scopes, "key": secret.expose() })),
    ))
}

pub async fn list(State(state): State<ApiState>, caller: Authenticated) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::Admin)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let keys = api_keys::list_api_keys(&client, caller.tenant_id).await?;
    let data: Vec<Value> = keys
        .into_iter()
        .map(|key| {
            json!({
                "id": key.id, "name": key.name, "prefix": key.prefix, "scopes": key.scopes,
                "created_at": key.created_at, "last_used_at": key.last_used_at, "revoked_at": key.revoked_at,
            })
        })
        .collect();
    Ok(Json(json!({ "data": data })))
}

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
