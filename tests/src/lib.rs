//! `TestEnv`: one isolated RelayOps for one test, on real services. Each test
//! gets its own Postgres database (created, migrated, and dropped afterwards)
//! and its own RabbitMQ namespace (queues expire once unused), and runs the real
//! API router, publisher loop, worker and simulator in-process on loopback
//! ports chosen by the OS. Services come from `scripts/services.sh`.
//!
//! Connection settings: `RELAYOPS_TEST_DATABASE_URL` (a role allowed to create
//! databases) and `RELAYOPS_TEST_AMQP_URL`; the defaults match the script.
//! [`Services`] points a test elsewhere: the TLS-only servers or pgbouncer
//! (`managed`).
pub mod browser;
pub mod cluster;
pub mod console;
pub mod https;
mod inspect;
pub mod lambda;
pub mod lanes;
pub mod managed;
pub mod moto;
pub mod netns;
mod outbox;
mod process;
pub mod prometheus;
pub mod relay;
pub mod scratch;

use std::time::Duration;

use relayops_publisher::Publisher;
use std::sync::Arc;

use relayops_shared::api::{ApiState, IngestLimiter, LoginThrottle, Wakeups};
use relayops_shared::backpressure::Backpressure;
use relayops_shared::bootstrap::{bootstrap_tenant, BootstrapRequest};
use relayops_shared::config::{
    AuthConfig, BackpressureConfig, BrokerConfig, CircuitConfig, DatabaseConfig, FlowConfig, IngestConfig,
    LoginThrottleConfig, PublisherConfig, WorkerConfig,
};
use relayops_shared::db::listen::PgNotifier;
use relayops_shared::db::{self, Pool};
use relayops_shared::flow::{FlowControl, Limit};
use relayops_shared::ids::TenantId;
use relayops_shared::net_policy::AllowList;
use relayops_simulator::Simulator;
use relayops_worker::gate::Gate;
use relayops_worker::Worker;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

pub use process::{binary as relayops_binary, log_file, RoleProcess};
pub use relayops_shared;

const DEFAULT_DATABASE_URL: &str = "postgres://relayops:relayops@127.0.0.1:5432/relayops";
const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// How long a test waits for a condition before failing.
pub const WAIT: Duration = Duration::from_secs(20);
/// How long a client following the protocol goes on retrying one request
/// answered 503 or 429, in all.
pub const RETRY_BUDGET: Duration = Duration::from_secs(120);
/// The longest single wait such a client honours, whatever `Retry-After` says.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);

/// What to run; tests change the fields they care about.
#[derive(Clone)]
pub struct TestConfig {
    pub run_publisher: bool,
    pub run_worker: bool,
    pub publisher: PublisherConfig,
    pub worker: WorkerConfig,
    /// Ingest backpressure; off unless a test turns it on.
    pub backpressure: Option<BackpressureConfig>,
    /// Flow control (always on); the key prefix is set per test.
    pub flow: FlowConfig,
    /// Login tokens and the bootstrap token (random per test).
    pub auth: AuthConfig,
    /// Login throttling (the production defaults unless a test changes them).
    pub login: LoginThrottleConfig,
    /// The Postgres and RabbitMQ servers (Redis: `flow.redis_url`).
    pub services: Services,
    /// The platform admin token (random per test; `auth` holds its hash).
    pub admin_token: String,
    /// How ingest writes deliveries (the production default unless a test changes it).
    pub ingest: IngestConfig,
    /// Ready queues (`RELAYOPS_READY_SHARDS`): the production default (10),
    /// so every test runs the shards production runs.
    pub ready_shards: u16,
}

/// Which servers a test uses.
#[derive(Clone)]
pub struct Services {
    /// A role allowed to create databases; the test's database is created on
    /// the same server, with the same URL parameters (TLS settings).
    pub admin_database_url: String,
    pub amqp_url: String,
    /// The app's pool goes through a transaction-mode pooler with this URL
    /// (host and port; the test database's name is filled in) and the
    /// statement cache off; migrations and `LISTEN` stay direct.
    pub pooler_url: Option<String>,
    /// The app's list and search reads go to a streaming standby of the
    /// admin database's server listening on this port (`RELAYOPS_DATABASE_READ_URL`;
    /// the test database replicates to it by itself).
    pub reader_port: Option<u16>,
}

impl Default for Services {
    fn default() -> Self {
        Self {
            admin_database_url: std::env::var("RELAYOPS_TEST_DATABASE_URL")
                .unwrap_or_else(|_| DEFAULT_DATABASE_URL.into()),
            amqp_url: std::env::var("RELAYOPS_TEST_AMQP_URL").unwrap_or_else(|_| DEFAULT_AMQP_URL.into()),
            pooler_url: None,
            reader_port: None,
        }
    }
}

