//! Real processes killed at the worst moment: a worker with a request in flight
//! (SIGKILL), a publisher between the broker's confirm and marking the row,
//! after claiming an event's row, half-way through an event's messages or a
//! batch of events' messages, and
//! an api between its commit and publishing the event itself, and a worker
//! right after recording an admitted delivery's retry (crash points that
//! abort the process there).
use std::time::Duration;

use relayops_shared::config::IngestConfig;
use relayops_tests::lanes::{LaneReceiver, Reply};
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
    // An ordered event: its delivery has a `delivery.v1` row of its own, which
    // is published again as it is (an event's row sends only what is still
    // pending: the tests below).
    let first = env.post_ordered("a.b", json!({ "n": 1 }), "order-1").await.body["id"].as_str().unwrap().to_owned();
    let envelope = env
        .pool
        .get()
        .await
        .unwrap()
        .query_one("SELECT envelope->>'type' FROM relayops.outbox_messages", &[])
        .await
        .unwrap();
    assert_eq!(envelope.get::<_, String>(0), "delivery.v1");

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
    // (The pass counts what it did when it ends; the loop may publish the
    // reclaimed row before that.)
    let reclaimed =
        env.wait_for_metric("relayops_recovery_actions_total", &[("action", "reclaimed")], |n| n >= 1.0).await;
    assert_eq!(reclaimed, 1.0, "the crashed publisher's claim was reclaimed, once");
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

/// An env whose publisher runs only in processes the test spawns, with
/// `endpoints` endpoints subscribed to everything and one event posted (its
/// deliveries written at ingest, however many).
async fn one_event_to_endpoints(endpoints: usize) -> (TestEnv, String) {
    let ingest = IngestConfig { deliveries_at_ingest_max: endpoints as i64, ..Default::default() };
    let env = TestEnv::start_with(TestConfig { run_publisher: false, ingest, ..Default::default() }).await;
    for _ in 0..endpoints {
        env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    }
    let answer = env.post_event("a.b", json!({ "n": 1 })).await;
    assert_eq!(answer.body["deliveries"], endpoints, "{:?}", answer.body);
    assert_eq!(env.count("outbox_messages").await, 1, "one row for the event");
    (env, answer.body["id"].as_str().unwrap().to_owned())
}

/// Runs a publisher process until it aborts at `failpoint`.
async fn run_publisher_until_it_crashes_at(env: &TestEnv, failpoint: &str) {
    let mut publisher = env.spawn_role("publisher", &[("RELAYOPS_FAILPOINTS", failpoint)]);
    let status = publisher.exited(WAIT).await.expect("the publisher reached its crash point");
    assert!(!status.success(), "it crashed: {status:?}");
}

/// The status of the outbox's one row.
async fn outbox_row_status(env: &TestEnv) -> String {
    let client = env.pool.get().await.unwrap();
    client.query_one("SELECT status FROM relayops.outbox_messages", &[]).await.unwrap().get(0)
}

