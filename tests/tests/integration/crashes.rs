//! Real processes killed at the worst moment: a worker with a request in flight
//! (SIGKILL), a publisher between the broker's confirm and marking the row
//! (a crash point that aborts the process there).
use std::time::Duration;

use relayops_tests::{TestConfig, TestEnv, WAIT};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_worker_process_mid_request_hands_the_delivery_to_another_worker() {
    let mut config = TestConfig { run_worker: false, ..Default::default() };
    config.worker.request_timeout = Duration::from_secs(5);
    config.worker.lease = Duration::from_secs(6);
    let env = TestEnv::start_with(config).await;
    // The receiver holds the first request (30 s) and answers later ones at once.
    env.create_endpoint("/sim/slow-once/30000", &["*"], json!({})).await;

    let mut doomed = env.spawn_role("worker", &[]);
    let event_id = env.post_event("a.b", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();
    env.simulator.wait_until(WAIT, |received| !received.is_empty()).await;
    env.wait_for_status(&event_id, "in_progress").await;
    doomed.kill();

    let _survivor = env.spawn_role("worker", &[]);
    let delivery = env.wait_for_status(&event_id, "delivered").await;
    let received = env.simulator.received();
    assert_eq!(received.len(), 2, "the receiver saw the killed attempt and the completed one");
    assert!(received.iter().all(|r| r.delivery_id.as_deref() == delivery["id"].as_str()), "same delivery id");
    assert!(received.iter().all(|r| r.signature_valid == Some(true)));
    let client = env.pool.get().await.unwrap();
    let numbers: Vec<i32> = client
        .query("SELECT attempt_number FROM relayops.delivery_attempts ORDER BY attempt_number", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(numbers, [1], "attempt numbers are unique; the killed attempt left no row");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_publisher_between_confirm_and_mark_costs_one_duplicate_message_and_no_extra_attempt() {
    let mut config = TestConfig { run_publisher: false, ..Default::default() };
    // One message at a time: the duplicate is settled before the next event.
    config.worker.concurrency = 1;
    let mut env = TestEnv::start_with(config).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let first = env.post_event("a.b", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();

    let mut publisher = env.spawn_role("publisher", &[("RELAYOPS_FAILPOINTS", "publisher.after_confirm")]);
    let status = publisher.exited(WAIT).await.expect("the publisher reached its crash point");
    assert!(!status.success(), "it crashed: {status:?}");
    // The broker had the message: it is delivered although the row was never marked.
    env.wait_for_status(&first, "delivered").await;
    let client = env.pool.get().await.unwrap();
    let row = client.query_one("SELECT status FROM relayops.outbox_messages", &[]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "claimed", "the crash left the row claimed, not deleted");

    // Another publisher reclaims the row after its claim expires and publishes it again.
    env.start_publisher();
    env.wait_for_outbox_drained().await;
    let reclaimed = env.metric("relayops_recovery_actions_total", &[("action", "reclaimed")]).await;
    assert_eq!(reclaimed, 1.0, "the crashed publisher's claim was reclaimed");
    env.wait_for_messages_published(1).await;
    let second = env.post_event("a.b", json!({ "n": 2 })).await.body["id"].as_str().unwrap().to_owned();
    env.wait_for_status(&second, "delivered").await;

    assert_eq!(env.simulator.received().len(), 2, "one request per event: the duplicate sent nothing");
    let attempts: i64 = client
        .query_one(
            "SELECT count(*) FROM relayops.delivery_attempts a JOIN relayops.deliveries d ON d.id = a.delivery_id
             WHERE d.event_id = (SELECT id FROM relayops.events ORDER BY received_at LIMIT 1)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(attempts, 1, "exactly one attempt for the duplicated message");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_undone_behind_the_workers_back_is_sent_again_not_stranded() {
    // Claims commit without waiting for the WAL flush, so a database crash can
    // undo one while its request is in flight. Undo it by hand at that moment.
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/slow-once/1500", &["*"], json!({})).await;
    let event_id = env.post_event("a.b", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();
    env.simulator.wait_until(WAIT, |received| !received.is_empty()).await;
    let client = env.pool.get().await.unwrap();
    let undone = client
        .execute(
            "UPDATE relayops.deliveries SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL
             WHERE status = 'in_progress'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(undone, 1, "the request was in flight under a claim");

    env.wait_for_status(&event_id, "delivered").await;
    assert_eq!(env.simulator.received().len(), 2, "sent again after the lost claim");
    let attempts: i64 = client.query_one("SELECT count(*) FROM relayops.delivery_attempts", &[]).await.unwrap().get(0);
    assert_eq!(attempts, 1, "the attempt whose lease was gone was not recorded");
}