impl TestConfig {
    /// This configuration with no platform admin token: the admin API is off.
    pub fn without_admin_token(mut self) -> Self {
        self.auth.admin_token_sha256 = None;
        self
    }
}

impl Default for TestConfig {
    fn default() -> Self {
        let admin_token = format!("admin-token-{}", uuid::Uuid::new_v4().simple());
        Self {
            run_publisher: true,
            run_worker: true,
            publisher: PublisherConfig {
                idle_interval: Duration::from_millis(100),
                claim_ttl: Duration::from_secs(2),
                // Long, so retries provably travel through the retry queues, not recovery.
                recovery_grace: Duration::from_secs(30),
                ..PublisherConfig::default()
            },
            worker: WorkerConfig {
                concurrency: 16,
                request_timeout: Duration::from_secs(2),
                lease: Duration::from_secs(3),
                // The simulator listens on loopback, which production refuses.
                outbound_allow: AllowList::nets(vec!["127.0.0.0/8".parse().expect("cidr")]),
                // Endpoint circuits as in production (on, 20 failures).
                circuit: CircuitConfig::default(),
                ..WorkerConfig::default()
            },
            backpressure: None,
            flow: FlowConfig {
                redis_url: std::env::var("RELAYOPS_TEST_REDIS_URL").unwrap_or_else(|_| DEFAULT_REDIS_URL.into()),
                redis_cluster: false,
                key_prefix: String::new(),
                redis_timeout: Duration::from_millis(250),
                redis_retry: Duration::from_secs(1),
                local_divisor: 1,
                // High enough that only tests about limits meet them.
                tenant_rate_per_sec: 100_000.0,
                tenant_burst: 100_000,
                endpoint_max_in_flight: 10,
            },
            auth: AuthConfig {
                jwt_secret: Some(format!("test-jwt-secret-{}", uuid::Uuid::new_v4().simple())),
                session_lifetime: Duration::from_secs(43_200),
                session_idle: Duration::from_secs(1_800),
                bootstrap_token: Some(format!("bootstrap-{}", uuid::Uuid::new_v4().simple())),
                api_key_cache_ttl: None,
                admin_token_sha256: Some(relayops_shared::auth::admin::token_sha256(&admin_token)),
            },
            login: LoginThrottleConfig::default(),
            services: Services::default(),
            admin_token,
            ingest: IngestConfig::default(),
            ready_shards: relayops_shared::broker::DEFAULT_READY_SHARDS,
        }
    }
}

/// Polls `check` every 50 ms until it returns `Ok`, for at most `limit`;
/// panics with the last `Err` (a description of the state seen) otherwise.
pub async fn eventually<T, F, Fut>(limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(state) if tokio::time::Instant::now() >= deadline => panic!("timed out after {limit:?}: {state}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A loopback `host:port` that was free a moment ago, for a child process to bind.
pub fn free_loopback_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    format!("127.0.0.1:{}", listener.local_addr().expect("local address").port())
}

/// Waits until `GET {base}/health/ready` answers 2xx (a process we started).
pub async fn wait_until_ready(http: &reqwest::Client, base: &str) {
    let url = format!("{base}/health/ready");
    eventually(WAIT, || async {
        match http.get(&url).send().await {
            Ok(response) if response.status().is_success() => Ok(()),
            Ok(response) => Err(format!("{url} answered {}", response.status())),
            Err(error) => Err(format!("{url}: {error}")),
        }
    })
    .await
}

/// An HTTP answer: status and JSON body (`Null` when the body is not JSON).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: Value,
    pub headers: reqwest::header::HeaderMap,
}

pub struct TestEnv {
    pub api_url: String,
    pub simulator_url: String,
    pub simulator: Simulator,
    pub pool: Pool,
    pub broker: BrokerConfig,
    pub tenant_id: TenantId,
    pub api_key: String,
    /// The bootstrapped admin's login.
    pub admin_email: String,
    pub admin_password: String,
    pub http: reqwest::Client,
    pub config: TestConfig,
    /// This test's own database.
    pub database_url: String,
    /// `RELAYOPS_DATABASE_READ_URL` when the test has a reader (`Services::reader_port`).
    pub read_url: Option<String>,
    database_name: String,
    admin_url: String,
    tasks: Vec<JoinHandle<()>>,
    worker: Option<JoinHandle<()>>,
    wakeup: std::sync::Arc<Notify>,
    /// The publisher the in-process API hands its rows to, as `relayops all`
    /// does (`relayops_shared::handoff`), until the first `start_publisher`
    /// runs it. With `run_publisher: false` the API has none: its rows wait
    /// pending for whichever publisher a test starts.
    handing_publisher: Option<Publisher>,
}

fn unique_suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_owned()
}

