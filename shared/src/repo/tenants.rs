//! Tenants and their first admin; suspension, limits and retention (platform
//! operators).
use chrono::{DateTime, Utc};
use tokio_postgres::Row;

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

/// Sets (or, with `None`, clears back to the platform default) a tenant's
/// ingest limit. An operator action: tenants cannot raise their own limit.
/// Returns the tenant as it now is; `None` when there is no such tenant.
pub async fn set_ingest_limit(
    client: &impl GenericClient,
    tenant: TenantId,
    rate_per_sec: Option<i32>,
    burst: Option<i32>,
) -> Result<Option<TenantRecord>, DbError> {
    let sql = format!(
        "UPDATE relayops.tenants SET ingest_rate_per_sec = $2, ingest_burst = $3 WHERE id = $1 RETURNING {TENANT_COLUMNS}"
    );
    let row = sql::query_opt(client, &sql, &[&tenant.as_uuid(), &rate_per_sec, &burst]).await?;
    Ok(row.as_ref().map(TenantRecord::from_row))
}

/// Sets (or, with `None`, clears back to the platform default) how many days a
/// tenant's finished history is kept (`repo::retention` removes older rows).
/// The caller checks it against the platform default. `None` when there is no
/// such tenant.
pub async fn set_retention(
    client: &impl GenericClient,
    tenant: TenantId,
    days: Option<i32>,
) -> Result<Option<TenantRecord>, DbError> {
    let sql = format!("UPDATE relayops.tenants SET retention_days = $2 WHERE id = $1 RETURNING {TENANT_COLUMNS}");
    let row = sql::query_opt(client, &sql, &[&tenant.as_uuid(), &days]).await?;
    Ok(row.as_ref().map(TenantRecord::from_row))
}

/// Sets a tenant's weight among the tenants waiting for a worker's slots
/// (1–100; the caller checks it). `None` when there is no such tenant.
pub async fn set_weight(
    client: &impl GenericClient,
    tenant: TenantId,
    weight: i16,
) -> Result<Option<TenantRecord>, DbError> {
    let sql = format!("UPDATE relayops.tenants SET weight = $2 WHERE id = $1 RETURNING {TENANT_COLUMNS}");
    let row = sql::query_opt(client, &sql, &[&tenant.as_uuid(), &weight]).await?;
    Ok(row.as_ref().map(TenantRecord::from_row))
}

/// Every tenant whose weight is not 1, with it (the others weigh 1): what
/// workers share their slots by. Not scoped by a tenant: it is the
/// platform's scheduling, read from a partial index of the few weighted.
pub async fn weights_other_than_one(client: &impl GenericClient) -> Result<Vec<(TenantId, u16)>, DbError> {
    const SQL: &str = "SELECT id, weight FROM relayops.tenants WHERE weight <> 1";
    let rows = sql::query(client, SQL, &[]).await?;
    Ok(rows
        .iter()
        .map(|row| (TenantId::from_uuid(row.get("id")), row.get::<_, i16>("weight").clamp(1, 100) as u16))
        .collect())
}

/// A tenant as the platform operator sees it (the admin API).
#[derive(Debug, Clone)]
pub struct TenantRecord {
    pub id: TenantId,
    pub name: String,
    pub ingest_rate_per_sec: Option<i32>,
    pub ingest_burst: Option<i32>,
    /// Days of history kept; `None`: the platform default.
    pub retention_days: Option<i32>,
    /// Its share of a worker's slots against other waiting tenants (1–100).
    pub weight: i16,
    pub suspended_at: Option<DateTime<Utc>>,
    pub suspended_reason: Option<String>,
    pub created_at: DateTime<Utc>,
}

const TENANT_COLUMNS: &str =
    "id, name, ingest_rate_per_sec, ingest_burst, retention_days, weight, suspended_at, suspended_reason, created_at";

impl TenantRecord {
    fn from_row(row: &Row) -> Self {
        Self {
            id: TenantId::from_uuid(row.get("id")),
            name: row.get("name"),
            ingest_rate_per_sec: row.get("ingest_rate_per_sec"),
            ingest_burst: row.get("ingest_burst"),
            retention_days: row.get("retention_days"),
            weight: row.get("weight"),
            suspended_at: row.get("suspended_at"),
            suspended_reason: row.get("suspended_reason"),
            created_at: row.get("created_at"),
        }
    }
}

/// Not scoped by a tenant credential: the admin API acts on any tenant.
pub async fn get_tenant(client: &impl GenericClient, id: TenantId) -> Result<Option<TenantRecord>, DbError> {
    let sql = format!("SELECT {TENANT_COLUMNS} FROM relayops.tenants WHERE id = $1");
    Ok(sql::query_opt(client, &sql, &[&id.as_uuid()]).await?.as_ref().map(TenantRecord::from_row))
}

/// Newest first, at most `limit` (the admin API).
pub async fn list_tenants(client: &impl GenericClient, limit: i64) -> Result<Vec<TenantRecord>, DbError> {
    let sql = format!("SELECT {TENANT_COLUMNS} FROM relayops.tenants ORDER BY created_at DESC, id DESC LIMIT $1");
    Ok(sql::query(client, &sql, &[&limit]).await?.iter().map(TenantRecord::from_row).collect())
}

/// Suspends (with a reason) or, with `None`, resumes a tenant. Suspending an
/// already suspended tenant keeps its first `suspended_at` and takes the new
/// reason. `None` when there is no such tenant.
pub async fn set_suspended(
    client: &impl GenericClient,
    id: TenantId,
    reason: Option<&str>,
) -> Result<Option<TenantRecord>, DbError> {
    let sql = format!(
        "UPDATE relayops.tenants
         SET suspended_at = CASE WHEN $2::text IS NOT NULL THEN coalesce(suspended_at, now()) END,
             suspended_reason = $2
         WHERE id = $1
         RETURNING {TENANT_COLUMNS}"
    );
    let row = sql::query_opt(client, &sql, &[&id.as_uuid(), &reason]).await?;
    Ok(row.as_ref().map(TenantRecord::from_row))
}
