//! No delivery is stranded, whatever the broker drops: recovery re-enqueues a
//! `pending` row whose message is gone, an operator can rescue one at once, and
//! a database outage does not make the worker burn the ready queue's delivery
//! limit (the broker drops a message requeued too often).
use std::time::Duration;

use relayops_tests::prometheus::{sample, scrape};
use relayops_tests::{TestConfig, TestEnv};
use serde_json::json;

/// Posts one event with the worker stopped, waits until its message is on the
/// ready queue, then empties the queue: the row is `pending` with no message.
async fn strand_one(env: &TestEnv) -> (String, String) {
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    env.wait_for_outbox_drained().await;
    relayops_tests::eventually(relayops_tests::WAIT, || async {
        match env.ready_depth().await {
            1 => Ok(()),
            depth => Err(format!("the ready queues hold {depth}")),
        }
    })
    .await;
    let mut purged = 0;
    for shard in env.topology().ready_shards.all() {
        purged += env.purge_queue(&shard.queue).await;
    }
    assert_eq!(purged, 1, "the message was lost");
    let pending = env.wait_for_status(&event_id, "pending").await;
    (event_id, pending["id"].as_str().unwrap().to_owned())
}

/// Waits until recovery passes have gone on for `span` from now (each pass
/// samples an outbox watermark).
async fn recovery_passes_for(env: &TestEnv, span: Duration) {
    let client = env.pool.get().await.unwrap();
    let now: String = client.query_one("SELECT now()::text", &[]).await.unwrap().get(0);
    let ms = span.as_millis();
    let sql = format!(
        "SELECT count(*) > 0 FROM relayops.outbox_watermarks
         WHERE sampled_at > '{now}'::timestamptz + {ms} * interval '1 millisecond'"
    );
    env.wait_for_sql("recovery passes for the span", &sql).await;
}

