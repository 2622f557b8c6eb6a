//! An unordered event's deliveries travel through the broker together: one
//! `deliveries.v1` message (up to 32 deliveries) instead of one per delivery;
//! and the deliveries of a tenant's events claimed together (one subscriber
//! each, say) in one `deliveries.v2`, instead of one message per event.
//! Each is still attempted, recorded and retried on its own: one that needs
//! another try goes round as a message of its own, and a worker that dies
//! with a bundle under way leaves the bundle to be redelivered, whose
//! deliveries already settled are not sent again.
use std::collections::HashMap;
use std::time::Duration;

use relayops_tests::{TestConfig, TestEnv, WAIT};
use serde_json::json;

/// How many requests the receiver saw per path.
fn requests_per_path(env: &TestEnv) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for received in env.simulator.received() {
        *counts.entry(received.path).or_default() += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_deliveries_travel_as_one_message_and_each_is_delivered_once() {
    let mut env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    for _ in 0..5 {
        env.create_endpoint("/sim/ok", &["b.*"], json!({})).await;
    }
    let answer = env.post_event("b.created", json!({ "n": 1 })).await;
    assert_eq!(answer.body["deliveries"], 5, "{:?}", answer.body);
    env.wait_for_outbox_drained().await;
    assert_eq!(env.ready_depth().await, 1, "one message for the event's five deliveries");
    env.wait_for_messages_published(5).await;

    env.start_worker().await;
    let event_id = answer.body["id"].as_str().unwrap();
    let deliveries =
        env.wait_for_deliveries(event_id, |all| all.len() == 5 && all.iter().all(|d| d["status"] == "delivered")).await;
    let received = env.simulator.received();
    let mut ids: Vec<_> = received.iter().map(|r| r.delivery_id.clone().unwrap()).collect();
    ids.sort();
    let mut expected: Vec<_> = deliveries.iter().map(|d| d["id"].as_str().unwrap().to_owned()).collect();
    expected.sort();
    assert_eq!(ids, expected, "each delivery sent once, under its own id");
    assert!(received.iter().all(|r| r.signature_valid == Some(true)), "each signed");
}

/// Six events with one subscriber each, posted in one batch (one statement:
/// the publisher gets their rows together): their deliveries cross the
/// broker as one message, and each is sent once, under its own id, with its
/// own event's payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_events_deliveries_travel_as_one_message_and_each_carries_its_own_event() {
    let mut env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    env.create_endpoint("/sim/ok", &["b.*"], json!({})).await;
    let events: Vec<_> = (0..6).map(|n| json!({ "event_type": "b.created", "payload": { "n": n } })).collect();
    let answer = env.post("/v1/events/batch", json!({ "events": events })).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    env.wait_for_outbox_drained().await;
    assert_eq!(env.ready_depth().await, 1, "one message for the six events' deliveries");
    env.wait_for_messages_published(6).await;

    env.start_worker().await;
    let mut sent_for = HashMap::new();
    for (n, result) in answer.body["results"].as_array().unwrap().iter().enumerate() {
        let event_id = result["event"]["id"].as_str().unwrap();
        let deliveries =
            env.wait_for_deliveries(event_id, |all| all.len() == 1 && all[0]["status"] == "delivered").await;
        sent_for.insert(deliveries[0]["id"].as_str().unwrap().to_owned(), json!({ "n": n }));
    }
    let received = env.simulator.received();
    assert_eq!(received.len(), 6, "each delivery sent once: {received:#?}");
    for request in &received {
        let id = request.delivery_id.as_deref().unwrap();
        assert_eq!(Some(&request.body), sent_for.get(id), "delivery {id} carries its own event");
        assert_eq!(request.signature_valid, Some(true));
    }
}

/// One delivery of a bundle fails and is retried (through the retry queue,
/// alone); the others are sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundled_delivery_that_fails_is_retried_alone_and_the_others_are_sent_once() {
    let env = TestEnv::start().await;
    for _ in 0..3 {
        env.create_endpoint("/sim/ok", &["b.*"], json!({})).await;
    }
    env.create_endpoint("/sim/flaky/1", &["b.*"], json!({ "retry_schedule_secs": [1] })).await;
    let answer = env.post_event("b.created", json!({ "n": 1 })).await;
    assert_eq!(answer.body["deliveries"], 4, "{:?}", answer.body);
    let event_id = answer.body["id"].as_str().unwrap();
    let deliveries =
        env.wait_for_deliveries(event_id, |all| all.len() == 4 && all.iter().all(|d| d["status"] == "delivered")).await;
    let attempts: Vec<i64> = deliveries.iter().map(|d| d["attempt_count"].as_i64().unwrap()).collect();
    assert_eq!(attempts.iter().filter(|&&n| n == 1).count(), 3, "{attempts:?}");
    assert_eq!(attempts.iter().filter(|&&n| n == 2).count(), 1, "{attempts:?}");
    let counts = requests_per_path(&env);
    assert_eq!((counts["/sim/ok"], counts["/sim/flaky/1"]), (3, 2), "{counts:?}");
    env.wait_for_outbox_drained().await;
}

