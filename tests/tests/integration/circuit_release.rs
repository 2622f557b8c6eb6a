//! How parked deliveries leave (SPEC §12): found on their own rows (a park
//! that commits after its circuit closed is admitted by a worker like any
//! other), a disabled endpoint's released within a window, a probe sent again
//! when the last went unanswered past the probe timeout; a replayed parked
//! delivery to a still-open circuit waits again with a new give-up time; and
//! an ordering lane behind an open circuit still ends in order, each
//! delivery `dead` when its policy says (or, on an endpoint whose lanes
//! block, held on its head that died parked); deliveries waiting for a slot
//! get their give-up time once the circuit opens.
use std::time::Duration;

use relayops_shared::config::CircuitConfig;
use relayops_shared::repo::{circuits, parked_expiry, waiting};
use relayops_tests::{eventually, TestConfig, TestEnv, WAIT};
use serde_json::{json, Value};

/// Ingest only: no worker, no publisher; every recovery pass is the test's.
fn ingest_only() -> TestConfig {
    TestConfig { run_publisher: false, run_worker: false, ..Default::default() }
}

async fn post_events(env: &TestEnv, count: usize) {
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        let events: Vec<Value> = chunk.iter().map(|n| json!({ "event_type": "a.b", "payload": { "n": n } })).collect();
        let answer = env.post("/v1/events/batch", json!({ "events": events })).await;
        assert_eq!(answer.status, 200, "{:?}", answer.body);
    }
}

async fn count(env: &TestEnv, condition: &str) -> i64 {
    env.query_i64(&format!("SELECT count(*) FROM relayops.deliveries WHERE {condition}")).await
}

async fn endpoint_uuid(env: &TestEnv, path: &str, extra: Value) -> String {
    let endpoint = env.create_endpoint(path, &["a.b"], extra).await;
    endpoint["id"].as_str().unwrap().rsplit('_').next().unwrap().to_owned()
}

async fn execute(env: &TestEnv, sql: &str) {
    env.pool.get().await.unwrap().batch_execute(sql).await.unwrap();
}

async fn release(env: &TestEnv, probe_timeout: Duration) -> circuits::Released {
    let mut client = env.pool.get().await.unwrap();
    circuits::release(&mut client, probe_timeout).await.unwrap()
}

/// A claim that read the circuit open may commit its park after the
/// circuit closed: nothing marks the endpoint then, and its deliveries are
/// still found (the recovery pass leaves them: nothing to publish again)
/// and admitted by a worker straight from Postgres.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_parked_after_their_circuit_closed_are_admitted_without_being_published_again() {
    let mut env = TestEnv::start_with(ingest_only()).await;
    let uuid = endpoint_uuid(&env, "/sim/ok", json!({})).await;
    post_events(&env, 3).await;
    execute(&env, "DELETE FROM relayops.outbox_messages; UPDATE relayops.deliveries SET status = 'parked'").await;
    let closed =
        format!("SELECT count(*) FROM relayops.webhook_endpoints WHERE id = '{uuid}' AND circuit_open_until IS NULL");
    assert_eq!(env.query_i64(&closed).await, 1, "the circuit is closed");
    let client = env.pool.get().await.unwrap();
    let admitting = waiting::admitting_endpoints(&client).await.unwrap();
    assert_eq!(admitting.iter().map(|(_, id)| id.as_uuid().simple().to_string()).collect::<Vec<_>>(), [uuid]);
    drop(client);
    assert_eq!(release(&env, Duration::from_secs(120)).await, circuits::Released::default(), "not the pass's");

    env.start_worker().await;
    env.wait_for_sql("all three delivered", "SELECT count(*) = 3 FROM relayops.deliveries WHERE status = 'delivered'")
        .await;
    assert_eq!(env.query_i64("SELECT count(*) FROM relayops.outbox_messages").await, 0, "nothing published again");
}

