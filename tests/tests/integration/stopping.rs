//! Stopping a process (SIGTERM, what `docker stop` and ECS send; Ctrl-C
//! alike): what it has under way is finished before it exits — the api's
//! answered requests' events published, the worker's deliveries sent and
//! recorded — instead of left to claim and lease expiries, as a crash leaves
//! them; a bundle's deliveries not yet started are given back untouched.
use relayops_tests::{log_file, RoleProcess, TestConfig, TestEnv, WAIT};
use serde_json::json;

/// Stopping an api (SIGTERM, what a container runtime sends before it kills;
/// Ctrl-C alike) publishes the rows its requests handed to its own publisher
/// before the process exits, instead of leaving them claimed by a process
/// that is gone until their claims expire (10 minutes here). A test hook
/// makes the publisher hold handed rows, so three are in the hand-off at the
/// stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_told_to_stop_publishes_the_rows_its_requests_handed_over_before_it_exits() {
    let env = TestEnv::start_with(TestConfig { run_publisher: false, ..Default::default() }).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    // From its publisher's first claim on, ingest writes rows claimed by it.
    let (mut api, replica) = env
        .spawn_publishing_api(&[
            ("RELAYOPS_FAILPOINTS", "publisher.hold_handed"),
            ("RELAYOPS_PUBLISHER_CLAIM_TTL_MS", "600000"),
        ])
        .await;
    let mut events = Vec::new();
    for n in 0..3 {
        let response = env
            .http
            .post(format!("{replica}/v1/events"))
            .bearer_auth(&env.api_key)
            .json(&json!({ "event_type": "a.b", "payload": { "n": n } }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 201);
        let body: serde_json::Value = response.json().await.unwrap();
        events.push(body["id"].as_str().unwrap().to_owned());
    }
    let client = env.pool.get().await.unwrap();
    let outbox = client
        .query_one("SELECT count(*) FILTER (WHERE status = 'claimed'), count(*) FROM relayops.outbox_messages", &[])
        .await
        .unwrap();
    let (held, rows): (i64, i64) = (outbox.get(0), outbox.get(1));
    assert_eq!((held, rows), (3, 3), "each event's row claimed by the api's publisher and held in its hand-off");

    api.terminate();
    let status = api.exited(WAIT).await.expect("the api exits once told to stop");
    assert!(status.success(), "cleanly: {status:?}");
    assert_eq!(env.count("outbox_messages").await, 0, "every handed row published before the exit");
    for event in &events {
        env.wait_for_status(event, "delivered").await;
    }
    assert_eq!(env.simulator.received().len(), 3, "each event delivered once");
}

/// A delivery as it stood when a worker exited.
struct Left {
    status: String,
    attempts: i32,
    /// Still under a live lease (in progress for a process that is gone).
    leased: bool,
}

/// Tells `worker` to stop once the receiver holds `in_flight` requests at
/// `simulator_path`, and waits for it to exit cleanly within the grace.
async fn stop_once_in_flight(env: &TestEnv, worker: &mut RoleProcess, simulator_path: &str, in_flight: u32) {
    env.simulator.wait_until(WAIT, |_| env.simulator.max_in_flight(simulator_path) >= in_flight).await;
    worker.terminate();
    let status = worker.exited(WAIT).await.expect("the worker exits once told to stop, within the grace");
    assert!(status.success(), "cleanly: {status:?}");
}

/// Creates an endpoint at `simulator_path` (`endpoint` as for
/// `create_endpoint`), starts a worker (`extra` as for `spawn_role`), posts
/// one event, tells the worker to stop while the receiver holds the request,
/// and waits for it to exit cleanly; returns what it left of the delivery.
async fn stop_a_worker_mid_request(
    env: &TestEnv,
    simulator_path: &str,
    endpoint: serde_json::Value,
    extra: &[(&str, &str)],
) -> Left {
    env.create_endpoint(simulator_path, &["*"], endpoint).await;
    let mut worker = env.spawn_role("worker", extra);
    env.post_event("a.b", json!({ "n": 1 })).await;
    stop_once_in_flight(env, &mut worker, simulator_path, 1).await;
    let client = env.pool.get().await.unwrap();
    let row = client
        .query_one(
            "SELECT status, attempt_count, coalesce(lease_expires_at > now(), false) FROM relayops.deliveries",
            &[],
        )
        .await
        .unwrap();
    Left { status: row.get(0), attempts: row.get(1), leased: row.get(2) }
}

/// Stopping a worker lets the delivery it has under way finish: the
/// receiver's slow answer comes, the attempt is recorded, and the process
/// exits cleanly with the delivery `delivered` — not `in_progress`, leased by
/// a process that is gone, to be sent again once the lease expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_told_to_stop_finishes_the_delivery_under_way_before_it_exits() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    let left = stop_a_worker_mid_request(&env, "/sim/slow/1000", json!({}), &[]).await;
    assert_eq!((left.status.as_str(), left.attempts, left.leased), ("delivered", 1, false), "recorded before the exit");
    assert_eq!(env.simulator.received().len(), 1, "sent once");
}

/// A stop waits no longer than its grace (`STOP_GRACE`, 8 s): a delivery
/// whose receiver holds the request past it is cut short, as a crash would
/// cut it — left in progress under its lease, to be sent again once the lease
/// expires — and the process still exits cleanly, before the runtime's kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_waits_no_longer_than_its_grace_for_a_delivery_that_outlasts_it() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    // The request outlasts the grace (25 s), not its own timeout or lease.
    let endpoint = json!({ "timeout_ms": 30_000 });
    let worker = [("RELAYOPS_HTTP_TIMEOUT_MS", "40000"), ("RELAYOPS_LEASE_MS", "60000")];
    let left = stop_a_worker_mid_request(&env, "/sim/slow/25000", endpoint, &worker).await;
    assert_eq!(
        (left.status.as_str(), left.attempts, left.leased),
        ("in_progress", 0, true),
        "cut short, under its lease"
    );
}

