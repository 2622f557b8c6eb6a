//! Managed services for real (SPEC §7): Postgres, RabbitMQ and Redis over TLS
//! with verification, refused when the certificate is not from the trusted
//! CA, and the HTTP functions and publisher through pgbouncer in transaction
//! mode. The servers are `scripts/tls-services.sh`'s.
use relayops_shared::broker;
use relayops_shared::config::{BrokerConfig, DatabaseConfig};
use relayops_shared::db::{self, PgTarget};
use relayops_shared::flow::FlowControl;
use relayops_shared::telemetry::error_chain;
use relayops_tests::managed::{self, amqps_url, ca_file, other_ca_file, postgres_tls_url, rediss_url};
use relayops_tests::{eventually, TestConfig, TestEnv, WAIT};
use serde_json::{json, Value};
use std::time::Duration;

fn tls_config() -> TestConfig {
    let mut config = TestConfig { services: managed::tls_services(), ..TestConfig::default() };
    config.flow.redis_url = rediss_url(&ca_file());
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_is_delivered_with_postgres_rabbitmq_and_redis_all_over_verified_tls() {
    let env = TestEnv::start_with(tls_config()).await;
    env.create_endpoint("/sim/ok", &["order.created"], json!({})).await;
    let answer = env.post_event("order.created", json!({ "order": 7 })).await;
    assert_eq!(answer.status, 201, "{:?}", answer.body);
    let event_id = answer.body["id"].as_str().unwrap().to_owned();
    env.wait_for_status(&event_id, "delivered").await;
    assert_eq!(env.simulator.received()[0].signature_valid, Some(true));

    // Postgres: every session of the test's database is encrypted.
    let client = env.pool.get().await.unwrap();
    let row = client
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE s.ssl), min(s.version)
               FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
              WHERE a.datname = current_database()",
            &[],
        )
        .await
        .unwrap();
    let (sessions, encrypted, version): (i64, i64, Option<String>) = (row.get(0), row.get(1), row.get(2));
    assert!(sessions >= 2, "the pool and the LISTEN connection are open: {sessions}");
    assert_eq!(encrypted, sessions, "every session is TLS");
    assert!(version.unwrap_or_default().starts_with("TLSv1."), "negotiated a TLS version");

    // RabbitMQ: the worker's and the publisher's connections are TLS.
    let connections = managed::rabbitmqctl_tls_node(&["list_connections", "ssl", "client_properties"]);
    for role in ["relayops-worker", "relayops-publisher"] {
        let line = connections.lines().find(|line| line.contains(role));
        let line = line.unwrap_or_else(|| panic!("no {role} connection on the AMQPS node: {connections}"));
        assert!(line.starts_with("true"), "{role} connection is not TLS: {line}");
    }

    // Redis: the server listens on its TLS port only, and our clients are connected there.
    let mut redis = redis::Client::build_with_tls(
        rediss_url(&ca_file()).as_str(),
        redis::TlsCertificates { client_tls: None, root_cert: Some(std::fs::read(ca_file()).unwrap()) },
    )
    .unwrap()
    .get_multiplexed_async_connection()
    .await
    .unwrap();
    let port: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("port").query_async(&mut redis).await.unwrap();
    assert_eq!(port[1], "0", "no plaintext listener");
    let clients: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut redis).await.unwrap();
    let on_tls_port = format!("laddr=127.0.0.1:{}", managed::REDIS_TLS_PORT);
    assert!(
        clients.lines().filter(|line| line.contains(&on_tls_port)).count() >= 3,
        "the ingest limiter, the worker's gate and this check are connected over TLS: {clients}"
    );
}

