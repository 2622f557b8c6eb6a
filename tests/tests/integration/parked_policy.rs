//! Waiting never changes what a delivery promises (SPEC §12): a delivery
//! parked behind an open endpoint circuit still dies when its retry policy
//! says — as `dead`, with its dead letter and `delivery.dead`, and can be
//! replayed — unless its endpoint holds parked deliveries longer
//! (`circuit_hold_secs`). And the circuit's run of failures is the
//! endpoint's, counted by every worker alike; a probe whose row is locked
//! never closes a circuit as if nothing were parked.
use std::collections::HashSet;
use std::time::Duration;

use relayops_shared::config::CircuitConfig;
use relayops_shared::repo::{circuits, parked_expiry};
use relayops_tests::{eventually, start_receiver, TestConfig, TestEnv, WAIT};
use serde_json::{json, Value};

/// The case: a dead receiver, schedule [1, 2, 4] s, 4 attempts.
const SCHEDULE: [u64; 3] = [1, 2, 4];
const EVENTS: usize = 40;

async fn post_events(env: &TestEnv, event_type: &str, count: usize) {
    let events: Vec<Value> = (0..count).map(|n| json!({ "event_type": event_type, "payload": { "n": n } })).collect();
    let answer = env.post("/v1/events/batch", json!({ "events": events })).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
}

async fn count(env: &TestEnv, condition: &str) -> i64 {
    env.query_i64(&format!("SELECT count(*) FROM relayops.deliveries WHERE {condition}")).await
}

fn uuid_of(id: &str) -> String {
    id.rsplit('_').next().unwrap().to_owned()
}

/// With the production defaults (circuits open after 20 failures in a row,
/// 5 s cooldown), 40 deliveries to a dead receiver: most are parked by the
/// open circuit, and every one is still `dead` within 10 s of its
/// schedule's end (7 s after it was posted), each with its dead letter and
/// `delivery.dead`, the parked ones without attempts the policy would not
/// have made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_deliveries_die_when_their_retry_schedule_is_used_up_with_dead_letter_and_delivery_dead() {
    let env = TestEnv::start().await;
    let (ops, ops_url) = start_receiver().await;
    let operational = json!({ "kind": "operational", "max_attempts": 1 });
    env.create_endpoint_on(&ops, &format!("{ops_url}/sim/ok"), &["delivery.dead"], operational).await;
    let policy = json!({ "retry_schedule_secs": SCHEDULE, "max_attempts": SCHEDULE.len() + 1 });
    env.create_endpoint("/sim/status/503", &["a.b"], policy).await;
    post_events(&env, "a.b", EVENTS).await;

    eventually(WAIT * 3, || async {
        let dead = count(&env, "status = 'dead'").await;
        if dead == EVENTS as i64 {
            Ok(())
        } else {
            let parked = count(&env, "status = 'parked'").await;
            Err(format!("{dead} of {EVENTS} dead, {parked} parked"))
        }
    })
    .await;
    let schedule_end: u64 = SCHEDULE.iter().sum();
    let latest = env
        .query_i64(
            "SELECT (max(extract(epoch FROM d.updated_at - e.received_at)) * 1000)::bigint
             FROM relayops.deliveries d JOIN relayops.events e ON e.id = d.event_id",
        )
        .await;
    assert!(
        latest <= ((schedule_end + 10) * 1000) as i64,
        "the last delivery died {latest} ms after it was posted; its schedule ends at {schedule_end} s"
    );
    let gave_up = count(&env, &format!("last_error = '{}'", parked_expiry::GAVE_UP)).await;
    assert!(gave_up > 0, "the circuit parked some of them, and those died parked");
    let requests = env.simulator.received().iter().filter(|r| r.path == "/sim/status/503").count();
    assert!(requests < EVENTS * (SCHEDULE.len() + 1), "{requests} requests: parked deliveries made no attempts");

    // Dead letters are taken off the queue as they are read: gathered here.
    let letters = std::sync::Mutex::new(Vec::new());
    eventually(WAIT, || async {
        let mut taken = env.take_dead_letters().await;
        taken.retain(|letter| letter["type"] == "dead_letter.v1");
        let mut letters = letters.lock().unwrap();
        letters.extend(taken);
        if letters.len() == EVENTS {
            Ok(())
        } else {
            Err(format!("{} dead letters of {EVENTS}", letters.len()))
        }
    })
    .await;
    let letters = letters.into_inner().unwrap();
    let given_up: Vec<_> = letters.iter().filter(|letter| letter["reason"] == parked_expiry::GAVE_UP).collect();
    assert_eq!(given_up.len() as i64, gave_up, "each delivery that died parked has its dead letter, saying so");
    let told = ops
        .wait_until(WAIT, |all| {
            all.iter().filter_map(|r| r.body["data"]["delivery_id"].as_str()).collect::<HashSet<_>>().len() == EVENTS
        })
        .await;
    assert!(told.iter().all(|r| r.event_type.as_deref() == Some("delivery.dead")));
}

