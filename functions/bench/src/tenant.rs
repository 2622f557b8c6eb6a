//! A tenant of the bench's own, made straight in the target's database,
//! with an ingest limit that measures capacity, not policy.
use relayops_shared::bootstrap::{bootstrap_tenant, BootstrapRequest};
use relayops_shared::db::Pool;
use relayops_shared::repo::tenants;

/// Its API key, and its admin's sign-in (the console scenario signs in).
pub struct BenchTenant {
    pub tenant_id: relayops_shared::ids::TenantId,
    pub api_key: String,
    pub email: String,
    pub password: String,
}

/// A fresh tenant named `name`.
pub async fn fresh(pool: &Pool, name: &str) -> anyhow::Result<BenchTenant> {
    let email = format!("{name}-{}@example.com", uuid::Uuid::new_v4().simple());
    let password = uuid::Uuid::new_v4().to_string();
    let request = BootstrapRequest { tenant_name: name, admin_email: &email, admin_password: &password };
    let tenant = bootstrap_tenant(pool, &request).await?;
    tenants::set_ingest_limit(&pool.get().await?, tenant.tenant_id, Some(1_000_000), Some(1_000_000)).await?;
    Ok(BenchTenant { tenant_id: tenant.tenant_id, api_key: tenant.api_key.expose().to_owned(), email, password })
}
