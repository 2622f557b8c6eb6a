//! Starting the long-lived roles in one process (stopping them: `stopping`).
use std::sync::Arc;

use anyhow::Context;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use relayops_publisher::Publisher;
use relayops_shared::api::{not_found_fallback, ApiState, IngestLimiter, LoginThrottle, PublisherWakeup, Wakeups};
use relayops_shared::backpressure::Backpressure;
use relayops_shared::config::{AlertConfig, BrokerConfig, HistoryConfig, OpsConfig, WorkerConfig};
use relayops_shared::db::listen::PgNotifier;
use relayops_shared::db::{self, Pool};
use relayops_shared::flow::{FlowControl, Limit};
use relayops_shared::observe;
use relayops_worker::gate::Gate;
use relayops_worker::Worker;
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::ops::{self, OpsProbe};
use crate::settings::{PipelineSettings, Settings};
pub use crate::stopping::wait;
use crate::stopping::Running;

pub struct Roles {
    /// All HTTP functions on one port; always runs a publisher loop with them.
    pub api: bool,
    /// The outbox publisher loop on its own.
    pub publisher: bool,
    pub worker: bool,
    pub simulator: bool,
}

/// Applies the migrations, then creates the history partitions ahead (so
/// ingest can write before the first publisher tick).
pub async fn migrate(pool: &Pool, history: &HistoryConfig) -> anyhow::Result<Vec<String>> {
    let mut client = pool.get().await.map_err(db::DbError::from)?;
    let applied = db::migrate::run(&mut client).await?;
    db::partitions::ensure(&client, history).await?;
    Ok(applied)
}

/// Every HTTP function mounted together, as API Gateway routes them.
pub fn api_router(state: ApiState) -> Router {
    Router::new()
        .merge(relayops_ingest::routes())
        .merge(relayops_query::routes())
        .merge(relayops_replay::routes())
        .merge(relayops_manage::routes())
        .merge(relayops_admin::routes())
        .merge(relayops_console::routes())
        .route("/health/live", get(|| async { Json(json!({ "status": "live" })) }))
        .route("/health/ready", get(ready))
        .route("/metrics", get(observe::metrics_handler))
        .route("/openapi.json", get(crate::openapi::serve))
        .fallback(not_found_fallback)
        .layer(axum::middleware::from_fn(observe::http::observe))
        .with_state(state)
}

/// Readiness of an api replica: it is ready when it can store events —
/// Postgres reachable with every migration applied, and ingest not refusing
/// work (backpressure). RabbitMQ is reported (from the backpressure sampler's
/// last measurement) but an unreachable broker does not make the replica
/// unready: events go to the outbox and are published when it returns. Redis
/// not answering is `"degraded"`, still ready: ingest goes on under
/// per-process limits. History partitions (`history::missing`): none for now
/// is unready (ingest refuses); none ahead of the current one is
/// `"degraded"` (maintenance is not running; ingest fails when the current
/// window ends). The body names each dependency's state.
async fn ready(State(state): State<ApiState>) -> (StatusCode, Json<Value>) {
    let postgres = ops::postgres_state(&state.pool).await;
    let partitions = ops::partitions_state(&state.pool).await;
    let redis = ops::redis_state(state.ingest_limiter.as_ref().map(|limiter| &limiter.flow)).await;
    let backpressure = state.backpressure.as_ref().map(|gauge| gauge.report());
    let rabbitmq = match &backpressure {
        Some(report) if report["ready_depth"].is_null() => "unreachable",
        Some(_) => "ok",
        None => "not sampled",
    };
    let accepting = backpressure.as_ref().is_none_or(|report| report["accepting"] == true);
    let ready = postgres == "ok" && redis != "unreachable" && accepting && partitions != "missing";
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let degraded = redis == "degraded" || partitions == "low";
    let body = json!({
        "status": match (ready, degraded) { (false, _) => "unready", (true, true) => "degraded", (true, false) => "ready" },
        "postgres": postgres,
        "history_partitions": partitions,
        "rabbitmq": rabbitmq,
        "redis": redis,
        "backpressure": backpressure,
    });
    (status, Json(body))
}

/// Runs the roles until Ctrl-C or SIGTERM (or until one of them fails).
pub async fn run(roles: Roles) -> anyhow::Result<()> {
    let running = start(roles).await?;
    wait(running).await
}

