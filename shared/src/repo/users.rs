//! User accounts as login and request authentication see them.
use crate::repo::GenericClient;

use crate::db::DbError;
use crate::ids::{TenantId, UserId};
use crate::repo::sql;

/// Not tenant-scoped: an email is how a login finds its tenant.
const FIND_BY_EMAIL: &str = "SELECT id, tenant_id, password_hash, role FROM relayops.user_accounts
     WHERE lower(email) = lower($1)";

const TOUCH_LOGIN: &str = "UPDATE relayops.user_accounts SET last_login_at = now() WHERE tenant_id = $1 AND id = $2";

pub struct LoginCandidate {
    pub id: UserId,
    pub tenant_id: TenantId,
    pub password_hash: String,
    pub role: String,
}

pub async fn find_by_email(client: &impl GenericClient, email: &str) -> Result<Option<LoginCandidate>, DbError> {
    let row = sql::query_opt(client, FIND_BY_EMAIL, &[&email]).await?;
    Ok(row.map(|row| LoginCandidate {
        id: UserId::from_uuid(row.get("id")),
        tenant_id: TenantId::from_uuid(row.get("tenant_id")),
        password_hash: row.get("password_hash"),
        role: row.get("role"),
    }))
}

pub async fn touch_login(client: &impl GenericClient, tenant: TenantId, user: UserId) -> Result<(), DbError> {
    sql::execute(client, TOUCH_LOGIN, &[&tenant.as_uuid(), &user.as_uuid()]).await?;
    Ok(())
}

/// A signed-in user as requests see it: role and the tenant's limits
/// (`repo::login_sessions::live_principal`).
pub struct UserPrincipal {
    pub role: String,
    pub ingest_rate_per_sec: Option<i32>,
    pub ingest_burst: Option<i32>,
    pub tenant_suspended: bool,
}

impl UserPrincipal {
    /// From a row with `role`, `ingest_rate_per_sec`, `ingest_burst` and `tenant_suspended`.
    pub(crate) fn from_row(row: &tokio_postgres::Row) -> Self {
        Self {
            role: row.get("role"),
            ingest_rate_per_sec: row.get("ingest_rate_per_sec"),
            ingest_burst: row.get("ingest_burst"),
            tenant_suspended: row.get("tenant_suspended"),
        }
    }
}

const USE_BOOTSTRAP_TOKEN: &str = "INSERT INTO relayops.used_bootstrap_tokens (token_hash) VALUES ($1)
     ON CONFLICT (token_hash) DO NOTHING";

const LINK_BOOTSTRAP_TOKEN: &str = "UPDATE relayops.used_bootstrap_tokens SET tenant_id = $2 WHERE token_hash = $1";

/// Records a bootstrap token as used; false if it already was. Run it in the
/// transaction that creates the tenant, so a failed bootstrap uses nothing.
pub async fn use_bootstrap_token(client: &impl GenericClient, token_hash: &[u8]) -> Result<bool, DbError> {
    Ok(sql::execute(client, USE_BOOTSTRAP_TOKEN, &[&token_hash]).await? == 1)
}

pub async fn link_bootstrap_token(
    client: &impl GenericClient,
    token_hash: &[u8],
    tenant: TenantId,
) -> Result<(), DbError> {
    sql::execute(client, LINK_BOOTSTRAP_TOKEN, &[&token_hash, &tenant.as_uuid()]).await?;
    Ok(())
}

/// A tenant's user as its admins see it (never the password hash).
pub struct UserRecord {
    pub id: UserId,
    pub email: String,
    pub role: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub last_login_at: Option<chrono::DateTime<chrono::Utc>>,
}

const USER_COLUMNS: &str = "id, email, role, created_at, last_login_at";

impl UserRecord {
    fn from_row(row: &tokio_postgres::Row) -> Self {
        Self {
            id: UserId::from_uuid(row.get("id")),
            email: row.get("email"),
            role: row.get("role"),
            created_at: row.get("created_at"),
            last_login_at: row.get("last_login_at"),
        }
    }
}