/// Creates the empty database `name` on the server at `admin_url`; its URL.
/// Test databases are named `relayops_test_*` (`make clean-test-databases`
/// removes those an interrupted run left behind).
pub async fn create_database(admin_url: &str, name: &str) -> String {
    let admin = db::connect_pool(&DatabaseConfig::new(admin_url.to_owned(), 1)).expect("admin pool");
    let client = admin.get().await.expect("Postgres is not reachable: run scripts/services.sh");
    client.batch_execute(&format!("CREATE DATABASE {name}")).await.expect("create test database");
    let mut url = url::Url::parse(admin_url).expect("database url");
    url.set_path(name);
    url.to_string()
}

/// Drops the database `name` on the server at `admin_url`, forcing off any
/// connection still open; failures are ignored (this runs in teardown).
pub async fn drop_database(admin_url: &str, name: &str) {
    let Ok(target) = relayops_shared::db::PgTarget::parse(admin_url) else {
        return;
    };
    if let Ok((client, connection)) = target.connect().await {
        tokio::spawn(connection);
        let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
    }
}

/// Runs `teardown` to completion on a thread and runtime of its own, for a
/// `Drop`: it cannot await, and must also run when the test panicked. Tests
/// use the multi-threaded runtime so that a connection still being opened by
/// a pool can finish its handshake while this blocks; otherwise its backend
/// sits in authentication and DROP DATABASE waits for it (up to 60 s).
pub(crate) fn run_on_own_thread(teardown: impl std::future::Future<Output = ()> + Send + 'static) {
    let _ = std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
            return;
        };
        runtime.block_on(teardown);
    })
    .join();
}

/// The API's state as every role builds it from `config` (auth, ingest rate
/// limit, login throttle, outbound allow-list), without wake-ups: callers
/// add their own.
pub(crate) fn api_state(pool: &Pool, config: &TestConfig) -> ApiState {
    let flow = FlowControl::new(&config.flow).expect("redis url");
    let throttle = LoginThrottle::new(flow.clone(), config.login.clone());
    let limiter = IngestLimiter {
        flow,
        default: Limit { per_second: config.flow.tenant_rate_per_sec, burst: config.flow.tenant_burst },
    };
    ApiState::new(pool.clone())
        .with_auth(&config.auth)
        .expect("auth config")
        .with_ingest_limiter(limiter)
        // The API refuses endpoint URLs the worker would refuse to send to.
        .with_outbound_allow(config.worker.outbound_allow.clone())
        .with_login_throttle(throttle)
        .with_platform_retention(config.publisher.history.retention)
        .with_ingest_config(&config.ingest)
}

/// The test database's URL on the standby listening on `port`, once the
/// standby has replayed its bootstrap (a tenant row).
async fn replayed_on_reader(database_url: &str, port: u16) -> String {
    let mut url = url::Url::parse(database_url).expect("database url");
    url.set_port(Some(port)).expect("port");
    let read_url = url.to_string();
    let pool = db::connect_pool(&DatabaseConfig::new(read_url.clone(), 1)).expect("reader pool");
    eventually(WAIT, || async {
        let client = pool.get().await.map_err(|error| format!("the standby on :{port}: {error}"))?;
        let row = client
            .query_one("SELECT count(*) FROM relayops.tenants", &[])
            .await
            .map_err(|error| format!("the standby on :{port}: {error}"))?;
        (row.get::<_, i64>(0) > 0).then_some(()).ok_or_else(|| "the bootstrap is not replayed yet".to_owned())
    })
    .await;
    read_url
}

async fn spawn_http(router: axum::Router) -> (String, JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let address = listener.local_addr().expect("local address");
    // As `relayops api` serves it: the peer address is the client's.
    let service = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, service).await;
    });
    (format!("http://{address}"), task)
}

/// Another real receiver on loopback (a simulator of its own, so it verifies
/// signatures only against the secrets registered with it); its base URL.
pub async fn start_receiver() -> (Simulator, String) {
    let simulator = Simulator::new();
    let (url, _task) = spawn_http(relayops_simulator::router(simulator.clone())).await;
    (simulator, url)
}

/// The client addresses (so the TCP connections) a receiver was sent over.
#[derive(Clone, Default)]
pub struct Connections(Arc<std::sync::Mutex<std::collections::HashSet<std::net::SocketAddr>>>);

impl Connections {
    /// How many distinct connections requests came over.
    pub fn count(&self) -> usize {
        self.0.lock().expect("connections lock").len()
    }
}

