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
