//! Dependencies going away and coming back while work is in flight.
use std::time::Duration;

use relayops_tests::{eventually, TestEnv, WAIT};
use reqwest::Method;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_is_survived_without_restarts_and_loses_nothing() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/slow/100", &["*"], json!({ "retry_schedule_secs": [1] })).await;
    let mut events = Vec::new();
    for n in 0..20 {
        let answer = env.post_event("a.b", json!({ "n": n })).await;
        assert_eq!(answer.status, 201);
        events.push(answer.body["id"].as_str().unwrap().to_owned());
    }

    env.cut_database().await;
    // While Postgres is away, ingest refuses clearly instead of hanging or losing.
    let refused = env.post_event_once("a.b", json!({ "during": "outage" })).await;
    refused.expect_problem(503);
    assert!(refused.headers.contains_key("retry-after"));
    // The outage itself lasts a while; this sleep is the fault, not a wait for a condition.
    tokio::time::sleep(Duration::from_secs(3)).await;
    env.restore_database().await;

    for n in 20..25 {
        let answer = env.post_event("a.b", json!({ "n": n })).await;
        assert_eq!(answer.status, 201, "{:?}", answer.body);
        events.push(answer.body["id"].as_str().unwrap().to_owned());
    }
    for event in &events {
        env.wait_for_status(event, "delivered").await;
    }
    assert_eq!(env.count("events").await, 25, "the refused event was not half-written");
    env.wait_for_outbox_drained().await;
}

/// While Postgres is down, every kind of route answers at once with a 503
/// problem and `Retry-After` (never a hang, a 500, or a 401 for a key it
/// cannot look up), and each works again when Postgres returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_503_with_retry_after_while_postgres_is_down() {
    let env = TestEnv::start().await;
    // Always refused, so the delivery can be replayed at every step.
    let endpoint = env.create_endpoint("/sim/status/502", &["*"], json!({ "max_attempts": 1 })).await;
    let endpoint_id = endpoint["id"].as_str().unwrap().to_owned();
    let event = env.post_event("a.b", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();
    let delivery = env.wait_for_status(&event, "dead").await["id"].as_str().unwrap().to_owned();
    let (_, other_key) = env.second_tenant().await;
    let key = Some(env.api_key.as_str());
    let admin = Some(env.config.admin_token.as_str());
    let new_endpoint = json!({ "url": format!("{}/sim/ok", env.simulator_url), "event_types": ["*"] });
    let routes: Vec<(Method, String, Option<&str>, Option<Value>)> = vec![
        (Method::GET, "/v1/events".into(), key, None),
        (Method::GET, format!("/v1/events/{event}"), key, None),
        (Method::GET, format!("/v1/deliveries/{delivery}"), key, None),
        (Method::GET, format!("/v1/deliveries/{delivery}/attempts"), key, None),
        (Method::GET, format!("/v1/endpoints/{endpoint_id}/stats"), key, None),
        (Method::GET, "/v1/endpoints".into(), key, None),
        (Method::POST, "/v1/endpoints".into(), key, Some(new_endpoint)),
        (Method::GET, "/v1/api-keys".into(), key, None),
        (Method::POST, format!("/v1/deliveries/{delivery}/replay"), key, Some(json!({}))),
        (Method::GET, "/admin/v1/tenants".into(), admin, None),
        // A key this process has not looked up yet: it cannot be checked.
        (Method::GET, "/v1/events".into(), Some(other_key.as_str()), None),
    ];
    for (method, path, credential, body) in &routes {
        let answer = env.request(method.clone(), path, *credential, body.clone()).await;
        assert!(answer.status < 400, "{method} {path} before the outage: {} {:?}", answer.status, answer.body);
    }
    // Well formed, looked up for the first time during the outage (and never issued).
    let unknown_key = "rk_live_neverissued1_0123456789abcdef0123456789abcdef";
    let during = routes.iter().cloned().chain([(Method::GET, "/v1/events".to_owned(), Some(unknown_key), None)]);

    env.cut_database().await;
    for (method, path, credential, body) in during {
        let request = env.request(method.clone(), &path, credential, body);
        let answer = tokio::time::timeout(WAIT, request)
            .await
            .unwrap_or_else(|_| panic!("{method} {path} hung while Postgres was down"));
        assert_eq!(answer.status, 503, "{method} {path}: {:?}", answer.body);
        answer.expect_problem(503);
        assert!(answer.headers.contains_key("retry-after"), "{method} {path}: no Retry-After");
    }
    env.restore_database().await;

    for (method, path, credential, body) in &routes {
        eventually(WAIT, || async {
            let answer = env.request(method.clone(), path, *credential, body.clone()).await;
            if answer.status < 400 {
                Ok(())
            } else {
                Err(format!("{method} {path} after the outage: {} {:?}", answer.status, answer.body))
            }
        })
        .await;
    }
}

/// Postgres cut while ordered deliveries are being sent and settled (the
/// settle that moves a lane on fails with it): afterwards every key's events
/// all arrive, and a position never arrives after a later one of its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outage_mid_lane_neither_loses_nor_reorders_a_key() {
    use relayops_tests::lanes::{LaneReceiver, Reply};
    const KEYS: i64 = 5;
    const PER_KEY: i64 = 8;
    let mut config = relayops_tests::TestConfig::default();
    // Whatever the outage strands, recovery brings back after this grace.
    config.publisher.recovery_grace = Duration::from_secs(10);
    config.worker.lease = Duration::from_secs(10);
    let env = TestEnv::start_with(config).await;
    let (receiver, url) = LaneReceiver::start(|_| Reply::Status(200)).await;
    env.create_lane_endpoint(&url, json!({ "retry_schedule_secs": [1] })).await;
    for n in 0..PER_KEY {
        for k in 0..KEYS {
            let key = format!("key-{k}");
            env.post_ordered("order.updated", json!({ "key": key, "n": n }), &key).await;
        }
    }
    // Cut while the lanes are moving: some sends are answered, more wait.
    receiver.wait_until(WAIT, |arrivals| arrivals.len() as i64 >= KEYS).await;
    env.cut_database().await;
    // The outage itself lasts a while; this sleep is the fault, not a wait for a condition.
    tokio::time::sleep(Duration::from_secs(3)).await;
    env.restore_database().await;

    receiver.assert_every_key_complete_in_order(Duration::from_secs(180), KEYS, PER_KEY).await;
}
