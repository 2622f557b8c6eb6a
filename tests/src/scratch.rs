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

/// `script` (several statements, for `batch_execute`) with `$1`, `$2`, … replaced
/// by the SQL literals given: bound parameters cannot span statements.
pub fn inline_params(script: &str, literals: &[String]) -> String {
    // The highest first, so `$1` does not eat the start of `$10`.
    literals
        .iter()
        .enumerate()
        .rev()
        .fold(script.to_owned(), |script, (n, literal)| script.replace(&format!("${}", n + 1), literal))
}

/// A UUID as an SQL literal.
pub fn uuid_literal(id: uuid::Uuid) -> String {
    format!("'{id}'::uuid")
}

impl Drop for ScratchDatabase {
    fn drop(&mut self) {
        self.pool.close();
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        run_on_own_thread(async move { drop_database(&admin_url, &name).await });
    }
}
