//! Replay of dead and failed deliveries.
use relayops_tests::TestEnv;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_delivery_is_replayed_and_its_attempt_numbers_continue() {
    let env = TestEnv::start().await;
    // Fails once (503), and with one attempt allowed that makes it dead.
    env.create_endpoint("/sim/flaky/1", &["*"], json!({ "max_attempts": 1 }))
        .await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let dead = env.wait_for_status(&event_id, "dead").await;
    let delivery_id = dead["id"].as_str().unwrap();

    let replay = env
        .post(&format!("/v1/deliveries/{delivery_id}/replay"), json!({}))
        .await;
    assert_eq!(replay.status, 202, "{:?}", replay.body);
    let delivered = env.wait_for_status(&event_id, "delivered").await;
    assert_eq!(delivered["attempt_count"], 2);
    let history = env
        .get(&format!("/v1/deliveries/{delivery_id}/attempts"))
        .await
        .body["data"]
        .clone();
    assert_eq!(history[0]["attempt_number"], 1);
    assert_eq!(history[0]["outcome"], "dead");
    assert_eq!(history[1]["attempt_number"], 2);
    assert_eq!(history[1]["outcome"], "delivered");
    assert_eq!(
        env.count("outbox_messages").await,
        2,
        "the replay wrote a new outbox row"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_a_delivery_that_is_not_dead_or_failed_is_a_conflict() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let delivered = env.wait_for_status(&event_id, "delivered").await;
    let delivery_id = delivered["id"].as_str().unwrap();
    let detail = env
        .post(&format!("/v1/deliveries/{delivery_id}/replay"), json!({}))
        .await
        .expect_problem(409);
    assert!(detail.contains("delivered"), "{detail}");
    assert_eq!(env.count("outbox_messages").await, 1, "nothing written");
    env.post(
        &format!("/v1/deliveries/dlv_{}/replay", "0".repeat(32)),
        json!({}),
    )
    .await
    .expect_problem(404);
}
