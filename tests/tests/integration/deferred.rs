//! Deliveries written after ingest (issue 18): an unordered event that
//! matches more endpoints than `RELAYOPS_DELIVERIES_AT_INGEST_MAX` is stored
//! with ONE `fanout` outbox row naming them and no delivery; a publisher
//! writes its deliveries (with the broker away too) and publishes them. The
//! answer counts every delivery from the start, each is delivered once — also
//! when the publisher dies right after writing them, or Postgres goes away
//! while it writes them — and an endpoint
//! disabled in between gets its delivery settled as `failed`, as one written
//! at ingest would be.
use std::collections::HashSet;

use relayops_publisher::Publisher;
use relayops_shared::config::{BrokerConfig, IngestConfig};
use relayops_tests::{TestConfig, TestEnv, WAIT};
use serde_json::{json, Value};

/// Ingest writes the deliveries of events matching up to this many endpoints.
const AT_INGEST_MAX: i64 = 2;
/// Endpoints subscribed to `many.*`: more than ingest writes.
const MANY: usize = 5;

/// An env whose ingest leaves events with more than [`AT_INGEST_MAX`]
/// subscribers to a publisher, with [`MANY`] endpoints on `many.*` and two on
/// `few.*` (as many as ingest writes itself). Returns the `many.*` endpoints.
async fn env_with_subscribers(run_publisher: bool) -> (TestEnv, Vec<Value>) {
    let config = TestConfig {
        run_publisher,
        ingest: IngestConfig { deliveries_at_ingest_max: AT_INGEST_MAX, ..Default::default() },
        ..Default::default()
    };
    let env = TestEnv::start_with(config).await;
    let mut many = Vec::new();
    for _ in 0..MANY {
        many.push(env.create_endpoint("/sim/ok", &["many.*"], json!({})).await);
    }
    for _ in 0..AT_INGEST_MAX {
        env.create_endpoint("/sim/ok", &["few.*"], json!({})).await;
    }
    (env, many)
}

/// Rows of `sql`'s two columns: an outbox status and a count of endpoints.
async fn statuses_and_endpoints(env: &TestEnv, sql: &str) -> Vec<(String, Option<i32>)> {
    let client = env.pool.get().await.unwrap();
    let rows = client.query(sql, &[]).await.unwrap();
    rows.iter().map(|row| (row.get(0), row.get(1))).collect()
}

/// The outbox now: each row's status and how many endpoints it names.
async fn outbox_rows(env: &TestEnv) -> Vec<(String, Option<i32>)> {
    let sql = "SELECT status, cardinality(fanout_endpoints) FROM relayops.outbox_messages ORDER BY id";
    statuses_and_endpoints(env, sql).await
}

async fn wait_until_delivered(env: &TestEnv, event_id: &str, count: usize) -> Vec<Value> {
    env.wait_for_deliveries(event_id, |all| all.len() == count && all.iter().all(|d| d["status"] == "delivered")).await
}

