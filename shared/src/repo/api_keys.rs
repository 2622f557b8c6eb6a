//! API keys: only the prefix and a hash are stored.
use crate::repo::GenericClient;

use crate::auth::{ApiKeySecret, Scope};
use crate::db::DbError;
use crate::ids::{ApiKeyId, TenantId, UserId};
use crate::repo::sql;

const INSERT_API_KEY: &str =
    "INSERT INTO relayops.api_keys (id, tenant_id, name, key_prefix, key_hash, scopes, created_by)
     VALUES ($1, $2, $3, $4, $5, $6, $7)";

/// Not tenant-scoped: this lookup is how a request's tenant is found.
const FIND_BY_PREFIX: &str =
    "SELECT k.id, k.tenant_id, k.key_hash, k.scopes, k.last_used_at, t.ingest_rate_per_sec, t.ingest_burst,
            t.suspended_at IS NOT NULL AS tenant_suspended
     FROM relayops.api_keys k JOIN relayops.tenants t ON t.id = k.tenant_id
     WHERE k.key_prefix = $1 AND k.revoked_at IS NULL";

/// Writes at most once a minute per key, so a busy key does not write per request.
const TOUCH_LAST_USED: &str = "UPDATE relayops.api_keys SET last_used_at = now()
     WHERE id = $1 AND tenant_id = $2 AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')";

pub struct NewApiKey<'a> {
    pub name: &'a str,
    pub secret: &'a ApiKeySecret,
    pub scopes: &'a [Scope],
    pub created_by: Option<UserId>,
}

pub async fn insert_api_key(
    client: &impl GenericClient,
    tenant: TenantId,
    key: &NewApiKey<'_>,
) -> Result<ApiKeyId, DbError> {
    let id = ApiKeyId::new();
    let scopes: Vec<&str> = key.scopes.iter().map(Scope::as_str).collect();
    let hash = key.secret.hash().to_vec();
    sql::execute(
        client,
        INSERT_API_KEY,
        &[
            &id.as_uuid(),
            &tenant.as_uuid(),
            &key.name,
            &key.secret.prefix(),
            &hash,
            &scopes,
            &key.created_by.map(|user| user.as_uuid()),
        ],
    )
    .await?;
    Ok(id)
}

/// An active key whose hash matched the presented key.
#[derive(Debug, Clone)]
pub struct VerifiedApiKey {
    pub id: ApiKeyId,
    pub tenant_id: TenantId,
    pub scopes: Vec<Scope>,
    /// The tenant's own ingest limit, if it has one.
    pub ingest_rate_per_sec: Option<i32>,
    pub ingest_burst: Option<i32>,
    /// The platform operator suspended the tenant (its ingest is refused).
    pub tenant_suspended: bool,
    /// Whether `last_used_at` is more than a minute old (or unset): only then
    /// is it worth writing again.
    pub last_used_stale: bool,
}

/// Finds the key by its prefix and compares hashes in constant time.
pub async fn verify(client: &impl GenericClient, presented: &ApiKeySecret) -> Result<Option<VerifiedApiKey>, DbError> {
    let Some(row) = sql::query_opt(client, FIND_BY_PREFIX, &[&presented.prefix()]).await? else {
        return Ok(None);
    };
    let stored_hash: Vec<u8> = row.get("key_hash");
    if !presented.matches(&stored_hash) {
        return Ok(None);
    }
    let scopes: Vec<String> = row.get("scopes");
    Ok(Some(VerifiedApiKey {
        id: ApiKeyId::from_uuid(row.get("id")),
        tenant_id: TenantId::from_uuid(row.get("tenant_id")),
        scopes: scopes.iter().filter_map(|scope| Scope::parse(scope)).collect(),
        ingest_rate_per_sec: row.get("ingest_rate_per_sec"),
        ingest_burst: row.get("ingest_burst"),
        tenant_suspended: row.get("tenant_suspended"),
        last_used_stale: row
            .get::<_, Option<chrono::DateTime<chrono::Utc>>>("last_used_at")
            .is_none_or(|at| chrono::Utc::now() - at > chrono::Duration::minutes(1)),
    }))
}

pub async fn touch_last_used(client: &impl GenericClient, tenant: TenantId, key: ApiKeyId) -> Result<(), DbError> {
    sql::execute(client, TOUCH_LAST_USED, &[&key.as_uuid(), &tenant.as_uuid()]).await?;
    Ok(())
}

const LIST: &str = "SELECT id, name, key_prefix, scopes, created_at, last_used_at, revoked_at
     FROM relayops.api_keys WHERE tenant_id = $1 ORDER BY created_at DESC, id DESC";

const REVOKE: &str = "UPDATE relayops.api_keys SET revoked_at = coalesce(revoked_at, now())
     WHERE tenant_id = $1 AND id = $2";

/// An API key as listed: never its secret or hash.
#[derive(Debug, Clone)]
pub struct ApiKeyRecord {
    pub id: ApiKeyId,
    pub name: String,
    pub prefix: String,
    pub scopes: Vec<String>,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub last_used_at: Option<chrono::DateTime<chrono::Utc>>,
    pub revoked_at: Option<chrono::DateTime<chrono::Utc>>,
}

pub async fn list_api_keys(client: &impl GenericClient, tenant: TenantId) -> Result<Vec<ApiKeyRecord>, DbError> {
    let rows = sql::query(client, LIST, &[&tenant.as_uuid()]).await?;
    Ok(rows
        .iter()
        .map(|row| ApiKeyRecord {
            id: ApiKeyId::from_uuid(row.get("id")),
            name: row.get("name"),
            prefix: row.get("key_prefix"),
            scopes: row.get("scopes"),
            created_at: row.get("created_at"),
            last_used_at: row.get("last_used_at"),
            revoked_at: row.get("revoked_at"),
        })
        .collect())
}

/// Revokes a key (idempotent); false if the tenant has no such key.
pub async fn revoke_api_key(client: &impl GenericClient, tenant: TenantId, id: ApiKeyId) -> Result<bool, DbError> {
    Ok(sql::execute(client, REVOKE, &[&tenant.as_uuid(), &id.as_uuid()]).await? == 1)
}
