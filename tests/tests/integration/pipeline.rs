//! The happy path, end to end.
use std::time::Duration;

use relayops_tests::{TestConfig, TestEnv};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_is_delivered_end_to_end_with_a_valid_signature_and_one_attempt() {
    let env = TestEnv::start().await;
    let endpoint = env.create_endpoint("/sim/ok", &["order.created"], json!({})).await;

    let answer = env.post_event("order.created", json!({ "order": 42, "note": "héllo" })).await;
    assert_eq!(answer.status, 201, "{:?}", answer.body);
    assert_eq!(answer.body["deliveries"], 1);
    let event_id = answer.body["id"].as_str().unwrap().to_owned();
    assert!(event_id.starts_with("evt_"));

    let delivery = env.wait_for_status(&event_id, "delivered").await;
    assert_eq!(delivery["endpoint_id"], endpoint["id"]);
    assert_eq!(delivery["attempt_count"], 1);
    assert_eq!(delivery["last_http_status"], 200);

    let received = env.simulator.received();
    assert_eq!(received.len(), 1, "exactly one request reached the receiver");
    let request = &received[0];
    assert_eq!(request.signature_valid, Some(true), "signature verifies with the endpoint's secret");
    assert_eq!(request.delivery_id.as_deref(), delivery["id"].as_str());
    assert_eq!(request.webhook_id, request.delivery_id, "webhook-id is the stable delivery id");
    assert_eq!(request.event_type.as_deref(), Some("order.created"));
    assert_eq!(request.body, json!({ "order": 42, "note": "héllo" }));

    let delivery_id = delivery["id"].as_str().unwrap();
    let attempts = env.get(&format!("/v1/deliveries/{delivery_id}/attempts")).await;
    let attempts = attempts.body["data"].as_array().unwrap().clone();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["attempt_number"], 1);
    assert_eq!(attempts[0]["outcome"], "delivered");
    assert_eq!(attempts[0]["http_status"], 200);
    assert_eq!(attempts[0]["request_headers"]["webhook-id"], delivery_id);
    assert!(attempts[0]["request_headers"].get("webhook-signature").is_none(), "signatures are not stored");

    // The outbox row was published, and the event reads back as posted.
    env.wait_for_outbox_drained().await;
    env.wait_for_messages_published(1).await;
    let event = env.get(&format!("/v1/events/{event_id}")).await;
    assert_eq!(event.status, 200);
    assert_eq!(event.body["payload"]["order"], 42);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_event_fans_out_to_every_matching_endpoint() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/ok", &["order.created"], json!({})).await;
    env.create_endpoint("/sim/ok", &["order.*"], json!({})).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    env.create_endpoint("/sim/ok", &["invoice.*"], json!({})).await;
    env.create_endpoint("/sim/ok", &["order.created"], json!({ "enabled": false })).await;

    let answer = env.post_event("order.created", json!({ "n": 1 })).await;
    assert_eq!(answer.status, 201);
    assert_eq!(answer.body["deliveries"], 3, "exact, prefix and catch-all match; others and disabled do not");
    let event_id = answer.body["id"].as_str().unwrap();
    env.wait_for_deliveries(event_id, |all| all.len() == 3 && all.iter().all(|d| d["status"] == "delivered")).await;
    let received = env.simulator.received();
    assert_eq!(received.len(), 3);
    assert!(received.iter().all(|r| r.signature_valid == Some(true)));
    env.wait_for_messages_published(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_without_matching_subscription_creates_no_delivery() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/ok", &["invoice.paid", "order.*"], json!({})).await;

    // "orders.created" must not match "order.*": the wildcard is per segment.
    for event_type in ["user.created", "orders.created", "invoice"] {
        let answer = env.post_event(event_type, json!({})).await;
        assert_eq!(answer.status, 201, "{:?}", answer.body);
        assert_eq!(answer.body["deliveries"], 0, "{event_type} matched unexpectedly");
    }
    assert_eq!(env.count("events").await, 3);
    assert_eq!(env.count("deliveries").await, 0);
    assert_eq!(env.count("outbox_messages").await, 0);
    assert_eq!(env.messages_published().await, 0.0, "no outbox row was written (and published)");
}

