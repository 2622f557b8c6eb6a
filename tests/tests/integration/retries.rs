//! How receivers' answers are treated: retry with backoff, honour Retry-After,
//! give up (dead) or fail at once.
use chrono::{DateTime, Utc};
use relayops_tests::TestEnv;
use serde_json::{json, Value};

async fn attempts(env: &TestEnv, delivery: &Value) -> Vec<Value> {
    let id = delivery["id"].as_str().unwrap();
    env.get(&format!("/v1/deliveries/{id}/attempts")).await.body["data"].as_array().unwrap().clone()
}

fn outcomes(attempts: &[Value]) -> Vec<(i64, String)> {
    attempts
        .iter()
        .map(|a| (a["attempt_number"].as_i64().unwrap(), a["outcome"].as_str().unwrap().to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_retried_until_delivered() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/flaky/2", &["*"], json!({ "retry_schedule_secs": [0] })).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    let delivery = env.wait_for_status(&event_id, "delivered").await;
    let history = attempts(&env, &delivery).await;
    assert_eq!(outcomes(&history), vec![(1, "retry".into()), (2, "retry".into()), (3, "delivered".into())]);
    assert_eq!(history[0]["http_status"], 503);
    let received = env.simulator.received();
    assert_eq!(received.len(), 3);
    assert!(received.iter().all(|r| r.delivery_id == received[0].delivery_id), "stable delivery id across retries");
    assert_eq!(received.iter().map(|r| r.attempt.unwrap()).collect::<Vec<_>>(), vec![1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_retries_become_dead() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/status/500", &["*"], json!({ "max_attempts": 3, "retry_schedule_secs": [0] })).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    let delivery = env.wait_for_status(&event_id, "dead").await;
    assert_eq!(delivery["attempt_count"], 3);
    assert_eq!(
        outcomes(&attempts(&env, &delivery).await),
        vec![(1, "retry".into()), (2, "retry".into()), (3, "dead".into())]
    );
    assert_eq!(env.simulator.received().len(), 3, "no attempt beyond max_attempts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_and_connection_errors_are_retried_then_dead() {
    let env = TestEnv::start().await;
    env.create_endpoint(
        "/sim/timeout",
        &["slow.*"],
        json!({ "max_attempts": 2, "retry_schedule_secs": [0], "timeout_ms": 300 }),
    )
    .await;
    // A port nobody listens on: bind, note it, close it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let refused = env
        .post(
            "/v1/endpoints",
            json!({ "url": format!("http://{closed}/hook"), "event_types": ["down.*"], "max_attempts": 2, "retry_schedule_secs": [0] }),
        )
        .await;
    assert_eq!(refused.status, 201);

    let slow = env.post_event("slow.x", json!({})).await.body["id"].as_str().unwrap().to_owned();
    let down = env.post_event("down.x", json!({})).await.body["id"].as_str().unwrap().to_owned();
    let slow = env.wait_for_status(&slow, "dead").await;
    let down = env.wait_for_status(&down, "dead").await;
    for (delivery, expected) in [(&slow, "timeout"), (&down, "connection")] {
        let history = attempts(&env, delivery).await;
        assert_eq!(outcomes(&history), vec![(1, "retry".into()), (2, "dead".into())]);
        assert!(history.iter().all(|a| a["http_status"].is_null()));
        let error = history[0]["error"].as_str().unwrap();
        assert!(error.contains(expected), "{error} should say {expected}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors_fail_at_once_without_retry() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/status/422", &["*"], json!({ "retry_schedule_secs": [0] })).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    let delivery = env.wait_for_status(&event_id, "failed").await;
    assert_eq!(delivery["attempt_count"], 1);
    assert_eq!(delivery["last_http_status"], 422);
    assert!(delivery["next_attempt_at"].is_null());
    assert_eq!(outcomes(&attempts(&env, &delivery).await), vec![(1, "failed".into())]);
    assert_eq!(env.simulator.received().len(), 1);
    assert_eq!(env.retry_queue_depth().await, 0, "nothing waits in the retry queues");
    assert!(env.take_dead_letters().await.is_empty(), "a refused delivery is failed, not dead");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_fails_the_delivery_and_disables_the_endpoint() {
    let env = TestEnv::start().await;
    let endpoint = env.create_endpoint("/sim/status/410", &["*"], json!({})).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    env.wait_for_status(&event_id, "failed").await;
    let endpoint = env.get(&format!("/v1/endpoints/{}", endpoint["id"].as_str().unwrap())).await;
    assert_eq!(endpoint.body["enabled"], false);
    assert!(endpoint.body["disabled_reason"].as_str().unwrap().contains("410"));
    let next = env.post_event("a.b", json!({})).await;
    assert_eq!(next.body["deliveries"], 0, "a disabled endpoint gets no new deliveries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_requests_waits_for_retry_after() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/retry-after/2", &["*"], json!({ "max_attempts": 2, "retry_schedule_secs": [0] })).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    let delivery = env.wait_for_status(&event_id, "dead").await;
    let history = attempts(&env, &delivery).await;
    assert_eq!(outcomes(&history), vec![(1, "retry".into()), (2, "dead".into())]);
    let time = |value: &Value| value.as_str().unwrap().parse::<DateTime<Utc>>().unwrap();
    let waited = time(&history[1]["started_at"]) - time(&history[0]["finished_at"]);
    assert!(waited >= chrono::Duration::milliseconds(1900), "waited only {waited} despite Retry-After: 2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_travel_through_the_retry_queues_with_growing_delays() {
    // Recovery's grace (30 s in tests) is far longer than this test: only the
    // TTL retry queues can bring the retries back.
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/flaky/2", &["*"], json!({ "retry_schedule_secs": [1, 2] })).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    let delivery = env.wait_for_status(&event_id, "delivered").await;
    let history = attempts(&env, &delivery).await;
    assert_eq!(outcomes(&history), vec![(1, "retry".into()), (2, "retry".into()), (3, "delivered".into())]);
    let time = |value: &Value| value.as_str().unwrap().parse::<DateTime<Utc>>().unwrap();
    let gap = |i: usize| time(&history[i + 1]["started_at"]) - time(&history[i]["finished_at"]);
    assert!(gap(0) >= chrono::Duration::milliseconds(750), "first retry after ~1 s, was {}", gap(0));
    assert!(gap(1) > gap(0), "delays grow: {} then {}", gap(0), gap(1));
    assert_eq!(env.retry_queue_depth().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_arriving_before_its_retry_is_due_waits_instead_of_sending_early() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/flaky/1", &["*"], json!({ "retry_schedule_secs": [3] })).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    let scheduled = env.wait_for_status(&event_id, "scheduled").await;

    // A stray duplicate reaches the ready queue long before the retry is due.
    env.enqueue_duplicate(scheduled["id"].as_str().unwrap()).await;

    let delivered = env.wait_for_status(&event_id, "delivered").await;
    let history = attempts(&env, &delivered).await;
    assert_eq!(outcomes(&history), vec![(1, "retry".into()), (2, "delivered".into())]);
    let due = scheduled["next_attempt_at"].as_str().unwrap().parse::<DateTime<Utc>>().unwrap();
    let second = history[1]["started_at"].as_str().unwrap().parse::<DateTime<Utc>>().unwrap();
    assert!(second >= due, "attempt 2 at {second} came before its due time {due}");
    assert_eq!(env.simulator.received().len(), 2, "the duplicate did not cause an extra request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_408_request_timeout_is_retried_not_failed() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/status/408", &["*"], json!({ "max_attempts": 2, "retry_schedule_secs": [0] })).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    let dead = env.wait_for_status(&event_id, "dead").await;
    assert_eq!(dead["attempt_count"], 2, "retried once, then dead as any retryable failure");
    assert_eq!(dead["last_http_status"], 408);
    assert_eq!(env.simulator.received().len(), 2);
}