/// An endpoint that holds parked deliveries (`circuit_hold_secs`) keeps them
/// parked past their schedule, while a sibling without the hold, parked by
/// the same failures, has its deliveries die; once the receiver answers,
/// every held delivery is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_keeps_parked_deliveries_past_their_schedule_until_the_circuit_closes() {
    let env = TestEnv::start_with(with_small_circuits()).await;
    let policy = json!({ "retry_schedule_secs": [1], "max_attempts": 3 });
    let held = env.create_endpoint("/sim/status/503", &["held.*"], json!({ "circuit_hold_secs": 3600 })).await;
    assert_eq!(held["circuit_hold_secs"], 3600);
    let held_id = held["id"].as_str().unwrap().to_owned();
    patch(&env, &held_id, policy.clone()).await;
    let plain = env.create_endpoint("/sim/status/503", &["plain.*"], policy).await;
    post_events(&env, "held.x", 20).await;
    post_events(&env, "plain.x", 20).await;

    // The sibling's parked deliveries died (so the sweep has passed their
    // time, which the held ones share) ...
    let plain_uuid = uuid_of(plain["id"].as_str().unwrap());
    let held_uuid = uuid_of(&held_id);
    eventually(WAIT * 2, || async {
        let dead = count(&env, &format!("endpoint_id = '{plain_uuid}' AND status = 'dead'")).await;
        let gave_up =
            count(&env, &format!("endpoint_id = '{plain_uuid}' AND last_error = '{}'", parked_expiry::GAVE_UP)).await;
        match (dead, gave_up) {
            (20, given) if given > 0 => Ok(()),
            (dead, given) => Err(format!("{dead} of 20 dead, {given} of them given up parked")),
        }
    })
    .await;
    // ... while the held ones wait, due to be given up an hour from parking.
    let held_parked = count(&env, &format!("endpoint_id = '{held_uuid}' AND status = 'parked'")).await;
    assert!(held_parked > 0, "the held endpoint's deliveries are parked");
    let held_dead =
        count(&env, &format!("endpoint_id = '{held_uuid}' AND last_error = '{}'", parked_expiry::GAVE_UP)).await;
    assert_eq!(held_dead, 0, "none given up");
    let soonest = env
        .query_i64(&format!(
            "SELECT extract(epoch FROM min(next_attempt_at) - now())::bigint FROM relayops.deliveries
             WHERE endpoint_id = '{held_uuid}' AND status = 'parked'"
        ))
        .await;
    assert!(soonest > 3_000, "held for the hour: given up in {soonest} s");

    // The receiver answers: the held deliveries are delivered, none lost.
    patch(&env, &held_id, json!({ "url": format!("{}/sim/ok", env.simulator_url) })).await;
    eventually(WAIT * 2, || async {
        let delivered = count(&env, &format!("endpoint_id = '{held_uuid}' AND status = 'delivered'")).await;
        if delivered == 20 {
            Ok(())
        } else {
            Err(format!("{delivered} of 20 held deliveries delivered"))
        }
    })
    .await;
}

