//! History partitions missing (issue 14): partition maintenance stopped for
//! longer than the partitions it keeps ahead, so no partition covers now.
//! Ingest refuses with 503 + `Retry-After` and a problem naming the cause,
//! writes nothing, readiness says so, and once maintenance runs again the
//! client's retry with the same Idempotency-Key is stored.
use relayops_shared::db::partitions;
use relayops_tests::{eventually, TestConfig, TestEnv, WAIT};
use serde_json::json;

/// Drops every partition of the history tables whose window ends after now
/// (the current one and those ahead), children first.
async fn drop_partitions_from_now(env: &TestEnv) -> Vec<String> {
    let client = env.pool.get().await.unwrap();
    let now = partitions::uuid_millis(uuid::Uuid::now_v7());
    let mut dropped = Vec::new();
    for table in [partitions::ATTEMPTS, partitions::DELIVERIES, partitions::EVENTS] {
        for partition in partitions::list(&client, table).await.unwrap() {
            if partition.to_ms > now {
                client.batch_execute(&format!("DROP TABLE relayops.{}", partition.name)).await.unwrap();
                dropped.push(partition.name);
            }
        }
    }
    dropped
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_partition_for_now_ingest_answers_503_and_succeeds_once_maintenance_runs() {
    // No publisher yet: its history maintenance would put the partitions back.
    let mut env = TestEnv::start_with(TestConfig { run_publisher: false, ..Default::default() }).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    assert_eq!(env.wait_for_readiness(true).await["history_partitions"], "ok");
    let dropped = drop_partitions_from_now(&env).await;
    assert!(dropped.len() >= 3, "the current window of each table: {dropped:?}");

    let key = "order-7-created";
    let event = json!({ "event_type": "order.created", "payload": { "n": 7 }, "idempotency_key": key });
    let refused = env.post("/v1/events", event.clone()).await;
    let detail = refused.expect_problem(503);
    assert_eq!(refused.body["type"], "https://relayops.dev/problems/history-partitions-missing");
    assert!(detail.contains("history partitions missing"), "{detail}");
    assert!(detail.contains("partition maintenance"), "{detail}");
    let retry_after: u64 = refused.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry_after >= 1, "{retry_after}");
    let batch = json!({ "events": [{ "event_type": "a.b", "payload": {} }, { "event_type": "a.c", "payload": {} }] });
    env.post("/v1/events/batch", batch).await.expect_problem(503);

    // Nothing written, the key included.
    for table in ["events", "deliveries", "outbox_messages", "idempotency_keys"] {
        assert_eq!(env.count(table).await, 0, "{table}");
    }
    let refusals = env.metric("relayops_history_partitions_missing_total", &[]).await;
    assert_eq!(refusals, 2.0, "each refusal is counted");
    let unready = env.wait_for_readiness(false).await;
    assert_eq!(unready["history_partitions"], "missing", "{unready}");

    // Maintenance runs again (the publisher's, at its start): ready, and the
    // client's retry with the same key is a first store.
    env.start_publisher();
    // Ready as soon as a partition covers now; "ok" once the pass has also
    // made the ones ahead (readiness may answer in between: "low").
    eventually(WAIT, || async {
        let ready = env.wait_for_readiness(true).await;
        if ready["history_partitions"] == "ok" {
            Ok(())
        } else {
            Err(format!("partitions not all back yet: {ready}"))
        }
    })
    .await;
    let stored = env.post("/v1/events", event).await;
    assert_eq!(stored.status, 201, "{:?}", stored.body);
    let delivered = env.wait_for_status(stored.body["id"].as_str().unwrap(), "delivered").await;
    assert_eq!(delivered["attempt_count"], 1);
}
