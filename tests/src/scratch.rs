//! A bare database for tests that drive migrations themselves (upgrades):
//! created empty on the test server, dropped when the value is.
use relayops_shared::config::DatabaseConfig;
use relayops_shared::db::{self, Pool};

use crate::{create_database, drop_database, run_on_own_thread, unique_suffix, Services};

pub struct ScratchDatabase {
    pub pool: Pool,
    name: String,
    admin_url: String,
}

impl ScratchDatabase {
    pub async fn create() -> Self {
        let admin_url = Services::default().admin_database_url;
        let name = format!("relayops_test_{}", unique_suffix());
        let url = create_database(&admin_url, &name).await;
        let pool = db::connect_pool(&DatabaseConfig::new(url, 4)).expect("pool");
        Self { pool, name, admin_url }
    }
}

impl Drop for ScratchDatabase {
    fn drop(&mut self) {
        self.pool.close();
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        run_on_own_thread(async move { drop_database(&admin_url, &name).await });
    }
}