/// A disabled endpoint's parked deliveries are released (to be failed) so
/// that at most 1,000 of its are pending or in flight; more follow as those
/// settle. An enabled endpoint's are not the pass's to release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_endpoints_release_keeps_at_most_the_release_window_outstanding() {
    let env = TestEnv::start_with(ingest_only()).await;
    let uuid = endpoint_uuid(&env, "/sim/ok", json!({})).await;
    let total = circuits::RELEASE_WINDOW as usize + 200;
    post_events(&env, total).await;
    execute(&env, "DELETE FROM relayops.outbox_messages; UPDATE relayops.deliveries SET status = 'parked'").await;
    assert_eq!(release(&env, Duration::from_secs(120)).await.released, 0, "enabled: workers admit them");
    execute(&env, &format!("UPDATE relayops.webhook_endpoints SET enabled = false WHERE id = '{uuid}'")).await;

    assert_eq!(release(&env, Duration::from_secs(120)).await.released, circuits::RELEASE_WINDOW as u64);
    assert_eq!(release(&env, Duration::from_secs(120)).await.released, 0, "the window is full");
    execute(
        &env,
        "UPDATE relayops.deliveries SET status = 'failed'
         WHERE id IN (SELECT id FROM relayops.deliveries WHERE status = 'pending' LIMIT 300)",
    )
    .await;
    assert_eq!(release(&env, Duration::from_secs(120)).await.released, 200, "the rest, now that there is room");
    assert_eq!(count(&env, "status = 'parked'").await, 0);
    assert_eq!(count(&env, "status = 'pending'").await, circuits::RELEASE_WINDOW - 100);
}

/// A probe that went unanswered (its message lost with a broker, its worker
/// gone) does not hold the circuit half-open for ever: past the probe
/// timeout the next oldest parked delivery is released as a new probe; not
/// before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_probe_is_followed_by_another_only_after_the_probe_timeout() {
    let env = TestEnv::start_with(ingest_only()).await;
    let uuid = endpoint_uuid(&env, "/sim/ok", json!({})).await;
    post_events(&env, 3).await;
    execute(
        &env,
        &format!(
            "DELETE FROM relayops.outbox_messages;
             UPDATE relayops.deliveries SET status = 'parked', next_attempt_at = now() + interval '1 hour';
             UPDATE relayops.webhook_endpoints SET circuit_open_until = now() - interval '1 minute',
                 circuit_cooldown_ms = 5000, circuit_probe = gen_random_uuid(),
                 circuit_probe_at = now() - interval '30 seconds'
             WHERE id = '{uuid}'"
        ),
    )
    .await;
    assert_eq!(release(&env, Duration::from_secs(60)).await.probes, 0, "the probe sent 30 s ago may still answer");
    assert_eq!(release(&env, Duration::from_secs(20)).await.probes, 1, "past the timeout, another probe");
    assert_eq!(count(&env, "status = 'parked'").await, 2, "only the probe left");
    let probing = format!(
        "SELECT count(*) FROM relayops.webhook_endpoints e JOIN relayops.deliveries d ON d.id = e.circuit_probe
         WHERE e.id = '{uuid}' AND d.status = 'pending' AND e.circuit_open_until IS NOT NULL"
    );
    assert_eq!(env.query_i64(&probing).await, 1, "the new probe is the one named, and the circuit stays half-open");
}

