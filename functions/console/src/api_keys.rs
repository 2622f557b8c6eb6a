//! `GET /console/api-keys`: the tenant's keys (prefix, name, scopes, use,
//! revocation — never a secret); creating one shows its secret once; revoking
//! takes effect at once in this process (and within the key cache's TTL in
//! others), as `DELETE /v1/api-keys/{id}` does.
use axum::extract::{Path, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::html;
use relayops_shared::api::{parse_path_id, ApiState, Principal};
use relayops_shared::auth::{ApiKeySecret, Scope};
use relayops_shared::db::DbError;
use relayops_shared::ids::ApiKeyId;
use relayops_shared::repo::api_keys::{self, NewApiKey};
use serde::Deserialize;

use crate::error::ConsoleError;
use crate::layout::{self, csrf_field, Section};
use crate::session::{ConsoleForm, NoFields, Session};

pub async fn list(State(state): State<ApiState>, session: Session) -> Result<Html<String>, ConsoleError> {
    session.require_admin()?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let keys = api_keys::list_api_keys(&client, session.tenant()).await?;
    let body = html! {
        form.card.create method="post" action="/console/api-keys" {
            h2 { "New API key" }
            (csrf_field(&session))
            label { "Name" input type="text" name="name" required maxlength="200" placeholder="billing service"; }
            label { "Scope"
                select name="scope" {
                    option value="ingest" { "ingest (post events)" }
                    option value="admin" { "admin (everything)" }
                }
            }
            button type="submit" { "Create key" }
        }
        div.scroll {
            table {
                thead { tr { th { "Name" } th { "Prefix" } th { "Scopes" } th { "Created" } th { "Last used" } th { "" } } }
                tbody {
                    @for key in &keys {
                        tr data-key=(key.id) {
                            td { (key.name) }
                            td { code { (key.prefix) } }
                            td { (key.scopes.join(", ")) }
                            td { (layout::time(key.created_at)) }
                            td { @if let Some(at) = key.last_used_at { (layout::age(at)) } @else { span.muted { "never" } } }
                            td {
                                @if let Some(at) = key.revoked_at {
                                    span.badge.bad { "revoked" } " " span.muted { (layout::age(at)) }
                                } @else {
                                    form method="post" action=(format!("/console/api-keys/{}/revoke", key.id)) {
                                        (csrf_field(&session))
                                        button.danger type="submit" { "Revoke" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(layout::page(&session, Section::ApiKeys, "API keys", body))
}

#[derive(Deserialize)]
pub struct CreateFields {
    name: String,
    scope: String,
}

/// Creates a key and shows its secret, once.
pub async fn create(
    State(state): State<ApiState>,
    form: ConsoleForm<CreateFields>,
) -> Result<Html<String>, ConsoleError> {
    form.session.require_admin()?;
    let name = form.fields.name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(ConsoleError::BadRequest("name: must be 1 to 200 characters".into()));
    }
    let scope = Scope::parse(&form.fields.scope)
        .ok_or_else(|| ConsoleError::BadRequest("scope: use admin or ingest".into()))?;
    let secret = ApiKeySecret::generate();
    let created_by = match form.session.caller.principal {
        Principal::User(user) => Some(user),
        Principal::ApiKey(_) => None,
    };
    let client = state.pool.get().await.map_err(DbError::from)?;
    let key = NewApiKey { name, secret: &secret, scopes: &[scope], created_by };
    let id = api_keys::insert_api_key(&client, form.session.tenant(), &key).await?;
    tracing::info!(tenant_id = %form.session.tenant(), api_key_id = %id, "API key created in the console");
    let body = html! {
        section.card {
            p { "Key " strong { (name) } " (" (scope.as_str()) ") was created. Copy it now: it is never shown again." }
            pre.secret #new-key { (secret.expose()) }
            p { a href="/console/api-keys" { "Back to API keys" } }
        }
    };
    Ok(layout::page(&form.session, Section::ApiKeys, "New API key", body))
}

pub async fn revoke(
    State(state): State<ApiState>,
    Path(key_id): Path<String>,
    form: ConsoleForm<NoFields>,
) -> Result<Response, ConsoleError> {
    form.session.require_admin()?;
    let id: ApiKeyId = parse_path_id(&key_id).map_err(|_| ConsoleError::NotFound("API key"))?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    if !api_keys::revoke_api_key(&client, form.session.tenant(), id).await? {
        return Err(ConsoleError::NotFound("API key"));
    }
    state.api_keys.forget(id);
    tracing::info!(tenant_id = %form.session.tenant(), api_key_id = %id, "API key revoked in the console");
    Ok(Redirect::to("/console/api-keys").into_response())
}