/// Every delivery of the event is delivered with exactly one attempt, and the
/// receiver got each once.
async fn assert_each_delivered_once(env: &TestEnv, event_id: &str, endpoints: usize) {
    env.wait_for_deliveries(event_id, |all| all.len() == endpoints && all.iter().all(|d| d["status"] == "delivered"))
        .await
        .iter()
        .for_each(|delivery| assert_eq!(delivery["attempt_count"], 1, "{delivery:?}"));
    env.assert_each_request_once(endpoints);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_publisher_after_it_claimed_an_events_row_loses_no_delivery() {
    let (mut env, event_id) = one_event_to_endpoints(3).await;
    run_publisher_until_it_crashes_at(&env, "publisher.after_claim").await;
    assert_eq!(outbox_row_status(&env).await, "claimed", "the crash left the event's row claimed");
    assert_eq!(env.simulator.received().len(), 0, "nothing was published");

    // Another publisher reclaims the row when the claim expires and expands it again.
    env.start_publisher();
    assert_each_delivered_once(&env, &event_id, 3).await;
    env.wait_for_outbox_drained().await;
    env.wait_for_messages_published(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_publisher_half_way_through_an_events_messages_sends_only_the_rest_again() {
    // Two messages' worth of deliveries (an event's deliveries travel up to
    // `PER_MESSAGE` a message), all written at ingest.
    const PER_MESSAGE: usize = relayops_shared::repo::outbox_fanout::DELIVERIES_PER_MESSAGE;
    let (mut env, event_id) = one_event_to_endpoints(2 * PER_MESSAGE).await;
    run_publisher_until_it_crashes_at(&env, "publisher.after_half_published").await;
    // The confirmed half is delivered; the row stays claimed for the rest.
    env.wait_for_sql(
        "the published half delivered",
        &format!("SELECT count(*) FILTER (WHERE status = 'delivered') = {PER_MESSAGE} FROM relayops.deliveries"),
    )
    .await;
    assert_eq!(outbox_row_status(&env).await, "claimed", "the row is deleted only after all its messages");

    // Reclaimed and expanded again: only the deliveries still pending go out.
    env.start_publisher();
    assert_each_delivered_once(&env, &event_id, 2 * PER_MESSAGE).await;
    env.wait_for_outbox_drained().await;
    env.wait_for_messages_published(PER_MESSAGE as u32).await;
}

/// A tenant's events claimed together (one subscriber each, posted in one
/// batch) travel two messages' worth of deliveries, each message carrying
/// many events' (`deliveries.v2`). The publisher dies once the first is
/// confirmed: every row stays claimed, and the next publisher, reclaiming
/// them, sends only the deliveries still pending — each delivered once, with
/// its own event's payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_publisher_half_way_through_a_batch_of_events_messages_sends_only_the_rest_again() {
    const PER_MESSAGE: usize = relayops_shared::repo::outbox_fanout::DELIVERIES_PER_MESSAGE;
    const EVENTS: usize = 2 * PER_MESSAGE;
    let mut env = TestEnv::start_with(TestConfig { run_publisher: false, ..Default::default() }).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let events: Vec<_> = (0..EVENTS).map(|n| json!({ "event_type": "a.b", "payload": { "n": n } })).collect();
    let answer = env.post("/v1/events/batch", json!({ "events": events })).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(env.count("outbox_messages").await, EVENTS as i64, "a row per event");

    run_publisher_until_it_crashes_at(&env, "publisher.after_half_published").await;
    env.wait_for_sql(
        "the published half delivered",
        &format!("SELECT count(*) FILTER (WHERE status = 'delivered') = {PER_MESSAGE} FROM relayops.deliveries"),
    )
    .await;
    let claimed =
        env.query_i64("SELECT count(*) FILTER (WHERE status = 'claimed') FROM relayops.outbox_messages").await;
    assert_eq!(claimed, EVENTS as i64, "no row is deleted before the messages of all its deliveries are confirmed");

    env.start_publisher();
    env.wait_for_sql(
        "every delivery delivered",
        &format!("SELECT count(*) FILTER (WHERE status = 'delivered' AND attempt_count = 1) = {EVENTS} FROM relayops.deliveries"),
    )
    .await;
    env.wait_for_outbox_drained().await;
    env.wait_for_messages_published(PER_MESSAGE as u32).await;
    env.assert_each_request_once(EVENTS);
    let mut payloads: Vec<u64> = env.simulator.received().iter().map(|r| r.body["n"].as_u64().unwrap()).collect();
    payloads.sort_unstable();
    assert_eq!(payloads, (0..EVENTS as u64).collect::<Vec<_>>(), "each event's payload once: none sent for another");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_killed_between_its_commit_and_its_own_publish_leaves_the_event_to_another_publisher() {
    let mut env = TestEnv::start_with(TestConfig { run_publisher: false, ..Default::default() }).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    // From its publisher's first claim on, ingest writes rows claimed by it.
    let (mut api, replica) = env.spawn_publishing_api(&[("RELAYOPS_FAILPOINTS", "ingest.after_commit")]).await;

    // The api stores the event and dies before answering, waking anyone or
    // publishing it (its own publisher dies with it).
    let answer = env
        .http
        .post(format!("{replica}/v1/events"))
        .bearer_auth(&env.api_key)
        .header("idempotency-key", "crash-after-commit")
        .json(&json!({ "event_type": "a.b", "payload": { "n": 1 } }))
        .send()
        .await;
    assert!(answer.is_err(), "no answer from a process that died: {answer:?}");
    let status = api.exited(WAIT).await.expect("the api reached its crash point");
    assert!(!status.success(), "it crashed: {status:?}");
    assert_eq!(env.count("events").await, 1, "the event was committed");
    assert_eq!(env.count("outbox_messages").await, 1, "and its message waits in the outbox");
    let client = env.pool.get().await.unwrap();
    let status: String = client.query_one("SELECT status FROM relayops.outbox_messages", &[]).await.unwrap().get(0);
    assert_eq!(status, "claimed", "claimed by the api's own publisher, which died with it");

    // Any other publisher is the safety net: once the dead one's claim
    // expires, its recovery pass makes the row pending again, and it
    // delivers the event, once.
    env.start_publisher();
    let event: uuid::Uuid = client.query_one("SELECT id FROM relayops.events", &[]).await.unwrap().get(0);
    let event_id = relayops_shared::ids::EventId::from_uuid(event).to_string();
    env.wait_for_status(&event_id, "delivered").await;
    env.wait_for_outbox_drained().await;
    assert_eq!(env.simulator.received().len(), 1, "one request: {:?}", env.simulator.received());
}

/// A delivery admitted from the parked ones came with no message of its own:
/// its retry's message is published before the failed attempt is recorded,
/// so a worker that dies right after the record (crash point) leaves that
/// message behind, as the message path leaves its unacknowledged one. The
/// retry then comes from the broker within its schedule; recovery, which
/// would otherwise find the row only a grace later, is kept out of reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_after_recording_an_admitted_deliverys_retry_leaves_its_message_behind() {
    let mut config = TestConfig { run_worker: false, ..Default::default() };
    config.publisher.recovery_grace = Duration::from_secs(3600);
    let env = TestEnv::start_with(config).await;
    // The first event holds the endpoint's one slot for a second; every later
    // event's first request fails, its retry succeeds.
    let (receiver, url) = LaneReceiver::start(|arrival| match (arrival.n, arrival.seen) {
        (0, _) => Reply::Slow(200, 1_000),
        (_, 1) => Reply::Status(503),
        _ => Reply::Status(200),
    })
    .await;
    env.create_lane_endpoint(&url, json!({ "max_in_flight": 1, "retry_schedule_secs": [1] })).await;
    let mut doomed = env.spawn_role("worker", &[("RELAYOPS_FAILPOINTS", "worker.after_admitted_retry_recorded")]);
    let first = env.post_event("a.b", json!({ "key": "", "n": 0 })).await;
    assert_eq!(first.status, 201, "{:?}", first.body);
    receiver.wait_until(WAIT, |arrivals| !arrivals.is_empty()).await;
    // Posted while the slot is taken: each waits parked, then is admitted.
    let second = env.post_event("a.b", json!({ "key": "", "n": 1 })).await;
    let second = second.body["id"].as_str().unwrap().to_owned();
    env.wait_for_sql(
        "the second delivery parked",
        "SELECT count(*) = 1 FROM relayops.deliveries WHERE status = 'parked'",
    )
    .await;

    let status = doomed.exited(WAIT).await.expect("the worker reached its crash point");
    assert!(!status.success(), "it crashed: {status:?}");
    let row = env.wait_for_deliveries(&second, |deliveries| deliveries.len() == 1).await;
    assert_eq!(row[0]["status"], "scheduled", "the failed attempt was recorded: {row:?}");
    assert_eq!(row[0]["attempt_count"], 1);

    let _survivor = env.spawn_role("worker", &[]);
    env.wait_for_status(&second, "delivered").await;
    let tries: Vec<u32> = receiver.arrivals().iter().filter(|a| a.n == 1).map(|a| a.seen).collect();
    assert_eq!(tries, [1, 2], "the failed attempt, then its retry from the message left behind");
}

/// An admitted delivery's retry due at once is published ahead of its
/// record, so its message can arrive while the row is still leased: it comes
/// back to look again (not dropped as a duplicate would be), and every retry
/// is sent with recovery out of reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admitted_deliverys_retry_that_arrives_before_its_record_comes_back_for_it() {
    let mut config = TestConfig::default();
    config.publisher.recovery_grace = Duration::from_secs(3600);
    let env = TestEnv::start_with(config).await;
    let (receiver, url) = LaneReceiver::start(|arrival| match (arrival.n, arrival.seen) {
        (0, _) => Reply::Slow(200, 500),
        (_, 1) => Reply::Status(503),
        _ => Reply::Status(200),
    })
    .await;
    env.create_lane_endpoint(&url, json!({ "max_in_flight": 1, "retry_schedule_secs": [0] })).await;
    env.post_event("a.b", json!({ "key": "", "n": 0 })).await;
    receiver.wait_until(WAIT, |arrivals| !arrivals.is_empty()).await;
    let mut events = Vec::new();
    for n in 1..=6 {
        events.push(env.post_event("a.b", json!({ "key": "", "n": n })).await.body["id"].as_str().unwrap().to_owned());
    }
    for event in &events {
        env.wait_for_status(event, "delivered").await;
    }
    let admitted = env.metric("relayops_deliveries_admitted_total", &[]).await;
    assert!(admitted >= 6.0, "each waited parked and was admitted: {admitted}");
    let arrivals = receiver.arrivals();
    for n in 1..=6 {
        let tries: Vec<u32> = arrivals.iter().filter(|a| a.n == n).map(|a| a.seen).collect();
        assert_eq!(tries, [1, 2], "event {n}: the failed attempt and its retry");
    }
}
