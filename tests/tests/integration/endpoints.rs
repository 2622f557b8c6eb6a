//! Managing endpoints: secret rotation with overlap, enable/disable, policy changes.
use relayops_tests::TestEnv;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_secret_signs_beside_the_old_one_until_the_grace_period_ends() {
    let env = TestEnv::start().await;
    let endpoint = env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let id = endpoint["id"].as_str().unwrap();

    let rotated = env.post(&format!("/v1/endpoints/{id}/secret/rotate"), json!({ "grace_period_secs": 2 })).await;
    assert_eq!(rotated.status, 200, "{:?}", rotated.body);
    let new_secret = rotated.body["secret"].as_str().unwrap();
    assert_ne!(new_secret, endpoint["secret"].as_str().unwrap());
    env.simulator.register_secret(new_secret).unwrap();
    assert_eq!(env.get(&format!("/v1/endpoints/{id}/secret")).await.body["secret"], new_secret);

    let during = env.post_event("a.b", json!({ "phase": "grace" })).await.body["id"].as_str().unwrap().to_owned();
    env.wait_for_status(&during, "delivered").await;
    let first = env.simulator.received()[0].clone();
    assert_eq!(first.signature_count, 2, "old and new secret both sign during the grace period");
    assert_eq!(first.verified_by, 2, "each secret verifies its signature");

    // After the grace period only the new secret signs.
    let client = env.pool.get().await.unwrap();
    env.wait_for_sql(
        "grace over",
        "SELECT bool_and(previous_secret_expires_at < now()) FROM relayops.webhook_endpoints",
    )
    .await;
    drop(client);
    let after = env.post_event("a.b", json!({ "phase": "after" })).await.body["id"].as_str().unwrap().to_owned();
    env.wait_for_status(&after, "delivered").await;
    let second = env.simulator.received()[1].clone();
    assert_eq!(second.signature_count, 1);
    assert_eq!(second.verified_by, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_can_be_disabled_reenabled_and_retuned() {
    let env = TestEnv::start().await;
    let endpoint = env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let id = endpoint["id"].as_str().unwrap();
    let path = format!("/v1/endpoints/{id}");

    let disabled =
        env.request(reqwest::Method::PATCH, &path, Some(&env.api_key), Some(json!({ "enabled": false }))).await;
    assert_eq!(disabled.status, 200, "{:?}", disabled.body);
    assert_eq!(disabled.body["enabled"], false);
    assert_eq!(env.post_event("a.b", json!({})).await.body["deliveries"], 0, "disabled endpoints get nothing");

    let changes =
        json!({ "enabled": true, "max_attempts": 3, "rate_limit_per_sec": 50, "retry_schedule_secs": [1, 2] });
    let enabled = env.request(reqwest::Method::PATCH, &path, Some(&env.api_key), Some(changes)).await;
    assert_eq!(enabled.status, 200);
    assert_eq!(enabled.body["enabled"], true);
    assert!(enabled.body["disabled_reason"].is_null());
    assert_eq!(enabled.body["max_attempts"], 3);
    assert_eq!(enabled.body["rate_limit_per_sec"], 50);
    let cleared = env
        .request(reqwest::Method::PATCH, &path, Some(&env.api_key), Some(json!({ "rate_limit_per_sec": null })))
        .await;
    assert!(cleared.body["rate_limit_per_sec"].is_null(), "null clears a limit");
    assert_eq!(cleared.body["max_attempts"], 3, "absent fields stay as they were");

    let bad = env.request(reqwest::Method::PATCH, &path, Some(&env.api_key), Some(json!({ "url": "ftp://x" }))).await;
    bad.expect_problem(422);
    let event = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    env.wait_for_status(&event, "delivered").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_rotation_keeps_the_current_secret() {
    let env = TestEnv::start_with(relayops_tests::TestConfig { run_worker: false, ..Default::default() }).await;
    let endpoint = env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let id = endpoint["id"].as_str().unwrap();
    let path = format!("/v1/endpoints/{id}/secret/rotate");
    for body in [
        json!({ "grace_period_secs": -1 }),
        json!({ "grace_period_secs": 8 * 24 * 3600 }),
        json!({ "secret": "plain" }),
    ] {
        env.post(&path, body).await.expect_problem(422);
    }
    assert_eq!(env.get(&format!("/v1/endpoints/{id}/secret")).await.body["secret"], endpoint["secret"]);
}