/// A delivery that died parked is replayed like any dead one: with the
/// receiver fixed, the replay is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_that_died_parked_can_be_replayed() {
    let env = TestEnv::start_with(with_small_circuits()).await;
    let endpoint = env
        .create_endpoint("/sim/status/503", &["a.b"], json!({ "retry_schedule_secs": [1], "max_attempts": 3 }))
        .await;
    let endpoint_id = endpoint["id"].as_str().unwrap().to_owned();
    post_events(&env, "a.b", 20).await;
    let condition = format!("last_error = '{}'", parked_expiry::GAVE_UP);
    env.wait_for_sql(
        "a delivery died parked",
        &format!("SELECT count(*) > 0 FROM relayops.deliveries WHERE {condition}"),
    )
    .await;
    let dead = env.get(&format!("/v1/deliveries?endpoint_id={endpoint_id}&status=dead")).await;
    let given_up = dead.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|delivery| delivery["last_error"] == parked_expiry::GAVE_UP)
        .expect("listed as dead with the reason")
        .clone();
    let id = given_up["id"].as_str().unwrap();

    patch(&env, &endpoint_id, json!({ "url": format!("{}/sim/ok", env.simulator_url) })).await;
    let replayed = env.post(&format!("/v1/deliveries/{id}/replay"), json!({})).await;
    assert_eq!(replayed.status, 202, "{:?}", replayed.body);
    let event_id = given_up["event_id"].as_str().unwrap();
    env.wait_for_status_within(event_id, "delivered", WAIT * 2).await;
}

/// The run of failures that opens a circuit is the endpoint's, not one
/// worker's: 3 failures seen by one worker and 2 by another open a circuit
/// that opens at 5 (each worker alone saw fewer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_seen_by_different_workers_add_up_to_open_the_circuit() {
    let mut env = TestEnv::start_with(with_small_circuits()).await;
    // One attempt each, then a retry far away: each event is one failure.
    let endpoint = env
        .create_endpoint("/sim/status/503", &["a.b"], json!({ "retry_schedule_secs": [3600], "max_attempts": 5 }))
        .await;
    let uuid = uuid_of(endpoint["id"].as_str().unwrap());
    post_events(&env, "a.b", 3).await;
    failures(&env, 3).await;
    env.wait_for_sql(
        "three failures counted on the endpoint",
        &format!("SELECT circuit_failures = 3 FROM relayops.webhook_endpoints WHERE id = '{uuid}'"),
    )
    .await;
    env.kill_worker().await;
    let _other = env.spawn_role("worker", &[("RELAYOPS_CIRCUIT_FAILURES", "5")]);
    post_events(&env, "a.b", 2).await;
    failures(&env, 5).await;
    env.wait_for_sql(
        "the circuit opened on the fifth failure, seen by the second worker",
        &format!("SELECT circuit_open_until IS NOT NULL FROM relayops.webhook_endpoints WHERE id = '{uuid}'"),
    )
    .await;
}

/// An endpoint that fails every other first attempt is up, and its circuit
/// (the production default: open after 20 failures in a row) stays closed
/// while two workers send to it at its `max_in_flight` with a backlog
/// parked: each answer ends the run, also one whose claim came before the
/// run began. 400 deliveries, half of them failing once: every one
/// delivered on its first or second attempt, the circuit never opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_failing_every_other_request_keeps_its_circuit_closed() {
    let env = TestEnv::start().await;
    let _second_worker = env.spawn_role("worker", &[]);
    let policy = json!({ "retry_schedule_secs": [1] });
    let endpoint = env.create_endpoint("/sim/alternate/503", &["a.b"], policy).await;
    let uuid = uuid_of(endpoint["id"].as_str().unwrap());
    for _ in 0..4 {
        post_events(&env, "a.b", 100).await;
    }
    let delivered = "(SELECT count(*) = 400 FROM relayops.deliveries WHERE status = 'delivered')";
    let opened = format!("(SELECT circuit_open_until IS NOT NULL FROM relayops.webhook_endpoints WHERE id = '{uuid}')");
    env.wait_for_sql("every delivery delivered, or the circuit opened", &format!("SELECT {delivered} OR {opened}"))
        .await;
    let opened = env.query_i64(&format!("SELECT {opened}::int::bigint")).await;
    assert_eq!(opened, 0, "the circuit of an endpoint answering every other first attempt opened");
    assert_eq!(count(&env, "status = 'delivered' AND attempt_count <= 2").await, 400);
}

