//! Ingest: idempotency and input validation.
use relayops_tests::TestEnv;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_idempotency_key_returns_original_event_and_creates_nothing_new() {
    let env = env_without_pipeline().await;
    env.create_endpoint("/sim/ok", &["order.created"], json!({})).await;
    let body = json!({ "event_type": "order.created", "payload": { "id": 7 }, "idempotency_key": "order-7" });

    let first = env.post("/v1/events", body.clone()).await;
    assert_eq!(first.status, 201, "{:?}", first.body);
    let counts = (env.count("events").await, env.count("deliveries").await, env.count("outbox_messages").await);
    assert_eq!(counts, (1, 1, 1));

    let second = env.post("/v1/events", body.clone()).await;
    assert_eq!(second.status, 200, "a repeat is answered 200, not 201");
    assert_eq!(second.body, first.body, "the same response body, same id");

    // The key may also come as a header.
    let mut via_header = env.http.post(format!("{}/v1/events", env.api_url)).bearer_auth(&env.api_key);
    via_header = via_header.header("Idempotency-Key", "order-7");
    let third =
        via_header.json(&json!({ "event_type": "order.created", "payload": { "id": 7 } })).send().await.unwrap();
    assert_eq!(third.status(), 200);
    let third: serde_json::Value = third.json().await.unwrap();
    assert_eq!(third["id"], first.body["id"]);

    let after = (env.count("events").await, env.count("deliveries").await, env.count("outbox_messages").await);
    assert_eq!(after, counts, "repeats create no event, delivery or outbox row");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_idempotency_key_with_a_different_payload_is_a_conflict() {
    let env = TestEnv::start_with(relayops_tests::TestConfig { run_worker: false, ..Default::default() }).await;
    let first =
        env.post("/v1/events", json!({ "event_type": "a.b", "payload": { "v": 1 }, "idempotency_key": "k1" })).await;
    assert_eq!(first.status, 201);
    let reused =
        env.post("/v1/events", json!({ "event_type": "a.b", "payload": { "v": 2 }, "idempotency_key": "k1" })).await;
    let detail = reused.expect_problem(409);
    assert!(detail.contains(first.body["id"].as_str().unwrap()), "names the original event: {detail}");
    assert_eq!(env.count("events").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_are_scoped_per_tenant() {
    let env = TestEnv::start_with(relayops_tests::TestConfig { run_worker: false, ..Default::default() }).await;
    let (_, other_key) = env.second_tenant().await;
    let body = json!({ "event_type": "a.b", "payload": {}, "idempotency_key": "same-key" });
    let mine = env.post("/v1/events", body.clone()).await;
    let theirs = env.request(reqwest::Method::POST, "/v1/events", Some(&other_key), Some(body)).await;
    assert_eq!((mine.status, theirs.status), (201, 201));
    assert_ne!(mine.body["id"], theirs.body["id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_get_a_4xx_problem_and_write_nothing() {
    let env = TestEnv::start_with(relayops_tests::TestConfig { run_worker: false, ..Default::default() }).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let url = format!("{}/v1/events", env.api_url);
    let raw = |body: &'static str, content_type: &'static str| {
        env.http.post(&url).bearer_auth(&env.api_key).header("content-type", content_type).body(body).send()
    };

    let cases: Vec<(reqwest::Response, u16, &str)> = vec![
        (raw("{not json", "application/json").await.unwrap(), 400, "syntax"),
        (raw(r#"{"event_type":"a.b","payload":{}}"#, "text/plain").await.unwrap(), 415, "content type"),
        (raw(r#"{"payload":{}}"#, "application/json").await.unwrap(), 422, "missing event_type"),
        (raw(r#"{"event_type":"a.b"}"#, "application/json").await.unwrap(), 422, "missing payload"),
        (raw(r#"{"event_type":5,"payload":{}}"#, "application/json").await.unwrap(), 422, "wrong type"),
        (raw(r#"{"event_type":"a..b","payload":{}}"#, "application/json").await.unwrap(), 422, "bad event type"),
        (raw(r#"{"event_type":"a.b","payload":[1]}"#, "application/json").await.unwrap(), 422, "payload not object"),
        (raw(r#"{"event_type":"a.b","payload":{},"x":1}"#, "application/json").await.unwrap(), 422, "unknown field"),
        (
            raw(r#"{"event_type":"a.b","payload":{},"idempotency_key":""}"#, "application/json").await.unwrap(),
            422,
            "empty key",
        ),
    ];
    for (response, status, case) in cases {
        let answer_status = response.status().as_u16();
        let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(answer_status, status, "{case}: {body}");
        assert_eq!(content_type, "application/problem+json", "{case}");
        assert!(body["detail"].as_str().is_some_and(|d| !d.is_empty()), "{case}: {body}");
    }

    let big = json!({ "event_type": "a.b", "payload": { "blob": "x".repeat(300 * 1024) } });
    env.post("/v1/events", big).await.expect_problem(413);

    let detail = env.post("/v1/events", json!({ "event_type": "has space", "payload": {} })).await.expect_problem(422);
    assert!(detail.contains("event_type"), "the detail names the field: {detail}");

    assert_eq!(env.count("events").await, 0, "nothing written for any bad request");
    assert_eq!(env.count("outbox_messages").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_endpoint_definitions_are_refused_with_the_reason() {
    let env = TestEnv::start_with(relayops_tests::TestConfig { run_worker: false, ..Default::default() }).await;
    let cases = [
        (json!({ "url": "ftp://example.com/x", "event_types": ["a"] }), "url"),
        (json!({ "url": "https://u:p@example.com/", "event_types": ["a"] }), "credentials"),
        (json!({ "url": "https://example.com/", "event_types": [] }), "event_types"),
        (json!({ "url": "https://example.com/", "event_types": ["a.**"] }), "event_types"),
        (json!({ "url": "https://example.com/", "event_types": ["a"], "max_attempts": 0 }), "max_attempts"),
        (json!({ "url": "https://example.com/", "event_types": ["a"], "secret": "plain" }), "secret"),
    ];
    for (body, field) in cases {
        let detail = env.post("/v1/endpoints", body).await.expect_problem(422);
        assert!(detail.contains(field), "{detail} should mention {field}");
    }
    assert_eq!(env.count("webhook_endpoints").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_commits_its_valid_events_together_with_a_result_per_item() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/ok", &["order.*"], json!({})).await;
    let batch = json!({ "events": [
        { "event_type": "order.created", "payload": { "n": 1 } },
        { "event_type": "order.paid", "payload": { "n": 2 }, "idempotency_key": "k1" },
        { "event_type": "no spaces allowed", "payload": {} },
        { "event_type": "order.paid", "payload": { "n": 2 }, "idempotency_key": "k1" },
        { "event_type": "order.paid", "payload": { "n": 3 }, "idempotency_key": "k1" },
        { "event_type": "order.created", "payload": [] },
    ]});
    let answer = env.post("/v1/events/batch", batch).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let statuses: Vec<u64> =
        answer.body["results"].as_array().unwrap().iter().map(|r| r["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, [201, 201, 422, 200, 409, 422]);
    assert_eq!(
        (answer.body["accepted"].as_u64(), answer.body["duplicates"].as_u64(), answer.body["rejected"].as_u64()),
        (Some(2), Some(1), Some(3))
    );
    let results = answer.body["results"].as_array().unwrap();
    assert_eq!(results[1]["event"]["id"], results[3]["event"]["id"], "the repeat names the original event");
    assert!(results[2]["error"].as_str().unwrap().contains("event_type"));
    assert_eq!(env.count("events").await, 2);
    for result in &results[..2] {
        env.wait_for_status(result["event"]["id"].as_str().unwrap(), "delivered").await;
    }

    env.post("/v1/events/batch", json!({ "events": [] })).await.expect_problem(422);
    let too_many: Vec<_> = (0..501).map(|n| json!({ "event_type": "a.b", "payload": { "n": n } })).collect();
    env.post("/v1/events/batch", json!({ "events": too_many })).await.expect_problem(422);
    assert_eq!(env.count("events").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_transaction_fails_writes_nothing() {
    let env = TestEnv::start_with(relayops_tests::TestConfig { run_worker: false, ..Default::default() }).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    env.pool
        .get()
        .await
        .unwrap()
        .batch_execute(
            "CREATE FUNCTION relayops.fail_second() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN IF (SELECT count(*) FROM relayops.events) >= 2 THEN RAISE EXCEPTION 'injected'; END IF; RETURN NEW; END $$;
             CREATE TRIGGER fail_second BEFORE INSERT ON relayops.events FOR EACH ROW EXECUTE FUNCTION relayops.fail_second();",
        )
        .await
        .unwrap();
    let batch: Vec<_> = (0..5).map(|n| json!({ "event_type": "a.b", "payload": { "n": n } })).collect();
    env.post("/v1/events/batch", json!({ "events": batch })).await.expect_problem(500);
    assert_eq!(
        (env.count("events").await, env.count("deliveries").await, env.count("outbox_messages").await),
        (0, 0, 0)
    );
}

/// A large batch with distinct keys runs pipelined; each result still lines up
/// with its item: repeats of earlier events name them, a changed repeat is a
/// conflict, invalid items are refused, new ones are created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelined_batch_answers_every_item_in_its_own_place() {
    let env = TestEnv::start_with(relayops_tests::TestConfig { run_worker: false, ..Default::default() }).await;
    let first: Vec<_> = (0..60)
        .map(|n| json!({ "event_type": "a.b", "payload": { "n": n }, "idempotency_key": format!("k{n}") }))
        .collect();
    let answer = env.post("/v1/events/batch", json!({ "events": first })).await;
    assert_eq!(answer.body["accepted"], 60, "{:?}", answer.body);
    let original_ids: Vec<String> = answer.body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|result| result["event"]["id"].as_str().unwrap().to_owned())
        .collect();

    // Item i: i % 4 == 0 repeats event i/4 exactly, 1 reuses key k(i/4) for other
    // content, 2 is invalid, 3 is new.
    let second: Vec<_> = (0..200)
        .map(|i| match i % 4 {
            0 => json!({ "event_type": "a.b", "payload": { "n": i / 4 }, "idempotency_key": format!("k{}", i / 4) }),
            1 => {
                json!({ "event_type": "a.b", "payload": { "other": i }, "idempotency_key": format!("k{}", i / 4 + 50) })
            }
            2 => json!({ "event_type": "not valid", "payload": {} }),
            _ => json!({ "event_type": "a.b", "payload": { "new": i }, "idempotency_key": format!("new{i}") }),
        })
        .collect();
    let answer = env.post("/v1/events/batch", json!({ "events": second })).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let results = answer.body["results"].as_array().unwrap();
    assert_eq!(results.len(), 200);
    for (i, result) in results.iter().enumerate() {
        assert_eq!(result["index"], i, "results in item order");
        let (status, key_owner) = (result["status"].as_u64().unwrap(), i / 4);
        match i % 4 {
            0 => {
                assert_eq!(status, 200, "item {i}: {result}");
                assert_eq!(result["event"]["id"], original_ids[key_owner].as_str(), "item {i} names its original");
            }
            1 if key_owner + 50 < 60 => assert_eq!(status, 409, "item {i}: {result}"),
            1 => assert_eq!(status, 201, "item {i}: {result}"),
            2 => assert_eq!(status, 422, "item {i}: {result}"),
            _ => assert_eq!(status, 201, "item {i}: {result}"),
        }
    }
    let created = results.iter().filter(|result| result["status"] == 201).count() as i64;
    assert_eq!(env.count("events").await, 60 + created);
}

/// A payload whose compact JSON is exactly `bytes` long (`{"blob":"…"}`: 11
/// bytes around the string).
fn payload_of(bytes: usize) -> serde_json::Value {
    let payload = json!({ "blob": "x".repeat(bytes - 11) });
    assert_eq!(serde_json::to_vec(&payload).unwrap().len(), bytes);
    payload
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_of_exactly_256_kib_is_stored_and_one_byte_more_is_413() {
    let env = TestEnv::start_with(relayops_tests::TestConfig { run_worker: false, ..Default::default() }).await;
    const LIMIT: usize = 256 * 1024;
    let at_limit = env.post_event("a.b", payload_of(LIMIT)).await;
    assert_eq!(at_limit.status, 201, "{:?}", at_limit.body);
    let over = env.post_event_once("a.b", payload_of(LIMIT + 1)).await;
    let detail = over.expect_problem(413);
    assert!(detail.contains("262145 bytes") && detail.contains("262144"), "{detail}");
    assert_eq!(over.body["type"], "https://relayops.dev/problems/payload-too-large");

    let batch = json!({ "events": [
        { "event_type": "a.b", "payload": payload_of(LIMIT) },
        { "event_type": "a.b", "payload": payload_of(LIMIT + 1) },
    ]});
    let answer = env.post("/v1/events/batch", batch).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body["results"]);
    let results = &answer.body["results"];
    assert_eq!(results[0]["status"], 201, "{:?}", results[0]);
    assert_eq!(results[1]["status"], 413, "{:?}", results[1]["error"]);
    assert!(results[1]["error"].as_str().is_some_and(|e| e.contains("262145 bytes")), "{:?}", results[1]);
    assert_eq!((answer.body["accepted"].as_u64(), answer.body["rejected"].as_u64()), (Some(1), Some(1)));
    assert_eq!(env.count("events").await, 2, "the two payloads at the limit, nothing over it");
}

/// An API and database with no publisher or worker: what ingest wrote stays put.
async fn env_without_pipeline() -> TestEnv {
    TestEnv::start_with(relayops_tests::TestConfig { run_worker: false, run_publisher: false, ..Default::default() })
        .await
}

/// An event for the group-commit tests, with its key if any.
fn prepared(
    tenant: relayops_shared::ids::TenantId,
    event_type: &str,
    payload: serde_json::Value,
    key: Option<&str>,
) -> relayops_shared::repo::events::PreparedEvent {
    use relayops_shared::domain::{EventPayload, EventType, IdempotencyKey};
    let event_type = EventType::parse(event_type).unwrap();
    let payload = EventPayload::parse(payload).unwrap();
    let key = key.map(|key| IdempotencyKey::parse(key).unwrap());
    let event = relayops_shared::repo::events::NewEvent {
        event_type: &event_type,
        payload: &payload,
        idempotency_key: key.as_ref(),
        ordering_key: None,
    };
    relayops_shared::repo::events::PreparedEvent::new(tenant, &event)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_written_in_one_statement_are_each_answered_as_if_alone() {
    use relayops_shared::repo::events::IngestOutcome;
    let env = env_without_pipeline().await;
    env.create_endpoint("/sim/ok", &["order.*"], json!({})).await;
    env.create_endpoint("/sim/ok", &["order.paid"], json!({})).await;
    let earlier = env
        .post(
            "/v1/events",
            json!({ "event_type": "order.created", "payload": { "n": 0 }, "idempotency_key": "earlier" }),
        )
        .await;
    assert_eq!(earlier.status, 201);
    let tenant = env.tenant_id;
    let batch = vec![
        prepared(tenant, "order.created", json!({ "n": 1 }), Some("k1")),
        prepared(tenant, "order.created", json!({ "n": 1 }), Some("k1")),
        prepared(tenant, "order.created", json!({ "n": 2 }), Some("k1")),
        prepared(tenant, "order.paid", json!({ "n": 3 }), None),
        prepared(tenant, "order.created", json!({ "n": 0 }), Some("earlier")),
        prepared(tenant, "user.created", json!({ "n": 4 }), Some("k2")),
    ];
    let ids: Vec<_> = batch.iter().map(|event| event.id).collect();
    let client = env.pool.get().await.unwrap();
    let outcomes = relayops_shared::repo::event_batches::write(&client, batch).await.unwrap();
    let outcomes: Vec<IngestOutcome> = outcomes.into_iter().map(Result::unwrap).collect();

    let created = |index: usize| match &outcomes[index] {
        IngestOutcome::Created(receipt) => {
            assert_eq!(receipt.id, ids[index], "event {index} keeps the id it was given");
            receipt.deliveries
        }
        other => panic!("event {index}: expected Created, got {other:?}"),
    };
    assert_eq!(created(0), 1, "order.created matches order.* only");
    assert_eq!(created(3), 2, "order.paid matches both endpoints");
    assert_eq!(created(5), 0, "no endpoint takes user.created");
    match &outcomes[1] {
        IngestOutcome::Duplicate(receipt) => {
            assert_eq!(receipt.id, ids[0], "a repeat in the same batch names the first")
        }
        other => panic!("expected Duplicate, got {other:?}"),
    }
    match &outcomes[2] {
        IngestOutcome::KeyReused { original } => assert_eq!(*original, ids[0]),
        other => panic!("expected KeyReused, got {other:?}"),
    }
    match &outcomes[4] {
        IngestOutcome::Duplicate(receipt) => assert_eq!(receipt.id.to_string(), earlier.body["id"].as_str().unwrap()),
        other => panic!("expected Duplicate of the earlier event, got {other:?}"),
    }
    let counts = (env.count("events").await, env.count("deliveries").await, env.count("outbox_messages").await);
    assert_eq!(counts, (4, 4, 3), "the earlier event and three new ones; one outbox row per event with a delivery");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_the_database_refuses_fails_alone_and_the_rest_of_its_batch_is_written() {
    let env = env_without_pipeline().await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let tenant = env.tenant_id;
    // A tenant that does not exist: its event breaks the foreign key.
    let nobody = relayops_shared::ids::TenantId::new();
    let batch = vec![
        prepared(tenant, "a.b", json!({ "n": 1 }), Some("x1")),
        prepared(nobody, "a.b", json!({ "n": 2 }), Some("x2")),
        prepared(tenant, "a.b", json!({ "n": 3 }), None),
    ];
    let client = env.pool.get().await.unwrap();
    let outcomes = relayops_shared::repo::event_batches::write(&client, batch).await.unwrap();
    assert!(outcomes[0].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
    assert!(outcomes[1].is_err(), "{outcomes:?}");
    assert_eq!((env.count("events").await, env.count("deliveries").await), (2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_posts_with_shared_keys_get_one_event_per_key_and_their_own_answers() {
    let env = env_without_pipeline().await;
    env.create_endpoint("/sim/ok", &["order.created"], json!({})).await;
    // 20 keys posted twice at once with the same body, 10 keys twice with
    // different bodies, and 10 events without a key: 80 requests in flight.
    let mut requests = Vec::new();
    for n in 0..20 {
        for _ in 0..2 {
            requests.push(
                json!({ "event_type": "order.created", "payload": { "n": n }, "idempotency_key": format!("same-{n}") }),
            );
        }
    }
    for n in 0..10 {
        for variant in 0..2 {
            requests.push(json!({ "event_type": "order.created", "payload": { "n": n, "v": variant }, "idempotency_key": format!("clash-{n}") }));
        }
    }
    for n in 0..10 {
        requests.push(json!({ "event_type": "order.created", "payload": { "n": n } }));
    }
    let answers = futures_util::future::join_all(requests.into_iter().map(|body| env.post("/v1/events", body))).await;
    let statuses: Vec<u16> = answers.iter().map(|answer| answer.status).collect();
    for pair in statuses[..40].chunks(2).zip(answers[..40].chunks(2)) {
        let (mut status, answer) = (pair.0.to_vec(), pair.1);
        status.sort();
        assert_eq!(status, [200, 201], "one creates, the repeat gets it back: {:?}", answer[1].body);
        assert_eq!(answer[0].body["id"], answer[1].body["id"], "both name the same event");
    }
    for pair in statuses[40..60].chunks(2) {
        let mut status = pair.to_vec();
        status.sort();
        assert_eq!(status, [201, 409], "the second body under a used key is a conflict");
    }
    assert!(statuses[60..].iter().all(|&status| status == 201), "{statuses:?}");
    let counts = (env.count("events").await, env.count("deliveries").await, env.count("outbox_messages").await);
    assert_eq!(counts, (40, 40, 40), "one event per key, ten without a key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_events_in_a_shared_batch_take_their_lane_positions_in_request_order() {
    use relayops_shared::domain::OrderingKey;
    let env = env_without_pipeline().await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let tenant = env.tenant_id;
    let ordered = |n: u32| {
        let mut event = prepared(tenant, "order.updated", json!({ "n": n }), None);
        event.ordering_key = Some(OrderingKey::parse("order-1").unwrap().as_str().to_owned());
        event
    };
    let batch = vec![ordered(1), prepared(tenant, "order.viewed", json!({}), None), ordered(2), ordered(3)];
    let ids: Vec<String> = batch.iter().map(|event| event.id.to_string()).collect();
    let client = env.pool.get().await.unwrap();
    let outcomes = relayops_shared::repo::event_batches::write(&client, batch).await.unwrap();
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    let env = &env;
    let status = |id: &str| {
        let id = id.to_owned();
        async move {
            let answer = env.get(&format!("/v1/events/{id}/deliveries")).await;
            answer.body["data"][0]["status"].as_str().unwrap().to_owned()
        }
    };
    assert_eq!(status(&ids[0]).await, "pending", "the first of the key heads its lane");
    assert_eq!(status(&ids[1]).await, "pending", "an unordered event is not in a lane");
    assert_eq!(status(&ids[2]).await, "scheduled", "the second waits behind the first");
    assert_eq!(status(&ids[3]).await, "scheduled");
    let positions: Vec<(String, i64)> = client
        .query(
            "SELECT 'evt_' || replace(event_id::text, '-', ''), seq FROM relayops.ordering_lane_waiting ORDER BY seq",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let waiting: Vec<&str> = positions.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(waiting, [ids[2].as_str(), ids[3].as_str()], "positions follow the request order: {positions:?}");
}

/// An event costs the subscriptions that match its type, whatever else its
/// tenant has. For a tenant with 300 endpoints subscribed to other types, the
/// subscriber lookup every ingest statement runs, on its generic plan (as a
/// prepared statement runs), reads the matching subscriptions by tenant and
/// pattern and each endpoint by its id: not every subscription of the
/// tenant, filtered (what generic plans did with the patterns as one `= ANY`
/// array), nor every endpoint of the tenant per subscriber (what plans made
/// on small tables did with the tenant beside the endpoint's id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_subscribers_are_found_by_key_however_many_endpoints_its_tenant_has() {
    use relayops_shared::repo::events::explain_subscribers;
    let env = env_without_pipeline().await;
    let mut client = env.pool.get().await.unwrap();
    client
        .execute(
            "WITH filler AS (
                 INSERT INTO relayops.webhook_endpoints (id, tenant_id, url, secret)
                 SELECT gen_random_uuid(), $1, 'http://127.0.0.1:9/' || n, 'whsec_filler' FROM generate_series(1, 300) n
                 RETURNING id, tenant_id)
             INSERT INTO relayops.endpoint_subscriptions (id, tenant_id, endpoint_id, event_type_pattern)
             SELECT gen_random_uuid(), tenant_id, id, 'other' || row_number() OVER () || '.*' FROM filler",
            &[&env.tenant_id.as_uuid()],
        )
        .await
        .unwrap();
    env.create_endpoint("/sim/ok", &["order.created"], json!({})).await;
    env.create_endpoint("/sim/ok", &["order.*", "*"], json!({})).await;
    env.create_endpoint("/sim/ok", &["order.paid"], json!({})).await;
    let disabled = env.create_endpoint("/sim/ok", &["order.*"], json!({})).await;
    let path = format!("/v1/endpoints/{}", disabled["id"].as_str().unwrap());
    let off = env.request(reqwest::Method::PATCH, &path, Some(&env.api_key), Some(json!({ "enabled": false }))).await;
    assert_eq!(off.status, 200, "{:?}", off.body);

    let plan = explain_subscribers(&mut client, env.tenant_id, "order.created").await.unwrap();
    let root = &plan[0]["Plan"];
    assert_eq!(root["Actual Rows"], 2, "the two enabled subscribers, one matched by two patterns\n{plan:#}");
    let mut reads = Vec::new();
    table_reads(root, &mut reads);
    let subscriptions: Vec<_> = reads.iter().filter(|read| read.relation == "endpoint_subscriptions").collect();
    let endpoints: Vec<_> = reads.iter().filter(|read| read.relation == "webhook_endpoints").collect();
    assert!(!subscriptions.is_empty() && !endpoints.is_empty(), "{reads:?}\n{plan:#}");
    for read in subscriptions {
        let by_pattern = read.kind.starts_with("Index") && read.condition.contains("event_type_pattern =");
        assert!(by_pattern && read.filtered_out == 0, "subscriptions sought by tenant and pattern: {read:?}\n{plan:#}");
    }
    for read in endpoints {
        assert_eq!(read.index, "webhook_endpoints_pkey", "each endpoint found by its id: {read:?}\n{plan:#}");
    }
}

/// One step of a plan that reads a table.
#[derive(Debug)]
struct TableRead {
    relation: String,
    kind: String,
    index: String,
    condition: String,
    /// Rows it read and dropped (`Rows Removed by Filter`).
    filtered_out: u64,
}

/// Every step of `node`'s plan that reads a table.
fn table_reads(node: &serde_json::Value, reads: &mut Vec<TableRead>) {
    let text = |key: &str| node.get(key).and_then(serde_json::Value::as_str).unwrap_or_default().to_owned();
    if !text("Relation Name").is_empty() {
        reads.push(TableRead {
            relation: text("Relation Name"),
            kind: text("Node Type"),
            index: text("Index Name"),
            condition: text("Index Cond"),
            filtered_out: node.get("Rows Removed by Filter").and_then(serde_json::Value::as_u64).unwrap_or_default(),
        });
    }
    for child in node.get("Plans").and_then(serde_json::Value::as_array).into_iter().flatten() {
        table_reads(child, reads);
    }
}