/// Ingest finds subscribers from the patterns that match an event's type
/// (`relayops.patterns_matching`): the type itself, `*`, and `prefix.*` for
/// each dotted prefix. Every ingest statement (single, batch, ordered) must
/// pick the same endpoints, and an endpoint matched by several of its
/// patterns gets one delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_reaches_exactly_the_endpoints_whose_patterns_match_its_type() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    let mut matching = std::collections::BTreeSet::new();
    for patterns in [&["a.b.c"][..], &["a.*"], &["a.b.*"], &["*"], &["a.*", "*", "a.b.c", "x.y"]] {
        matching.insert(env.create_endpoint("/sim/ok", patterns, json!({})).await["id"].as_str().unwrap().to_owned());
    }
    for patterns in [&["a.b"][..], &["a.b.c.*"], &["b.*"], &["a.bc.*"], &["a.b.cd"], &["ab.*"], &["a.b.c-d"]] {
        env.create_endpoint("/sim/ok", patterns, json!({})).await;
    }
    let disabled = env.create_endpoint("/sim/ok", &["*"], json!({})).await["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/endpoints/{disabled}");
    let off = env.request(reqwest::Method::PATCH, &path, Some(&env.api_key), Some(json!({ "enabled": false }))).await;
    assert_eq!(off.status, 200, "{:?}", off.body);

    let single = env.post_event("a.b.c", json!({})).await.body["id"].as_str().unwrap().to_owned();
    let ordered = env.post("/v1/events", json!({ "event_type": "a.b.c", "payload": {}, "ordering_key": "k" })).await;
    assert_eq!(ordered.status, 201, "{:?}", ordered.body);
    let batch = env
        .post(
            "/v1/events/batch",
            json!({ "events": [{ "event_type": "a.b.c", "payload": {} }, { "event_type": "b.x", "payload": {} }] }),
        )
        .await;
    assert_eq!(batch.status, 200, "{:?}", batch.body);
    let in_batch = |n: usize| batch.body["results"][n]["event"]["id"].as_str().unwrap().to_owned();
    for event in [single, ordered.body["id"].as_str().unwrap().to_owned(), in_batch(0)] {
        let deliveries = env.wait_for_deliveries(&event, |all| !all.is_empty()).await;
        let endpoints: std::collections::BTreeSet<String> =
            deliveries.iter().map(|d| d["endpoint_id"].as_str().unwrap().to_owned()).collect();
        assert_eq!((deliveries.len(), &endpoints), (matching.len(), &matching), "event {event}");
    }
    // `b.x`: the `b.*` endpoint and the two `*` ones.
    assert_eq!(env.wait_for_deliveries(&in_batch(1), |all| !all.is_empty()).await.len(), 3);
}

