//! Endpoint circuits (SPEC §12): a receiver that keeps failing has its
//! circuit opened, and its deliveries wait parked in Postgres (no attempts,
//! no broker rounds) instead of retrying; probes go out after a cooldown;
//! when a probe succeeds every parked delivery is delivered — also when the
//! worker that parked them, or a publisher releasing them, was killed.
use std::time::Duration;

use relayops_shared::config::CircuitConfig;
use relayops_tests::{eventually, TestConfig, TestEnv, WAIT};
use serde_json::{json, Value};

const EVENTS: usize = 200;

fn with_circuits() -> TestConfig {
    let mut config = TestConfig::default();
    config.worker.circuit =
        CircuitConfig { failures: 5, cooldown: Duration::from_millis(500), max_cooldown: Duration::from_secs(1) };
    config
}

/// A failing endpoint (a 503 receiver, retried every second, up to 20
/// attempts) and `EVENTS` events posted to it.
async fn failing_endpoint_with_events(env: &TestEnv) -> String {
    let endpoint = env
        .create_endpoint("/sim/status/503", &["a.b"], json!({ "retry_schedule_secs": [1], "max_attempts": 20 }))
        .await;
    post_events(env).await;
    endpoint["id"].as_str().unwrap().to_owned()
}

/// `EVENTS` events of type `a.b`, in one batch.
async fn post_events(env: &TestEnv) {
    let events: Vec<Value> = (0..EVENTS).map(|n| json!({ "event_type": "a.b", "payload": { "n": n } })).collect();
    let answer = env.post("/v1/events/batch", json!({ "events": events })).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
}

async fn count_status(env: &TestEnv, status: &str) -> i64 {
    env.query_i64(&format!("SELECT count(*) FROM relayops.deliveries WHERE status = '{status}'")).await
}

/// Whether the endpoint's circuit meets `condition` (1) or not (0).
async fn circuits(env: &TestEnv, endpoint: &str, condition: &str) -> i64 {
    let id = endpoint.trim_start_matches("ep_");
    env.query_i64(&format!("SELECT count(*) FROM relayops.webhook_endpoints WHERE id = '{id}'::uuid AND {condition}"))
        .await
}

fn requests_to(env: &TestEnv, path: &str) -> usize {
    env.simulator.received().iter().filter(|received| received.path == path).count()
}

/// Waits until nearly all deliveries are parked; returns the requests the
/// failing receiver had by then.
async fn wait_until_parked(env: &TestEnv) -> usize {
    eventually(WAIT, || async {
        let parked = count_status(env, "parked").await;
        if parked >= EVENTS as i64 - 10 {
            Ok(requests_to(env, "/sim/status/503"))
        } else {
            Err(format!("{parked} of {EVENTS} deliveries parked"))
        }
    })
    .await
}

async fn patch_endpoint(env: &TestEnv, endpoint: &str, changes: Value) {
    let path = format!("/v1/endpoints/{endpoint}");
    let answer = env.request(reqwest::Method::PATCH, &path, Some(&env.api_key), Some(changes)).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
}

/// The receiver is fixed (the endpoint now points at one that answers 200).
async fn fix_receiver(env: &TestEnv, endpoint: &str) {
    patch_endpoint(env, endpoint, json!({ "url": format!("{}/sim/ok", env.simulator_url) })).await;
}

/// Waits until all `EVENTS` deliveries have `status`.
async fn wait_until_all(env: &TestEnv, status: &str) {
    eventually(WAIT * 2, || async {
        let count = count_status(env, status).await;
        if count == EVENTS as i64 {
            Ok(())
        } else {
            Err(format!("{count} of {EVENTS} {status}; {} parked", count_status(env, "parked").await))
        }
    })
    .await;
}

