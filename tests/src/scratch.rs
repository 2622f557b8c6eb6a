//! A bare database for tests that drive migrations themselves (upgrades):
//! created empty on the test server, dropped when the value is.
use relayops_shared::config::DatabaseConfig;
use relayops_shared::db::{self, Pool};

use crate::Services;

pub struct ScratchDatabase {
    pub pool: Pool,
    pub url: String,
    name: String,
    admin_url: String,
}

impl ScratchDatabase {
    pub async fn create() -> Self {
        let admin_url = Services::default().admin_database_url;
        let name = format!("relayops_scratch_{}", &uuid::Uuid::new_v4().simple().to_string()[..16]);
        let admin = db::connect_pool(&DatabaseConfig::new(admin_url.clone(), 1)).expect("admin pool");
        let client = admin.get().await.expect("Postgres is not reachable: run scripts/services.sh");
        client.batch_execute(&format!("CREATE DATABASE {name}")).await.expect("create scratch database");
        let mut url = url::Url::parse(&admin_url).expect("database url");
        url.set_path(&name);
        let url = url.to_string();
        let pool = db::connect_pool(&DatabaseConfig::new(url.clone(), 4)).expect("pool");
        Self { pool, url, name, admin_url }
    }
}

impl Drop for ScratchDatabase {
    fn drop(&mut self) {
        self.pool.close();
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            runtime.block_on(async move {
                let Ok(target) = relayops_shared::db::PgTarget::parse(&admin_url) else {
                    return;
                };
                if let Ok((client, connection)) = target.connect().await {
                    tokio::spawn(connection);
                    let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
                }
            });
        })
        .join();
    }
}