/// A half-open circuit whose parked rows are all locked (a replay or a
/// give-up holding them) is left open for the next pass, not closed as if
/// nothing were parked; once they are free, the oldest is released as the probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_probe_row_never_closes_the_circuit() {
    let env = TestEnv::start_with(TestConfig { run_publisher: false, run_worker: false, ..Default::default() }).await;
    let endpoint = env.create_endpoint("/sim/ok", &["a.b"], json!({})).await;
    let uuid = uuid_of(endpoint["id"].as_str().unwrap());
    post_events(&env, "a.b", 3).await;
    let setup = env.pool.get().await.unwrap();
    setup
        .batch_execute(&format!(
            "UPDATE relayops.deliveries SET status = 'parked', next_attempt_at = now() + interval '1 hour';
             UPDATE relayops.webhook_endpoints SET circuit_open_until = now() - interval '1 second',
                 circuit_cooldown_ms = 1000 WHERE id = '{uuid}'"
        ))
        .await
        .unwrap();

    let mut holder = env.pool.get().await.unwrap();
    let holding = holder.transaction().await.unwrap();
    holding.batch_execute("SELECT 1 FROM relayops.deliveries WHERE status = 'parked' FOR UPDATE").await.unwrap();
    let mut client = env.pool.get().await.unwrap();
    let released = circuits::release(&mut client, Duration::from_secs(120)).await.unwrap();
    assert_eq!(released.probes, 0, "no probe could be taken");
    let open = format!("SELECT circuit_open_until IS NOT NULL FROM relayops.webhook_endpoints WHERE id = '{uuid}'");
    assert!(setup.query_one(&open, &[]).await.unwrap().get::<_, bool>(0), "the circuit is still open");

    holding.rollback().await.unwrap();
    let released = circuits::release(&mut client, Duration::from_secs(120)).await.unwrap();
    assert_eq!(released.probes, 1, "the oldest parked delivery is the probe");
    assert_eq!(count(&env, "status = 'parked'").await, 2);
}

/// Waits until the failing receiver has seen `n` requests.
async fn failures(env: &TestEnv, n: usize) {
    eventually(WAIT, || async {
        let seen = env.simulator.received().iter().filter(|r| r.path == "/sim/status/503").count();
        if seen == n {
            Ok(())
        } else {
            Err(format!("{seen} of {n} failures"))
        }
    })
    .await;
}

fn with_small_circuits() -> TestConfig {
    let mut config = TestConfig::default();
    config.worker.circuit =
        CircuitConfig { failures: 5, cooldown: Duration::from_millis(500), max_cooldown: Duration::from_secs(1) };
    config
}

async fn patch(env: &TestEnv, endpoint: &str, changes: Value) {
    let path = format!("/v1/endpoints/{endpoint}");
    let answer = env.request(reqwest::Method::PATCH, &path, Some(&env.api_key), Some(changes)).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
}

/// `circuit_hold_secs` is validated (1 s to 30 days) and `null` clears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn circuit_hold_is_validated_and_cleared_with_null() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    let url = format!("{}/sim/ok", env.simulator_url);
    for bad in [0, 2_592_001] {
        let body = json!({ "url": url, "event_types": ["a.b"], "circuit_hold_secs": bad });
        let answer = env.post("/v1/endpoints", body).await;
        let detail = answer.expect_problem(422);
        assert!(detail.contains("circuit_hold_secs"), "{detail}");
    }
    let endpoint = env.create_endpoint("/sim/ok", &["a.b"], json!({ "circuit_hold_secs": 86_400 })).await;
    assert_eq!(endpoint["circuit_hold_secs"], 86_400);
    let id = endpoint["id"].as_str().unwrap();
    let path = format!("/v1/endpoints/{id}");
    let cleared =
        env.request(reqwest::Method::PATCH, &path, Some(&env.api_key), Some(json!({ "circuit_hold_secs": null })));
    let cleared = cleared.await;
    assert_eq!(cleared.status, 200, "{:?}", cleared.body);
    assert!(cleared.body["circuit_hold_secs"].is_null());
}
