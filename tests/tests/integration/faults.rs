//! The SPEC's fault table, each row injected for real: database triggers that
//! fail a transaction, a worker killed mid-request, a publisher that died
//! holding claims, a message published twice.
use std::time::Duration;

use relayops_tests::prometheus::{sample, scrape};
use relayops_tests::relayops_shared::ids::EventId;
use relayops_tests::relayops_shared::repo::outbox;
use relayops_tests::{eventually, RefusingQueues, TestConfig, TestEnv, WAIT};
use serde_json::json;

/// Makes the last statement of the ingest transaction (the outbox insert)
/// fail until [`FAIL_OUTBOX_OFF`] runs.
const FAIL_OUTBOX: &str = "CREATE FUNCTION relayops.fail_outbox() RETURNS trigger LANGUAGE plpgsql AS
       $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$;
     CREATE TRIGGER fail_outbox BEFORE INSERT ON relayops.outbox_messages
       FOR EACH STATEMENT EXECUTE FUNCTION relayops.fail_outbox();";
const FAIL_OUTBOX_OFF: &str = "DROP TRIGGER fail_outbox ON relayops.outbox_messages";

/// An env (no worker, no publisher: the outbox rows ingest writes stay to be
/// counted) with an endpoint for every event, whose ingest fails at its last
/// statement.
async fn ingest_failing_at_the_outbox() -> TestEnv {
    let env = TestEnv::start_with(TestConfig { run_worker: false, run_publisher: false, ..Default::default() }).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    env.pool.get().await.unwrap().batch_execute(FAIL_OUTBOX).await.unwrap();
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_ingest_transaction_leaves_no_event_delivery_or_outbox_row() {
    // The last statement of the ingest transaction fails.
    let env = ingest_failing_at_the_outbox().await;
    let client = env.pool.get().await.unwrap();

    let answer = env.post_event("order.created", json!({ "n": 1 })).await;
    let detail = answer.expect_problem(500);
    assert!(!detail.contains("injected"), "internal causes are not exposed: {detail}");
    assert_eq!(env.count("events").await, 0);
    assert_eq!(env.count("deliveries").await, 0);
    assert_eq!(env.count("outbox_messages").await, 0);

    // Once the fault is gone the same request succeeds.
    client.batch_execute(FAIL_OUTBOX_OFF).await.unwrap();
    assert_eq!(env.post_event("order.created", json!({ "n": 1 })).await.status, 201);
    assert_eq!((env.count("events").await, env.count("outbox_messages").await), (1, 1));
}

/// The rollback takes the idempotency key with it: the client's retry with
/// the same key is a first request, not a repeat of an event that never was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_ingest_transaction_keeps_no_idempotency_key_and_the_retry_with_it_is_accepted() {
    let env = ingest_failing_at_the_outbox().await;
    let client = env.pool.get().await.unwrap();
    let key = "order-42-created";
    let rows_for_key = || async {
        let sql = "SELECT count(*) FROM relayops.idempotency_keys WHERE idempotency_key = $1";
        client.query_one(sql, &[&key]).await.unwrap().get::<_, i64>(0)
    };

    let answer = env.post_event_with_key("order.created", json!({ "n": 42 }), key).await.answer;
    answer.expect_problem(500);
    let stored = (
        env.count("events").await,
        env.count("deliveries").await,
        env.count("outbox_messages").await,
        rows_for_key().await,
    );
    assert_eq!(stored, (0, 0, 0, 0), "(events, deliveries, outbox, keys) after the rollback");

    client.batch_execute(FAIL_OUTBOX_OFF).await.unwrap();
    let retry = env.post_event_with_key("order.created", json!({ "n": 42 }), key).await.answer;
    assert_eq!(retry.status, 201, "a new event, not a repeat: {:?}", retry.body);
    assert_eq!((env.count("events").await, env.count("outbox_messages").await, rows_for_key().await), (1, 1, 1));
    let held_by: uuid::Uuid = client
        .query_one("SELECT event_id FROM relayops.idempotency_keys WHERE idempotency_key = $1", &[&key])
        .await
        .unwrap()
        .get(0);
    let event_id = retry.body["id"].as_str().unwrap().parse::<EventId>().unwrap();
    assert_eq!(held_by, event_id.as_uuid(), "the key names the retry's event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_claimed_by_a_publisher_that_died_are_reclaimed_and_published() {
    let mut env = TestEnv::start_with(TestConfig { run_publisher: false, ..Default::default() }).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();

    // A publisher claims the row and dies before any confirm.
    let mut client = env.pool.get().await.unwrap();
    let claimed = outbox::claim_batch(
        &mut client,
        "publisher-that-died",
        10,
        Duration::from_millis(500),
        &mut Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(claimed.messages.len(), 1);

    env.start_publisher();
    env.wait_for_status(&event_id, "delivered").await;
    env.wait_for_outbox_drained().await;
    // (The pass counts what it did when it ends; the loop may publish the
    // reclaimed row before that.)
    let reclaimed =
        env.wait_for_metric("relayops_recovery_actions_total", &[("action", "reclaimed")], |n| n >= 1.0).await;
    assert_eq!(reclaimed, 1.0, "the dead publisher's claim was reclaimed, once");
    env.wait_for_messages_published(1).await;
    assert_eq!(env.simulator.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_message_after_confirm_is_absorbed_by_the_worker_claim() {
    let mut config = TestConfig::default();
    // One message at a time, so the duplicate is settled before the next event.
    config.worker.concurrency = 1;
    let env = TestEnv::start_with(config).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let first = env.post_event("a.b", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();
    let delivered = env.wait_for_status(&first, "delivered").await;

    // The publisher's confirm arrived but it died before deleting the row: the
    // row is still there and gets published a second time.
    env.wait_for_messages_published(1).await;
    env.enqueue_duplicate(delivered["id"].as_str().unwrap()).await;
    env.wait_for_messages_published(2).await;
    let second = env.post_event("a.b", json!({ "n": 2 })).await.body["id"].as_str().unwrap().to_owned();
    env.wait_for_status(&second, "delivered").await;

    let received = env.simulator.received();
    assert_eq!(received.len(), 2, "one request per event; the duplicate sent nothing: {received:#?}");
    let delivery = env.wait_for_status(&first, "delivered").await;
    assert_eq!(delivery["attempt_count"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_dying_before_persisting_is_recovered_after_its_lease_expires() {
    let mut env = TestEnv::start().await;
    // The first request hangs long enough for the worker to be killed mid-request.
    env.create_endpoint("/sim/slow-once/10000", &["*"], json!({})).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    env.simulator.wait_until(relayops_tests::WAIT, |received| !received.is_empty()).await;
    env.wait_for_status(&event_id, "in_progress").await;
    env.kill_worker().await;

    env.start_worker().await;
    let delivery = env.wait_for_status(&event_id, "delivered").await;
    assert_eq!(delivery["attempt_count"], 1, "the killed attempt left no record");
    let received = env.simulator.received();
    assert_eq!(received.len(), 2, "sent again after the lease expired");
    assert_eq!(received[0].delivery_id, received[1].delivery_id, "same delivery id both times");
    assert!(received.iter().all(|r| r.signature_valid == Some(true)));
    assert_eq!(env.count("delivery_attempts").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receiver_success_with_failed_local_commit_is_retried_with_the_same_delivery_id() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    // The first attempt's record fails to commit (a sequence is not rolled back,
    // so only the first insert fails).
    let client = env.pool.get().await.unwrap();
    client.batch_execute("CREATE SEQUENCE relayops.fault_counter").await.unwrap();
    env.create_trigger(
        "fail_first_attempt",
        "BEFORE INSERT ON relayops.delivery_attempts",
        "IF nextval('relayops.fault_counter') = 1 THEN RAISE EXCEPTION 'injected commit failure'; END IF;
         RETURN NEW;",
    )
    .await;

    let event_id = env.post_event("a.b", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();
    let delivery = env.wait_for_status(&event_id, "delivered").await;
    let received = env.simulator.received();
    assert_eq!(received.len(), 2, "the receiver saw the request twice");
    assert_eq!(received[0].delivery_id, received[1].delivery_id);
    assert_eq!(received[0].delivery_id.as_deref(), delivery["id"].as_str());
    assert_eq!(env.count("delivery_attempts").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_accepts_but_never_answers_is_an_error_not_a_hang() {
    // A loopback listener that takes the TCP connection and says nothing: the
    // AMQP handshake never completes.
    let (address, holder) = relayops_tests::silent_listener().await;
    let env = TestEnv::start_with(TestConfig { run_worker: false, run_publisher: false, ..Default::default() }).await;
    let mut broker = env.broker.clone();
    broker.url = format!("amqp://guest:guest@{address}/%2f");
    let publisher = relayops_publisher::Publisher::new(env.pool.clone(), broker, Default::default());
    let limit = relayops_tests::relayops_shared::broker::SETUP_TIMEOUT + Duration::from_secs(10);
    let outcome = tokio::time::timeout(limit, publisher.connect()).await.expect("gave up by itself, in time");
    let error = outcome.expect_err("no session from a silent broker");
    assert!(
        relayops_tests::relayops_shared::telemetry::error_chain(&error).contains("did not answer"),
        "{}",
        relayops_tests::relayops_shared::telemetry::error_chain(&error)
    );
    holder.abort();
}

/// A rate-limited endpoint's backlog waits parked, not going round: with
/// the retry queues refusing every message (a policy), deliveries its rate
/// limit turns away need no re-publish at all — each is parked (one write),
/// admitted with a token as the bucket refills, and delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_deliveries_wait_parked_and_need_no_re_publish() {
    let mut config = TestConfig::default();
    config.publisher.recovery_grace = Duration::from_secs(1);
    let env = TestEnv::start_with(config).await;
    env.create_endpoint("/sim/ok", &["*"], json!({ "rate_limit_per_sec": 2, "rate_limit_burst": 1 })).await;
    let _refusing = RefusingQueues::apply(&env.broker, "delay\\..*");
    let events = env.post_numbered_events("a.b", 6).await;
    for event in &events {
        env.wait_for_status(event, "delivered").await;
    }
    assert_eq!(env.count("delivery_attempts").await, 6, "each delivered once");
    let metrics = scrape(&env.http, &env.api_url).await;
    let turned_away = sample(&metrics, "relayops_deliveries_parked_total", &[("reason", "rate_limited")]);
    assert!(turned_away > 0.0, "the fault was met: the rate limit turned deliveries away");
    let parked = sample(&metrics, "relayops_deliveries_parked_total", &[]);
    assert_eq!(sample(&metrics, "relayops_deliveries_admitted_total", &[]), parked, "each admitted once");
    let not_sent_round = sample(&metrics, "relayops_deliveries_not_sent_round_total", &[]);
    assert_eq!(not_sent_round, 0.0, "nothing needed the refusing retry queues");
    assert_eq!(sample(&metrics, "relayops_outbox_published_total", &[]), 6.0, "each published once");
}

/// A delivery admitted from the parked ones (its endpoint was full) whose
/// attempt fails needs its retry published by the worker itself — there is
/// no message to send round. With the retry queues refusing every message,
/// that publish fails: the retry's row is `scheduled`, and recovery
/// re-enqueues it once overdue. Every delivery ends delivered, on its
/// second attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admitted_deliverys_retry_the_broker_refuses_is_recovered() {
    let mut config = TestConfig::default();
    config.publisher.recovery_grace = Duration::from_secs(1);
    let env = TestEnv::start_with(config).await;
    let policy = json!({ "max_in_flight": 1, "retry_schedule_secs": [1] });
    env.create_endpoint("/sim/flaky/1", &["*"], policy).await;
    let _refusing = RefusingQueues::apply(&env.broker, "delay\\..*");
    // One batch: its deliveries travel in one message and are attempted
    // together, so all but one find the endpoint full and are parked (posted
    // one by one, each could finish before the next came, and none park).
    let batch: Vec<_> = (0..6).map(|n| json!({ "event_type": "a.b", "payload": { "n": n } })).collect();
    let answer = env.post("/v1/events/batch", json!({ "events": batch })).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let results = answer.body["results"].as_array().unwrap();
    let events: Vec<String> = results.iter().map(|result| result["event"]["id"].as_str().unwrap().to_owned()).collect();
    for event in &events {
        env.wait_for_status(event, "delivered").await;
    }
    assert_eq!(env.count("delivery_attempts").await, 12, "each failed once, then was delivered");
    let metrics = scrape(&env.http, &env.api_url).await;
    let admitted = sample(&metrics, "relayops_deliveries_admitted_total", &[]);
    let not_sent_round = sample(&metrics, "relayops_deliveries_not_sent_round_total", &[]);
    let requeued = sample(&metrics, "relayops_recovery_actions_total", &[("action", "requeued")]);
    assert!(admitted > 0.0, "the fault was met: deliveries were admitted from the parked ones");
    assert!(not_sent_round > 0.0 && requeued > 0.0, "retries refused ({not_sent_round}), recovered ({requeued})");
}

/// The broker refuses messages for the ready queue: a policy gives it a
/// maximum length of 0 with reject-publish overflow, and one message parked
/// in it (no worker runs yet) keeps it over that length, so RabbitMQ nacks
/// every publish after it. Refused: a lone delivery (`delivery.v1`), an
/// event's two (`deliveries.v1`) and a batch of events' (`deliveries.v2`,
/// six events of one tenant claimed together). While it refuses, nothing
/// more is published and no outbox row is deleted; the rows are released
/// and tried again. Once it takes messages again, every delivery is sent
/// once, at its first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_the_broker_refuses_to_queue_stay_in_the_outbox_until_it_takes_them() {
    // One ready queue, so the one message parked in it makes every publish
    // refused (with shards, the tenant's other shard would take one more).
    let config = TestConfig { run_worker: false, ready_shards: 1, ..Default::default() };
    let mut env = TestEnv::start_with(config).await;
    env.create_endpoint("/sim/ok", &["one.*", "two.*"], json!({})).await;
    env.create_endpoint("/sim/ok", &["two.*"], json!({})).await;
    let refusing = RefusingQueues::apply(&env.broker, "ready");
    let parked = env.post_event("one.created", json!({ "parked": true })).await;
    assert_eq!(parked.status, 201, "{:?}", parked.body);
    env.wait_for_messages_published(1).await;
    let ready = env.topology().ready_shards.returns().queue.clone();
    assert_eq!(env.queue_depth(&ready).await, 1, "the first message is taken: the queue is now over its length");

    const REFUSED: (&str, &[(&str, &str)]) = ("relayops_outbox_publish_failures_total", &[("kind", "refused")]);
    let refused = || env.metric(REFUSED.0, REFUSED.1);
    let wait_for_refusals_beyond = |seen: f64| env.wait_for_metric(REFUSED.0, REFUSED.1, move |now| now > seen);
    let mut events = vec![parked.body["id"].as_str().unwrap().to_owned()];
    for (event_type, shape) in [("one.created", "delivery.v1"), ("two.created", "deliveries.v1")] {
        let before = refused().await;
        let answer = env.post_event(event_type, json!({ "shape": shape })).await;
        assert_eq!(answer.status, 201, "{:?}", answer.body);
        events.push(answer.body["id"].as_str().unwrap().to_owned());
        wait_for_refusals_beyond(before).await;
    }
    let batch: Vec<_> = (0..6).map(|n| json!({ "event_type": "one.created", "payload": { "n": n } })).collect();
    let answer = env.post("/v1/events/batch", json!({ "events": batch })).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let results = answer.body["results"].as_array().unwrap();
    events.extend(results.iter().map(|result| result["event"]["id"].as_str().unwrap().to_owned()));
    // Every row refused at least once more after the last post: all eight
    // rows are pending, so each try claims them all.
    let after_posts = refused().await;
    wait_for_refusals_beyond(after_posts + 8.0).await;

    assert_eq!(env.messages_published().await, 1.0, "nothing more published while the broker refuses");
    assert_eq!(env.queue_depth(&ready).await, 1, "nothing more queued");
    assert_eq!(env.count("outbox_messages").await, 8, "every refused event's row is still in the outbox");
    let pending = env.query_i64("SELECT count(*) FROM relayops.deliveries WHERE status = 'pending'").await;
    assert_eq!(pending, 10, "every delivery still pending");

    drop(refusing);
    env.start_worker().await;
    for event in &events {
        env.wait_for_deliveries(event, |all| !all.is_empty() && all.iter().all(|d| d["status"] == "delivered")).await;
    }
    env.wait_for_outbox_drained().await;
    env.assert_each_request_once(10);
    assert_eq!(env.count("delivery_attempts").await, 10, "each at its first attempt");
}

/// A retry queue holding a message refuses the next (a policy on the 5 s
/// queue: maximum length 0, reject-publish), and the policy is removed while
/// it still holds the first. RabbitMQ 3.10 then leaves a channel it told to refuse
/// refusing for good; the worker renews its retry channel after a refusal,
/// so later retries go through the retry queue again rather than each
/// waiting for recovery. (Should the first message leave the queue before
/// the policy goes, RabbitMQ itself tells the channel to go on, and this
/// test cannot tell the two apart: it has 5 s for two posts.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_go_through_the_retry_queues_again_once_the_broker_takes_them_again() {
    let mut config = TestConfig::default();
    config.publisher.recovery_grace = Duration::from_secs(1);
    let env = TestEnv::start_with(config).await;
    // Each delivery fails once and is retried after 7 s ± 20 %: through the
    // test's longest retry queue, 5 s, first.
    env.create_endpoint("/sim/flaky/1", &["*"], json!({ "retry_schedule_secs": [7] })).await;
    const NOT_SENT_ROUND: &str = "relayops_deliveries_not_sent_round_total";
    let not_sent_round = || env.metric(NOT_SENT_ROUND, &[]);
    const FAILED_ONCE: (&str, &[(&str, &str)]) = ("relayops_delivery_attempts_total", &[("outcome", "retry")]);
    let post_and_see_it_fail = |n: u32| {
        let env = &env;
        async move {
            let before = env.metric(FAILED_ONCE.0, FAILED_ONCE.1).await;
            let answer = env.post_event("a.b", json!({ "n": n })).await;
            assert_eq!(answer.status, 201, "{:?}", answer.body);
            env.wait_for_metric(FAILED_ONCE.0, FAILED_ONCE.1, |now| now > before).await;
            answer.body["id"].as_str().unwrap().to_owned()
        }
    };
    let refusing = RefusingQueues::apply(&env.broker, "delay\\.5000ms");
    // Taken (the queue was empty), which puts the queue over its length.
    let mut events = vec![post_and_see_it_fail(0).await];
    let retry_queue = env.topology().bucket_for(Duration::from_secs(5)).queue.clone();
    eventually(WAIT, || async {
        match env.queue_depth(&retry_queue).await {
            1 => Ok(()),
            depth => Err(format!("{depth} messages in {retry_queue}")),
        }
    })
    .await;
    assert_eq!(not_sent_round().await, 0.0, "the first retry went through its retry queue");
    // Refused: its row is scheduled, and recovery sends it round.
    events.push(post_and_see_it_fail(1).await);
    env.wait_for_metric(NOT_SENT_ROUND, &[], |now| now == 1.0).await;

    drop(refusing);
    events.push(post_and_see_it_fail(2).await);
    for event in &events {
        let delivery = env.wait_for_status(event, "delivered").await;
        assert_eq!(delivery["attempt_count"], 2, "{delivery}");
    }
    assert_eq!(not_sent_round().await, 1.0, "once the queue takes messages again, retries go through it");
}

/// Admission's lease failing in the database after the endpoint's slot was
/// reserved for it (a planted fault: after the first, which tells admission
/// the endpoint's limits, three leases of a parked delivery are refused): the
/// slot is given back, admission pauses and tries
/// again, and every parked delivery is then sent once, never more than
/// `max_in_flight` at a time, with no slot left held afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admission_lease_the_database_refuses_gives_its_slot_back_and_is_tried_again() {
    let env = TestEnv::start().await;
    let endpoint = env.create_endpoint("/sim/slow/200", &["*"], json!({ "max_in_flight": 1 })).await;
    let client = env.pool.get().await.unwrap();
    client.batch_execute("CREATE SEQUENCE relayops.refused_admissions").await.unwrap();
    env.create_trigger(
        "refuse_first_admissions",
        "BEFORE UPDATE ON relayops.deliveries",
        "IF OLD.status = 'parked' AND NEW.status = 'in_progress'
            AND nextval('relayops.refused_admissions') BETWEEN 2 AND 4 THEN
             RAISE EXCEPTION 'admission refused by the test';
         END IF;
         RETURN NEW;",
    )
    .await;
    let events = env.post_numbered_events("a.b", 6).await;
    for event in &events {
        env.wait_for_status(event, "delivered").await;
    }
    let refused = env.query_i64("SELECT last_value FROM relayops.refused_admissions").await;
    assert!(refused >= 4, "the fault was met: {refused} leases tried");
    assert_eq!(env.count("delivery_attempts").await, 6, "each sent once");
    assert_eq!(env.simulator.max_in_flight("/sim/slow/200"), 1, "the endpoint's limit held");
    let flow = relayops_tests::relayops_shared::flow::FlowControl::new(&env.config.flow).unwrap();
    let endpoint = endpoint["id"].as_str().unwrap();
    assert!(!flow.is_full("endpoint-lease", endpoint, 1).await, "no slot left held for a refused lease");
}

/// A delivery a worker parks before it takes a slot — its tenant at its
/// share, its endpoint slow — whose park write the database refuses waits
/// for a slot instead, and is sent once; later parks go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_park_write_the_database_refuses_leaves_the_delivery_waiting_for_a_slot_and_sent_once() {
    const SLOW: &str = "/sim/slow/600";
    let env = TestEnv::start().await;
    // Allowed far more at once than the tenant's share (15 of the worker's
    // 16 slots), and slow (600 ms a request): beyond its share, parked.
    env.create_endpoint(SLOW, &["*"], json!({ "max_in_flight": 1000 })).await;
    let client = env.pool.get().await.unwrap();
    client.batch_execute("CREATE SEQUENCE relayops.park_writes").await.unwrap();
    env.create_trigger(
        "refuse_first_parks",
        "BEFORE UPDATE ON relayops.deliveries",
        "IF OLD.status <> 'parked' AND NEW.status = 'parked'
            AND nextval('relayops.park_writes') <= 2 THEN
             RAISE EXCEPTION 'park refused by the test';
         END IF;
         RETURN NEW;",
    )
    .await;
    let post_wave = |first: usize| {
        let events: Vec<_> =
            (first..first + 90).map(|n| json!({ "event_type": "a.b", "payload": { "n": n } })).collect();
        env.post("/v1/events/batch", json!({ "events": events }))
    };
    assert_eq!(post_wave(0).await.status, 200);
    // A second wave once a park has been refused: its deliveries meet the
    // tenant at its share again, and are parked after the refusals.
    env.wait_for_sql("a park tried", "SELECT is_called FROM relayops.park_writes").await;
    assert_eq!(post_wave(90).await.status, 200);
    eventually(Duration::from_secs(120), || async {
        let delivered = env.query_i64("SELECT count(*) FROM relayops.deliveries WHERE status = 'delivered'").await;
        if delivered == 180 {
            Ok(())
        } else {
            Err(format!("{delivered} of 180 delivered"))
        }
    })
    .await;
    let park_writes = env.query_i64("SELECT last_value FROM relayops.park_writes").await;
    assert!(
        park_writes > 2,
        "parks were refused twice and then went through: {park_writes} park writes met the trigger"
    );
    assert_eq!(env.count("delivery_attempts").await, 180, "each sent once");
    let sent = env.simulator.received().iter().filter(|request| request.path == SLOW).count();
    assert_eq!(sent, 180, "the receiver was asked once per delivery");
    let metrics = scrape(&env.http, &env.api_url).await;
    let parked = sample(&metrics, "relayops_deliveries_parked_total", &[("reason", "tenant_share")]);
    assert!(parked > 0.0, "later parks at the share went through");
    let parked_all = sample(&metrics, "relayops_deliveries_parked_total", &[]);
    assert_eq!(
        sample(&metrics, "relayops_deliveries_admitted_total", &[]),
        parked_all,
        "each parked one admitted once"
    );
    // A refused park's message is not dropped for the recovery pass to
    // find its row stranded minutes later: it waited for a slot.
    let requeued = sample(&metrics, "relayops_recovery_actions_total", &[("action", "requeued")]);
    assert_eq!(requeued, 0.0, "no delivery was left to recovery");
}