/// Ingest's work is that of the subscriptions that match, not of the
/// tenant's endpoints: with 2,000 endpoints subscribed to other types (and
/// statistics that know it), writing an event for the one subscriber reads a
/// handful of rows (the statement used to read every endpoint of the tenant
/// and, for each, its subscriptions). Counted by Postgres for the writing
/// transaction itself (`pg_stat_xact_user_tables`), which is rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_reads_only_the_subscriptions_that_match_however_many_endpoints_the_tenant_has() {
    use relayops_shared::domain::{EndpointKind, EventPayload, EventType};
    use relayops_shared::repo::events::{insert_prepared, IngestOutcome, NewEvent, PreparedEvent, WriteOptions};
    let env = TestEnv::start_with(TestConfig { run_worker: false, run_publisher: false, ..Default::default() }).await;
    env.create_endpoint("/sim/ok", &["a.b"], json!({})).await;
    let mut client = env.pool.get().await.unwrap();
    let tenant = env.tenant_id.as_uuid();
    client
        .execute(
            "WITH endpoints AS (
                 INSERT INTO relayops.webhook_endpoints (id, tenant_id, url, secret)
                 SELECT gen_random_uuid(), $1, 'http://127.0.0.1:9/elsewhere', 'whsec_' || md5(n::text)
                 FROM generate_series(1, 2000) AS n RETURNING id, tenant_id)
             INSERT INTO relayops.endpoint_subscriptions (id, tenant_id, endpoint_id, event_type_pattern)
             SELECT gen_random_uuid(), e.tenant_id, e.id, p FROM endpoints e, unnest(ARRAY['other.type', 'c.*']) AS p",
            &[&tenant],
        )
        .await
        .unwrap();
    client.batch_execute("ANALYZE relayops.webhook_endpoints, relayops.endpoint_subscriptions").await.unwrap();
    let tx = client.transaction().await.unwrap();
    // The backend's counters not yet flushed may hold earlier work of this
    // connection: the difference across the insert is the insert's.
    let rows_read = "SELECT coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)) FILTER (WHERE relname = 'endpoint_subscriptions'), 0)::bigint,
                            coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)) FILTER (WHERE relname = 'webhook_endpoints'), 0)::bigint
                     FROM pg_stat_xact_user_tables WHERE schemaname = 'relayops'";
    let before = tx.query_one(rows_read, &[]).await.unwrap();
    let (event_type, payload) = (EventType::parse("a.b").unwrap(), EventPayload::parse(json!({})).unwrap());
    let event = NewEvent { event_type: &event_type, payload: &payload, idempotency_key: None, ordering_key: None };
    let event = PreparedEvent::new(env.tenant_id, &event);
    let outcome = insert_prepared(&tx, &event, EndpointKind::Webhook, WriteOptions::default()).await.unwrap();
    assert!(matches!(&outcome, IngestOutcome::Created(receipt) if receipt.deliveries == 1), "{outcome:?}");
    let after = tx.query_one(rows_read, &[]).await.unwrap();
    tx.rollback().await.unwrap();
    let read = |column: usize| after.get::<_, i64>(column) - before.get::<_, i64>(column);
    let (subscriptions, endpoints) = (read(0), read(1));
    // One subscription; its endpoint, and the delivery's foreign-key check of it.
    assert!(
        subscriptions <= 2 && endpoints <= 3,
        "rows read by the ingest of one event: {subscriptions} subscriptions, {endpoints} endpoints"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_requests_verify_with_the_reference_standard_webhooks_library() {
    let env = TestEnv::start().await;
    let endpoint = env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let event_id = env.post_event("order.created", json!({ "a": [1, 2.5, "ü"], "nested": { "z": null } })).await.body
        ["id"]
        .as_str()
        .unwrap()
        .to_owned();
    env.wait_for_status(&event_id, "delivered").await;
    let request = env.simulator.received()[0].clone();

    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("webhook-id", request.webhook_id.clone().unwrap().parse().unwrap());
    headers.insert("webhook-timestamp", request.webhook_timestamp.clone().unwrap().parse().unwrap());
    headers.insert("webhook-signature", request.webhook_signature.clone().unwrap().parse().unwrap());
    let verifier = standardwebhooks::Webhook::new(endpoint["secret"].as_str().unwrap()).unwrap();
    verifier.verify(request.raw_body.as_bytes(), &headers).expect("the reference library accepts our signature");
    let tampered = request.raw_body.replace("2.5", "3.5");
    assert!(verifier.verify(tampered.as_bytes(), &headers).is_err(), "and rejects a tampered body");
}

/// Ingest writes ONE outbox row per event, whatever its number of
/// subscribers (alone and through the batch route); every delivery is
/// queryable and replayable at once; the publisher turns each event's row into
/// a message per pending delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_with_many_subscribers_writes_one_outbox_row_and_each_delivery_is_sent() {
    let config = relayops_tests::TestConfig { run_worker: false, run_publisher: false, ..Default::default() };
    let mut env = TestEnv::start_with(config).await;
    for _ in 0..3 {
        env.create_endpoint("/sim/ok", &["order.*"], json!({})).await;
    }
    let alone = env.post_event("order.created", json!({ "n": 0 })).await;
    assert_eq!(alone.body["deliveries"], 3, "{:?}", alone.body);
    let events: Vec<_> = (1..3).map(|n| json!({ "event_type": "order.created", "payload": { "n": n } })).collect();
    let batch = env.post("/v1/events/batch", json!({ "events": events })).await;
    assert_eq!(batch.status, 200, "{:?}", batch.body);
    let counts = (env.count("events").await, env.count("deliveries").await, env.count("outbox_messages").await);
    assert_eq!(counts, (3, 9, 3), "(events, deliveries, outbox rows): one row per event");

    // Queryable and replayable before anything was published.
    let event_id = alone.body["id"].as_str().unwrap();
    let deliveries = env.wait_for_deliveries(event_id, |all| all.len() == 3).await;
    assert!(deliveries.iter().all(|d| d["status"] == "pending"), "{deliveries:?}");
    let delivery_id = deliveries[0]["id"].as_str().unwrap();
    let rescued = env.post(&format!("/v1/deliveries/{delivery_id}/replay"), json!({})).await;
    assert_eq!(rescued.status, 202, "{:?}", rescued.body);

    // All rows go out in one claim: 3 x 3 messages from the events' rows and
    // the replay's own (a duplicate for its delivery, absorbed by the claim).
    env.start_publisher();
    env.wait_for_outbox_drained().await;
    env.wait_for_messages_published(10).await;
    env.start_worker().await;
    env.wait_for_sql(
        "every delivery delivered",
        "SELECT count(*) FILTER (WHERE status = 'delivered') = 9 FROM relayops.deliveries",
    )
    .await;
    let client = env.pool.get().await.unwrap();
    let attempts: i64 = client.query_one("SELECT count(*) FROM relayops.delivery_attempts", &[]).await.unwrap().get(0);
    assert_eq!(attempts, 9, "one attempt per delivery");
    let received = env.simulator.received();
    assert_eq!(received.len(), 9, "one request per delivery");
    let distinct: std::collections::HashSet<_> = received.iter().map(|r| r.delivery_id.clone()).collect();
    assert_eq!(distinct.len(), 9, "each delivery once");
}

