//! Tenants' weights, as the worker's fair slots ([`crate::slots`]) share
//! them: a tenant with weight 2 gets twice the slots of a tenant with weight
//! 1 while both wait for them (SPEC §12; set with `PUT
//! /admin/v1/tenants/{id}/weight`). Read from Postgres every [`REFRESH`]:
//! only the tenants whose weight is not 1 (a partial index holds them), so
//! the cost does not grow with the tenants, and a lookup is a map's.
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
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

impl TenantWeights {
    /// `tenant`'s weight: 1 unless set.
    pub fn of(&self, tenant: TenantId) -> u16 {
        self.weights.read().unwrap_or_else(|poisoned| poisoned.into_inner()).get(&tenant).copied().unwrap_or(1)
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
            let read = async {
                let client = pool.get().await.map_err(DbError::from)?;
                tenants::weights_other_than_one(&client).await
            };
            match read.await {
                Ok(weights) => {
                    self.replace(weights.into_iter().collect());
                    failing = false;
                }
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
}