/// Starts the roles on background tasks, once every setting they read has
/// been read and checked ([`Settings`]).
pub async fn start(roles: Roles) -> anyhow::Result<Running> {
    let settings = Settings::from_env(&roles)?;
    observe::install_prometheus();
    let mut tasks = Running::default();
    let mut probe = OpsProbe::default();
    let listen = settings.listen;

    if roles.simulator {
        let listener = listen_on(listen.simulator, "RELAYOPS_SIMULATOR_LISTEN").await?;
        tracing::info!(address = %listen.simulator, "simulator listening");
        let app = relayops_simulator::router(relayops_simulator::Simulator::new());
        tasks.spawn(async move { axum::serve(listener, app).await.map_err(anyhow::Error::from) });
    }
    let mut outbound_allow = settings.outbound_allow;
    if roles.simulator && std::env::var("RELAYOPS_OUTBOUND_ALLOW_CIDRS").is_err() {
        // Development: the built-in simulator is the one receiver on a
        // special address that may be reached: its address and port, no
        // other port there (a database, a broker on loopback).
        outbound_allow = simulator_allowance(listen.simulator);
        tracing::info!(allowed = %outbound_allow, "outbound allow-list set to the simulator");
    }
    if let Some(pipeline) = settings.pipeline {
        let PipelineSettings { database, history, broker, publisher, api, worker, flow, alert } = pipeline;
        let pool = db::connect_pool(&database)?;
        migrate(&pool, &history).await?;
        probe.pool = Some(pool.clone());
        let gauges =
            observe::gauges::spawn_queue_gauges(pool.clone(), broker.clone(), settings.ops.gauge_sample_interval);
        tasks.spawn(async move {
            gauges.await?;
            Ok(())
        });
        let wakeup = Arc::new(Notify::new());
        let mut handoff = None;
        let publisher_runs_here = publisher.is_some();
        if let Some(publisher_config) = publisher {
            // Wake on commits from any process (ingest replicas, replays, recovery).
            let listener = db::listen::wake_on_outbox_inserts(database.listen_url().to_owned(), Arc::clone(&wakeup));
            tasks.spawn(async move {
                listener.await;
                Ok(())
            });
            let publisher = Arc::new(Publisher::new(pool.clone(), broker.clone(), publisher_config));
            // With the api in this process, ingest hands its rows to this publisher.
            handoff = roles.api.then(|| publisher.handoff());
            if !roles.api {
                // A standalone publisher is ready only while it reaches the
                // broker (an api replica is ready while it can store events).
                probe.publisher_connected = Some(publisher.broker_connected());
            }
            let notify = Arc::clone(&wakeup);
            // On stop it publishes what ingest still hands it, then returns.
            tasks.spawn_finishing(|stopping| async move {
                publisher.run_until(notify, stopping).await;
                Ok(())
            });
        }
        if let (Some(api), Some(flow)) = (api, &flow) {
            let backpressure = Backpressure::new(api.backpressure);
            let sampler = backpressure.start_sampler(pool.clone(), broker.clone()).await;
            tasks.spawn(async move {
                sampler.await?;
                Ok(())
            });
            let flow_control = FlowControl::new(flow)?;
            let throttle = LoginThrottle::new(flow_control.clone(), api.login_throttle);
            let limiter = IngestLimiter {
                flow: flow_control,
                default: Limit { per_second: flow.tenant_rate_per_sec, burst: flow.tenant_burst },
            };
            let reads = db::connect_reads(&database, &pool).context("RELAYOPS_DATABASE_READ_URL")?;
            let mut state = ApiState::new(pool.clone())
                .with_reads(reads)
                .with_auth(&api.auth)?
                .with_wakeup(Arc::new(Wakeups(vec![
                    Arc::clone(&wakeup) as Arc<dyn PublisherWakeup>,
                    Arc::new(PgNotifier::new(pool.clone())),
                ])))
                .with_backpressure(backpressure)
                .with_ingest_limiter(limiter)
                .with_outbound_allow(outbound_allow.clone())
                .with_login_throttle(throttle)
                .with_platform_retention(history.retention)
                .with_ingest_config(&api.ingest);
            if let Some(handoff) = handoff.take() {
                state = state.with_handoff(handoff);
            }
            let listener = listen_on(listen.api, "RELAYOPS_API_LISTEN").await?;
            tracing::info!(address = %listen.api, "api listening");
            // The peer address is the client (login throttling), unless a
            // trusted proxy forwards for it.
            let app = api_router(state).into_make_service_with_connect_info::<std::net::SocketAddr>();
            // On stop: no new connection, the requests under way answered;
            // then the router (and ingest's end of the hand-off) is dropped.
            tasks.spawn_finishing(|mut stopping| async move {
                let stopped = async move { relayops_shared::task::stop_requested(&mut stopping).await };
                axum::serve(listener, app).with_graceful_shutdown(stopped).await.map_err(anyhow::Error::from)
            });
        }
        if let (Some(worker_config), Some(flow)) = (worker, &flow) {
            let config = WorkerConfig { outbound_allow: outbound_allow.clone(), ..worker_config };
            let gate = Gate::from_config(flow, &config)?;
            // Readiness shares the gate's circuit, so it reports what the gate does.
            probe.flow = gate.flow().cloned();
            let mut worker = Worker::new(pool.clone(), broker.clone(), config, gate)?;
            if publisher_runs_here {
                // A lane's next delivery goes to this process's publisher at once.
                worker = worker.waking_publisher(Arc::clone(&wakeup) as Arc<dyn PublisherWakeup>);
            }
            probe.worker_consuming = Some(worker.consuming());
            // On stop it takes no new message and finishes those under way.
            tasks.spawn_finishing(|stopping| async move {
                worker.run_until(stopping).await;
                Ok(())
            });
        }
        if let Some(config) = alert {
            // `all`: alerting too, when an alert receiver is configured.
            probe.alerter_consuming = Some(spawn_alerter(&mut tasks, broker, config)?);
        }
    }
    if !roles.api && (roles.worker || roles.publisher) {
        if let Some(address) = settings.ops.worker_health_listen {
            tasks.spawn(ops::serve(address, probe).await?);
        }
    }

    Ok(tasks)
}

