//! Ordering lanes (SPEC §11): per (endpoint, ordering key), one delivery at a
//! time in the order the events were accepted; retries hold the lane, other
//! keys flow past a stuck one, and neither a killed worker nor several
//! workers at once reorder a key at the receiver (duplicates allowed).
use std::time::Duration;

use relayops_tests::lanes::{accepted_count, first_request_of_position_0, LaneReceiver, Reply};
use relayops_tests::{TestEnv, WAIT};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_arrives_in_posting_order_and_its_retries_hold_the_lane() {
    let env = TestEnv::start().await;
    // Every event fails twice, then goes through; retries are due at once.
    let (receiver, url) =
        LaneReceiver::start(|arrival| if arrival.seen <= 2 { Reply::Status(503) } else { Reply::Status(200) }).await;
    env.create_lane_endpoint(&url, json!({ "retry_schedule_secs": [0] })).await;
    for n in 0..5 {
        let answer = env.post_ordered("order.updated", json!({ "key": "order-1", "n": n }), "order-1").await;
        assert_eq!(answer.status, 201, "{:?}", answer.body);
        assert_eq!(answer.body["ordering_key"], "order-1");
    }
    let arrivals = receiver.wait_until(WAIT, |arrivals| arrivals.len() >= 15).await;
    let positions: Vec<i64> = arrivals.iter().map(|arrival| arrival.n).collect();
    assert_eq!(positions, [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4], "each event's retries before the next event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_key_holds_only_its_own_lane() {
    let env = TestEnv::start().await;
    let (receiver, url) = LaneReceiver::start(|arrival| match arrival.key.as_str() {
        "stuck" => Reply::Status(500),
        _ => Reply::Status(200),
    })
    .await;
    env.create_lane_endpoint(&url, json!({ "max_attempts": 50, "retry_schedule_secs": [1] })).await;
    let first_stuck = env.post_ordered("order.updated", json!({ "key": "stuck", "n": 0 }), "stuck").await;
    let second_stuck = env.post_ordered("order.updated", json!({ "key": "stuck", "n": 1 }), "stuck").await;
    for n in 0..10 {
        env.post_ordered("order.updated", json!({ "key": "free", "n": n }), "free").await;
    }
    // Unordered events to the same endpoint are not held either.
    let unordered = env.post_event("order.updated", json!({ "key": "", "n": 0 })).await;

    let arrivals =
        receiver.wait_until(WAIT, |arrivals| arrivals.iter().filter(|a| a.key == "free").count() >= 10).await;
    env.wait_for_status(unordered.body["id"].as_str().unwrap(), "delivered").await;
    let free: Vec<i64> = arrivals.iter().filter(|a| a.key == "free").map(|a| a.n).collect();
    assert_eq!(free, (0..10).collect::<Vec<_>>(), "the healthy key in order, once each");
    assert!(arrivals.iter().filter(|a| a.key == "stuck").all(|a| a.n == 0), "only the stuck head was sent");

    let head = env.wait_for_deliveries(first_stuck.body["id"].as_str().unwrap(), |d| d.len() == 1).await;
    assert!(["scheduled", "in_progress"].contains(&head[0]["status"].as_str().unwrap()), "{head:?}");
    assert_eq!(head[0]["ordering_key"], "stuck");
    let behind = env.wait_for_deliveries(second_stuck.body["id"].as_str().unwrap(), |d| d.len() == 1).await;
    assert_eq!(behind[0]["status"], "scheduled", "waiting in its lane: {behind:?}");
    assert_eq!(behind[0]["attempt_count"], 0);
    assert!(behind[0]["next_attempt_at"].is_null(), "no due time while it waits: {behind:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_lane_neither_loses_nor_reorders_its_key() {
    let mut config = relayops_tests::TestConfig { run_worker: false, ..Default::default() };
    config.worker.request_timeout = Duration::from_secs(5);
    config.worker.lease = Duration::from_secs(6);
    let env = TestEnv::start_with(config).await;
    // The very first request hangs: that is when the worker dies.
    let (receiver, url) = LaneReceiver::start(first_request_of_position_0(Reply::Hang)).await;
    env.create_lane_endpoint(&url, json!({})).await;

    let mut doomed = env.spawn_role("worker", &[]);
    let mut events = Vec::new();
    for n in 0..4 {
        let answer = env.post_ordered("order.updated", json!({ "key": "k", "n": n }), "k").await;
        events.push(answer.body["id"].as_str().unwrap().to_owned());
    }
    receiver.wait_until(WAIT, |arrivals| !arrivals.is_empty()).await;
    env.wait_for_status(&events[0], "in_progress").await;
    doomed.kill();

    let _survivor = env.spawn_role("worker", &[]);
    for event in &events {
        env.wait_for_status(event, "delivered").await;
    }
    let arrivals = receiver.arrivals();
    let positions: Vec<i64> = arrivals.iter().map(|arrival| arrival.n).collect();
    assert_eq!(positions, [0, 0, 1, 2, 3], "the killed attempt, its repeat, then the rest in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_keys_with_random_failures_and_two_worker_processes_arrive_in_order_per_key() {
    const KEYS: i64 = 20;
    const PER_KEY: i64 = 12;
    let mut config = relayops_tests::TestConfig { run_worker: false, ..Default::default() };
    config.worker.lease = Duration::from_secs(4);
    let env = TestEnv::start_with(config).await;
    // A third of attempts fail, pseudo-randomly but the same for the same
    // (event, attempt); a few hang until the worker's timeout.
    let (receiver, url) = LaneReceiver::start(|arrival| {
        let roll = (key_hash(&arrival.key) + arrival.n * 7919 + i64::from(arrival.seen) * 31) % 100;
        match roll {
            0..=29 => Reply::Status(500),
            30..=32 if arrival.seen == 1 => Reply::Hang,
            _ => Reply::Status(200),
        }
    })
    .await;
    env.create_lane_endpoint(&url, json!({ "max_attempts": 30, "retry_schedule_secs": [0, 1] })).await;
    let mut first = env.spawn_role("worker", &[]);
    let _second = env.spawn_role("worker", &[]);

    // Keys post concurrently; each key's events one after another (the
    // acceptance order the lane keeps).
    let posting = (0..KEYS).map(|k| {
        let env = &env;
        async move {
            let key = format!("key-{k}");
            for n in 0..PER_KEY {
                let answer = env.post_ordered("order.updated", json!({ "key": key, "n": n }), &key).await;
                assert_eq!(answer.status, 201, "{:?}", answer.body);
            }
        }
    });
    futures_util::future::join_all(posting).await;
    // Halfway, one worker dies (kill -9) with requests in flight; a third
    // takes its place.
    let total = (KEYS * PER_KEY) as usize;
    receiver.wait_until(WAIT, |arrivals| accepted_count(arrivals) >= total / 2).await;
    first.kill();
    let _third = env.spawn_role("worker", &[]);

    receiver.assert_every_key_complete_in_order(Duration::from_secs(120), KEYS, PER_KEY).await;
    env.wait_for_sql("every delivery delivered", "SELECT bool_and(status = 'delivered') FROM relayops.deliveries")
        .await;
    env.wait_for_sql("every lane emptied", "SELECT count(*) = 0 FROM relayops.ordering_lanes").await;
}

fn key_hash(key: &str) -> i64 {
    key.bytes().fold(17_i64, |hash, byte| (hash * 31 + i64::from(byte)) % 1_000_003)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_releases_its_lane_by_default_and_its_replay_joins_the_back() {
    let env = TestEnv::start().await;
    let (receiver, url) = LaneReceiver::start(first_request_of_position_0(Reply::Status(500))).await;
    let endpoint = env.create_lane_endpoint(&url, json!({ "max_attempts": 1 })).await;
    assert_eq!(endpoint["dead_letter_lane"], "release", "the default");
    let mut events = Vec::new();
    for n in 0..3 {
        let answer = env.post_ordered("order.updated", json!({ "key": "k", "n": n }), "k").await;
        events.push(answer.body["id"].as_str().unwrap().to_owned());
    }
    let dead = env.wait_for_status(&events[0], "dead").await;
    env.wait_for_status(&events[2], "delivered").await;

    let replay = env.post(&format!("/v1/deliveries/{}/replay", dead["id"].as_str().unwrap()), json!({})).await;
    assert_eq!(replay.status, 202, "{:?}", replay.body);
    assert_eq!(replay.body["status"], "pending", "the lane was empty: sent at once");
    env.wait_for_status(&events[0], "delivered").await;
    let positions: Vec<i64> = receiver.arrivals().iter().map(|arrival| arrival.n).collect();
    assert_eq!(positions, [0, 1, 2, 0], "the dead letter released the lane; its replay came after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_endpoint_holds_a_lane_on_its_dead_letter_until_a_replay_or_a_skip() {
    let env = TestEnv::start().await;
    // Positions 0 and 2 of key `k` die on their first attempt.
    let (receiver, url) = LaneReceiver::start(|arrival| {
        if arrival.key == "k" && [0, 2].contains(&arrival.n) && arrival.seen == 1 {
            Reply::Status(500)
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let endpoint = env.create_lane_endpoint(&url, json!({ "max_attempts": 1, "dead_letter_lane": "block" })).await;
    assert_eq!(endpoint["dead_letter_lane"], "block");
    let endpoint_id = endpoint["id"].as_str().unwrap();
    let mut events = Vec::new();
    for n in 0..4 {
        let answer = env.post_ordered("order.updated", json!({ "key": "k", "n": n }), "k").await;
        events.push(answer.body["id"].as_str().unwrap().to_owned());
    }
    for n in 0..3 {
        env.post_ordered("order.updated", json!({ "key": "other", "n": n }), "other").await;
    }
    let first_dead = env.wait_for_status(&events[0], "dead").await;
    receiver.wait_until(WAIT, |arrivals| arrivals.iter().filter(|a| a.key == "other").count() == 3).await;
    let blocked_lanes = format!("/v1/endpoints/{endpoint_id}/blocked-lanes");
    let blocked = env.get(&blocked_lanes).await;
    assert_eq!(blocked.status, 200, "{:?}", blocked.body);
    assert_eq!(blocked.body["data"].as_array().unwrap().len(), 1, "only `k` is held: {:?}", blocked.body);
    assert_eq!(blocked.body["data"][0]["ordering_key"], "k");
    assert_eq!(blocked.body["data"][0]["delivery_id"], first_dead["id"]);
    assert_eq!(blocked.body["data"][0]["waiting"], 3);
    assert!(receiver.arrivals().iter().filter(|a| a.key == "k").all(|a| a.n == 0), "nothing behind the dead letter");

    // A replay sends the dead head again; the lane goes on once it is delivered.
    let replay = env.post(&format!("/v1/deliveries/{}/replay", first_dead["id"].as_str().unwrap()), json!({})).await;
    assert_eq!(replay.status, 202, "{:?}", replay.body);
    let second_dead = env.wait_for_status(&events[2], "dead").await;
    let blocked = env.get(&blocked_lanes).await;
    assert_eq!(blocked.body["data"][0]["delivery_id"], second_dead["id"], "now held on position 2");
    assert_eq!(blocked.body["data"][0]["waiting"], 1);

    // A skip lets the lane go on past it; the skipped delivery stays dead.
    let skip_path = format!("/v1/deliveries/{}/skip", second_dead["id"].as_str().unwrap());
    let skipped = env.post(&skip_path, json!({})).await;
    assert_eq!(skipped.status, 200, "{:?}", skipped.body);
    assert_eq!(skipped.body["ordering_key"], "k");
    assert!(skipped.body["released"].is_string(), "position 3 released: {:?}", skipped.body);
    env.wait_for_status(&events[3], "delivered").await;
    env.wait_for_status(&events[2], "dead").await;
    let positions: Vec<i64> = receiver.arrivals().iter().filter(|a| a.key == "k").map(|a| a.n).collect();
    assert_eq!(positions, [0, 0, 1, 2, 3]);
    assert_eq!(env.get(&blocked_lanes).await.body["data"], json!([]));
    let again = env.post(&skip_path, json!({})).await;
    let detail = again.expect_problem(409);
    assert!(detail.contains("no blocked ordering lane"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordering_keys_are_validated_shown_and_filterable() {
    let env = TestEnv::start_with(relayops_tests::TestConfig { run_worker: false, ..Default::default() }).await;
    for bad in ["", " padded", "line\nbreak", &"k".repeat(257)] {
        let body = json!({ "event_type": "a.b", "payload": {}, "ordering_key": bad });
        let detail = env.post("/v1/events", body).await.expect_problem(422);
        assert!(detail.contains("ordering_key"), "the problem names the field: {detail}");
    }
    assert_eq!(env.count("events").await, 0, "nothing written for a refused key");
    let batch = json!({ "events": [
        { "event_type": "a.b", "payload": {}, "ordering_key": "" },
        { "event_type": "a.b", "payload": {}, "ordering_key": "order-7" },
    ] });
    let answer = env.post("/v1/events/batch", batch).await;
    assert_eq!(answer.body["results"][0]["status"], 422, "{:?}", answer.body);
    assert_eq!(answer.body["results"][1]["status"], 201);
    assert_eq!(answer.body["results"][1]["event"]["ordering_key"], "order-7");
    env.post_ordered("a.b", json!({}), "order-8").await;
    env.post_event("a.b", json!({})).await;

    let events = env.get("/v1/events?ordering_key=order-7").await;
    assert_eq!(events.body["data"].as_array().unwrap().len(), 1, "{:?}", events.body);
    assert_eq!(events.body["data"][0]["ordering_key"], "order-7");
    assert_eq!(env.get("/v1/events").await.body["data"].as_array().unwrap().len(), 3);
    let detail = env.get("/v1/events?ordering_key=%0A").await.expect_problem(400);
    assert!(detail.contains("ordering_key"), "{detail}");
    let detail = env.get("/v1/deliveries?ordering_key=").await.expect_problem(400);
    assert!(detail.contains("ordering_key"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_list_by_ordering_key_and_show_it() {
    let config = relayops_tests::TestConfig { run_worker: false, run_publisher: false, ..Default::default() };
    let env = TestEnv::start_with(config).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    for n in 0..3 {
        env.post_ordered("a.b", json!({ "n": n }), "order-1").await;
    }
    env.post_ordered("a.b", json!({}), "order-2").await;
    env.post_event("a.b", json!({})).await;
    let listed = env.get("/v1/deliveries?ordering_key=order-1").await;
    let data = listed.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 3, "{:?}", listed.body);
    assert!(data.iter().all(|d| d["ordering_key"] == "order-1"));
    // Nothing runs: the first is pending (the lane's head), the others wait
    // without a message.
    let statuses: Vec<&str> = data.iter().rev().map(|d| d["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["pending", "scheduled", "scheduled"]);
    assert!(data.iter().all(|d| d["next_attempt_at"].is_null()));
    assert_eq!(env.count("outbox_messages").await, 3, "one message per lane head and one for the unordered event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_rabbitmq_restart_mid_lane_keeps_every_key_in_order() {
    const KEYS: i64 = 5;
    const PER_KEY: i64 = 6;
    let mut config = relayops_tests::TestConfig::default();
    // Whatever the restart drops, recovery brings back after this grace.
    config.publisher.recovery_grace = Duration::from_secs(10);
    let env = TestEnv::start_with(config).await;
    // Every event's first attempt fails: each lane's head waits in a retry
    // queue when the broker goes down.
    let (receiver, url) =
        LaneReceiver::start(|arrival| if arrival.seen == 1 { Reply::Status(503) } else { Reply::Status(200) }).await;
    env.create_lane_endpoint(&url, json!({ "retry_schedule_secs": [3] })).await;
    for n in 0..PER_KEY {
        for k in 0..KEYS {
            let key = format!("key-{k}");
            env.post_ordered("order.updated", json!({ "key": key, "n": n }), &key).await;
        }
    }
    receiver.wait_until(WAIT, |arrivals| arrivals.len() as i64 >= KEYS).await;
    tokio::task::spawn_blocking(|| {
        relayops_tests::rabbitmqctl(&["stop_app"]);
        relayops_tests::rabbitmqctl(&["start_app"]);
        relayops_tests::rabbitmqctl(&["await_startup"]);
    })
    .await
    .unwrap();

    receiver.assert_every_key_complete_in_order(Duration::from_secs(180), KEYS, PER_KEY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_endpoint_fails_a_lane_one_delivery_after_another() {
    let mut env = TestEnv::start_with(relayops_tests::TestConfig { run_worker: false, ..Default::default() }).await;
    let (receiver, url) = LaneReceiver::start(|_| Reply::Status(200)).await;
    let endpoint = env.create_lane_endpoint(&url, json!({})).await;
    let mut events = Vec::new();
    for n in 0..3 {
        let answer = env.post_ordered("order.updated", json!({ "key": "k", "n": n }), "k").await;
        events.push(answer.body["id"].as_str().unwrap().to_owned());
    }
    let path = format!("/v1/endpoints/{}", endpoint["id"].as_str().unwrap());
    let answer =
        env.request(reqwest::Method::PATCH, &path, Some(&env.api_key), Some(json!({ "enabled": false }))).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    env.start_worker().await;
    for event in &events {
        let failed = env.wait_for_status(event, "failed").await;
        assert_eq!(failed["last_error"], "endpoint disabled");
    }
    env.wait_for_sql("the lane emptied", "SELECT count(*) = 0 FROM relayops.ordering_lanes").await;
    assert!(receiver.arrivals().is_empty(), "nothing sent to a disabled endpoint");
}