/// Every delivery delivered, each to the fixed receiver, none dead.
async fn wait_until_all_delivered(env: &TestEnv) {
    wait_until_all(env, "delivered").await;
    assert_eq!(count_status(env, "dead").await, 0);
    let mut delivered_ids: Vec<String> = env
        .simulator
        .received()
        .into_iter()
        .filter(|received| received.path == "/sim/ok")
        .filter_map(|received| received.delivery_id)
        .collect();
    delivered_ids.sort();
    delivered_ids.dedup();
    assert_eq!(delivered_ids.len(), EVENTS, "every delivery reached the fixed receiver");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_endpoints_deliveries_park_instead_of_retrying_and_all_arrive_once_it_answers() {
    let env = TestEnv::start_with(with_circuits()).await;
    let endpoint = failing_endpoint_with_events(&env).await;
    let requests = wait_until_parked(&env).await;
    // Without the circuit, every delivery would be attempted, and retried
    // every second: at least EVENTS requests by now. With it, the run of 5
    // failures, what was in flight (max_in_flight 10 per endpoint), and probes.
    assert!(requests < EVENTS / 2, "{requests} requests reached the failing receiver for {EVENTS} deliveries");
    assert_eq!(circuits(&env, &endpoint, "circuit_open_until IS NOT NULL").await, 1, "the endpoint's circuit is open");
    // Parked deliveries wait in Postgres, not in the broker.
    let queued = env.queue_depth(&env.topology().ready_shards.all()[0].queue).await;
    assert!(queued < 20, "{queued} messages still in the ready queue");

    fix_receiver(&env, &endpoint).await;
    wait_until_all_delivered(&env).await;
    assert_eq!(
        circuits(&env, &endpoint, "circuit_open_until IS NULL").await,
        1,
        "the successful probe closed the circuit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_parked_by_a_worker_that_is_killed_are_all_delivered() {
    let mut env = TestEnv::start_with(with_circuits()).await;
    let endpoint = failing_endpoint_with_events(&env).await;
    wait_until_parked(&env).await;
    env.kill_worker().await;
    fix_receiver(&env, &endpoint).await;
    env.start_worker().await;
    wait_until_all_delivered(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_endpoints_parked_deliveries_are_failed_not_stranded() {
    let env = TestEnv::start_with(with_circuits()).await;
    let endpoint = failing_endpoint_with_events(&env).await;
    wait_until_parked(&env).await;
    patch_endpoint(&env, &endpoint, json!({ "enabled": false })).await;
    // All failed: none is left parked.
    wait_until_all(&env, "failed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_killed_while_releasing_parked_deliveries_leaves_them_parked_for_the_next() {
    let mut env = TestEnv::start_with(TestConfig { run_publisher: false, ..with_circuits() }).await;
    let endpoint = failing_endpoint_with_events(&env).await;
    // A publisher process sends the events; the worker parks them; the
    // process's recovery pass releases the first probe and dies before its
    // commit.
    let mut publisher = env.spawn_role("publisher", &[("RELAYOPS_FAILPOINTS", "publisher.before_release_commit")]);
    let status = publisher.exited(WAIT).await.expect("the publisher reached its crash point");
    assert!(!status.success(), "it crashed: {status:?}");
    wait_until_parked(&env).await;
    assert_eq!(circuits(&env, &endpoint, "circuit_probe IS NULL").await, 1, "the probe's release was rolled back");

    fix_receiver(&env, &endpoint).await;
    env.start_publisher();
    wait_until_all_delivered(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_last_attempt_is_never_parked_so_one_allowed_attempt_dead_letters_every_delivery() {
    let env = TestEnv::start_with(with_circuits()).await;
    env.create_endpoint("/sim/status/503", &["a.b"], json!({ "max_attempts": 1 })).await;
    post_events(&env).await;
    wait_until_all(&env, "dead").await;
    assert_eq!(requests_to(&env, "/sim/status/503"), EVENTS, "each delivery had its one attempt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_probe_opens_the_circuit_again_for_twice_as_long_up_to_the_maximum() {
    // Cooldown 500 ms, at most 1.5 s: opening writes 500; a failed probe
    // doubles it (1,000: below the maximum); the next would double it to
    // 2,000 and is capped at 1,500; later ones stay there.
    let mut config = with_circuits();
    config.worker.circuit.max_cooldown = Duration::from_millis(1500);
    let env = TestEnv::start_with(config).await;
    let endpoint = failing_endpoint_with_events(&env).await;
    // Once deliveries are parked behind the open circuit, only probes leave
    // (one request each). (Before anything is parked a half-open circuit with
    // nothing to probe closes, and opens again at the next run of failures.)
    let (parked, requests) = eventually(WAIT, || async {
        let requests = wait_until_parked(&env).await;
        match circuits(&env, &endpoint, "circuit_open_until IS NOT NULL").await {
            1 => Ok((count_status(&env, "parked").await, requests)),
            _ => Err("the circuit is not open".to_owned()),
        }
    })
    .await;
    let cooldown_reaches = |ms: u32| {
        let env = &env;
        let endpoint = &endpoint;
        async move {
            let condition = format!("circuit_open_until IS NOT NULL AND circuit_cooldown_ms = {ms}");
            eventually(WAIT, || async {
                match circuits(env, endpoint, &condition).await {
                    1 => Ok(()),
                    _ => Err(format!("the circuit was not opened again for {ms} ms")),
                }
            })
            .await
        }
    };
    cooldown_reaches(1000).await;
    cooldown_reaches(1500).await;
    // Two more failed probes: the cooldown stays at the maximum.
    let at_maximum = requests_to(&env, "/sim/status/503");
    eventually(WAIT, || async {
        match requests_to(&env, "/sim/status/503") {
            seen if seen >= at_maximum + 2 => Ok(()),
            seen => Err(format!("{} probes since the maximum", seen - at_maximum)),
        }
    })
    .await;
    cooldown_reaches(1500).await;
    let probes = (requests_to(&env, "/sim/status/503") - requests) as i64;
    assert!(count_status(&env, "parked").await >= parked - probes, "the rest stay parked ({probes} probes sent)");
}
