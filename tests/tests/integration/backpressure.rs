//! Ingest backpressure: over the outbox-backlog or ready-depth threshold, ingest
//! answers 503 + Retry-After and writes nothing; readiness says so too.
use std::time::Duration;

use relayops_tests::relayops_shared::config::BackpressureConfig;
use relayops_tests::{TestConfig, TestEnv};
use serde_json::json;

fn gauge(max_outbox_backlog: i64, max_ready_depth: u32) -> Option<BackpressureConfig> {
    Some(BackpressureConfig {
        max_outbox_backlog,
        max_ready_depth,
        sample_interval: Duration::from_millis(100),
        retry_after_secs: 7,
    })
}

/// Readiness once it is refused with `backpressure.<field>` at `value`. A
/// refusal for another reason comes first now and then on a busy machine (a
/// stale measurement: readiness fails closed too, showing the last reading,
/// 0 before the publisher's messages were counted); a client polling
/// readiness would keep polling.
async fn not_ready_with(env: &TestEnv, field: &str, value: i64) -> serde_json::Value {
    relayops_tests::eventually(relayops_tests::WAIT, || async {
        let answer = env.request(reqwest::Method::GET, "/health/ready", None, None).await;
        if answer.status != 200 && answer.body["backpressure"][field] == value {
            Ok(answer.body)
        } else {
            Err(format!("readiness never refused with {field} {value}: {} {:?}", answer.status, answer.body))
        }
    })
    .await
}

/// The answer to a post refused for a limit. A refusal because a measurement
/// is stale (the sampler, every 100 ms here, fell behind on a busy machine:
/// ingest fails closed) is followed, as a client would, by another try.
async fn refusal_over_a_limit(env: &TestEnv) -> relayops_tests::Answer {
    let deadline = std::time::Instant::now() + relayops_tests::WAIT;
    loop {
        let answer = env.post_event_once("a.b", json!({ "n": "refused" })).await;
        let stale = answer.status == 503 && answer.body["detail"].as_str().is_some_and(|d| d.contains("measurement"));
        if !stale || std::time::Instant::now() > deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_backlog_over_threshold_makes_ingest_refuse_until_it_drains() {
    let config = TestConfig { run_publisher: false, backpressure: gauge(3, 1_000), ..Default::default() };
    let mut env = TestEnv::start_with(config).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    for n in 0..4 {
        assert_eq!(env.post_event("a.b", json!({ "n": n })).await.status, 201);
    }
    not_ready_with(&env, "outbox_backlog", 4).await;

    let refused = refusal_over_a_limit(&env).await;
    let detail = refused.expect_problem(503);
    assert!(detail.contains("outbox backlog 4 is over the limit 3"), "{detail}");
    assert_eq!(refused.headers["retry-after"], "7");
    assert_eq!(env.count("events").await, 4, "nothing written while refusing");

    env.start_publisher();
    let ready = env.wait_for_readiness(true).await;
    for dependency in ["postgres", "rabbitmq", "redis"] {
        assert_eq!(ready[dependency], "ok", "readiness names each dependency: {ready}");
    }
    assert_eq!(env.post_event("a.b", json!({ "n": "after" })).await.status, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_queue_over_threshold_makes_ingest_refuse_until_workers_catch_up() {
    let config = TestConfig { run_worker: false, backpressure: gauge(1_000, 2), ..Default::default() };
    let mut env = TestEnv::start_with(config).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    // Three messages: each event published before the next is posted (events
    // the publisher holds together would share one message).
    for n in 0..3 {
        assert_eq!(env.post_event("a.b", json!({ "n": n })).await.status, 201);
        env.wait_for_messages_published(n + 1).await;
    }
    not_ready_with(&env, "ready_depth", 3).await;
    let detail = refusal_over_a_limit(&env).await.expect_problem(503);
    assert!(detail.contains("ready queue depth 3 is over the limit 2"), "{detail}");
    assert_eq!(env.count("events").await, 3);

    env.start_worker().await;
    env.wait_for_readiness(true).await;
    assert_eq!(env.post_event("a.b", json!({})).await.status, 201);
}