/// What a client trusting the wrong CA gets from each server: a refusal
/// naming the service and the reason, on one line — never a plaintext session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_not_from_the_trusted_ca_is_refused_with_an_error_naming_the_service() {
    let other = other_ca_file();

    for mode in ["verify-full", "verify-ca", "require"] {
        let pool = db::connect_pool(&DatabaseConfig::new(postgres_tls_url("postgres", mode, &other), 1)).unwrap();
        let error = pool.get().await.map(|_| ()).map_err(db::DbError::from).expect_err(mode);
        let text = error_chain(&error);
        assert!(text.starts_with("Postgres is unavailable"), "{mode}: {text}");
        assert!(text.contains("invalid peer certificate: UnknownIssuer"), "{mode}: {text}");
    }

    let broker = BrokerConfig { url: amqps_url(&other), ..test_broker() };
    let error = broker::connect(&broker, "wrong-ca").await.expect_err("refused");
    let text = error_chain(&error);
    assert!(text.starts_with("cannot connect to RabbitMQ"), "{text}");
    assert!(text.contains("UnknownIssuer"), "{text}");

    let mut flow = tls_config().flow;
    flow.redis_url = rediss_url(&other);
    // What is checked is the refusal's reason, not the limiter's 250 ms bound:
    // on a busy machine the handshake alone can take longer than that.
    flow.redis_timeout = Duration::from_secs(10);
    let error = FlowControl::new(&flow).unwrap().ping().await.expect_err("refused");
    let text = error_chain(&error);
    assert!(text.starts_with("redis is unavailable"), "{text}");
    assert!(text.contains("UnknownIssuer"), "{text}");

    // Started as an operator would: one line on stderr, naming Postgres.
    let output = std::process::Command::new(relayops_tests::relayops_binary())
        .arg("migrate")
        .env("RELAYOPS_DATABASE_URL", postgres_tls_url("postgres", "verify-full", &other))
        .env("RELAYOPS_LOG", "off")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("Postgres is unavailable") && stderr.contains("UnknownIssuer"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sslmodes_check_what_libpq_checks_and_the_server_refuses_plaintext() {
    let ca = ca_file();
    // The certificate names 127.0.0.1 and localhost; connect to 127.0.0.1 under another name.
    let renamed = |mode: &str| {
        format!(
            "postgres://relayops:relayops@db.invalid:5433/postgres?hostaddr=127.0.0.1&sslmode={mode}&sslrootcert={ca}"
        )
    };
    let connects = |url: String| async move {
        let target = PgTarget::parse(&url).unwrap();
        match target.connect().await {
            Ok((client, connection)) => {
                tokio::spawn(connection);
                let row = client.query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]).await;
                Ok(row.unwrap().get::<_, bool>(0))
            }
            Err(error) => Err(error_chain(&error)),
        }
    };
    let refused = connects(renamed("verify-full")).await.expect_err("host name checked");
    assert!(refused.contains("not valid for name \"db.invalid\""), "{refused}");
    assert_eq!(connects(renamed("verify-ca")).await, Ok(true), "verify-ca checks the chain only");
    assert_eq!(connects(renamed("require")).await, Ok(true), "require encrypts");
    assert_eq!(connects(postgres_tls_url("postgres", "verify-full", &ca)).await, Ok(true));
    assert_eq!(connects(postgres_tls_url("postgres", "prefer", &ca)).await, Ok(true), "prefer takes TLS when offered");
    // Like RDS with rds.force_ssl: no plaintext session at all.
    let plaintext = connects(postgres_tls_url("postgres", "disable", &ca)).await.expect_err("plaintext refused");
    assert!(plaintext.contains("no encryption"), "{plaintext}");
}

fn test_broker() -> BrokerConfig {
    BrokerConfig {
        url: String::new(),
        namespace: format!("test.{}", uuid::Uuid::new_v4().simple()),
        queue_expires_ms: Some(60_000),
        retry_delays_ms: vec![250],
        ready_shards: 1,
    }
}

/// RDS Proxy's local stand-in: every HTTP function and the publisher work
/// through pgbouncer in transaction mode (no prepared statement survives a
/// transaction there) under many concurrent requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_query_and_the_publisher_work_through_pgbouncer_in_transaction_mode() {
    let env = TestEnv::start_with(TestConfig { services: managed::pooled_services(), ..TestConfig::default() }).await;
    env.create_endpoint("/sim/ok", &["order.*"], json!({})).await;

    const EVENTS: usize = 200;
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..EVENTS {
        let (http, api, key) = (env.http.clone(), env.api_url.clone(), env.api_key.clone());
        tasks.spawn(async move {
            let post = http
                .post(format!("{api}/v1/events"))
                .bearer_auth(&key)
                .json(&json!({ "event_type": "order.created", "payload": { "n": n }, "idempotency_key": format!("k{n}") }))
                .send()
                .await
                .unwrap();
            let status = post.status().as_u16();
            let body: Value = post.json().await.unwrap();
            let id = body["id"].as_str().unwrap_or_default().to_owned();
            // Reads interleaved with the writes, on the same pooled connections.
            let read = http.get(format!("{api}/v1/events/{id}")).bearer_auth(&key).send().await.unwrap();
            let list = http.get(format!("{api}/v1/deliveries?limit=5")).bearer_auth(&key).send().await.unwrap();
            (status, read.status().as_u16(), list.status().as_u16(), body)
        });
    }
    while let Some(result) = tasks.join_next().await {
        let (posted, read, listed, body) = result.unwrap();
        assert_eq!((posted, read, listed), (201, 200, 200), "{body}");
    }
    // A repeated key through the pooler answers the original.
    let repeat = env
        .post("/v1/events", json!({ "event_type": "order.created", "payload": { "n": 0 }, "idempotency_key": "k0" }))
        .await;
    assert_eq!(repeat.status, 200, "{:?}", repeat.body);
    let batch = env
        .post("/v1/events/batch", json!({ "events": (0..50).map(|n| json!({ "event_type": "order.batched", "payload": { "n": n } })).collect::<Vec<_>>() }))
        .await;
    assert_eq!(batch.status, 200, "{:?}", batch.body);

    env.wait_for_sql(
        "every delivery delivered through the pooler",
        &format!("SELECT count(*) = {} FROM relayops.deliveries WHERE status = 'delivered'", EVENTS + 50),
    )
    .await;

    // The pool really went through pgbouncer: it has a pool for this database.
    let pools = eventually(WAIT, || async {
        let target = PgTarget::parse(&format!(
            "postgres://relayops:relayops@127.0.0.1:{}/pgbouncer?sslmode=disable",
            managed::PGBOUNCER_PORT
        ))
        .unwrap();
        let (client, connection) = target.connect().await.map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let rows = client.simple_query("SHOW POOLS").await.map_err(|e| e.to_string())?;
        Ok::<_, String>(format!("{rows:?}"))
    })
    .await;
    let database = env.database_url.rsplit('/').next().unwrap().to_owned();
    assert!(pools.contains(&database), "pgbouncer has no pool for {database}");
}
