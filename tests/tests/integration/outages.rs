//! Dependencies going away and coming back while work is in flight.
use std::time::Duration;

use relayops_tests::TestEnv;
use serde_json::json;

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