/// As [`start_receiver`], also noting the connection each request came over
/// (its client address: a port is not reused while the connection before it
/// lingers in `TIME_WAIT`).
pub async fn start_receiver_noting_connections() -> (Simulator, String, Connections) {
    use axum::extract::{ConnectInfo, Request};
    let simulator = Simulator::new();
    let connections = Connections::default();
    let noted = connections.clone();
    let router = relayops_simulator::router(simulator.clone()).layer(axum::middleware::from_fn(
        move |ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>, request: Request, next: axum::middleware::Next| {
            noted.0.lock().expect("connections lock").insert(peer);
            next.run(request)
        },
    ));
    let (url, _task) = spawn_http(router).await;
    (simulator, url, connections)
}

/// Another tenant ([`TestEnv::second_account`]) and its admin's login.
pub struct SecondAccount {
    pub tenant_id: TenantId,
    pub api_key: String,
    pub email: String,
    pub password: String,
}

impl TestEnv {
    pub async fn start() -> Self {
        Self::start_with(TestConfig::default()).await
    }

    pub async fn start_with(mut config: TestConfig) -> Self {
        relayops_shared::telemetry::init();
        // Metrics are per process; nextest runs each test in its own.
        relayops_shared::observe::install_prometheus();
        let admin_url = config.services.admin_database_url.clone();
        let amqp_url = config.services.amqp_url.clone();
        let suffix = unique_suffix();
        config.flow.key_prefix = format!("test:{suffix}");
        let database_name = format!("relayops_test_{suffix}");

        let database_url = create_database(&admin_url, &database_name).await;
        // Migrations always go direct (they hold a session advisory lock); the
        // direct pool stays the app's unless a pooler is asked for (and then
        // its warm connection is dropped).
        let direct = db::connect_pool(&DatabaseConfig::new(database_url.clone(), 8)).expect("pool");
        let mut client = direct.get().await.expect("test database connection");
        db::migrate::run(&mut client).await.expect("migrations");
        db::partitions::ensure(&client, &config.publisher.history).await.expect("history partitions");
        drop(client);
        let pool = match &config.services.pooler_url {
            None => direct,
            Some(pooler) => {
                direct.close();
                let mut url = url::Url::parse(pooler).expect("pooler url");
                url.set_path(&database_name);
                let pooled = DatabaseConfig { statement_cache: false, ..DatabaseConfig::new(url.to_string(), 8) };
                db::connect_pool(&pooled).expect("pool")
            }
        };

        let broker = BrokerConfig {
            url: amqp_url,
            namespace: format!("test.{suffix}"),
            // Teardown deletes the namespace; expiry is only the backstop for a
            // test process that was killed. Kept longer than a test run: many
            // quorum queues expiring at once stall RabbitMQ for up to a minute.
            queue_expires_ms: Some(1_800_000),
            // Few buckets keep the broker light with many tests at once.
            retry_delays_ms: vec![250, 1_000, 5_000],
            ready_shards: config.ready_shards,
        };
        let admin_email = format!("admin-{suffix}@example.com");
        let admin_password = format!("pw-{}", uuid::Uuid::new_v4().simple());
        let request =
            BootstrapRequest { tenant_name: "Test tenant", admin_email: &admin_email, admin_password: &admin_password };
        let tenant = bootstrap_tenant(&pool, &request).await.expect("bootstrap");
        // Open a few connections before the components start: a new one costs
        // ~0.1 s of CPU in a debug build (SCRAM's PBKDF2, plus TLS when the
        // server offers it), spent on a runtime thread, which would otherwise
        // land in the first requests and stall the test's own timers.
        let warm: Vec<_> = futures_util::future::join_all((0..4).map(|_| pool.get())).await;
        drop(warm);

        // Declare the topology up front (quorum queues take a moment to create on
        // a busy broker), so components start against queues that exist.
        let connection =
            relayops_shared::broker::connect(&broker, "test-setup").await.expect("RabbitMQ is not reachable");
        let channel = connection.create_channel().await.expect("channel");
        relayops_shared::broker::Topology::new(&broker).declare(&channel).await.expect("topology");
        let _ = connection.close(0, "setup done").await;

        let read_url = match config.services.reader_port {
            None => None,
            Some(port) => Some(replayed_on_reader(&database_url, port).await),
        };

        let simulator = Simulator::new();
        let (simulator_url, simulator_task) = spawn_http(relayops_simulator::router(simulator.clone())).await;
        let wakeup = std::sync::Arc::new(Notify::new());
        let mut state = api_state(&pool, &config)
            .with_wakeup(Arc::new(Wakeups(vec![wakeup.clone(), Arc::new(PgNotifier::new(pool.clone()))])));
        if let Some(read_url) = &read_url {
            let reader = db::connect_pool(&DatabaseConfig::new(read_url.clone(), 4)).expect("reader pool");
            state = state.with_reads(db::Reads::with_reader(pool.clone(), reader));
        }
        let handing_publisher =
            config.run_publisher.then(|| Publisher::new(pool.clone(), broker.clone(), config.publisher.clone()));
        if let Some(publisher) = &handing_publisher {
            state = state.with_handoff(publisher.handoff());
        }
        let mut tasks = vec![simulator_task];
        if let Some(backpressure_config) = &config.backpressure {
            let backpressure = Backpressure::new(backpressure_config.clone());
            tasks.push(backpressure.start_sampler(pool.clone(), broker.clone()).await);
            state = state.with_backpressure(backpressure);
        }
        let (api_url, api_task) = spawn_http(relayops::api_router(state)).await;
        tasks.push(api_task);
        let mut env = Self {
            api_url,
            simulator_url,
            simulator,
            pool,
            broker,
            tenant_id: tenant.tenant_id,
            api_key: tenant.api_key.expose().to_owned(),
            admin_email,
            admin_password,
            http: reqwest::Client::new(),
            config: config.clone(),
            database_url,
            read_url,
            database_name,
            admin_url,
            tasks,
            worker: None,
            wakeup,
            handing_publisher,
        };
        if config.run_publisher {
            env.start_publisher();
        }
        if config.run_worker {
            env.start_worker().await;
        }
        env
    }