/// The requests the receiver saw: each delivery id once, every signature valid.
fn assert_each_delivered_once(env: &TestEnv, expected: usize) {
    let received = env.simulator.received();
    let ids: HashSet<_> = received.iter().map(|r| r.delivery_id.clone()).collect();
    assert_eq!((received.len(), ids.len()), (expected, expected), "one request per delivery");
    assert!(received.iter().all(|r| r.signature_valid == Some(true)), "signed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_with_more_subscribers_than_ingest_writes_is_answered_with_all_of_them_and_each_is_delivered_once() {
    let (env, _) = env_with_subscribers(true).await;
    let client = env.pool.get().await.unwrap();
    client.batch_execute("CREATE TABLE relayops.outbox_inserts (status text, endpoints int)").await.unwrap();
    env.create_trigger(
        "note_outbox_inserts",
        "AFTER INSERT ON relayops.outbox_messages",
        "INSERT INTO relayops.outbox_inserts VALUES (NEW.status, cardinality(NEW.fanout_endpoints)); RETURN NEW;",
    )
    .await;

    let first = env.post_event_with_key("many.created", json!({ "n": 1 }), "many-1").await.answer;
    assert_eq!((first.status, first.body["deliveries"].as_u64()), (201, Some(MANY as u64)), "{:?}", first.body);
    let event_id = first.body["id"].as_str().unwrap().to_owned();
    let deliveries = wait_until_delivered(&env, &event_id, MANY).await;
    let endpoints: HashSet<_> = deliveries.iter().map(|d| d["endpoint_id"].clone()).collect();
    assert_eq!(endpoints.len(), MANY, "one delivery per subscribed endpoint");
    let written = env.metric("relayops_deferred_deliveries_written_total", &[]).await;
    assert_eq!(written, MANY as f64, "written by the publisher");

    // As many as ingest writes itself: written with the event, as before.
    let few = env.post_event("few.created", json!({ "n": 2 })).await;
    assert_eq!(few.body["deliveries"], AT_INGEST_MAX);
    wait_until_delivered(&env, few.body["id"].as_str().unwrap(), AT_INGEST_MAX as usize).await;
    assert_each_delivered_once(&env, MANY + AT_INGEST_MAX as usize);

    let repeat = env.post_event_with_key("many.created", json!({ "n": 1 }), "many-1").await.answer;
    assert_eq!((repeat.status, &repeat.body["id"], &repeat.body["deliveries"]), (200, &first.body["id"], &json!(MANY)));
    let inserts = statuses_and_endpoints(&env, "SELECT status, endpoints FROM relayops.outbox_inserts").await;
    assert_eq!(inserts.len(), 2, "one row per event: {inserts:?}");
    assert_eq!(inserts[0], ("fanout".to_owned(), Some(MANY as i32)), "the row names the endpoints matched");
    assert!(
        inserts[1].0 != "fanout" && inserts[1].1.is_none(),
        "the small event's row is written to publish: {inserts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_are_written_while_the_broker_is_away_and_sent_once_it_is_back() {
    let (mut env, many) = env_with_subscribers(false).await;
    let first = env.post_event_with_key("many.created", json!({ "n": 1 }), "many-1").await.answer;
    assert_eq!(first.body["deliveries"], MANY);
    let event_id = first.body["id"].as_str().unwrap().to_owned();
    assert_eq!(env.count("deliveries").await, 0, "none written by ingest");
    assert_eq!(outbox_rows(&env).await, [("fanout".to_owned(), Some(MANY as i32))]);
    let repeat = env.post_event_with_key("many.created", json!({ "n": 1 }), "many-1").await.answer;
    assert_eq!((repeat.status, &repeat.body["deliveries"]), (200, &json!(MANY)), "counted before they exist");

    // An endpoint disabled in between: its delivery is written (the event
    // was accepted for it) and settled as one written at ingest would be.
    let disabled = many[0]["id"].as_str().unwrap();
    let path = format!("/v1/endpoints/{disabled}");
    let off = env.request(reqwest::Method::PATCH, &path, Some(&env.api_key), Some(json!({ "enabled": false }))).await;
    assert_eq!(off.status, 200, "{:?}", off.body);

    let unreachable = BrokerConfig { url: "amqp://guest:guest@127.0.0.1:1/%2f".into(), ..env.broker.clone() };
    let publisher = Publisher::new(env.pool.clone(), unreachable, env.config.publisher.clone());
    assert!(publisher.drain(None).await.is_err(), "the broker is away");
    let listed = env.wait_for_deliveries(&event_id, |all| all.len() == MANY).await;
    assert!(listed.iter().all(|d| d["status"] == "pending"), "written all the same: {listed:?}");
    assert_eq!(outbox_rows(&env).await, [("pending".to_owned(), None)], "waiting for the broker");
    let repeat = env.post_event_with_key("many.created", json!({ "n": 1 }), "many-1").await.answer;
    assert_eq!(repeat.body["deliveries"], MANY);

    env.start_publisher();
    let settled = env
        .wait_for_deliveries(&event_id, |all| {
            all.iter().filter(|d| d["status"] == "delivered").count() == MANY - 1
                && all.iter().any(|d| d["status"] == "failed")
        })
        .await;
    let failed: Vec<_> = settled.iter().filter(|d| d["status"] == "failed").collect();
    assert_eq!((failed.len(), &failed[0]["endpoint_id"]), (1, &many[0]["id"]), "the disabled endpoint's");
    env.wait_for_outbox_drained().await;
    assert_each_delivered_once(&env, MANY - 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_that_dies_right_after_writing_the_deliveries_leaves_them_to_the_next_one() {
    let (mut env, _) = env_with_subscribers(false).await;
    let event_id = env.post_event("many.created", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();
    let mut doomed = env.spawn_role("publisher", &[("RELAYOPS_FAILPOINTS", "publisher.after_deferred_write")]);
    let status = doomed.exited(WAIT).await.expect("the publisher reached its crash point");
    assert!(!status.success(), "it crashed: {status:?}");
    assert_eq!(env.count("deliveries").await, MANY as i64, "its statement committed");
    assert_eq!(outbox_rows(&env).await, [("pending".to_owned(), None)], "the row waits to be published");

    env.start_publisher();
    wait_until_delivered(&env, &event_id, MANY).await;
    env.wait_for_outbox_drained().await;
    assert_each_delivered_once(&env, MANY);
}

/// The batch route writes its events with one set-based statement: each
/// event with more subscribers than ingest writes gets its `fanout` row there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_leaves_the_deliveries_of_its_widely_subscribed_events_to_a_publisher_too() {
    let (env, _) = env_with_subscribers(true).await;
    let batch = json!({ "events": [
        { "event_type": "many.created", "payload": { "n": 1 } },
        { "event_type": "few.created", "payload": { "n": 2 } },
        { "event_type": "many.paid", "payload": { "n": 3 }, "idempotency_key": "k1" },
        { "event_type": "many.paid", "payload": { "n": 3 }, "idempotency_key": "k1" },
    ]});
    let answer = env.post("/v1/events/batch", batch).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let results = answer.body["results"].as_array().unwrap();
    let seen: Vec<(u64, u64)> = results
        .iter()
        .map(|r| (r["status"].as_u64().unwrap(), r["event"]["deliveries"].as_u64().unwrap_or_default()))
        .collect();
    assert_eq!(seen, [(201, MANY as u64), (201, AT_INGEST_MAX as u64), (201, MANY as u64), (200, MANY as u64)]);
    for (result, count) in results[..3].iter().zip([MANY, AT_INGEST_MAX as usize, MANY]) {
        wait_until_delivered(&env, result["event"]["id"].as_str().unwrap(), count).await;
    }
    assert_each_delivered_once(&env, 2 * MANY + AT_INGEST_MAX as usize);
}

/// One statement, several widely subscribed events: each `fanout` row names
/// exactly its own event's endpoints (two events of the batch match different
/// sets, a third gets its deliveries from ingest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_names_each_widely_subscribed_events_own_endpoints() {
    let (env, many) = env_with_subscribers(false).await;
    let mut paid: Vec<String> = many.iter().map(|endpoint| endpoint["id"].as_str().unwrap().to_owned()).collect();
    for _ in 0..2 {
        let endpoint = env.create_endpoint("/sim/ok", &["many.paid"], json!({})).await;
        paid.push(endpoint["id"].as_str().unwrap().to_owned());
    }
    let batch = json!({ "events": [
        { "event_type": "many.created", "payload": { "n": 1 } },
        { "event_type": "few.created", "payload": { "n": 2 } },
        { "event_type": "many.paid", "payload": { "n": 3 } },
    ]});
    let answer = env.post("/v1/events/batch", batch).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let events: Vec<(String, u64)> = answer.body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["event"]["id"].as_str().unwrap().to_owned(), r["event"]["deliveries"].as_u64().unwrap()))
        .collect();
    let counts: Vec<u64> = events.iter().map(|(_, count)| *count).collect();
    assert_eq!(counts, [MANY as u64, AT_INGEST_MAX as u64, MANY as u64 + 2]);

    let client = env.pool.get().await.unwrap();
    let named = |event_id: String| {
        let client = &client;
        async move {
            let rows = client
                .query(
                    "SELECT 'ep_' || replace(endpoint::text, '-', '')
                     FROM relayops.outbox_messages o, unnest(o.fanout_endpoints) AS endpoint
                     WHERE o.status = 'fanout' AND 'evt_' || replace(o.event_id::text, '-', '') = $1",
                    &[&event_id],
                )
                .await
                .unwrap();
            rows.iter().map(|row| row.get(0)).collect::<HashSet<String>>()
        }
    };
    let created: HashSet<String> = paid[..MANY].iter().cloned().collect();
    assert_eq!(named(events[0].0.clone()).await, created, "many.created: the many.* endpoints");
    assert_eq!(named(events[2].0.clone()).await, paid.iter().cloned().collect(), "many.paid: those and its own two");
    assert!(named(events[1].0.clone()).await.is_empty(), "few.created's deliveries are written by ingest");
    assert_eq!(env.count("deliveries").await, AT_INGEST_MAX, "only few.created's");
}

/// The database refuses one event's deliveries (a trigger stands in for any
/// lasting refusal): that event is set aside with the reason, and neither the
/// deferred event behind it nor publishing waits for it. Once the refusal is
/// gone and the row is due again, it is delivered like the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_whose_deliveries_are_refused_is_set_aside_and_holds_up_nothing_else() {
    let (mut env, _) = env_with_subscribers(false).await;
    let refused =
        env.post_event("many.created", json!({ "refuse": true })).await.body["id"].as_str().unwrap().to_owned();
    env.create_trigger(
        "refuse_one_events_deliveries",
        "BEFORE INSERT ON relayops.deliveries",
        "IF NEW.event_id IN (SELECT id FROM relayops.events WHERE payload ? 'refuse') THEN
             RAISE EXCEPTION 'deliveries refused for the test';
         END IF;
         RETURN NEW;",
    )
    .await;
    let behind = env.post_event("many.created", json!({ "n": 2 })).await.body["id"].as_str().unwrap().to_owned();
    let few = env.post_event("few.created", json!({ "n": 3 })).await.body["id"].as_str().unwrap().to_owned();

    env.start_publisher();
    wait_until_delivered(&env, &behind, MANY).await;
    wait_until_delivered(&env, &few, AT_INGEST_MAX as usize).await;
    let client = env.pool.get().await.unwrap();
    let aside = client
        .query_one(
            "SELECT status, last_error, available_at > now() + interval '30 seconds' FROM relayops.outbox_messages
             WHERE fanout_endpoints IS NOT NULL",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(aside.get::<_, String>(0), "fanout", "still waiting for its deliveries");
    assert!(aside.get::<_, String>(1).contains("deliveries refused for the test"), "the reason is kept");
    assert!(aside.get::<_, bool>(2), "set aside for a while, not retried on every drain");
    assert_eq!(env.wait_for_deliveries(&refused, |_| true).await.len(), 0);

    // The refusal gone and the row due again (standing in for the minute's wait).
    client.batch_execute("DROP TRIGGER refuse_one_events_deliveries ON relayops.deliveries").await.unwrap();
    client
        .execute("UPDATE relayops.outbox_messages SET available_at = now() WHERE status = 'fanout'", &[])
        .await
        .unwrap();
    wait_until_delivered(&env, &refused, MANY).await;
    env.wait_for_outbox_drained().await;
    assert_each_delivered_once(&env, 2 * MANY + AT_INGEST_MAX as usize);
}

/// An event removed while its deliveries waited for a publisher (retention
/// ran while no publisher did; deleted by hand here) gets none: its row is
/// dropped, the event behind it is delivered, and no delivery points at an
/// event that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_removed_before_its_deliveries_were_written_gets_none_and_holds_up_nothing() {
    let (mut env, _) = env_with_subscribers(false).await;
    env.post_event("many.created", json!({ "removed": true })).await;
    let client = env.pool.get().await.unwrap();
    let removed = client.execute("DELETE FROM relayops.events WHERE payload ? 'removed'", &[]).await.unwrap();
    assert_eq!(removed, 1);
    let kept = env.post_event("many.created", json!({ "n": 2 })).await.body["id"].as_str().unwrap().to_owned();

    env.start_publisher();
    wait_until_delivered(&env, &kept, MANY).await;
    env.wait_for_outbox_drained().await;
    let orphans: i64 = client
        .query_one(
            "SELECT count(*) FROM relayops.deliveries d WHERE NOT EXISTS (SELECT 1 FROM relayops.events e WHERE e.id = d.event_id)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!((orphans, env.count("deliveries").await), (0, MANY as i64), "only the kept event's");
    assert_each_delivered_once(&env, MANY);
}

/// Postgres goes away while a publisher is writing deferred deliveries (the
/// statement is in flight: a trigger holds it on its first row) and stays
/// away a while: the write is undone with its transaction, nothing is set
/// aside as if the database had refused it, and once Postgres is back every
/// event's deliveries are written and each is delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outage_while_deliveries_are_written_loses_and_delays_nothing() {
    const EVENTS: usize = 6;
    let (mut env, _) = env_with_subscribers(false).await;
    let mut events = Vec::new();
    for n in 0..EVENTS {
        events.push(env.post_event("many.created", json!({ "n": n })).await.body["id"].as_str().unwrap().to_owned());
    }
    let client = env.pool.get().await.unwrap();
    // A sequence is not rolled back: only the very first delivery row waits.
    client.batch_execute("CREATE SEQUENCE relayops.deliveries_written").await.unwrap();
    env.create_trigger(
        "hold_the_first_delivery",
        "BEFORE INSERT ON relayops.deliveries",
        "IF nextval('relayops.deliveries_written') = 1 THEN PERFORM pg_sleep(60); END IF; RETURN NEW;",
    )
    .await;
    drop(client);

    env.start_publisher();
    env.wait_for_sql(
        "the publisher's write in flight",
        "SELECT count(*) = 1 FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event = 'PgSleep' AND query LIKE '%fanout%'",
    )
    .await;
    env.cut_database().await;
    // The outage lasts a while: this sleep is the fault, not a wait for a condition.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    env.restore_database().await;

    for event in &events {
        wait_until_delivered(&env, event, MANY).await;
    }
    env.wait_for_outbox_drained().await;
    assert_each_delivered_once(&env, EVENTS * MANY);
    let client = env.pool.get().await.unwrap();
    let written: i64 = client.query_one("SELECT count(*) FROM relayops.deliveries", &[]).await.unwrap().get(0);
    assert_eq!(written, (EVENTS * MANY) as i64, "each delivery written once");
}
