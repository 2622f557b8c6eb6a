//! Creating a tenant with its first admin user and an API key, in one
//! transaction. Used by `relayops bootstrap`, the demo and the tests.
use crate::auth::password::{hash_password, PasswordError};
use crate::auth::{ApiKeySecret, Scope};
use crate::db::{DbError, Pool};
use crate::ids::{ApiKeyId, TenantId, UserId};
use crate::repo::api_keys::{self, NewApiKey};
use crate::repo::tenants::{self, NewUser};

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error(transparent)]
    Database(#[from] DbError),
    #[error(transparent)]
    Password(#[from] PasswordError),
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

pub async fn bootstrap_tenant(pool: &Pool, request: &BootstrapRequest<'_>) -> Result<Bootstrapped, BootstrapError> {
    let password_hash = hash_password(request.admin_password)?;
    let api_key = ApiKeySecret::generate();
    let mut client = pool.get().await.map_err(DbError::from)?;
    let tx = client.transaction().await.map_err(DbError::from)?;
    let tenant_id = tenants::insert_tenant(&tx, request.tenant_name).await?;
    let user = NewUser { email: request.admin_email, password_hash: &password_hash, role: "admin" };
    let user_id = tenants::insert_user(&tx, tenant_id, &user).await?;
    let key = NewApiKey {
        name: "bootstrap admin key",
        secret: &api_key,
        scopes: &[Scope::Admin, Scope::Ingest],
        created_by: Some(user_id),
    };
    let api_key_id = api_keys::insert_api_key(&tx, tenant_id, &key).await?;
    tx.commit().await.map_err(DbError::from)?;
    Ok(Bootstrapped { tenant_id, user_id, api_key_id, api_key })
}