/// Deliveries parked for a slot (no give-up time) wait for a working
/// endpoint; once its circuit opens, the recovery pass starts their retry
/// policy's clock (as a park by the circuit would have), all but a last
/// attempt, which a worker may still admit and send while the circuit is
/// open. Nothing of an endpoint with a closed circuit is touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_waiting_for_a_slot_get_their_give_up_time_when_the_circuit_opens() {
    let env = TestEnv::start_with(ingest_only()).await;
    let policy = json!({ "retry_schedule_secs": [60], "max_attempts": 3 });
    let failing = endpoint_uuid(&env, "/sim/status/503", policy).await;
    let busy = endpoint_uuid(&env, "/sim/ok", json!({})).await;
    post_events(&env, 4).await;
    execute(
        &env,
        &format!(
            "DELETE FROM relayops.outbox_messages;
             UPDATE relayops.deliveries SET status = 'parked', next_attempt_at = NULL;
             UPDATE relayops.deliveries SET attempt_count = 2
             WHERE id = (SELECT id FROM relayops.deliveries WHERE endpoint_id = '{failing}' ORDER BY id LIMIT 1);
             UPDATE relayops.webhook_endpoints SET circuit_open_until = now() + interval '1 hour' WHERE id = '{failing}'"
        ),
    )
    .await;
    let client = env.pool.get().await.unwrap();
    assert_eq!(
        parked_expiry::start_clocks(&client, 100).await.unwrap(),
        3,
        "the failing endpoint's, but its last attempt"
    );
    assert_eq!(parked_expiry::start_clocks(&client, 100).await.unwrap(), 0, "once");
    let clocks = env
        .query_i64(&format!(
            "SELECT count(*) FROM relayops.deliveries WHERE endpoint_id = '{failing}' AND status = 'parked'
               AND next_attempt_at BETWEEN now() + interval '110 seconds' AND now() + interval '121 seconds'"
        ))
        .await;
    assert_eq!(clocks, 3, "two waits of 60 s left each, counted from now");
    assert_eq!(
        count(&env, &format!("endpoint_id = '{busy}' AND next_attempt_at IS NULL")).await,
        4,
        "closed: untouched"
    );
    let admitting = waiting::admitting_endpoints(&client).await.unwrap();
    let admitting: Vec<String> = admitting.iter().map(|(_, id)| id.as_uuid().simple().to_string()).collect();
    assert!(admitting.contains(&failing), "its last attempt may still be admitted: {admitting:?}");
}

fn with_small_circuits() -> TestConfig {
    let mut config = TestConfig::default();
    config.worker.circuit =
        CircuitConfig { failures: 5, cooldown: Duration::from_secs(30), max_cooldown: Duration::from_secs(60) };
    config
}

/// A parked delivery replayed while its circuit is still open waits the
/// same way: claimed, parked again (no attempt) with a new give-up time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_delivery_replayed_to_an_open_circuit_parks_again_with_a_new_give_up_time() {
    let env = TestEnv::start_with(with_small_circuits()).await;
    let schedule = json!({ "retry_schedule_secs": [60], "max_attempts": 20 });
    let uuid = endpoint_uuid(&env, "/sim/status/503", schedule).await;
    // Five failures open the circuit (their retries are a minute away); the
    // deliveries posted after that park.
    post_events(&env, 5).await;
    env.wait_for_sql(
        "the circuit open",
        &format!("SELECT circuit_open_until IS NOT NULL FROM relayops.webhook_endpoints WHERE id = '{uuid}'"),
    )
    .await;
    post_events(&env, 5).await;
    env.wait_for_sql(
        "deliveries parked behind the open circuit",
        &format!(
            "SELECT count(*) > 0 FROM relayops.deliveries d JOIN relayops.webhook_endpoints e ON e.id = d.endpoint_id
             WHERE e.id = '{uuid}' AND e.circuit_open_until IS NOT NULL AND d.status = 'parked'"
        ),
    )
    .await;
    let client = env.pool.get().await.unwrap();
    let parked = client
        .query_one(
            "SELECT 'dlv_' || replace(id::text, '-', '') AS id, next_attempt_at, attempt_count
             FROM relayops.deliveries WHERE status = 'parked' ORDER BY updated_at LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    let (id, gave_up_at, attempts): (String, chrono::DateTime<chrono::Utc>, i32) =
        (parked.get(0), parked.get(1), parked.get(2));
    let requests = env.simulator.received().len();

    let replayed = env.post(&format!("/v1/deliveries/{id}/replay"), json!({})).await;
    assert_eq!(replayed.status, 202, "{:?}", replayed.body);
    let delivery = eventually(WAIT, || async {
        let delivery = env.get(&format!("/v1/deliveries/{id}")).await.body;
        let later = delivery["next_attempt_at"]
            .as_str()
            .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
            .is_some_and(|at| at > gave_up_at);
        if delivery["status"] == "parked" && later {
            Ok(delivery)
        } else {
            Err(format!("not parked again with a later give-up time: {delivery}"))
        }
    })
    .await;
    assert_eq!(delivery["attempt_count"], attempts, "no attempt while the circuit is open");
    assert_eq!(env.simulator.received().len(), requests, "nothing sent");
}

