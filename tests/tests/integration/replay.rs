//! Replay of dead and failed deliveries.
use relayops_tests::TestEnv;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_delivery_is_replayed_and_its_attempt_numbers_continue() {
    let env = TestEnv::start().await;
    // Fails once (503), and with one attempt allowed that makes it dead.
    env.create_endpoint("/sim/flaky/1", &["*"], json!({ "max_attempts": 1 })).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    let dead = env.wait_for_status(&event_id, "dead").await;
    let delivery_id = dead["id"].as_str().unwrap();
    env.wait_for_outbox_drained().await;
    let letters = env.take_dead_letters().await;
    assert_eq!(letters.len(), 1, "one ops-DLQ message");
    assert_eq!(letters[0]["delivery_id"], delivery_id);

    let replay = env.post(&format!("/v1/deliveries/{delivery_id}/replay"), json!({})).await;
    assert_eq!(replay.status, 202, "{:?}", replay.body);
    let delivered = env.wait_for_status(&event_id, "delivered").await;
    assert_eq!(delivered["attempt_count"], 2);
    let history = env.get(&format!("/v1/deliveries/{delivery_id}/attempts")).await.body["data"].clone();
    assert_eq!(history[0]["attempt_number"], 1);
    assert_eq!(history[0]["outcome"], "dead");
    assert_eq!(history[1]["attempt_number"], 2);
    assert_eq!(history[1]["outcome"], "delivered");
    // The delivery, its dead letter, and the replay's new message.
    env.wait_for_messages_published(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_a_delivery_that_is_not_dead_or_failed_is_a_conflict() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    let delivered = env.wait_for_status(&event_id, "delivered").await;
    let delivery_id = delivered["id"].as_str().unwrap();
    env.wait_for_messages_published(1).await;
    let detail = env.post(&format!("/v1/deliveries/{delivery_id}/replay"), json!({})).await.expect_problem(409);
    assert!(detail.contains("delivered"), "{detail}");
    // Nothing written: no outbox row waiting, none published.
    assert_eq!(env.count("outbox_messages").await, 0, "nothing written");
    assert_eq!(env.messages_published().await, 1.0, "nothing written");
    env.post(&format!("/v1/deliveries/dlv_{}/replay", "0".repeat(32)), json!({})).await.expect_problem(404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_delivery_reaches_the_ops_dlq_and_the_dead_list() {
    let env = TestEnv::start().await;
    let endpoint =
        env.create_endpoint("/sim/status/502", &["*"], json!({ "max_attempts": 2, "retry_schedule_secs": [0] })).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    let dead = env.wait_for_status(&event_id, "dead").await;

    env.wait_for_outbox_drained().await;
    let letters = env.take_dead_letters().await;
    assert_eq!(letters.len(), 1, "exactly one ops-DLQ message: {letters:?}");
    let letter = &letters[0];
    assert_eq!(letter["type"], "dead_letter.v1");
    assert_eq!(letter["delivery_id"], dead["id"]);
    assert_eq!(letter["tenant_id"], env.tenant_id.to_string());
    assert_eq!(letter["endpoint_id"], endpoint["id"]);
    assert_eq!(letter["attempts"], 2);
    assert_eq!(letter["last_http_status"], 502);
    assert!(letter["reason"].as_str().is_some_and(|r| !r.is_empty()));

    let list = env.get("/v1/deliveries?status=dead").await;
    let rows = list.body["data"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["id"], dead["id"]);
    assert_eq!(rows[0]["last_http_status"], 502);
    env.get("/v1/deliveries?status=zombie").await.expect_problem(400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_replay_by_filter_reports_a_dry_run_and_respects_its_cap() {
    let env = TestEnv::start().await;
    // Two endpoints fail once then succeed; only one is targeted by the filter.
    let target = env.create_endpoint("/sim/flaky/1", &["order.*"], json!({ "max_attempts": 1 })).await;
    env.create_endpoint("/sim/flaky/1", &["invoice.*"], json!({ "max_attempts": 1 })).await;
    let mut order_events = Vec::new();
    for n in 0..5 {
        order_events
            .push(env.post_event("order.created", json!({ "n": n })).await.body["id"].as_str().unwrap().to_owned());
    }
    let invoice = env.post_event("invoice.paid", json!({})).await.body["id"].as_str().unwrap().to_owned();
    for event in order_events.iter().chain([&invoice]) {
        env.wait_for_status(event, "dead").await;
    }

    let filter = json!({ "endpoint_id": target["id"], "statuses": ["dead"], "dry_run": true });
    let dry = env.post("/v1/replays", filter).await;
    assert_eq!(dry.status, 200, "{:?}", dry.body);
    assert_eq!((dry.body["matched"].as_i64(), dry.body["replayed"].as_i64()), (Some(5), Some(0)));
    assert_eq!(
        env.get("/v1/deliveries?status=dead").await.body["data"].as_array().unwrap().len(),
        6,
        "dry run changed nothing"
    );

    let first = env.post("/v1/replays", json!({ "endpoint_id": target["id"], "limit": 3 })).await;
    assert_eq!(first.status, 202, "{:?}", first.body);
    assert_eq!((first.body["replayed"].as_i64(), first.body["remaining"].as_i64()), (Some(3), Some(2)));
    let second = env.post("/v1/replays", json!({ "endpoint_id": target["id"], "limit": 3 })).await;
    assert_eq!((second.body["replayed"].as_i64(), second.body["remaining"].as_i64()), (Some(2), Some(0)));

    for event in &order_events {
        let delivered = env.wait_for_status(event, "delivered").await;
        assert_eq!(delivered["attempt_count"], 2, "attempt numbers continue after replay");
    }
    let untouched = env.wait_for_status(&invoice, "dead").await;
    assert_eq!(untouched["attempt_count"], 1, "outside the filter");

    let detail = env.post("/v1/replays", json!({ "statuses": ["delivered"] })).await.expect_problem(422);
    assert!(detail.contains("statuses"), "{detail}");
    env.post("/v1/replays", json!({ "limit": 5000 })).await.expect_problem(422);
}
