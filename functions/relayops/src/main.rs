//! `relayops`: the local runner. One binary, every role, the same code the
//! Lambdas and the worker container run:
//!
//! - `migrate` applies the schema; `bootstrap` creates a tenant, an admin user
//!   and an API key (printed once, as JSON on stdout).
//! - `api` serves every HTTP function on one port, routed as API Gateway
//!   would, and runs the outbox publisher loop (woken in-process by ingest).
//! - `worker` consumes and delivers; `simulator` is the test receiver.
//! - `alerter` posts dead-letter alerts to an operator's webhook.
//! - `all` is api + worker + simulator in one process; `demo` runs `all` and
//!   then a scripted tour through the public API.
//! - `openapi` prints the API's OpenAPI 3.1 document (`docs/openapi.json`).
use relayops::roles;

use clap::{Parser, Subcommand};
use relayops_shared::bootstrap::{bootstrap_tenant, BootstrapRequest};
use relayops_shared::config::{DatabaseConfig, HistoryConfig};
use relayops_shared::{db, telemetry};

#[derive(Parser)]
#[command(name = "relayops", version, about = "RelayOps webhook delivery platform, local runner")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply pending database migrations.
    Migrate,
    /// Create a tenant, its admin user and an API key; prints the key once.
    Bootstrap {
        #[arg(long, default_value = "Demo tenant")]
        tenant: String,
        #[arg(long, default_value = "admin@example.com")]
        email: String,
        /// The admin's password (prefer the environment variable).
        #[arg(long, env = "RELAYOPS_BOOTSTRAP_PASSWORD", hide_env_values = true)]
        password: String,
    },
    /// Set a tenant's ingest limit (events/s and burst); without values, back
    /// to the platform default.
    TenantLimit {
        /// The tenant (`ten_…`).
        tenant: String,
        #[arg(long, requires = "burst")]
        rate: Option<i32>,
        #[arg(long, requires = "rate")]
        burst: Option<i32>,
    },
    /// All HTTP functions on one port, plus the outbox publisher loop.
    Api,
    /// The outbox publisher loop on its own (the api role runs one too).
    Publisher,
    /// The delivery worker.
    Worker,
    /// The webhook receiver simulator.
    Simulator,
    /// Dead-letter alerting: posts an alert to RELAYOPS_ALERT_WEBHOOK_URL per
    /// dead delivery, with a per-endpoint cool-down.
    Alerter,
    /// api + worker + simulator in one process (+ the alerter when
    /// RELAYOPS_ALERT_WEBHOOK_URL is set).
    All,
    /// Everything in one process, then a scripted tour: endpoints, events, deliveries.
    Demo {
        /// Keep running after the tour (Ctrl-C to stop).
        #[arg(long)]
        keep_running: bool,
    },
    /// Print the API's OpenAPI 3.1 document (what `docs/openapi.json` holds).
    Openapi,
}

/// A failure is one line on stderr with its whole cause chain ("Postgres is
/// unavailable: error performing TLS handshake: invalid peer certificate:
/// UnknownIssuer"), so the service and the reason read together in any log.
/// The runtime has `RELAYOPS_RUNTIME_THREADS` worker threads (read first: a
/// bad value stops the process before anything starts).
fn main() -> std::process::ExitCode {
    let ran = relayops_shared::config::runtime_threads_from_env()
        .map_err(anyhow::Error::from)
        .and_then(|threads| {
            Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()?)
        })
        .and_then(|runtime| {
            runtime.block_on(async {
                let ran = run().await;
                // Stopped or failed: AMQP connections close with the
                // handshake before the runtime goes (no I/O errors on a stop).
                relayops_shared::broker::close_all(std::time::Duration::from_secs(2)).await;
                ran
            })
        });
    match ran {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("relayops: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    telemetry::init();
    let cli = Cli::parse();
    match cli.command {
        Command::Migrate => {
            let pool = db::connect_pool(&DatabaseConfig::from_env()?)?;
            let applied = roles::migrate(&pool, &HistoryConfig::from_env()?).await?;
            println!("{}", serde_json::json!({ "applied": applied, "latest": db::migrate::latest_version() }));
        }
        Command::Bootstrap { tenant, email, password } => {
            let pool = db::connect_pool(&DatabaseConfig::from_env()?)?;
            roles::migrate(&pool, &HistoryConfig::from_env()?).await?;
            let request = BootstrapRequest { tenant_name: &tenant, admin_email: &email, admin_password: &password };
            let created = bootstrap_tenant(&pool, &request).await?;
            println!(
                "{}",
                serde_json::json!({
                    "tenant_id": created.tenant_id,
                    "user_id": created.user_id,
                    "api_key_id": created.api_key_id,
                    "api_key": created.api_key.expose(),
                })
            );
        }
        Command::Api => {
            roles::run(roles::Roles { api: true, publisher: false, worker: false, simulator: false }).await?
        }
        Command::Worker => {
            roles::run(roles::Roles { api: false, publisher: false, worker: true, simulator: false }).await?
        }
        Command::Simulator => {
            roles::run(roles::Roles { api: false, publisher: false, worker: false, simulator: true }).await?
        }
        Command::All => roles::run(roles::Roles { api: true, publisher: false, worker: true, simulator: true }).await?,
        Command::TenantLimit { tenant, rate, burst } => {
            let tenant: relayops_shared::ids::TenantId = tenant.parse()?;
            if rate.is_some_and(|r| r <= 0) || burst.is_some_and(|b| b <= 0) {
                anyhow::bail!("--rate and --burst must be positive");
            }
            let pool = db::connect_pool(&DatabaseConfig::from_env()?)?;
            let client = pool.get().await.map_err(db::DbError::from)?;
            if relayops_shared::repo::tenants::set_ingest_limit(&client, tenant, rate, burst).await?.is_none() {
                anyhow::bail!("no tenant {tenant}");
            }
            println!(
                "{}",
                serde_json::json!({ "tenant_id": tenant, "ingest_rate_per_sec": rate, "ingest_burst": burst })
            );
        }
        Command::Publisher => {
            roles::run(roles::Roles { api: false, publisher: true, worker: false, simulator: false }).await?
        }
        Command::Alerter => roles::run_alerter().await?,
        Command::Demo { keep_running } => relayops::demo::run(keep_running).await?,
        Command::Openapi => print!("{}", relayops::openapi::document_json()),
    }
    Ok(())
}