/// An ordering lane behind an open circuit: each key's head is parked and
/// dies when its schedule ends; only then does the next event of its key
/// start waiting, and it too dies on its own schedule — in order, with the
/// lane moving on as it does after any dead letter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordering_lane_behind_an_open_circuit_dies_in_order_each_on_its_own_schedule() {
    const KEYS: usize = 6;
    let env = TestEnv::start_with(with_small_circuits()).await;
    let policy = json!({ "retry_schedule_secs": [1, 2, 4], "max_attempts": 4 });
    let uuid = endpoint_uuid(&env, "/sim/status/503", policy).await;
    for n in 0..2 {
        for key in 0..KEYS {
            let answer = env.post_ordered("a.b", json!({ "n": n }), &format!("k{key}")).await;
            assert_eq!(answer.status, 201, "{:?}", answer.body);
        }
    }
    eventually(WAIT * 3, || async {
        match count(&env, "status = 'dead'").await {
            dead if dead == 2 * KEYS as i64 => Ok(()),
            dead => Err(format!("{dead} of {} dead", 2 * KEYS)),
        }
    })
    .await;
    let opened = format!(
        "SELECT count(*) FROM relayops.webhook_endpoints WHERE id = '{uuid}' AND circuit_cooldown_ms IS NOT NULL"
    );
    assert_eq!(env.query_i64(&opened).await, 1, "the heads' failures opened the circuit");
    // Per key: the second event's delivery died a whole schedule after the
    // first's death (its own 7 s, less a margin), never beside it.
    let out_of_order = env
        .query_i64(
            "SELECT count(*) FROM relayops.deliveries first JOIN relayops.events fe ON fe.id = first.event_id
             JOIN relayops.deliveries second ON second.ordering_key = first.ordering_key
             JOIN relayops.events se ON se.id = second.event_id
             WHERE (fe.payload->>'n') = '0' AND (se.payload->>'n') = '1'
               AND second.updated_at < first.updated_at + interval '5 seconds'",
        )
        .await;
    assert_eq!(out_of_order, 0, "a key's second delivery waited for the first to end");
}

/// On an endpoint whose lanes block on a dead letter, a lane whose head died
/// parked (its policy gave it up behind the open circuit) is held on that
/// head, exactly as after a last failed attempt: the next delivery of its
/// key waits, unattempted, and the blocked lanes name the dead head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_lane_whose_head_died_parked_is_held_on_it() {
    const KEYS: usize = 6;
    let env = TestEnv::start_with(with_small_circuits()).await;
    let policy = json!({ "retry_schedule_secs": [1, 2, 4], "max_attempts": 4, "dead_letter_lane": "block" });
    let endpoint = env.create_endpoint("/sim/status/503", &["a.b"], policy).await;
    let endpoint_id = endpoint["id"].as_str().unwrap().to_owned();
    for n in 0..2 {
        for key in 0..KEYS {
            let answer = env.post_ordered("a.b", json!({ "n": n }), &format!("k{key}")).await;
            assert_eq!(answer.status, 201, "{:?}", answer.body);
        }
    }
    let first = "event_id IN (SELECT id FROM relayops.events WHERE payload->>'n' = '0')";
    let second = "event_id IN (SELECT id FROM relayops.events WHERE payload->>'n' = '1')";
    eventually(WAIT * 3, || async {
        match count(&env, &format!("status = 'dead' AND {first}")).await {
            dead if dead == KEYS as i64 => Ok(()),
            dead => Err(format!("{dead} of {KEYS} heads dead")),
        }
    })
    .await;
    let gave_up = count(&env, &format!("last_error = '{}'", parked_expiry::GAVE_UP)).await;
    assert!(gave_up > 0, "some heads died parked, given up behind the open circuit");
    let blocked = env.get(&format!("/v1/endpoints/{endpoint_id}/blocked-lanes")).await;
    assert_eq!(blocked.status, 200, "{:?}", blocked.body);
    let lanes = blocked.body["data"].as_array().unwrap();
    assert_eq!(lanes.len(), KEYS, "every lane held on its dead head: {:?}", blocked.body);
    assert!(lanes.iter().all(|lane| lane["waiting"] == 1), "{:?}", blocked.body);
    assert_eq!(count(&env, &format!("attempt_count > 0 AND {second}")).await, 0, "nothing behind a dead head sent");
    assert_eq!(count(&env, &format!("status = 'dead' AND {second}")).await, 0, "nor given up");
}