/// Stopping a worker in the middle of an event's deliveries (one bundle of
/// ten, two under way at a time) finishes the two under way and starts none
/// of the others: they go back to the broker untouched — no attempt, no
/// lease — and another worker delivers them, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_told_to_stop_mid_bundle_finishes_what_is_under_way_and_starts_nothing_more() {
    const SLOW: &str = "/sim/slow/1500";
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    for _ in 0..10 {
        env.create_endpoint(SLOW, &["*"], json!({})).await;
    }
    let mut worker = env.spawn_role("worker", &[("RELAYOPS_WORKER_CONCURRENCY", "2")]);
    let answer = env.post_event("a.b", json!({ "n": 1 })).await;
    assert_eq!(answer.body["deliveries"], 10, "{:?}", answer.body);
    stop_once_in_flight(&env, &mut worker, SLOW, 2).await;
    let client = env.pool.get().await.unwrap();
    let left = client
        .query_one(
            "SELECT count(*) FILTER (WHERE status = 'delivered'),
                    count(*) FILTER (WHERE status = 'pending' AND attempt_count = 0 AND lease_expires_at IS NULL)
             FROM relayops.deliveries",
            &[],
        )
        .await
        .unwrap();
    let (delivered, untouched): (i64, i64) = (left.get(0), left.get(1));
    assert_eq!((delivered, untouched), (2, 8), "the two under way finished, the rest not started");

    let _next = env.spawn_role("worker", &[]);
    let event_id = answer.body["id"].as_str().unwrap();
    env.wait_for_deliveries(event_id, |all| all.len() == 10 && all.iter().all(|d| d["status"] == "delivered")).await;
    assert_eq!(env.simulator.received().len(), 10, "each delivery sent once");
}

/// A stop is what every deploy does, so operators alert on ERROR lines: a
/// worker and an api (with its publisher) that delivered an event and are
/// told to stop log none — their broker connections close with the AMQP
/// handshake before the process ends, instead of the client's I/O threads
/// finding the runtime gone under them. And a setting the broker client
/// cannot use stops the process at once with a message naming it, no panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_logs_no_error_and_a_bad_setting_stops_the_start_with_its_name() {
    let env = TestEnv::start_with(TestConfig { run_publisher: false, run_worker: false, ..Default::default() }).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let (worker_log, api_log) = (log_file("stop-worker"), log_file("stop-api"));
    let info = [("RELAYOPS_LOG", "info")];
    let mut worker = env.spawn_role_logging("worker", &info, Some(&worker_log));
    let address = relayops_tests::free_loopback_address();
    let mut api =
        env.spawn_role_logging("api", &[("RELAYOPS_LOG", "info"), ("RELAYOPS_API_LISTEN", &address)], Some(&api_log));
    let api_url = format!("http://{address}");
    relayops_tests::wait_until_ready(&env.http, &api_url).await;
    let response = env
        .http
        .post(format!("{api_url}/v1/events"))
        .bearer_auth(&env.api_key)
        .json(&json!({ "event_type": "a.b", "payload": { "n": 1 } }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let event: serde_json::Value = response.json().await.unwrap();
    env.wait_for_status(event["id"].as_str().unwrap(), "delivered").await;

    api.terminate();
    worker.terminate();
    for (process, log) in [(&mut api, &api_log), (&mut worker, &worker_log)] {
        let status = process.exited(WAIT).await.expect("exits once told to stop");
        assert!(status.success(), "cleanly: {status:?}");
        let text = std::fs::read_to_string(log).unwrap();
        assert!(text.contains("shutting down"), "the log is the process's own: {text}");
        let errors: Vec<&str> = text.lines().filter(|line| line.contains(r#""level":"ERROR""#)).collect();
        assert!(errors.is_empty(), "{} logged ERROR lines on a clean stop:\n{}", log.display(), errors.join("\n"));
    }

    // A bad setting stops the start with the setting's name, never a panic.
    let api_listen = relayops_tests::free_loopback_address();
    let bad_settings: [(&str, &[(&str, &str)]); 3] = [
        ("worker", &[("RELAYOPS_AMQP_URL", "amqp://a:b@127.0.0.1:5672/%2f,http://nope")]),
        (
            "worker",
            &[
                ("RELAYOPS_REDIS_URL", "redis://127.0.0.1:7001,redis://127.0.0.1:7002"),
                ("RELAYOPS_REDIS_CLUSTER", "off"),
            ],
        ),
        (
            "api",
            &[
                ("RELAYOPS_DATABASE_READ_URL", "postgres://r@127.0.0.1:5434/x?sslmode=sometimes"),
                ("RELAYOPS_API_LISTEN", &api_listen),
            ],
        ),
    ];
    for (role, settings) in bad_settings {
        let bad_log = log_file("stop-bad-setting");
        let mut bad = env.spawn_role_logging(role, settings, Some(&bad_log));
        let status = bad.exited(WAIT).await.expect("a bad setting stops the start");
        let text = std::fs::read_to_string(&bad_log).unwrap();
        assert!(!status.success(), "{text}");
        assert!(text.contains(settings[0].0), "names the setting: {text}");
        assert!(!text.contains("panicked"), "no panic: {text}");
    }
}
