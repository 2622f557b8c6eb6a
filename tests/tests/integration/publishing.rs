//! The publisher's housekeeping: woken by commits from other processes, and
//! keeping the outbox small.
use std::time::{Duration, Instant};

use relayops_tests::{TestConfig, TestEnv};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_in_another_process_wakes_on_commit_not_on_its_idle_timer() {
    let env = TestEnv::start_with(TestConfig { run_publisher: false, ..Default::default() }).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    // An idle interval far longer than this test: only a notification can wake it.
    let _publisher = env.spawn_role("publisher", &[("RELAYOPS_PUBLISHER_IDLE_MS", "600000")]);
    env.wait_for_sql(
        "the publisher listens",
        "SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN relayops_outbox%'",
    )
    .await;
    for n in 0..3 {
        let started = Instant::now();
        let event = env.post_event("a.b", json!({ "n": n })).await.body["id"].as_str().unwrap().to_owned();
        env.wait_for_status(&event, "delivered").await;
        assert!(started.elapsed() < Duration::from_secs(5), "event {n} took {:?}", started.elapsed());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_outbox_rows_are_deleted_once_the_broker_confirmed_them() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let event = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    env.wait_for_status(&event, "delivered").await;
    env.wait_for_outbox_drained().await;
    env.wait_for_messages_published(1).await;
    assert_eq!(env.count("deliveries").await, 1, "only the outbox is cleaned, never deliveries");
}
