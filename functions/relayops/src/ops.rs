//! The operations port of processes that serve no API (a worker, a publisher
//! or an alerter run on their own): `/health/live`, `/health/ready` and
//! `/metrics` on `RELAYOPS_WORKER_HEALTH_LISTEN`. The api role serves the same
//! three routes on its own port (see `roles::api_router`).
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use relayops_shared::db::{self, Pool};
use relayops_shared::flow::FlowControl;
use relayops_shared::observe;
use serde_json::{json, Value};
use tokio::sync::watch;

/// What readiness looks at; `None` where the process does not use it.
#[derive(Clone, Default)]
pub struct OpsProbe {
    pub pool: Option<Pool>,
    /// The worker's consumer on the ready queue.
    pub worker_consuming: Option<watch::Receiver<bool>>,
    /// The worker's flow control (Redis).
    pub flow: Option<FlowControl>,
    /// The alerter's consumer on its dead-letter queue.
    pub alerter_consuming: Option<watch::Receiver<bool>>,
    /// The standalone publisher's broker session.
    pub publisher_connected: Option<watch::Receiver<bool>>,
}

pub fn ops_router(probe: OpsProbe) -> Router {
    Router::new()
        .route("/health/live", get(live))
        .route("/health/ready", get(ready))
        .route("/metrics", get(observe::metrics_handler))
        .with_state(probe)
}

pub(crate) async fn live() -> Json<Value> {
    Json(json!({ "status": "live" }))
}

/// Postgres reachable within 2 s with every migration applied.
pub(crate) async fn postgres_state(pool: &Pool) -> &'static str {
    match tokio::time::timeout(Duration::from_secs(2), pool.get()).await {
        Ok(Ok(client)) => match db::migrate::is_current(&client).await {
            Ok(true) => "ok",
            Ok(false) => "migrations pending",
            Err(_) => "unreachable",
        },
        _ => "unreachable",
    }
}

/// History partitions (`history::missing::coverage`): `ok`, `low` (none
/// ahead of the current one), `missing` (none for now), or `unknown` when
/// Postgres did not answer (its own state says why).
pub(crate) async fn partitions_state(pool: &Pool) -> &'static str {
    let Ok(Ok(client)) = tokio::time::timeout(Duration::from_secs(2), pool.get()).await else {
        return "unknown";
    };
    match relayops_shared::history::missing::coverage(&client).await {
        Ok(coverage) => coverage.as_str(),
        Err(_) => "unknown",
    }
}

/// Redis as flow control sees it: `ok` while Redis answers and no key's
/// limits are per process, or `degraded` while some are (in a cluster, a
/// shard that fails degrades the keys it holds only). Not a reason to be
/// unready: ingest and delivery go on without it.
pub(crate) async fn redis_state(flow: Option<&FlowControl>) -> &'static str {
    match flow {
        Some(flow) if flow.ping().await.is_ok() && !flow.is_degraded() => "ok",
        Some(_) => "degraded",
        None => "not used",
    }
}

fn consumer_state(consuming: &Option<watch::Receiver<bool>>) -> &'static str {
    match consuming {
        Some(consuming) if *consuming.borrow() => "ok",
        Some(_) => "not consuming",
        None => "not used",
    }
}

async fn ready(State(probe): State<OpsProbe>) -> (StatusCode, Json<Value>) {
    let postgres = match &probe.pool {
        Some(pool) => postgres_state(pool).await,
        None => "not used",
    };
    let redis = redis_state(probe.flow.as_ref()).await;
    let worker = consumer_state(&probe.worker_consuming);
    let alerter = consumer_state(&probe.alerter_consuming);
    let publisher = match &probe.publisher_connected {
        Some(connected) if *connected.borrow() => "ok",
        Some(_) => "unreachable",
        None => "not used",
    };
    let ready = [postgres, redis, worker, alerter, publisher]
        .iter()
        .all(|state| matches!(*state, "ok" | "not used" | "degraded"));
    let body = json!({
        "status": match (ready, redis) { (false, _) => "unready", (true, "degraded") => "degraded", (true, _) => "ready" },
        "postgres": postgres,
        "redis": redis,
        "rabbitmq": { "worker": worker, "alerter": alerter, "publisher": publisher },
    });
    (if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }, Json(body))
}

/// Binds the operations port and serves it on a background task.
pub async fn serve(
    address: std::net::SocketAddr,
    probe: OpsProbe,
) -> anyhow::Result<impl std::future::Future<Output = anyhow::Result<()>>> {
    let listener = crate::roles::listen_on(address, "RELAYOPS_WORKER_HEALTH_LISTEN").await?;
    tracing::info!(
        address = %listener.local_addr()?,
        runtime_threads = tokio::runtime::Handle::current().metrics().num_workers(),
        "operations port listening (/health/live, /health/ready, /metrics)"
    );
    let app = ops_router(probe);
    Ok(async move { axum::serve(listener, app).await.map_err(anyhow::Error::from) })
}
