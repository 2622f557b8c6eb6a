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
    // Every route that names an object: the other tenant gets 404, nothing else.
    let by_id: Vec<(Method, String, Option<serde_json::Value>)> = vec![
        (Method::GET, format!("/v1/events/{event_id}"), None),
        (Method::GET, format!("/v1/events/{event_id}/deliveries"), None),
        (Method::GET, format!("/v1/deliveries/{delivery_id}"), None),
        (Method::GET, format!("/v1/deliveries/{delivery_id}/attempts"), None),
        (Method::POST, format!("/v1/deliveries/{delivery_id}/replay"), None),
        (Method::POST, format!("/v1/deliveries/{delivery_id}/skip"), None),
        (Method::GET, format!("/v1/endpoints/{endpoint_id}"), None),
        (Method::PATCH, format!("/v1/endpoints/{endpoint_id}"), Some(json!({ "enabled": false }))),
        (Method::GET, format!("/v1/endpoints/{endpoint_id}/secret"), None),
        (Method::POST, format!("/v1/endpoints/{endpoint_id}/secret/rotate"), Some(json!({}))),
        (Method::GET, format!("/v1/endpoints/{endpoint_id}/subscriptions"), None),
        (Method::GET, format!("/v1/endpoints/{endpoint_id}/stats"), None),
        (Method::GET, format!("/v1/endpoints/{endpoint_id}/blocked-lanes"), None),
        (Method::POST, format!("/v1/endpoints/{endpoint_id}/subscriptions"), Some(json!({ "event_type": "x.y" }))),
    ];
    for (method, path, body) in by_id {
        let answer = env.request(method.clone(), &path, Some(&other), body).await;
        let detail = answer.expect_problem(404);
        assert!(!detail.contains("mine"), "{method} {path}: nothing of the other tenant leaks: {detail}");
    }
    // Lists and counts never include the other tenant's objects.
    for path in [
        "/v1/events".to_owned(),
        "/v1/endpoints".to_owned(),
        "/v1/deliveries".to_owned(),
        format!("/v1/deliveries?endpoint_id={endpoint_id}"),
        "/v1/events?event_type=order.created".to_owned(),
    ] {
        let answer = env.request(Method::GET, &path, Some(&other), None).await;
        assert_eq!(answer.body["data"], json!([]), "{path}");
    }
    let keys = env.request(Method::GET, "/v1/api-keys", Some(&other), None).await;
    assert_eq!(keys.body["data"].as_array().unwrap().len(), 1, "only the other tenant's own key");
    let replay = json!({ "endpoint_id": endpoint_id, "statuses": ["dead", "failed"], "dry_run": true });
    let counted = env.request(Method::POST, "/v1/replays", Some(&other), Some(replay)).await;
    assert_eq!(counted.body["matched"], 0, "counts never include another tenant's deliveries");

    // And the owner still sees everything unchanged.
    let mine = env.get(&format!("/v1/endpoints/{endpoint_id}")).await;
    assert_eq!(mine.body["enabled"], true, "the other tenant's PATCH changed nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_ids_and_unknown_routes_are_clear_errors() {
    let env = TestEnv::start_with(relayops_tests::TestConfig { run_worker: false, ..Default::default() }).await;
    let detail = env.get("/v1/events/dlv_0123").await.expect_problem(400);
    assert!(detail.contains("event id"), "{detail}");
    env.get("/v1/nope").await.expect_problem(404);
    env.get(&format!("/v1/events/evt_{}", "0".repeat(32))).await.expect_problem(404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_revoked_by_another_process_is_refused_once_the_key_cache_ttl_passes() {
    let mut config = relayops_tests::TestConfig { run_worker: false, ..Default::default() };
    config.auth.api_key_cache_ttl = Some(std::time::Duration::from_millis(400));
    let env = TestEnv::start_with(config).await;
    assert_eq!(env.post_event("a.b", json!({ "n": 1 })).await.status, 201, "verified, and now cached");
    // Revoked behind this API's back (another replica, or SQL by an operator).
    let client = env.pool.get().await.unwrap();
    client.execute("UPDATE relayops.api_keys SET revoked_at = now()", &[]).await.unwrap();
    let refused_at = std::time::Instant::now();
    relayops_tests::eventually(std::time::Duration::from_secs(5), || async {
        let answer = env.request(Method::GET, "/v1/events", Some(&env.api_key), None).await;
        if answer.status == 401 {
            Ok(())
        } else {
            Err(format!("still {}", answer.status))
        }
    })
    .await;
    assert!(refused_at.elapsed() < std::time::Duration::from_secs(2), "refused within the TTL and a poll");
}