fn spawn_alerter(
    tasks: &mut Running,
    broker: BrokerConfig,
    config: AlertConfig,
) -> anyhow::Result<tokio::sync::watch::Receiver<bool>> {
    tracing::info!(cooldown_ms = config.cooldown.as_millis() as u64, "dead-letter alerting on");
    let alerter = relayops_alerter::Alerter::new(broker, config)?;
    let consuming = alerter.consuming();
    tasks.spawn(async move {
        alerter.run().await;
        Ok(())
    });
    Ok(consuming)
}

/// `relayops alerter`: dead-letter alerting on its own, with its operations port.
pub async fn run_alerter() -> anyhow::Result<()> {
    let config = AlertConfig::from_env()?
        .ok_or_else(|| anyhow::anyhow!("RELAYOPS_ALERT_WEBHOOK_URL is required for the alerter"))?;
    let broker = BrokerConfig::from_env()?;
    let ops_config = OpsConfig::from_env()?;
    observe::install_prometheus();
    let mut tasks = Running::default();
    let probe = OpsProbe { alerter_consuming: Some(spawn_alerter(&mut tasks, broker, config)?), ..Default::default() };
    if let Some(address) = ops_config.worker_health_listen {
        tasks.spawn(ops::serve(address, probe).await?);
    }
    wait(tasks).await
}

/// A listener on `address`, or an error naming the address and the setting
/// that chose it (another process holds the port, or the address is not ours).
pub(crate) async fn listen_on(address: std::net::SocketAddr, setting: &str) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|error| anyhow::anyhow!("cannot listen on {address} ({setting}): {error}"))
}

/// What `relayops all` opens for its simulator: exactly its address and port
/// (loopback's, when it listens on every address).
fn simulator_allowance(simulator: std::net::SocketAddr) -> relayops_shared::net_policy::AllowList {
    let addresses = if simulator.ip().is_unspecified() {
        vec![
            std::net::SocketAddr::from(([127, 0, 0, 1], simulator.port())),
            std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, simulator.port())),
        ]
    } else {
        vec![simulator]
    };
    relayops_shared::net_policy::AllowList::addresses(addresses)
}
