//! Endpoint health (issue 16, SPEC §10): a rolling record of outcomes kept off
//! the hot path, automatic disabling after a window of nothing but failures,
//! re-enabling with one PATCH, and operational webhooks that tell the tenant
//! about it — signed, through the same pipeline, never looping — whether the
//! API or the console switched it.
use std::time::Duration;

use relayops_shared::domain::SigningSecret;
use relayops_shared::signing;
use relayops_simulator::{Received, Simulator};
use relayops_tests::console::ConsoleClient;
use relayops_tests::{eventually, start_receiver, TestConfig, TestEnv, WAIT};
use serde_json::{json, Value};

/// Creates an operational endpoint on `receiver` (a simulator of its own)
/// and registers its secret there only; returns (endpoint, secret).
async fn operational_endpoint(env: &TestEnv, receiver: &Simulator, url: &str, event_types: &[&str]) -> (Value, String) {
    let extra = json!({ "kind": "operational", "max_attempts": 1 });
    let endpoint = env.create_endpoint_on(receiver, url, event_types, extra).await;
    assert_eq!(endpoint["kind"], "operational");
    let secret = endpoint["secret"].as_str().unwrap().to_owned();
    (endpoint, secret)
}

/// The request verifies against `secret`, as any Standard Webhooks receiver checks it.
fn assert_signed_with(request: &Received, secret: &str) {
    let secret = SigningSecret::parse(secret).unwrap();
    let id = request.webhook_id.as_deref().expect("webhook-id");
    let timestamp: i64 = request.webhook_timestamp.as_deref().expect("webhook-timestamp").parse().unwrap();
    let header = request.webhook_signature.as_deref().expect("webhook-signature");
    assert!(signing::verify(&secret, id, timestamp, request.raw_body.as_bytes(), header), "{request:?}");
    assert_eq!(request.signature_valid, Some(true), "the receiver verified it too");
}