/// The tenant's users, oldest first.
pub async fn list_users(client: &impl GenericClient, tenant: TenantId) -> Result<Vec<UserRecord>, DbError> {
    let sql = format!(
        "SELECT {USER_COLUMNS} FROM relayops.user_accounts WHERE tenant_id = $1 ORDER BY created_at, id LIMIT 1000"
    );
    let rows = sql::query(client, &sql, &[&tenant.as_uuid()]).await?;
    Ok(rows.iter().map(UserRecord::from_row).collect())
}

pub async fn get_user(
    client: &impl GenericClient,
    tenant: TenantId,
    user: UserId,
) -> Result<Option<UserRecord>, DbError> {
    let sql = format!("SELECT {USER_COLUMNS} FROM relayops.user_accounts WHERE tenant_id = $1 AND id = $2");
    let row = sql::query_opt(client, &sql, &[&tenant.as_uuid(), &user.as_uuid()]).await?;
    Ok(row.as_ref().map(UserRecord::from_row))
}

/// The tenant's admins, locked until the transaction ends (so two removals
/// at once cannot leave a tenant with none).
pub async fn lock_admins(client: &impl GenericClient, tenant: TenantId) -> Result<Vec<UserId>, DbError> {
    const LOCK_ADMINS: &str = "SELECT id FROM relayops.user_accounts
         WHERE tenant_id = $1 AND role = 'admin' ORDER BY id FOR UPDATE";
    let rows = sql::query(client, LOCK_ADMINS, &[&tenant.as_uuid()]).await?;
    Ok(rows.iter().map(|row| UserId::from_uuid(row.get("id"))).collect())
}

/// Sets a user's role; the user as it now is, `None` if not in the tenant.
pub async fn set_role(
    client: &impl GenericClient,
    tenant: TenantId,
    user: UserId,
    role: &str,
) -> Result<Option<UserRecord>, DbError> {
    let sql = format!(
        "UPDATE relayops.user_accounts SET role = $3 WHERE tenant_id = $1 AND id = $2 RETURNING {USER_COLUMNS}"
    );
    let row = sql::query_opt(client, &sql, &[&tenant.as_uuid(), &user.as_uuid(), &role]).await?;
    Ok(row.as_ref().map(UserRecord::from_row))
}

/// Removes a user (their login sessions go with them: a foreign key
/// cascades); whether there was one.
pub async fn delete_user(client: &impl GenericClient, tenant: TenantId, user: UserId) -> Result<bool, DbError> {
    const DELETE_USER: &str = "DELETE FROM relayops.user_accounts WHERE tenant_id = $1 AND id = $2";
    Ok(sql::execute(client, DELETE_USER, &[&tenant.as_uuid(), &user.as_uuid()]).await? > 0)
}

/// A user's email and password hash (to check a password change).
pub async fn credentials(
    client: &impl GenericClient,
    tenant: TenantId,
    user: UserId,
) -> Result<Option<(String, String)>, DbError> {
    const CREDENTIALS: &str =
        "SELECT email, password_hash FROM relayops.user_accounts WHERE tenant_id = $1 AND id = $2";
    let row = sql::query_opt(client, CREDENTIALS, &[&tenant.as_uuid(), &user.as_uuid()]).await?;
    Ok(row.map(|row| (row.get("email"), row.get("password_hash"))))
}

pub async fn set_password_hash(
    client: &impl GenericClient,
    tenant: TenantId,
    user: UserId,
    password_hash: &str,
) -> Result<bool, DbError> {
    const SET_PASSWORD: &str = "UPDATE relayops.user_accounts SET password_hash = $3 WHERE tenant_id = $1 AND id = $2";
    Ok(sql::execute(client, SET_PASSWORD, &[&tenant.as_uuid(), &user.as_uuid(), &password_hash]).await? > 0)
}
