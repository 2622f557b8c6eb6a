//! Tenants and their first admin.
use crate::repo::GenericClient;

use crate::db::DbError;
use crate::ids::{TenantId, UserId};
use crate::repo::sql;

const INSERT_TENANT: &str = "INSERT INTO relayops.tenants (id, name) VALUES ($1, $2)";

const INSERT_USER: &str = "INSERT INTO relayops.user_accounts (id, tenant_id, email, password_hash, role)
     VALUES ($1, $2, $3, $4, $5)";

pub async fn insert_tenant(client: &impl GenericClient, name: &str) -> Result<TenantId, DbError> {
    let id = TenantId::new();
    sql::execute(client, INSERT_TENANT, &[&id.as_uuid(), &name]).await?;
    Ok(id)
}

pub struct NewUser<'a> {
    pub email: &'a str,
    pub password_hash: &'a str,
    pub role: &'a str,
}

pub async fn insert_user(client: &impl GenericClient, tenant: TenantId, user: &NewUser<'_>) -> Result<UserId, DbError> {
    let id = UserId::new();
    sql::execute(
        client,
        INSERT_USER,
        &[&id.as_uuid(), &tenant.as_uuid(), &user.email, &user.password_hash, &user.role],
    )
    .await?;
    Ok(id)
}

const SET_INGEST_LIMIT: &str = "UPDATE relayops.tenants SET ingest_rate_per_sec = $2, ingest_burst = $3 WHERE id = $1";

/// Sets (or, with `None`, clears back to the platform default) a tenant's
/// ingest limit. An operator action: tenants cannot raise their own limit.
pub async fn set_ingest_limit(
    client: &impl GenericClient,
    tenant: TenantId,
    rate_per_sec: Option<i32>,
    burst: Option<i32>,
) -> Result<bool, DbError> {
    Ok(sql::execute(client, SET_INGEST_LIMIT, &[&tenant.as_uuid(), &rate_per_sec, &burst]).await? == 1)
}
