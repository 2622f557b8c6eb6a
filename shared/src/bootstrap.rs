//! Creating a tenant with its first admin user and an API key, in one
//! transaction: from the command line (`relayops bootstrap`), the demo and
//! tests, or over HTTP with the one-time bootstrap token.
use crate::repo::GenericClient;

use crate::auth::password::{hash_password_blocking, PasswordError};
use crate::auth::{ApiKeySecret, Scope};
use crate::db::{DbError, Pool};
use crate::ids::{ApiKeyId, TenantId, UserId};
use crate::repo::api_keys::{self, NewApiKey};
use crate::repo::tenants::{self, NewUser};
use crate::repo::users;

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error(transparent)]
    Database(#[from] DbError),
    #[error(transparent)]
    Password(#[from] PasswordError),
    #[error("this bootstrap token has already been used")]
    TokenUsed,
}

pub struct BootstrapRequest<'a> {
    pub tenant_name: &'a str,
    pub admin_email: &'a str,
    pub admin_password: &'a str,
}

pub struct Bootstrapped {
    pub tenant_id: TenantId,
    pub user_id: UserId,
    pub api_key_id: ApiKeyId,
    /// Shown once; only its hash is stored.
    pub api_key: ApiKeySecret,
}

async fn create(
    tx: &impl GenericClient,
    request: &BootstrapRequest<'_>,
    password_hash: &str,
) -> Result<Bootstrapped, BootstrapError> {
    let api_key = ApiKeySecret::generate();
    let tenant_id = tenants::insert_tenant(tx, request.tenant_name).await?;
    let user = NewUser { email: request.admin_email, password_hash, role: "admin" };
    let user_id = tenants::insert_user(tx, tenant_id, &user).await?;
    let key = NewApiKey {
        name: "bootstrap admin key",
        secret: &api_key,
        scopes: &[Scope::Admin, Scope::Ingest],
        created_by: Some(user_id),
    };
    let api_key_id = api_keys::insert_api_key(tx, tenant_id, &key).await?;
    Ok(Bootstrapped { tenant_id, user_id, api_key_id, api_key })
}

async fn hashed(password: &str) -> Result<String, BootstrapError> {
    Ok(hash_password_blocking(password.to_owned()).await?)
}

pub async fn bootstrap_tenant(pool: &Pool, request: &BootstrapRequest<'_>) -> Result<Bootstrapped, BootstrapError> {
    let password_hash = hashed(request.admin_password).await?;
    let mut client = pool.get().await.map_err(DbError::from)?;
    let tx = client.transaction().await.map_err(DbError::from)?;
    let created = create(&tx, request, &password_hash).await?;
    tx.commit().await.map_err(DbError::from)?;
    Ok(created)
}

/// The HTTP bootstrap: the token's hash is recorded in the same transaction, so
/// a token creates at most one tenant, and a failed attempt uses nothing.
pub async fn bootstrap_with_token(
    pool: &Pool,
    token_hash: &[u8],
    request: &BootstrapRequest<'_>,
) -> Result<Bootstrapped, BootstrapError> {
    let password_hash = hashed(request.admin_password).await?;
    let mut client = pool.get().await.map_err(DbError::from)?;
    let tx = client.transaction().await.map_err(DbError::from)?;
    if !users::use_bootstrap_token(&tx, token_hash).await? {
        return Err(BootstrapError::TokenUsed);
    }
    let created = create(&tx, request, &password_hash).await?;
    users::link_bootstrap_token(&tx, token_hash, created.tenant_id).await?;
    tx.commit().await.map_err(DbError::from)?;
    Ok(created)
}
