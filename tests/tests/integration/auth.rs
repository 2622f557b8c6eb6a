//! Authentication and tenant isolation.
use relayops_tests::TestEnv;
use reqwest::Method;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_a_valid_api_key_get_401() {
    let env = TestEnv::start_with(relayops_tests::TestConfig { run_worker: false, ..Default::default() }).await;
    let body = json!({ "event_type": "a.b", "payload": {} });
    // Same prefix as the real key, different secret part.
    let forged = format!("{}_{}", &env.api_key[..20], "A".repeat(32));
    for key in
        [None, Some("garbage"), Some("rk_live_AAAAAAAAAAAA_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"), Some(forged.as_str())]
    {
        let answer = env.request(Method::POST, "/v1/events", key, Some(body.clone())).await;
        answer.expect_problem(401);
        assert_eq!(answer.headers["www-authenticate"], "Bearer");
        let answer = env.request(Method::GET, "/v1/events", key, None).await;
        answer.expect_problem(401);
    }
    assert_eq!(env.count("events").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_objects_are_not_found() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let posted = env.post_event("order.created", json!({ "secret": "mine" })).await;
    let event_id = posted.body["id"].as_str().unwrap().to_owned();
    let delivery = env.wait_for_status(&event_id, "delivered").await;
    let delivery_id = delivery["id"].as_str().unwrap();
    let endpoint_id = delivery["endpoint_id"].as_str().unwrap();

    let (_, other) = env.second_tenant().await;
    for path in [
        format!("/v1/events/{event_id}"),
        format!("/v1/events/{event_id}/deliveries"),
        format!("/v1/deliveries/{delivery_id}"),
        format!("/v1/deliveries/{delivery_id}/attempts"),
        format!("/v1/endpoints/{endpoint_id}"),
        format!("/v1/endpoints/{endpoint_id}/secret"),
    ] {
        let answer = env.request(Method::GET, &path, Some(&other), None).await;
        let detail = answer.expect_problem(404);
        assert!(!detail.contains("mine"), "nothing of the other tenant leaks: {detail}");
    }
    let replay = env.request(Method::POST, &format!("/v1/deliveries/{delivery_id}/replay"), Some(&other), None).await;
    replay.expect_problem(404);
    let subscribe = env
        .request(
            Method::POST,
            &format!("/v1/endpoints/{endpoint_id}/subscriptions"),
            Some(&other),
            Some(json!({ "event_type": "x.y" })),
        )
        .await;
    subscribe.expect_problem(404);

    let lists = env.request(Method::GET, "/v1/events", Some(&other), None).await;
    assert_eq!(lists.body["data"], json!([]), "lists show only the caller's events");
    let endpoints = env.request(Method::GET, "/v1/endpoints", Some(&other), None).await;
    assert_eq!(endpoints.body["data"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_ids_and_unknown_routes_are_clear_errors() {
    let env = TestEnv::start_with(relayops_tests::TestConfig { run_worker: false, ..Default::default() }).await;
    let detail = env.get("/v1/events/dlv_0123").await.expect_problem(400);
    assert!(detail.contains("event id"), "{detail}");
    env.get("/v1/nope").await.expect_problem(404);
    env.get(&format!("/v1/events/evt_{}", "0".repeat(32))).await.expect_problem(404);
}