/// A worker process killed while one delivery of a bundle is under way (the
/// others delivered): the bundle comes back to another worker, which sends
/// none of the settled deliveries again, and the one under way is delivered
/// once its lease has expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_bundle_leaves_no_delivery_behind_and_sends_no_settled_one_again() {
    let mut config = TestConfig { run_worker: false, ..Default::default() };
    config.worker.request_timeout = Duration::from_secs(5);
    config.worker.lease = Duration::from_secs(6);
    let env = TestEnv::start_with(config).await;
    for _ in 0..3 {
        env.create_endpoint("/sim/ok", &["b.*"], json!({})).await;
    }
    // The receiver holds the first request (30 s) and answers later ones at once.
    env.create_endpoint("/sim/slow-once/30000", &["b.*"], json!({})).await;

    let mut doomed = env.spawn_role("worker", &[]);
    let answer = env.post_event("b.created", json!({ "n": 1 })).await;
    let event_id = answer.body["id"].as_str().unwrap().to_owned();
    env.wait_for_deliveries(&event_id, |all| {
        let delivered = all.iter().filter(|d| d["status"] == "delivered").count();
        let under_way = all.iter().filter(|d| d["status"] == "in_progress").count();
        (delivered, under_way) == (3, 1)
    })
    .await;
    env.simulator.wait_until(WAIT, |received| received.len() == 4).await;
    doomed.kill();

    let _survivor = env.spawn_role("worker", &[]);
    env.wait_for_deliveries(&event_id, |all| all.len() == 4 && all.iter().all(|d| d["status"] == "delivered")).await;
    let counts = requests_per_path(&env);
    assert_eq!(counts["/sim/ok"], 3, "no settled delivery sent again: {counts:?}");
    assert_eq!(counts["/sim/slow-once/30000"], 2, "the killed attempt and the completed one: {counts:?}");
}

/// Flow control turns one bundled delivery away (its endpoint's rate limit):
/// it waits parked alone, without spending an attempt, and is delivered once
/// its turn comes; the other deliveries of the same bundles are sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundled_delivery_flow_control_turns_away_waits_alone_without_an_attempt() {
    const EVENTS: usize = 3;
    let env = TestEnv::start().await;
    for _ in 0..2 {
        env.create_endpoint("/sim/ok", &["b.*"], json!({})).await;
    }
    env.create_endpoint("/sim/status/200", &["b.*"], json!({ "rate_limit_per_sec": 1, "rate_limit_burst": 1 })).await;
    let posts = (0..EVENTS).map(|n| env.post_event("b.created", json!({ "n": n })));
    let answers = futures_util::future::join_all(posts).await;
    for answer in &answers {
        assert_eq!(answer.body["deliveries"], 3, "{:?}", answer.body);
        let event_id = answer.body["id"].as_str().unwrap();
        let deliveries = env
            .wait_for_deliveries(event_id, |all| all.len() == 3 && all.iter().all(|d| d["status"] == "delivered"))
            .await;
        assert!(deliveries.iter().all(|d| d["attempt_count"] == 1), "no attempt spent on a turn-away: {deliveries:?}");
    }
    let counts = requests_per_path(&env);
    assert_eq!((counts["/sim/ok"], counts["/sim/status/200"]), (2 * EVENTS, EVENTS), "{counts:?}");
    let turned_away = env.metric("relayops_deliveries_parked_total", &[("reason", "rate_limited")]).await;
    assert!(turned_away >= 1.0, "the rate limit turned at least one delivery away ({turned_away})");
    let parked = env.metric("relayops_deliveries_parked_total", &[]).await;
    let admitted = env.metric("relayops_deliveries_admitted_total", &[]).await;
    assert_eq!(admitted, parked, "each delivery parked was admitted once");
}

/// A bundle none of whose deliveries can be sent round — each claim fails on
/// our side (a trigger raises), and the retry queue a requeued delivery goes
/// through is gone (the broker refuses what is sent to it) — is never
/// acknowledged: it is requeued whole, again and again, and near the ready
/// queue's delivery limit published afresh instead of being dropped by the
/// broker. Once the faults are gone each delivery is sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_whose_deliveries_cannot_go_round_is_kept_past_the_delivery_limit_and_loses_none() {
    let mut config = TestConfig { run_worker: false, ..Default::default() };
    // Recovery's lost-`pending` sweep stays out of it: only the bundle's own message can bring it back.
    config.publisher.recovery_grace = Duration::from_secs(600);
    let mut env = TestEnv::start_with(config).await;
    for _ in 0..3 {
        env.create_endpoint("/sim/ok", &["b.*"], json!({})).await;
    }
    env.create_trigger(
        "refuse_claims",
        "BEFORE UPDATE ON relayops.deliveries",
        "IF NEW.status = 'in_progress' THEN RAISE EXCEPTION 'claims refused by the test'; END IF; RETURN NEW;",
    )
    .await;
    // The worker declares the topology as it starts; the queue goes after that.
    env.start_worker().await;
    // A requeued delivery goes round after 500 ms: through the longest retry queue not above it.
    let requeue_bucket = env.topology().bucket_for(Duration::from_millis(500)).queue.clone();
    env.delete_queue(&requeue_bucket).await;
    let answer = env.post_event("b.created", json!({ "n": 1 })).await;
    assert_eq!(answer.body["deliveries"], 3, "{:?}", answer.body);
    relayops_tests::eventually(Duration::from_secs(60), || async {
        match env.metric("relayops_deliveries_republished_total", &[]).await {
            republished if republished >= 1.0 => Ok(()),
            _ => Err("the bundle not yet published afresh near the delivery limit".to_owned()),
        }
    })
    .await;
    assert!(env.simulator.received().is_empty(), "nothing sent while every claim failed");

    env.declare_topology().await;
    let client = env.pool.get().await.unwrap();
    client.batch_execute("DROP TRIGGER refuse_claims ON relayops.deliveries").await.unwrap();
    let event_id = answer.body["id"].as_str().unwrap();
    let deliveries =
        env.wait_for_deliveries(event_id, |all| all.len() == 3 && all.iter().all(|d| d["status"] == "delivered")).await;
    assert!(deliveries.iter().all(|d| d["attempt_count"] == 1), "{deliveries:?}");
    assert_eq!(requests_per_path(&env)["/sim/ok"], 3, "each delivery sent once");
}