/// Rows of events with a large fan-out past a batch's message limit (10 per
/// row the batch may claim) go back for the next batch, whole: every
/// delivery is still sent, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_with_a_large_fan_out_are_published_over_several_batches() {
    let mut config = relayops_tests::TestConfig { run_publisher: false, ..Default::default() };
    // Two rows claimed at a time, 20 messages at most: one 15-delivery event per batch.
    config.publisher.batch_size = 2;
    let mut env = TestEnv::start_with(config).await;
    for _ in 0..15 {
        env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    }
    for n in 0..2 {
        assert_eq!(env.post_event("a.b", json!({ "n": n })).await.body["deliveries"], 15);
    }
    env.start_publisher();
    env.wait_for_sql(
        "every delivery delivered",
        "SELECT count(*) FILTER (WHERE status = 'delivered') = 30 FROM relayops.deliveries",
    )
    .await;
    env.wait_for_outbox_drained().await;
    env.wait_for_messages_published(30).await;
    let batches = env.metric("relayops_outbox_publish_batch_duration_seconds_count", &[]).await;
    assert!(batches >= 2.0, "the two events went out in separate batches ({batches})");
    assert_eq!(env.simulator.received().len(), 30, "each delivery sent once");
}

/// A busy receiver is sent to over connections kept open between deliveries:
/// never more connections than requests the worker may have in flight, not a
/// new connection (a TCP handshake, and for HTTPS a TLS one, on both sides)
/// for most deliveries once more than a few dozen are in flight at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_receiver_is_sent_to_over_connections_kept_open() {
    const IN_FLIGHT: u16 = 64;
    const ENDPOINTS: usize = 10;
    const EVENTS: usize = 60;
    let mut config = TestConfig::default();
    config.worker.concurrency = IN_FLIGHT;
    let env = TestEnv::start_with(config).await;
    // Ten endpoints on one receiver (one host and port): the worker fills its
    // concurrency with requests to it, each answered after 20 ms.
    let (receiver, url, connections) = relayops_tests::start_receiver_noting_connections().await;
    for _ in 0..ENDPOINTS {
        env.create_endpoint_on(&receiver, &format!("{url}/sim/slow/20"), &["load.*"], json!({ "max_in_flight": 64 }))
            .await;
    }
    let posts = (0..EVENTS).map(|n| env.post_event("load.tested", json!({ "n": n })));
    for answer in futures_util::future::join_all(posts).await {
        assert_eq!(answer.status, 201, "{:?}", answer.body);
    }
    let deliveries = ENDPOINTS * EVENTS;
    receiver.wait_until(Duration::from_secs(60), |seen| seen.len() >= deliveries).await;
    env.wait_for_sql(
        "every delivery delivered",
        &format!("SELECT count(*) FILTER (WHERE status = 'delivered') = {deliveries} FROM relayops.deliveries"),
    )
    .await;
    let (opened, peak) = (connections.count(), receiver.max_in_flight("/sim/slow/20"));
    assert!(
        opened <= usize::from(IN_FLIGHT),
        "{deliveries} deliveries, at most {peak} at once, came over {opened} connections \
         (the worker may have {IN_FLIGHT} requests in flight)"
    );
}