    /// Starts an outbox publisher loop (woken by this env's ingest; the first
    /// one started in an env with `run_publisher` takes its API's hand-off).
    pub fn start_publisher(&mut self) {
        let listener = db::listen::wake_on_outbox_inserts(self.database_url.clone(), self.wakeup.clone());
        self.tasks.push(tokio::spawn(listener));
        let publisher = self
            .handing_publisher
            .take()
            .unwrap_or_else(|| Publisher::new(self.pool.clone(), self.broker.clone(), self.config.publisher.clone()));
        self.tasks.push(tokio::spawn(std::sync::Arc::new(publisher).run(self.wakeup.clone())));
    }

    /// Starts a worker with the test's worker config (replacing none).
    /// Returns once the worker consumes, so tests time their work, not start-up.
    pub async fn start_worker(&mut self) {
        self.worker = Some(self.spawn_worker(self.pool.clone(), self.config.worker.clone()).await);
    }

    /// Starts a worker on `pool` with `config` (give it a `worker_id` of its
    /// own), beside any other; returns once it consumes. Aborting the handle
    /// kills it as a crash would.
    pub async fn spawn_worker(&self, pool: Pool, config: WorkerConfig) -> JoinHandle<()> {
        let gate = Gate::from_config(&self.config.flow, &config).expect("redis url");
        let worker = Worker::new(pool, self.broker.clone(), config, gate).expect("worker");
        let mut consuming = worker.consuming();
        let handle = tokio::spawn(async move { worker.run().await });
        // Room for one SETUP_TIMEOUT reconnect on a busy broker.
        tokio::time::timeout(Duration::from_secs(40), consuming.wait_for(|consuming| *consuming))
            .await
            .expect("the worker started consuming within 40 s")
            .expect("worker alive");
        handle
    }

    /// Kills the worker as a crash would: in-flight work is dropped unsettled.
    pub async fn kill_worker(&mut self) {
        if let Some(worker) = self.worker.take() {
            worker.abort();
            let _ = worker.await;
        }
    }

    /// Another tenant on the same installation: its admin's login and API key.
    pub async fn second_account(&self) -> SecondAccount {
        let email = format!("other-{}@example.com", unique_suffix());
        let password = "other-password-1";
        let request = BootstrapRequest { tenant_name: "Other tenant", admin_email: &email, admin_password: password };
        let tenant = bootstrap_tenant(&self.pool, &request).await.expect("second tenant");
        SecondAccount {
            tenant_id: tenant.tenant_id,
            api_key: tenant.api_key.expose().to_owned(),
            email,
            password: password.to_owned(),
        }
    }

    /// Another tenant on the same installation, with its own admin key.
    pub async fn second_tenant(&self) -> (TenantId, String) {
        let account = self.second_account().await;
        (account.tenant_id, account.api_key)
    }