/// The first request of `event_type` that reached `path` on the receiver.
async fn wait_for_type(receiver: &Simulator, path: &str, event_type: &str) -> Received {
    let wanted = |r: &Received| r.path == path && r.event_type.as_deref() == Some(event_type);
    let all = receiver.wait_until(WAIT, |all| all.iter().any(wanted)).await;
    all.into_iter().find(wanted).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_learns_from_an_operational_webhook_that_its_failing_endpoint_was_disabled() {
    let mut config = TestConfig::default();
    config.worker.endpoint_disable_after = Duration::from_secs(2);
    let env = TestEnv::start_with(config).await;
    let (ops, ops_url) = start_receiver().await;
    let (operational, ops_secret) = operational_endpoint(&env, &ops, &format!("{ops_url}/sim/ok"), &["*"]).await;
    // Subscribed to everything, so it would also get operational events if
    // they leaked to ordinary endpoints.
    let failing =
        env.create_endpoint("/sim/status/500", &["*"], json!({ "max_attempts": 50, "retry_schedule_secs": [1] })).await;
    let failing_id = failing["id"].as_str().unwrap();
    assert_eq!(failing["health"]["status"], "unknown", "no attempt yet");

    let event = env.post_event("order.created", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();

    // Every attempt fails; after 2 s of that the endpoint is disabled, and the
    // delivery is settled `failed` without another send (the disabled path).
    let path = format!("/v1/endpoints/{failing_id}");
    let disabled = eventually(WAIT, || async {
        let answer = env.get(&path).await;
        match answer.body["enabled"] {
            Value::Bool(false) => Ok(answer.body),
            _ => Err(format!("still enabled: {:?}", answer.body)),
        }
    })
    .await;
    let reason = disabled["disabled_reason"].as_str().unwrap();
    assert!(reason.contains("every attempt failed for 2 s"), "{reason}");
    assert_eq!(disabled["health"]["status"], "disabled");
    assert!(disabled["health"]["failing_since"].is_string(), "{disabled:?}");
    assert!(disabled["health"]["last_failure_at"].is_string());
    assert!(disabled["health"]["last_success_at"].is_null());
    let delivery = env.wait_for_status(&event, "failed").await;
    assert_eq!(delivery["last_error"], "endpoint disabled");
    assert!(delivery["attempt_count"].as_i64().unwrap() >= 3, "it failed for the whole window first: {delivery:?}");

    // The tenant is told, signed with the operational endpoint's own secret.
    let told = wait_for_type(&ops, "/sim/ok", "endpoint.disabled").await;
    assert_signed_with(&told, &ops_secret);
    assert_eq!(told.body["type"], "endpoint.disabled");
    assert_eq!(told.body["tenant_id"], env.tenant_id.to_string());
    assert_eq!(told.body["data"]["endpoint_id"], failing_id);
    assert_eq!(told.body["data"]["disabled_by"], "health");
    assert_eq!(told.body["data"]["reason"], reason);
    assert!(told.body["data"]["failing_since"].is_string());

    // One PATCH re-enables it and clears the failing state; the tenant hears that too.
    let enabled =
        env.request(reqwest::Method::PATCH, &path, Some(&env.api_key), Some(json!({ "enabled": true }))).await;
    assert_eq!(enabled.status, 200, "{:?}", enabled.body);
    assert_eq!(enabled.body["enabled"], true);
    assert!(enabled.body["disabled_reason"].is_null());
    assert!(enabled.body["health"]["failing_since"].is_null());
    assert_eq!(enabled.body["health"]["status"], "unknown", "no attempt since it was re-enabled");
    let back = wait_for_type(&ops, "/sim/ok", "endpoint.enabled").await;
    assert_signed_with(&back, &ops_secret);
    assert_eq!(back.body["data"]["endpoint_id"], failing_id);

    // Operational events never went to the ordinary endpoint, and nothing
    // about the operational endpoint itself was emitted.
    let ordinary: Vec<_> = env.simulator.received().into_iter().filter_map(|r| r.event_type).collect();
    assert!(ordinary.iter().all(|t| t == "order.created"), "{ordinary:?}");
    let operational_id = operational["id"].as_str().unwrap();
    assert!(ops.received().iter().all(|r| r.body["data"]["endpoint_id"] != operational_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_deliveries_are_reported_once_and_operational_failures_never_loop() {
    let env = TestEnv::start().await;
    let (ops, ops_url) = start_receiver().await;
    let (_, ops_secret) = operational_endpoint(&env, &ops, &format!("{ops_url}/sim/ok"), &["delivery.dead"]).await;
    // A second operational endpoint that fails every delivery (one attempt each):
    // its own dead letters must produce no operational events, to it or to the other.
    let (broken, _) = operational_endpoint(&env, &ops, &format!("{ops_url}/sim/status/500"), &["*"]).await;
    let broken_id = broken["id"].as_str().unwrap().to_owned();
    let ordinary = env.create_endpoint("/sim/status/503", &["order.*"], json!({ "max_attempts": 1 })).await;

    let event = env.post_event("order.created", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();
    let dead = env.wait_for_status(&event, "dead").await;

    let told = wait_for_type(&ops, "/sim/ok", "delivery.dead").await;
    assert_signed_with(&told, &ops_secret);
    assert_eq!(told.body["data"]["delivery_id"], dead["id"]);
    assert_eq!(told.body["data"]["event_id"], event);
    assert_eq!(told.body["data"]["event_type"], "order.created");
    assert_eq!(told.body["data"]["endpoint_id"], ordinary["id"]);
    assert_eq!(told.body["data"]["attempts"], 1);
    assert_eq!(told.body["data"]["last_http_status"], 503);

    // The broken operational endpoint's copy dies too; when it has, any event
    // its death could have caused would exist (it commits with the death).
    let broken_dead = format!("/v1/deliveries?endpoint_id={broken_id}&status=dead");
    eventually(WAIT, || async {
        let answer = env.get(&broken_dead).await;
        let count = answer.body["data"].as_array().map_or(0, Vec::len);
        if count == 1 {
            Ok(())
        } else {
            Err(format!("{answer:?}"))
        }
    })
    .await;
    let reported = env.get("/v1/events?event_type=delivery.dead").await;
    assert_eq!(reported.body["data"].as_array().unwrap().len(), 1, "one report, no loop: {:?}", reported.body);
    let to_ops: Vec<_> = ops.received().into_iter().filter(|r| r.path == "/sim/ok").collect();
    assert_eq!(to_ops.len(), 1, "{to_ops:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_endpoint_gets_no_health_write_per_delivery() {
    let env = TestEnv::start().await;
    let endpoint = env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let id = endpoint["id"].as_str().unwrap();
    let first = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    env.wait_for_status(&first, "delivered").await;
    // The health write follows the attempt's record, after the delivery shows delivered.
    let healthy = eventually(WAIT, || async {
        let answer = env.get(&format!("/v1/endpoints/{id}")).await;
        match answer.body["health"]["status"].as_str() {
            Some("healthy") => Ok(answer.body),
            _ => Err(format!("{:?}", answer.body)),
        }
    })
    .await;
    assert!(healthy["health"]["last_success_at"].is_string());
    assert!(healthy["health"]["failing_since"].is_null());

    // The row's version (xmin) changes with every write to it.
    let version = || async {
        let client = env.pool.get().await.unwrap();
        let uuid = id.parse::<relayops_shared::ids::EndpointId>().unwrap().as_uuid();
        let rows = client
            .query_typed(
                "SELECT xmin::text FROM relayops.webhook_endpoints WHERE id = $1",
                &[(&uuid, tokio_postgres::types::Type::UUID)],
            )
            .await
            .unwrap();
        rows[0].get::<_, String>(0)
    };
    let before = version().await;
    for n in 0..20 {
        let event = env.post_event("a.b", json!({ "n": n })).await.body["id"].as_str().unwrap().to_owned();
        env.wait_for_status(&event, "delivered").await;
    }
    assert_eq!(version().await, before, "20 successes wrote nothing to the endpoint row");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operational_endpoints_take_only_operational_types_and_never_tenant_events() {
    let env = TestEnv::start().await;
    let (ops, ops_url) = start_receiver().await;
    let url = format!("{ops_url}/sim/ok");
    let refused =
        env.post("/v1/endpoints", json!({ "url": url, "event_types": ["order.*"], "kind": "operational" })).await;
    assert!(refused.expect_problem(422).contains("operational"), "{:?}", refused.body);
    let bad_kind = env.post("/v1/endpoints", json!({ "url": url, "event_types": ["*"], "kind": "audit" })).await;
    bad_kind.expect_problem(422);
    let (endpoint, _) = operational_endpoint(&env, &ops, &url, &["endpoint.*"]).await;
    let subscriptions = format!("/v1/endpoints/{}/subscriptions", endpoint["id"].as_str().unwrap());
    env.post(&subscriptions, json!({ "event_type": "order.created" })).await.expect_problem(422);
    assert_eq!(env.post(&subscriptions, json!({ "event_type": "delivery.dead" })).await.status, 201);

    // A tenant's own event named like an operational one reaches no operational endpoint.
    let posted = env.post_event("endpoint.disabled", json!({ "spoof": true })).await;
    assert_eq!(posted.status, 201);
    assert_eq!(posted.body["deliveries"], 0, "{:?}", posted.body);
    assert_eq!(env.count("deliveries").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_receiver_and_an_operator_disabling_are_reported_with_who_did_it() {
    let env = TestEnv::start().await;
    let (ops, ops_url) = start_receiver().await;
    let (_, ops_secret) = operational_endpoint(&env, &ops, &format!("{ops_url}/sim/ok"), &["endpoint.disabled"]).await;
    let gone = env.create_endpoint("/sim/status/410", &["order.*"], json!({})).await;
    let event = env.post_event("order.created", json!({})).await.body["id"].as_str().unwrap().to_owned();
    env.wait_for_status(&event, "failed").await;
    let told = wait_for_type(&ops, "/sim/ok", "endpoint.disabled").await;
    assert_signed_with(&told, &ops_secret);
    assert_eq!(told.body["data"]["endpoint_id"], gone["id"]);
    assert_eq!(told.body["data"]["disabled_by"], "receiver_gone");
    assert_eq!(told.body["data"]["reason"], "receiver answered 410 Gone");

    let other = env.create_endpoint("/sim/ok", &["order.*"], json!({})).await;
    let path = format!("/v1/endpoints/{}", other["id"].as_str().unwrap());
    let off = json!({ "enabled": false });
    assert_eq!(env.request(reqwest::Method::PATCH, &path, Some(&env.api_key), Some(off.clone())).await.status, 200);
    // Disabling a disabled endpoint again switches nothing and reports nothing.
    assert_eq!(env.request(reqwest::Method::PATCH, &path, Some(&env.api_key), Some(off)).await.status, 200);
    let reports = ops.wait_until(WAIT, |all| all.len() >= 2).await;
    assert_eq!(reports[1].body["data"]["endpoint_id"], other["id"]);
    assert_eq!(reports[1].body["data"]["disabled_by"], "operator");
    let listed = env.get("/v1/events?event_type=endpoint.disabled").await;
    assert_eq!(listed.body["data"].as_array().unwrap().len(), 2, "{:?}", listed.body);
    assert_eq!(ops.received().len(), 2, "the second PATCH reported nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_disabled_in_the_console_is_reported_as_by_an_operator() {
    let env = TestEnv::start().await;
    let (ops, ops_url) = start_receiver().await;
    let (_, ops_secret) = operational_endpoint(&env, &ops, &format!("{ops_url}/sim/ok"), &["endpoint.disabled"]).await;
    let endpoint = env.create_endpoint("/sim/ok", &["order.*"], json!({})).await;
    let endpoint_id = endpoint["id"].as_str().unwrap();
    let console = ConsoleClient::sign_in(&env.api_url, &env.admin_email, &env.admin_password).await;
    let csrf = console.csrf().await;
    let answer = console
        .post(&format!("/console/endpoints/{endpoint_id}/enabled"), &[("csrf", &csrf), ("enabled", "false")])
        .await;
    assert_eq!(answer.status(), 303, "{:?}", answer.text().await);
    assert_eq!(env.get(&format!("/v1/endpoints/{endpoint_id}")).await.body["enabled"], false);

    let told = wait_for_type(&ops, "/sim/ok", "endpoint.disabled").await;
    assert_signed_with(&told, &ops_secret);
    assert_eq!(told.body["data"]["endpoint_id"], endpoint["id"]);
    assert_eq!(told.body["data"]["disabled_by"], "operator");
}

/// Health is advice, not a promise: while its write fails, deliveries are
/// still delivered and recorded; the next attempt after the fault makes the
/// write again (the worker does not remember a write that never committed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_health_write_loses_no_delivery_and_is_made_again_by_the_next_attempt() {
    let env = TestEnv::start().await;
    let endpoint = env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let id = endpoint["id"].as_str().unwrap();
    let client = env.pool.get().await.unwrap();
    client
        .batch_execute(
            "CREATE FUNCTION relayops.fail_health() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN RAISE EXCEPTION 'injected health write failure'; END $$;
             CREATE TRIGGER fail_health BEFORE UPDATE OF last_success_at, last_failure_at
               ON relayops.webhook_endpoints FOR EACH ROW EXECUTE FUNCTION relayops.fail_health();",
        )
        .await
        .unwrap();
    let mut events = Vec::new();
    for n in 0..5 {
        events.push(env.post_event("a.b", json!({ "n": n })).await.body["id"].as_str().unwrap().to_owned());
    }
    for event in &events {
        let delivery = env.wait_for_status(event, "delivered").await;
        let attempts = env.get(&format!("/v1/deliveries/{}/attempts", delivery["id"].as_str().unwrap())).await;
        assert_eq!(attempts.body["data"][0]["http_status"], 200, "{:?}", attempts.body);
    }
    let unwritten = env.get(&format!("/v1/endpoints/{id}")).await.body;
    assert!(unwritten["health"]["last_success_at"].is_null(), "the write failed: {unwritten:?}");

    client.batch_execute("DROP TRIGGER fail_health ON relayops.webhook_endpoints").await.unwrap();
    let after = env.post_event("a.b", json!({ "n": "after" })).await.body["id"].as_str().unwrap().to_owned();
    env.wait_for_status(&after, "delivered").await;
    eventually(WAIT, || async {
        let answer = env.get(&format!("/v1/endpoints/{id}")).await;
        match answer.body["health"]["status"].as_str() {
            Some("healthy") if answer.body["health"]["last_success_at"].is_string() => Ok(()),
            _ => Err(format!("{:?}", answer.body)),
        }
    })
    .await;
}