/// Stranded deliveries the recovery pass re-enqueued (a message each).
async fn requeued_by_recovery(env: &TestEnv) -> f64 {
    env.metric("relayops_recovery_actions_total", &[("action", "requeued")]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_delivery_whose_message_was_lost_is_re_enqueued_by_recovery() {
    let mut config = TestConfig { run_worker: false, ..Default::default() };
    config.publisher.recovery_grace = Duration::from_secs(2);
    let mut env = TestEnv::start_with(config).await;
    let (event_id, _) = strand_one(&env).await;
    env.start_worker().await;

    let delivered = env.wait_for_status(&event_id, "delivered").await;
    assert_eq!(delivered["attempt_count"], 1);
    assert_eq!(requeued_by_recovery(&env).await, 1.0, "recovery re-enqueued the stranded row");
    env.wait_for_messages_published(2).await;
    assert_eq!(env.simulator.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_rescues_a_stuck_pending_delivery_without_waiting_for_recovery() {
    // Recovery would take longer than the test waits: the rescue is what delivers.
    let mut config = TestConfig { run_worker: false, ..Default::default() };
    config.publisher.recovery_grace = Duration::from_secs(600);
    let mut env = TestEnv::start_with(config).await;
    let (event_id, delivery_id) = strand_one(&env).await;

    let rescued = env.post(&format!("/v1/deliveries/{delivery_id}/replay"), json!({})).await;
    assert_eq!(rescued.status, 202, "{:?}", rescued.body);
    assert_eq!(rescued.body["status"], "pending");
    assert_eq!(rescued.body["previous_status"], "pending");
    env.start_worker().await;
    let delivered = env.wait_for_status(&event_id, "delivered").await;
    assert_eq!(delivered["attempt_count"], 1);

    // A delivered one is not sent again.
    let detail = env.post(&format!("/v1/deliveries/{delivery_id}/replay"), json!({})).await.expect_problem(409);
    assert!(detail.contains("delivered"), "{detail}");
    assert_eq!(env.simulator.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_retry_can_be_brought_forward() {
    let mut env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    // Fails once, then a retry an hour away.
    env.create_endpoint("/sim/flaky/1", &["*"], json!({ "retry_schedule_secs": [3600] })).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    env.start_worker().await;
    let scheduled = env.wait_for_status(&event_id, "scheduled").await;
    let delivery_id = scheduled["id"].as_str().unwrap();

    let rescued = env.post(&format!("/v1/deliveries/{delivery_id}/replay"), json!({})).await;
    assert_eq!(rescued.status, 202, "{:?}", rescued.body);
    assert_eq!(rescued.body["previous_status"], "scheduled");
    let delivered = env.wait_for_status(&event_id, "delivered").await;
    assert_eq!(delivered["attempt_count"], 2, "attempt numbers continue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_holds_queued_messages_instead_of_burning_their_redeliveries() {
    // Recovery is out of reach for this test: every delivery must come through
    // its original message, which the broker drops after 20 requeues.
    let mut config = TestConfig { run_worker: false, ..Default::default() };
    config.publisher.recovery_grace = Duration::from_secs(600);
    // Every message in flight at once, as on a worker whose prefetch exceeds
    // the queue: a requeued message comes straight back.
    config.worker.concurrency = 64;
    let mut env = TestEnv::start_with(config).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let items: Vec<_> = (0..50).map(|n| json!({ "event_type": "a.b", "payload": { "n": n } })).collect();
    let batch = env.post("/v1/events/batch", json!({ "events": items })).await;
    assert_eq!(batch.status, 200, "{:?}", batch.body);
    env.wait_for_outbox_drained().await;

    env.cut_database().await;
    env.start_worker().await;
    // The outage outlasts 20 requeues at the old pace (half a second's pause
    // and a failed connection attempt each); this sleep is the fault itself,
    // not a wait for a condition.
    tokio::time::sleep(Duration::from_secs(30)).await;
    env.restore_database().await;

    relayops_tests::eventually(Duration::from_secs(90), || async {
        let client = env.pool.get().await.map_err(|error| error.to_string())?;
        let sql = "SELECT count(*) FILTER (WHERE status = 'delivered'), count(*) FROM relayops.deliveries";
        let row = client.query_one(sql, &[]).await.map_err(|error| error.to_string())?;
        let (delivered, total): (i64, i64) = (row.get(0), row.get(1));
        if delivered == 50 && total == 50 {
            Ok(())
        } else {
            Err(format!("{delivered} of {total} delivered"))
        }
    })
    .await;
    assert_eq!(requeued_by_recovery(&env).await, 0.0, "every delivery came through its first message");
    assert_eq!(env.messages_published().await, 50.0, "one message per delivery, none written since");
    assert_eq!(env.ready_depth().await, 0);
    // Held, not requeued: no message came near the delivery limit (where the
    // worker's last defence publishes a fresh copy).
    let metrics = scrape(&env.http, &env.api_url).await;
    assert!(sample(&metrics, "relayops_deliveries_held_total", &[]) >= 50.0, "{metrics}");
    assert_eq!(sample(&metrics, "relayops_deliveries_republished_total", &[]), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_longer_than_a_third_of_the_lease_extends_it_and_is_sent_once() {
    let mut config = TestConfig::default();
    config.worker.lease = Duration::from_secs(3);
    config.worker.request_timeout = Duration::from_millis(2_900);
    // Recovery looks often, so a lease left to expire would be taken back.
    config.publisher.recovery_grace = Duration::from_secs(1);
    let env = TestEnv::start_with(config).await;
    env.create_endpoint("/sim/slow/2600", &["*"], json!({ "timeout_ms": 2900 })).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();

    let lease = "SELECT lease_expires_at FROM relayops.deliveries WHERE status = 'in_progress'";
    let first: chrono::DateTime<chrono::Utc> = relayops_tests::eventually(relayops_tests::WAIT, || async {
        let client = env.pool.get().await.unwrap();
        let row = client.query_opt(lease, &[]).await.unwrap();
        row.map(|row| row.get(0)).ok_or_else(|| "not in progress yet".to_owned())
    })
    .await;
    relayops_tests::eventually(relayops_tests::WAIT, || async {
        let client = env.pool.get().await.unwrap();
        match client.query_opt(lease, &[]).await.unwrap().map(|row| row.get::<_, chrono::DateTime<chrono::Utc>>(0)) {
            Some(now) if now > first + chrono::Duration::milliseconds(500) => Ok(()),
            Some(now) => Err(format!("lease still ends at {now} (first {first})")),
            None => Err("the send ended before its lease was extended".to_owned()),
        }
    })
    .await;

    let delivered = env.wait_for_status(&event_id, "delivered").await;
    assert_eq!(delivered["attempt_count"], 1);
    assert_eq!(env.simulator.received().len(), 1, "sent once: the lease was never lost");
}

/// After a backlog (here: a row held by a publisher that died), a delivery
/// written long ago whose message was published just now is on its way, not
/// lost: recovery leaves it for the grace after its publication (published
/// rows are deleted, so this rests on the outbox watermarks), and for as
/// long after as its message waits on the ready queue (no worker runs: the
/// queue is never seen empty). Only once the message is gone (the queue
/// purged) and the queue has been seen empty for the grace is it re-enqueued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_published_late_from_a_backlog_is_re_enqueued_only_once_its_message_is_gone() {
    let grace = Duration::from_secs(3);
    let mut config = TestConfig { run_worker: false, run_publisher: false, ..Default::default() };
    config.publisher.recovery_grace = grace;
    let mut env = TestEnv::start_with(config).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    env.post_event("a.b", json!({})).await;
    let mut client = env.pool.get().await.unwrap();
    let held = relayops_tests::relayops_shared::repo::outbox::claim_batch(
        &mut client,
        "publisher-that-died",
        10,
        Duration::from_secs(3600),
        &mut Default::default(),
    )
    .await
    .unwrap()
    .messages;
    assert_eq!(held.len(), 1);
    // Written ten minutes ago, as a backlog's oldest rows are.
    client
        .batch_execute(
            "UPDATE relayops.deliveries SET updated_at = now() - interval '10 minutes';
             UPDATE relayops.outbox_messages SET created_at = now() - interval '10 minutes';",
        )
        .await
        .unwrap();
    env.start_publisher();
    // Recovery passes have run for longer than the grace while the row waited.
    env.wait_for_sql(
        "a watermark older than the grace",
        "SELECT count(*) > 0 FROM relayops.outbox_watermarks WHERE sampled_at < now() - interval '4 seconds'",
    )
    .await;
    assert_eq!(requeued_by_recovery(&env).await, 0.0, "a row still in the outbox is not lost");

    // The dead publisher's claim expires: the row is published now, and
    // waits on the ready queue.
    client.execute("UPDATE relayops.outbox_messages SET claim_expires_at = now()", &[]).await.unwrap();
    env.wait_for_outbox_drained().await;
    recovery_passes_for(&env, grace * 2).await;
    assert_eq!(requeued_by_recovery(&env).await, 0.0, "a message waiting on the ready queue is not lost");
    assert_eq!(env.ready_depth().await, 1, "and was not published a second time");

    // Now it is lost.
    for shard in env.topology().ready_shards.all() {
        env.purge_queue(&shard.queue).await;
    }
    let purged = std::time::Instant::now();
    relayops_tests::eventually(relayops_tests::WAIT, || async {
        match requeued_by_recovery(&env).await {
            0.0 => Err("not re-enqueued yet".to_owned()),
            _ => Ok(()),
        }
    })
    .await;
    let after = purged.elapsed();
    assert!(after >= grace - Duration::from_millis(500), "re-enqueued {after:?} after its message was lost");
    env.wait_for_messages_published(2).await;
}

/// A retry whose message came back to its tenant's ready shard and waits
/// there (behind a backlog; here no worker runs) is overdue but not lost:
/// recovery leaves it while the queue holds it, and re-enqueues it only once
/// the message is gone and the queue has been seen empty for the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overdue_retry_whose_message_waits_on_a_ready_queue_is_not_re_enqueued() {
    let mut config = TestConfig { run_worker: false, ..Default::default() };
    config.publisher.recovery_grace = Duration::from_secs(2);
    let env = TestEnv::start_with(config).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    let message = relayops_tests::eventually(relayops_tests::WAIT, || async {
        match env.take_ready_messages().await.pop() {
            Some(message) => Ok(message),
            None => Err("no message on the ready queues yet".to_owned()),
        }
    })
    .await;
    // The delivery failed once; its retry is due now and its message came
    // back to its tenant's shard, where it waits.
    let returns = env.topology().return_shard(Some(env.tenant_id), None).queue.clone();
    env.publish_to_queue(&returns, &message).await;
    env.query_i64(&format!(
        "WITH s AS (UPDATE relayops.deliveries SET status = 'scheduled', next_attempt_at = now()
                    WHERE event_id = '{}'::uuid RETURNING 1) SELECT count(*) FROM s",
        event_id.trim_start_matches("evt_")
    ))
    .await;
    recovery_passes_for(&env, Duration::from_secs(4)).await;
    assert_eq!(requeued_by_recovery(&env).await, 0.0, "a retry waiting on a ready queue is not lost");

    env.purge_queue(&returns).await;
    relayops_tests::eventually(relayops_tests::WAIT, || async {
        match requeued_by_recovery(&env).await {
            0.0 => Err("not re-enqueued yet".to_owned()),
            _ => Ok(()),
        }
    })
    .await;
    env.wait_for_messages_published(2).await;
}

/// The recovery pass's search for expired leases and overdue retries spans
/// every history partition, so planning it for its parameters opened them all
/// each time (12 ms a pass with 35 partitions, every second, for a new
/// publisher's first minutes): it runs on its generic plan from the first pass
/// on a connection, and only it — the rest of the pass is planned as Postgres
/// chooses (a generic plan could hash every pending row of a backlog).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recovery_pass_plans_its_expired_lease_search_once_per_connection() {
    use relayops_shared::repo::recovery;

    let env = TestEnv::start_with(TestConfig { run_publisher: false, run_worker: false, ..Default::default() }).await;
    let mut client = env.pool.get().await.unwrap();
    for _ in 0..2 {
        let tx = client.transaction().await.unwrap();
        let queues = recovery::ReadyQueues::of(&env.topology().ready_shards);
        recovery::requeue_stranded(&tx, Duration::from_secs(30), 100, &queues).await.unwrap();
        let mode: String = tx.query_one("SHOW plan_cache_mode", &[]).await.unwrap().get(0);
        assert_eq!(mode, "auto", "the setting outlived the search");
        tx.commit().await.unwrap();
    }
    let expired = crate::batching::plans_of(&client, "%lease_expires_at < now()%FOR UPDATE SKIP LOCKED").await;
    assert_eq!(expired, (2, 0), "the search ran its generic plan both times, never one planned for its parameters");
    let lost = crate::batching::plans_of(&client, "%WHERE (d.id, d.event_id) IN (%FOR UPDATE OF d SKIP LOCKED").await;
    assert_eq!(lost, (0, 2), "the lost-pending search is planned for its parameters, as Postgres chooses");
}
