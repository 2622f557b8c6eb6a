//! Operations: `/metrics` counts what happened, request ids, the worker's
//! attempt log line, and readiness naming pending migrations. Processes under
//! test are real `relayops` children, so their metrics are theirs alone.
use relayops_tests::prometheus::{sample, scrape};
use relayops_tests::relayops_shared::config::DatabaseConfig;
use relayops_tests::relayops_shared::db;
use relayops_tests::{eventually, free_loopback_address, wait_until_ready, TestConfig, TestEnv, WAIT};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_delivered_failed_duplicate_and_rejected_events() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, run_publisher: false, ..Default::default() }).await;
    let (api_listen, ops_listen) = (free_loopback_address(), free_loopback_address());
    let log = relayops_tests::log_file("api");
    let api_env = [("RELAYOPS_API_LISTEN", api_listen.as_str()), ("RELAYOPS_LOG", "info")];
    let _api = env.spawn_role_logging("api", &api_env, Some(&log));
    let _worker = env.spawn_role(
        "worker",
        &[("RELAYOPS_WORKER_HEALTH_LISTEN", ops_listen.as_str()), ("RELAYOPS_GAUGE_SAMPLE_MS", "200")],
    );
    let (api, ops) = (format!("http://{api_listen}"), format!("http://{ops_listen}"));
    let http = reqwest::Client::new();
    wait_until_ready(&http, &api).await;
    wait_until_ready(&http, &ops).await;
    env.create_endpoint("/sim/ok", &["ok.*"], json!({})).await;
    env.create_endpoint("/sim/status/400", &["bad.*"], json!({})).await;

    let (delivered, failed, duplicates) = (4, 3, 2);
    let post = |body: Value| http.post(format!("{api}/v1/events")).bearer_auth(&env.api_key).json(&body).send();
    for n in 0..delivered {
        let body = json!({ "event_type": "ok.x", "payload": { "n": n }, "idempotency_key": format!("ok-{n}") });
        assert_eq!(post(body).await.unwrap().status(), 201);
    }
    for n in 0..failed {
        assert_eq!(post(json!({ "event_type": "bad.x", "payload": { "n": n } })).await.unwrap().status(), 201);
    }
    for n in 0..duplicates {
        let body = json!({ "event_type": "ok.x", "payload": { "n": n }, "idempotency_key": format!("ok-{n}") });
        assert_eq!(post(body).await.unwrap().status(), 200, "an idempotent repeat");
    }
    let invalid = http
        .post(format!("{api}/v1/events"))
        .bearer_auth(&env.api_key)
        .header("x-request-id", "metrics-test-invalid")
        .json(&json!({ "event_type": "", "payload": {} }))
        .send()
        .await
        .unwrap();
    assert_eq!(invalid.status(), 422);
    env.wait_for_sql(
        "every delivery settled",
        &format!(
            "SELECT count(*) FILTER (WHERE status = 'delivered') = {delivered}
                AND count(*) FILTER (WHERE status = 'failed') = {failed} FROM relayops.deliveries"
        ),
    )
    .await;

    let text = scrape(&http, &api).await;
    assert_eq!(sample(&text, "relayops_events_received_total", &[]), f64::from(delivered + failed), "{text}");
    assert_eq!(sample(&text, "relayops_events_duplicate_total", &[]), f64::from(duplicates));
    assert_eq!(sample(&text, "relayops_events_rejected_total", &[("reason", "validation")]), 1.0);
    let created = [("route", "/v1/events"), ("method", "POST"), ("status", "201")];
    assert_eq!(sample(&text, "relayops_http_request_duration_seconds_count", &created), f64::from(delivered + failed));
    // The api role's publisher published one message per delivery.
    let published = sample(&text, "relayops_outbox_published_total", &[]);
    assert_eq!(published, f64::from(delivered + failed));
    assert!(!text.contains(&env.tenant_id.to_string()), "no tenant ids in labels");

    // The worker's figures, on its own port; attempts settle before the scrape.
    let text = eventually(WAIT, || async {
        let text = scrape(&http, &ops).await;
        let done = sample(&text, "relayops_delivery_attempts_total", &[]) == f64::from(delivered + failed);
        if done {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .await;
    let attempts = |outcome: &str| sample(&text, "relayops_delivery_attempts_total", &[("outcome", outcome)]);
    assert_eq!(attempts("delivered"), f64::from(delivered), "{text}");
    assert_eq!(attempts("failed"), f64::from(failed));
    assert_eq!(attempts("retry") + attempts("dead") + attempts("blocked"), 0.0);
    let durations = sample(&text, "relayops_delivery_attempt_duration_seconds_count", &[("outcome", "delivered")]);
    assert_eq!(durations, f64::from(delivered));
    // Sampled gauges: every queue of the namespace has a depth.
    let text = eventually(WAIT, || async {
        let text = scrape(&http, &ops).await;
        if text.contains("relayops_queue_depth{queue=\"dead\"}") {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .await;
    for queue in ["ready", "retry_250ms", "retry_1000ms", "retry_5000ms", "dead"] {
        assert!(text.contains(&format!("relayops_queue_depth{{queue=\"{queue}\"}}")), "{queue}: {text}");
    }
    assert!(text.contains("relayops_outbox_backlog "), "{text}");

    let live = http.get(format!("{ops}/health/live")).send().await.unwrap();
    assert_eq!(live.status(), 200);
    let ready: Value = http.get(format!("{ops}/health/ready")).send().await.unwrap().json().await.unwrap();
    assert_eq!(ready["status"], "ready");
    assert_eq!(ready["postgres"], "ok");
    assert_eq!(ready["redis"], "ok");
    assert_eq!(ready["rabbitmq"]["worker"], "ok");

    // Request logs: one access line per request, with the request id, and the
    // lines written inside a request carry it in their span.
    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let _ = std::fs::remove_file(&log);
    let access = lines
        .iter()
        .find(|line| line["message"] == "request" && line["request_id"] == "metrics-test-invalid")
        .unwrap_or_else(|| panic!("no access line: {lines:?}"));
    assert_eq!((access["route"].as_str(), access["status"].as_u64()), (Some("/v1/events"), Some(422)), "{access}");
    assert!(access["latency_ms"].is_u64());
    let accepted = lines.iter().find(|line| line["message"] == "event accepted").expect("an event accepted line");
    assert!(accepted["span"]["request_id"].as_str().is_some_and(|id| id.starts_with("req_")), "{accepted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_carries_a_request_id_the_caller_may_choose() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    let id_of = |response: &reqwest::Response| response.headers()["x-request-id"].to_str().unwrap().to_owned();
    let chosen = env
        .http
        .post(format!("{}/v1/events", env.api_url))
        .bearer_auth(&env.api_key)
        .header("x-request-id", "client-chosen.id:42")
        .json(&json!({ "event_type": "", "payload": {} }))
        .send()
        .await
        .unwrap();
    assert_eq!(chosen.status(), 422);
    assert_eq!(id_of(&chosen), "client-chosen.id:42", "a sane id is echoed back, on problems too");
    let problem: Value = chosen.json().await.unwrap();
    assert_eq!(problem["request_id"], "client-chosen.id:42", "the problem body quotes it: {problem}");

    let generated = env.http.get(format!("{}/health/live", env.api_url)).send().await.unwrap();
    let first = id_of(&generated);
    assert!(first.starts_with("req_") && first.len() > 20, "{first}");
    let again = env.http.get(format!("{}/health/live", env.api_url)).send().await.unwrap();
    assert_ne!(id_of(&again), first, "one id per request");
    for unusable in ["x".repeat(129), "has spaces".to_owned(), "quote\"d".to_owned()] {
        let response = env
            .http
            .get(format!("{}/health/live", env.api_url))
            .header("x-request-id", &unusable)
            .send()
            .await
            .unwrap();
        assert!(id_of(&response).starts_with("req_"), "`{unusable}` is replaced");
    }

    let unknown = env.http.get(format!("{}/no/such/route", env.api_url)).send().await.unwrap();
    assert_eq!(unknown.status(), 404);
    let text = env.http.get(format!("{}/metrics", env.api_url)).send().await.unwrap().text().await.unwrap();
    let labels = [("route", "/v1/events"), ("status", "422")];
    assert_eq!(sample(&text, "relayops_http_request_duration_seconds_count", &labels), 1.0, "{text}");
    let unmatched = [("route", "unmatched"), ("status", "404")];
    assert_eq!(sample(&text, "relayops_http_request_duration_seconds_count", &unmatched), 1.0);
    assert!(!text.contains("/no/such/route") && !text.contains(&first), "paths and ids are not labels");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_attempt_line_has_every_field_and_no_secret() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    let log = relayops_tests::log_file("attempt");
    let mut worker = env.spawn_role_logging("worker", &[("RELAYOPS_LOG", "info")], Some(&log));
    let endpoint =
        env.create_endpoint("/sim/status/503", &["*"], json!({ "max_attempts": 2, "retry_schedule_secs": [0] })).await;
    let secret = endpoint["secret"].as_str().unwrap().to_owned();
    let marker = format!("payload-marker-{}", uuid::Uuid::new_v4().simple());
    let event = env.post_event("a.b", json!({ "card": marker })).await;
    let event_id = event.body["id"].as_str().unwrap().to_owned();
    let dead = env.wait_for_status(&event_id, "dead").await;
    let received = env.simulator.received();
    assert_eq!(received.len(), 2);
    worker.kill();
    let logs = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);

    let lines: Vec<Value> = logs
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["message"] == "delivery attempt")
        .collect();
    assert_eq!(lines.len(), 2, "one line per attempt: {logs}");
    for (index, line) in lines.iter().enumerate() {
        assert_eq!(line["tenant_id"], env.tenant_id.to_string(), "{line}");
        assert_eq!(line["delivery_id"], dead["id"]);
        assert_eq!(line["event_id"], event_id.as_str());
        assert_eq!(line["endpoint_id"], endpoint["id"]);
        assert_eq!(line["attempt"], index as u64 + 1);
        assert_eq!(line["outcome"], if index == 0 { "retry" } else { "dead" });
        assert_eq!(line["http_status"], 503);
        assert!(line["latency_ms"].is_u64(), "{line}");
        assert_eq!(line["level"], "INFO");
    }
    let signature = received[0].webhook_signature.clone().unwrap();
    for (what, needle) in [
        ("signing secret", secret.as_str()),
        ("secret without prefix", secret.trim_start_matches("whsec_")),
        ("signature", signature.trim_start_matches("v1,")),
        ("payload", marker.as_str()),
    ] {
        assert!(!logs.contains(needle), "the worker logged the {what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_names_pending_migrations() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, run_publisher: false, ..Default::default() }).await;
    let live = env.request(reqwest::Method::GET, "/health/live", None, None).await;
    assert_eq!((live.status, live.body["status"].as_str()), (200, Some("live")));
    assert_eq!(env.wait_for_readiness(true).await["postgres"], "ok");

    // As if a newer binary had started against an older schema.
    let client = env.pool.get().await.unwrap();
    let hide = "UPDATE relayops.schema_migrations SET version = version || '.hidden'
                 WHERE version = (SELECT max(version) FROM relayops.schema_migrations)";
    assert_eq!(client.execute(hide, &[]).await.unwrap(), 1);
    let unready = env.wait_for_readiness(false).await;
    assert_eq!(unready["postgres"], "migrations pending", "{unready}");
    let restore = "UPDATE relayops.schema_migrations SET version = left(version, -7) WHERE version LIKE '%.hidden'";
    assert_eq!(client.execute(restore, &[]).await.unwrap(), 1);
    assert_eq!(env.wait_for_readiness(true).await["postgres"], "ok");
}

/// Started as an operator would, with one setting wrong or missing: the
/// process exits at once with one line naming the variable, before it
/// connects anywhere — the database it was given is left untouched (no
/// migration ran) and nothing half-started logs its shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_error_stops_relayops_before_it_touches_the_database() {
    let admin_url = relayops_tests::Services::default().admin_database_url;
    let name = format!("relayops_test_cfg_{}", uuid::Uuid::new_v4().simple());
    let database_url = relayops_tests::create_database(&admin_url, &name).await;

    // (role, settings beside the valid ones, the variable the error names)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 11] = [
        ("all", &[], "RELAYOPS_REDIS_URL: is required"),
        (
            "all",
            &[("RELAYOPS_REDIS_URL", "redis://127.0.0.1:6379"), ("RELAYOPS_TENANT_BURST", "0")],
            "RELAYOPS_TENANT_BURST",
        ),
        (
            "worker",
            &[("RELAYOPS_REDIS_URL", "redis://127.0.0.1:6379"), ("RELAYOPS_LEASE_MS", "soon")],
            "RELAYOPS_LEASE_MS",
        ),
        (
            "all",
            &[("RELAYOPS_REDIS_URL", "redis://127.0.0.1:6379"), ("RELAYOPS_ALERT_WEBHOOK_URL", "ftp://x")],
            "RELAYOPS_ALERT_WEBHOOK_URL",
        ),
        ("publisher", &[("RELAYOPS_PUBLISHER_BATCH_SIZE", "-1")], "RELAYOPS_PUBLISHER_BATCH_SIZE"),
        ("all", &[("RELAYOPS_RUNTIME_THREADS", "0")], "RELAYOPS_RUNTIME_THREADS"),
        (
            "api",
            &[("RELAYOPS_REDIS_URL", "redis://127.0.0.1:6379"), ("RELAYOPS_INGEST_LANES", "0")],
            "RELAYOPS_INGEST_LANES",
        ),
        ("publisher", &[("RELAYOPS_READY_SHARDS", "0")], "RELAYOPS_READY_SHARDS: must be greater than zero"),
        (
            "worker",
            &[("RELAYOPS_REDIS_URL", "redis://127.0.0.1:6379"), ("RELAYOPS_READY_SHARDS", "65")],
            "RELAYOPS_READY_SHARDS: must be at most 64",
        ),
        (
            "worker",
            &[("RELAYOPS_REDIS_URL", "redis://127.0.0.1:6379"), ("RELAYOPS_CIRCUIT_FAILURES", "many")],
            "RELAYOPS_CIRCUIT_FAILURES",
        ),
        (
            "worker",
            &[
                ("RELAYOPS_REDIS_URL", "redis://127.0.0.1:6379"),
                ("RELAYOPS_CIRCUIT_COOLDOWN_MS", "10000"),
                ("RELAYOPS_CIRCUIT_MAX_COOLDOWN_MS", "5000"),
            ],
            "RELAYOPS_CIRCUIT_MAX_COOLDOWN_MS: must be at least RELAYOPS_CIRCUIT_COOLDOWN_MS",
        ),
    ];
    for (role, extra, named) in cases {
        let mut command = std::process::Command::new(relayops_tests::relayops_binary());
        command
            .arg(role)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RELAYOPS_DATABASE_URL", &database_url)
            .env("RELAYOPS_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
            .env("RELAYOPS_JWT_SECRET", "configuration-test-secret-0123456789abcdef")
            .env("RELAYOPS_API_LISTEN", free_loopback_address())
            .env("RELAYOPS_SIMULATOR_LISTEN", free_loopback_address())
            .env("RELAYOPS_LOG", "info");
        for (key, value) in extra {
            command.env(key, value);
        }
        let output = tokio::task::spawn_blocking(move || command.output().expect("run relayops")).await.unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{role} {extra:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{role} {extra:?}: one line, got: {stderr}");
        assert!(stderr.starts_with("relayops: configuration ") && stderr.contains(named), "{role}: {stderr}");
    }

    let client = db::connect_pool(&DatabaseConfig::new(database_url, 1)).unwrap().get().await.unwrap();
    let schemas: i64 =
        client.query_one("SELECT count(*) FROM pg_namespace WHERE nspname = 'relayops'", &[]).await.unwrap().get(0);
    drop(client);
    relayops_tests::drop_database(&admin_url, &name).await;
    assert_eq!(schemas, 0, "a misconfigured start must not migrate the database");
}

/// `RELAYOPS_RUNTIME_THREADS` sets how many threads the process's async
/// runtime runs on (as the runtime itself reports them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_runs_on_as_many_threads_as_configured() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    for threads in ["1", "3"] {
        let log =
            std::env::temp_dir().join(format!("relayops-threads-{threads}-{}.log", uuid::Uuid::new_v4().simple()));
        let mut worker = env.spawn_role_logging(
            "worker",
            &[("RELAYOPS_RUNTIME_THREADS", threads), ("RELAYOPS_LOG", "info")],
            Some(&log),
        );
        let reported = eventually(WAIT, || async {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let line = text.lines().find(|line| line.contains("operations port listening"));
            let value = line.and_then(|line| serde_json::from_str::<serde_json::Value>(line).ok());
            match value.as_ref().and_then(|value| value["runtime_threads"].as_u64()) {
                Some(reported) => Ok(reported),
                None => Err(format!("no start-up line yet: {text}")),
            }
        })
        .await;
        worker.kill();
        let _ = std::fs::remove_file(&log);
        assert_eq!(reported.to_string(), threads);
    }
}