    pub async fn request(&self, method: reqwest::Method, path: &str, key: Option<&str>, body: Option<Value>) -> Answer {
        let mut request = self.http.request(method, format!("{}{path}", self.api_url));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        Answer::from(request.send().await.expect("API request")).await
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.request(reqwest::Method::GET, path, Some(&self.api_key), None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Answer {
        self.request(reqwest::Method::POST, path, Some(&self.api_key), Some(body)).await
    }

    /// Creates an endpoint at a simulator path and registers its secret with the
    /// simulator, so the simulator verifies every signature. Extra fields
    /// (e.g. `max_attempts`) are merged into the request.
    pub async fn create_endpoint(&self, simulator_path: &str, event_types: &[&str], extra: Value) -> Value {
        let url = format!("{}{simulator_path}", self.simulator_url);
        self.create_endpoint_on(&self.simulator, &url, event_types, extra).await
    }

    /// As [`create_endpoint`](Self::create_endpoint), at `url` on another
    /// receiver (`simulator`, which then verifies this endpoint's signatures).
    pub async fn create_endpoint_on(
        &self,
        simulator: &Simulator,
        url: &str,
        event_types: &[&str],
        extra: Value,
    ) -> Value {
        let mut body = json!({ "url": url, "event_types": event_types });
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        let answer = self.post("/v1/endpoints", body).await;
        assert_eq!(answer.status, 201, "endpoint creation failed: {:?}", answer.body);
        let secret = answer.body["secret"].as_str().expect("secret in creation response");
        simulator.register_secret(secret).expect("simulator accepts the secret");
        answer.body
    }

    /// Posts an event as a client following the protocol: with an
    /// `Idempotency-Key` of its own, and a 503 or 429 sent again after its
    /// `Retry-After` (see [`send_following_protocol`]).
    pub async fn post_event(&self, event_type: &str, payload: Value) -> Answer {
        self.post_event_retrying(event_type, payload).await.answer
    }

    /// Posts `count` events of `event_type`, one at a time, with payloads
    /// `{"n": 0}`, `{"n": 1}`, …; each must be stored (201). Their ids, in order.
    pub async fn post_numbered_events(&self, event_type: &str, count: usize) -> Vec<String> {
        let mut ids = Vec::with_capacity(count);
        for n in 0..count {
            let answer = self.post_event(event_type, json!({ "n": n })).await;
            assert_eq!(answer.status, 201, "{:?}", answer.body);
            ids.push(answer.body["id"].as_str().expect("event id").to_owned());
        }
        ids
    }

    /// As [`post_event`](Self::post_event), also returning the refusals retried.
    pub async fn post_event_retrying(&self, event_type: &str, payload: Value) -> Persisted {
        let key = format!("test-{}", uuid::Uuid::new_v4().simple());
        self.post_event_with_key(event_type, payload, &key).await
    }

    /// As [`post_event_retrying`](Self::post_event_retrying), with the
    /// `Idempotency-Key` given (for tests about keys).
    pub async fn post_event_with_key(&self, event_type: &str, payload: Value, key: &str) -> Persisted {
        let body = json!({ "event_type": event_type, "payload": payload });
        let url = format!("{}/v1/events", self.api_url);
        send_following_protocol(|| {
            self.http.post(&url).bearer_auth(&self.api_key).header("idempotency-key", key).json(&body)
        })
        .await
    }

    /// Posts an event once, without a key, and returns whatever the answer is
    /// (for tests about refusals themselves).
    pub async fn post_event_once(&self, event_type: &str, payload: Value) -> Answer {
        self.post("/v1/events", json!({ "event_type": event_type, "payload": payload })).await
    }

    /// Rows in a table of this test's database (all tenants).
    pub async fn count(&self, table: &str) -> i64 {
        let client = self.pool.get().await.expect("connection");
        // Unnamed statements (`query_typed`): the pool may be behind pgbouncer.
        let rows = client.query_typed(&format!("SELECT count(*) FROM relayops.{table}"), &[]).await.expect("count");
        rows[0].get(0)
    }

    /// The one `bigint` a query of this test's database answers.
    pub async fn query_i64(&self, sql: &str) -> i64 {
        let client = self.pool.get().await.expect("connection");
        client.query_typed(sql, &[]).await.expect("query")[0].get(0)
    }

    /// Polls the query API until the event's deliveries satisfy `done`.
    pub async fn wait_for_deliveries(&self, event_id: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        self.wait_for_deliveries_within(event_id, WAIT, done).await
    }

    pub async fn wait_for_deliveries_within(
        &self,
        event_id: &str,
        limit: Duration,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let path = format!("/v1/events/{event_id}/deliveries");
        let done = &done;
        eventually(limit, || async {
            let answer = self.get(&path).await;
            let deliveries = answer.body["data"].as_array().cloned().unwrap_or_default();
            if done(&deliveries) {
                Ok(deliveries)
            } else {
                Err(format!("deliveries never reached the expected state: {deliveries:#?}"))
            }
        })
        .await
    }

    /// Waits until the event's single delivery has `status`; returns it.
    pub async fn wait_for_status(&self, event_id: &str, status: &str) -> Value {
        self.wait_for_status_within(event_id, status, WAIT).await
    }

    pub async fn wait_for_status_within(&self, event_id: &str, status: &str, limit: Duration) -> Value {
        let deliveries =
            self.wait_for_deliveries_within(event_id, limit, |all| all.len() == 1 && all[0]["status"] == status).await;
        deliveries[0].clone()
    }

    /// Polls `GET /health/ready` until its readiness is `ready`; returns the body.
    pub async fn wait_for_readiness(&self, ready: bool) -> Value {
        eventually(WAIT, || async {
            let answer = self.request(reqwest::Method::GET, "/health/ready", None, None).await;
            if (answer.status == 200) == ready {
                Ok(answer.body)
            } else {
                Err(format!("readiness never became {ready}: {:?}", answer.body))
            }
        })
        .await
    }

    /// Polls a SQL condition (a query returning one boolean) until it holds.
    pub async fn wait_for_sql(&self, what: &str, sql: &str) {
        eventually(WAIT, || async {
            let client = self.pool.get().await.expect("connection");
            let rows = client.query_typed(sql, &[]).await.expect("condition query");
            let holds: bool = rows[0].get(0);
            if holds {
                Ok(())
            } else {
                Err(format!("waiting for: {what}"))
            }
        })
        .await
    }
}

impl Answer {
    /// Reads a response (status, content type, JSON body, headers).
    pub async fn from(response: reqwest::Response) -> Self {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let content_type = headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = response.bytes().await.unwrap_or_default();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Self { status, content_type, body, headers }
    }

    /// Asserts an RFC 7807 problem with this status; returns its detail.
    pub fn expect_problem(&self, status: u16) -> String {
        assert_eq!(self.status, status, "unexpected answer: {:?}", self.body);
        assert_eq!(self.content_type, "application/problem+json", "problem content type");
        assert_eq!(self.body["status"], status, "problem status field: {:?}", self.body);
        let detail = self.body["detail"].as_str().unwrap_or_default().to_owned();
        assert!(!detail.is_empty(), "problem without a detail: {:?}", self.body);
        detail
    }
}

/// An answer and the refusals (503, 429) retried before it, in order.
#[derive(Debug)]
pub struct Persisted {
    pub answer: Answer,
    pub refused: Vec<u16>,
}

/// Sends the request `build` makes — each time with the same body and
/// `Idempotency-Key` — until the answer is neither 503 nor 429, waiting as
/// each `Retry-After` says (1 s without one, at most 10 s), for at most
/// [`RETRY_BUDGET`] in all; then returns the last answer. This is what the API
/// asks of its clients; a refusal writes nothing, so a retry never doubles an
/// event.
pub async fn send_following_protocol(mut build: impl FnMut() -> reqwest::RequestBuilder) -> Persisted {
    let started = tokio::time::Instant::now();
    let mut refused = Vec::new();
    loop {
        let answer = Answer::from(build().send().await.expect("API request")).await;
        if !matches!(answer.status, 503 | 429) {
            return Persisted { answer, refused };
        }
        let wait = answer
            .headers
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok()?.trim().parse::<u64>().ok())
            .map_or(Duration::from_secs(1), Duration::from_secs)
            .min(MAX_RETRY_AFTER);
        if started.elapsed() + wait > RETRY_BUDGET {
            return Persisted { answer, refused };
        }
        refused.push(answer.status);
        tokio::time::sleep(wait).await;
    }
}

/// A loopback listener that takes TCP connections and never says anything (a
/// peer that accepts but never answers); it holds them until the task ends.
pub async fn silent_listener() -> (std::net::SocketAddr, JoinHandle<()>) {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = silent.local_addr().expect("address");
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    (address, holder)
}

/// Runs `rabbitmqctl` (the broker under test is local); panics if it fails.
pub fn rabbitmqctl(args: &[&str]) {
    assert!(try_rabbitmqctl(args), "rabbitmqctl {args:?} failed");
}

/// Kills the local RabbitMQ node (the default one, which `rabbitmqctl` talks
/// to) as a crash would: SIGKILL to its Erlang VM.
pub fn kill_rabbitmq_node() {
    kill_rabbitmq_vm(&[]);
}

/// SIGKILL to the Erlang VM of the node `rabbitmqctl <node_args>` talks to
/// (none: the default node; `["-n", name]`: another); waits until it is gone.
pub fn kill_rabbitmq_vm(node_args: &[&str]) {
    let pid = std::process::Command::new("rabbitmqctl")
        .args(node_args)
        .args(["eval", "os:getpid()."])
        .output()
        .expect("rabbitmqctl");
    let pid: String = String::from_utf8_lossy(&pid.stdout).chars().filter(char::is_ascii_digit).collect();
    assert!(!pid.is_empty(), "no RabbitMQ node to kill ({node_args:?})");
    let killed = std::process::Command::new("kill").args(["-KILL", &pid]).status();
    assert!(killed.is_ok_and(|s| s.success()), "kill -KILL {pid} failed");
    wait_blocking("the RabbitMQ node to die", || !quiet_rabbitmqctl(&[node_args, &["status"]].concat()));
}

/// `rabbitmqctl -n <node> -q <args>`'s standard output; panics if it fails.
pub fn rabbitmqctl_on(node: &str, args: &[&str]) -> String {
    let output =
        std::process::Command::new("rabbitmqctl").args(["-n", node, "-q"]).args(args).output().expect("rabbitmqctl");
    assert!(output.status.success(), "rabbitmqctl -n {node} {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Starts the local RabbitMQ node as `scripts/services.sh` does, and waits
/// until it serves.
pub fn start_rabbitmq_node() {
    let started = std::process::Command::new("rabbitmq-server")
        .arg("-detached")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    assert!(started.is_ok_and(|s| s.success()), "rabbitmq-server -detached failed");
    wait_blocking("RabbitMQ to start", || quiet_rabbitmqctl(&["await_startup", "--timeout", "5"]));
}

/// Runs `pg_ctlcluster <version> main <args>` on the local cluster (the newest
/// installed version, as `scripts/services.sh` picks it); after a start, waits
/// until it accepts connections.
pub fn postgres_cluster(args: &[&str]) {
    let version = postgres_version();
    // pg_ctl waits 60 s for a start by default; a start after a crash may
    // spend longer in recovery on a busy machine with many test databases.
    let wait_longer: &[&str] = if args.first() == Some(&"start") { &["--", "-t", "300"] } else { &[] };
    let status = std::process::Command::new("pg_ctlcluster")
        .arg(version.to_string())
        .arg("main")
        .args(args)
        .args(wait_longer)
        .stdout(std::process::Stdio::null())
        .status();
    assert!(status.is_ok_and(|s| s.success()), "pg_ctlcluster {args:?} failed");
    if args.first() == Some(&"start") {
        wait_blocking("PostgreSQL to accept connections", || {
            std::process::Command::new("pg_isready")
                .args(["-h", "127.0.0.1", "-p", "5432", "-q"])
                .status()
                .is_ok_and(|s| s.success())
        });
    }
}

/// The newest PostgreSQL version installed (as `scripts/services.sh` picks it).
pub fn postgres_version() -> u32 {
    std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL installed")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .max()
        .expect("a PostgreSQL version")
}

/// Polls a blocking condition every 200 ms for up to two minutes.
fn wait_blocking(what: &str, mut holds: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !holds() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs `rabbitmqctl`; whether it succeeded (for teardown, which must not panic).
fn try_rabbitmqctl(args: &[&str]) -> bool {
    let status = std::process::Command::new("rabbitmqctl").args(args).stdout(std::process::Stdio::null()).status();
    status.is_ok_and(|s| s.success())
}

/// As [`try_rabbitmqctl`], without its error output (for polling).
fn quiet_rabbitmqctl(args: &[&str]) -> bool {
    let mut command = std::process::Command::new("rabbitmqctl");
    command.args(args).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    command.status().is_ok_and(|s| s.success())
}

/// A RabbitMQ policy that makes every queue of the test's namespace matching
/// `queues` (a regex suffix, e.g. `delay\..*`) refuse new messages (max length
/// 0, reject-publish): publishes to them are nacked. Removed when dropped.
pub struct RefusingQueues {
    name: String,
}

impl RefusingQueues {
    pub fn apply(broker: &BrokerConfig, queues: &str) -> Self {
        let name = format!("{}-refusing", broker.namespace);
        let pattern = format!("^{}\\.{queues}$", broker.namespace.replace('.', "\\."));
        let definition = r#"{"max-length":0,"overflow":"reject-publish"}"#;
        rabbitmqctl(&["set_policy", "--apply-to", "queues", "--priority", "10", &name, &pattern, definition]);
        Self { name }
    }
}

impl Drop for RefusingQueues {
    fn drop(&mut self) {
        try_rabbitmqctl(&["clear_policy", &self.name]);
    }
}

/// Deletes a test's RabbitMQ queues and exchanges (best effort: a broker that
/// is down leaves them to the `x-expires` backstop).
async fn delete_broker_namespace(broker: &BrokerConfig) {
    let Ok(connection) = relayops_shared::broker::connect(broker, "test-teardown").await else {
        return;
    };
    if let Ok(channel) = connection.create_channel().await {
        if let Err(error) = relayops_shared::broker::Topology::new(broker).delete(&channel).await {
            eprintln!("teardown: deleting the test's broker namespace failed: {error:?}");
        }
    }
    let _ = connection.close(0, "teardown done").await;
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        for task in self.tasks.drain(..).chain(self.worker.take()) {
            task.abort();
        }
        self.pool.close();
        // The database and the test's queues and exchanges go from a thread of
        // their own (see `run_on_own_thread`).
        let admin_url = self.admin_url.clone();
        let name = self.database_name.clone();
        let broker = self.broker.clone();
        run_on_own_thread(async move {
            drop_database(&admin_url, &name).await;
            let _ = tokio::time::timeout(Duration::from_secs(10), delete_broker_namespace(&broker)).await;
        });
    }
}
