//! Tenants' weights, as the worker's fair slots ([`crate::slots`]) share
//! them: a tenant with weight 2 gets twice the slots of a tenant with weight
//! 1 while both wait for them (SPEC §12; set with `PUT
//! /admin/v1/tenants/{id}/weight`). Read from Postgres every [`REFRESH`]:
//! only the tenants whose weight is not 1 (a partial index holds them), so
//! the cost does not grow with the tenants, and a lookup is a map's.
use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Duration;

use relayops_shared::db::{DbError, Pool};
use relayops_shared::ids::TenantId;
use relayops_shared::repo::tenants;
use relayops_shared::task::stop_requested;
use tokio::sync::watch;

/// How often the weights are read again: a changed weight applies within it.
pub const REFRESH: Duration = Duration::from_secs(5);

/// The weights that are not 1, by tenant.
#[derive(Default)]
pub struct TenantWeights {
    weights: RwLock<HashMap<TenantId, u16>>,
}

/// The weights as read at one moment, for several lookups under one lock.
pub struct Weights<'a>(RwLockReadGuard<'a, HashMap<TenantId, u16>>);

impl Weights<'_> {
    /// `tenant`'s weight: 1 unless set.
    pub fn of(&self, tenant: TenantId) -> u16 {
        self.0.get(&tenant).copied().unwrap_or(1)
    }
}

impl TenantWeights {
    /// The weights now (hold it for a decision, not across an await).
    pub fn read(&self) -> Weights<'_> {
        Weights(self.weights.read().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Replaces the weights (a fresh read of every weight other than 1).
    pub fn replace(&self, weights: HashMap<TenantId, u16>) {
        *self.weights.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = weights;
    }

    /// Reads the weights now and every [`REFRESH`] until `stopping`; a failed
    /// read keeps the weights it had (and says so once per failure run).
    pub async fn refresh_until(self: Arc<Self>, pool: Pool, mut stopping: watch::Receiver<bool>) {
        let mut failing = false;
        loop {
            match self.refresh(&pool).await {
                Ok(()) => failing = false,
                Err(error) if !failing => {
                    failing = true;
                    tracing::warn!(
                        error = %relayops_shared::telemetry::error_chain(&error),
                        "tenant weights not read; the last ones stay"
                    );
                }
                Err(_) => {}
            }
            tokio::select! {
                _ = tokio::time::sleep(REFRESH) => {}
                _ = stop_requested(&mut stopping) => return,
            }
        }
    }

    /// One read of the weights; on failure the ones it had stay.
    async fn refresh(&self, pool: &Pool) -> Result<(), DbError> {
        let client = pool.get().await?;
        self.replace(tenants::weights_other_than_one(&client).await?.into_iter().collect());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use relayops_shared::config::DatabaseConfig;

    use super::*;

    #[tokio::test]
    async fn weights_stay_as_they_were_when_postgres_cannot_be_read() {
        let weights = TenantWeights::default();
        let heavy = TenantId::new();
        weights.replace([(heavy, 3)].into_iter().collect());
        // Nothing listens on port 1: the read fails as Postgres being down does.
        let unreachable = DatabaseConfig::new("postgres://relayops:relayops@127.0.0.1:1/relayops", 1);
        let pool = relayops_shared::db::connect_pool(&unreachable).unwrap();
        assert!(weights.refresh(&pool).await.is_err(), "the read fails");
        assert_eq!(weights.read().of(heavy), 3, "the last weights stay");
        assert_eq!(weights.read().of(TenantId::new()), 1, "others weigh 1");
    }
}
