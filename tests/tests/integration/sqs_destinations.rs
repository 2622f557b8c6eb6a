//! Endpoints whose destination is an Amazon SQS queue, against moto's SQS
//! server: the worker sends each delivery as one message (the body as a
//! webhook's, the webhook's headers as attributes, signed), a FIFO queue's
//! grouped by ordering key and deduplicated by delivery id; a queue that does
//! not exist fails the delivery at once and replay sends it once it does; a
//! service that cannot be reached is retried. Endpoints name real AWS queue
//! URLs; the worker's test-only endpoint override sends their calls to moto.
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use axum::response::IntoResponse;
use relayops_shared::config::{AwsIdentity, AwsKeys, ContainerToken};
use relayops_shared::domain::SigningSecret;
use relayops_shared::signing;
use relayops_tests::console::ConsoleClient;
use relayops_tests::moto::{free_port, FaultyFront, FrontPlan, MotoServer, ServiceFault};
use relayops_tests::{TestConfig, TestEnv, WAIT};
use serde_json::{json, Value};

/// moto's account.
const ACCOUNT: &str = "123456789012";

/// The queue URL AWS would give for `name` in us-east-1.
fn aws_queue_url(name: &str) -> String {
    format!("https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/{name}")
}

/// The default test configuration, with the worker's AWS calls sent to
/// `endpoint` and test credentials (moto takes any).
fn sending_to(endpoint: &str) -> TestConfig {
    let mut config = TestConfig::default();
    config.worker.aws_destination_endpoint = Some(endpoint.to_owned());
    let keys = AwsKeys { access_key_id: "test".into(), secret_access_key: "test".into(), session_token: None };
    config.worker.aws_identity = Some(AwsIdentity::Keys(keys));
    config
}

/// Creates an `aws_sqs` endpoint for `name`'s queue; answers the creation body.
async fn sqs_endpoint(env: &TestEnv, name: &str, extra: Value) -> Value {
    let mut body = json!({ "url": aws_queue_url(name), "destination": "aws_sqs", "event_types": ["*"] });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    let answer = env.post("/v1/endpoints", body).await;
    assert_eq!(answer.status, 201, "{:?}", answer.body);
    answer.body
}

/// Posts `count` `order.created` events, then waits until each is delivered.
async fn post_delivered(env: &TestEnv, count: usize) {
    let mut events = Vec::new();
    for n in 0..count {
        events.push(env.post_event("order.created", json!({ "n": n })).await.body["id"].as_str().unwrap().to_owned());
    }
    for event in &events {
        env.wait_for_status(event, "delivered").await;
    }
}

fn attribute<'a>(message: &'a Message, name: &str) -> &'a str {
    let attributes = message.message_attributes().unwrap_or_else(|| panic!("no attributes: {message:?}"));
    attributes.get(name).and_then(|value| value.string_value()).unwrap_or_else(|| panic!("no {name}: {message:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqs_destination_gets_each_event_once_signed_with_the_webhook_headers_as_attributes() {
    let moto = MotoServer::start().await;
    let queue = moto.create_queue("orders").await;
    let env = TestEnv::start_with(sending_to(&moto.endpoint)).await;
    let endpoint = sqs_endpoint(&env, "orders", json!({})).await;
    assert_eq!(endpoint["destination"], "aws_sqs");
    assert_eq!(endpoint["url"], aws_queue_url("orders"));
    let secret = SigningSecret::parse(endpoint["secret"].as_str().unwrap()).unwrap();

    let mut events = Vec::new();
    for n in 0..3 {
        let id = env.post_event("order.created", json!({ "n": n, "note": "ünïcode" })).await.body["id"]
            .as_str()
            .unwrap()
            .to_owned();
        events.push(id);
    }
    let mut deliveries = Vec::new();
    for event in &events {
        deliveries.push(env.wait_for_status(event, "delivered").await);
    }
    let messages = moto.receive(&queue, 3).await;
    for delivery in &deliveries {
        let id = delivery["id"].as_str().unwrap();
        let message = messages
            .iter()
            .find(|message| attribute(message, signing::HEADER_ID) == id)
            .unwrap_or_else(|| panic!("no message for {id}: {messages:?}"));
        let body = message.body().unwrap();
        let event = env.get(&format!("/v1/events/{}", delivery["event_id"].as_str().unwrap())).await;
        assert_eq!(serde_json::from_str::<Value>(body).unwrap(), event.body["payload"], "the payload as posted");
        assert_eq!(attribute(message, signing::HEADER_DELIVERY_ID), id);
        assert_eq!(attribute(message, signing::HEADER_EVENT_TYPE), "order.created");
        assert_eq!(attribute(message, signing::HEADER_ATTEMPT), "1");
        let timestamp: i64 = attribute(message, signing::HEADER_TIMESTAMP).parse().unwrap();
        let signature = attribute(message, signing::HEADER_SIGNATURE);
        assert!(
            signing::verify(&secret, id, timestamp, body.as_bytes(), signature),
            "signed over the body: {message:?}"
        );

        let attempts = env.get(&format!("/v1/deliveries/{id}/attempts")).await;
        let attempts = attempts.body["data"].as_array().unwrap().clone();
        assert_eq!(attempts.len(), 1, "{attempts:?}");
        let response: Value = serde_json::from_str(attempts[0]["response_body"].as_str().unwrap()).unwrap();
        assert_eq!(response["message_id"].as_str(), message.message_id(), "the attempt names SQS's message id");
    }
    assert!(moto.is_empty(&queue).await, "nothing sent twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_queue_gets_the_ordering_key_as_group_and_the_delivery_id_as_deduplication_id() {
    let moto = MotoServer::start().await;
    let queue = moto.create_fifo_queue("orders.fifo").await;
    let env = TestEnv::start_with(sending_to(&moto.endpoint)).await;
    sqs_endpoint(&env, "orders.fifo", json!({})).await;
    let mut events = Vec::new();
    for n in 0..4 {
        let answer = env
            .post(
                "/v1/events",
                json!({ "event_type": "order.updated", "payload": { "n": n }, "ordering_key": "order-7" }),
            )
            .await;
        assert_eq!(answer.status, 201, "{:?}", answer.body);
        events.push(answer.body["id"].as_str().unwrap().to_owned());
    }
    let unordered = env.post_event("order.created", json!({ "n": 99 })).await.body["id"].as_str().unwrap().to_owned();
    for event in events.iter().chain([&unordered]) {
        env.wait_for_status(event, "delivered").await;
    }
    let messages = moto.receive(&queue, 5).await;
    let system = |message: &Message, name: MessageSystemAttributeName| {
        message.attributes().and_then(|attributes| attributes.get(&name)).cloned().unwrap_or_default()
    };
    let mut ordered_payloads = Vec::new();
    for message in &messages {
        let delivery = attribute(message, signing::HEADER_ID);
        assert_eq!(system(message, MessageSystemAttributeName::MessageDeduplicationId), delivery);
        let payload: Value = serde_json::from_str(message.body().unwrap()).unwrap();
        let group = system(message, MessageSystemAttributeName::MessageGroupId);
        if payload["n"] == 99 {
            assert_eq!(group, delivery, "an event without an ordering key is a group of its own");
        } else {
            assert_eq!(group, "order-7");
            ordered_payloads.push(payload["n"].as_i64().unwrap());
        }
    }
    assert_eq!(ordered_payloads, vec![0, 1, 2, 3], "the lane's events in the order posted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_that_does_not_exist_fails_the_delivery_at_once_and_replay_sends_it_once_it_does() {
    let moto = MotoServer::start().await;
    let env = TestEnv::start_with(sending_to(&moto.endpoint)).await;
    sqs_endpoint(&env, "not-yet", json!({ "max_attempts": 10 })).await;
    let event = env.post_event("order.created", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();
    let failed = env.wait_for_status(&event, "failed").await;
    assert_eq!(failed["last_http_status"], 400);
    let id = failed["id"].as_str().unwrap();
    let attempts = env.get(&format!("/v1/deliveries/{id}/attempts")).await.body["data"].as_array().unwrap().clone();
    assert_eq!(attempts.len(), 1, "refused for good, not retried: {attempts:?}");
    let error = attempts[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("aws_sqs") && error.contains("NonExistentQueue"), "names the service's code: {error}");

    let queue = moto.create_queue("not-yet").await;
    let replay = env.post(&format!("/v1/deliveries/{id}/replay"), json!({})).await;
    assert!(replay.status < 300, "{:?}", replay.body);
    env.wait_for_status(&event, "delivered").await;
    let messages = moto.receive(&queue, 1).await;
    assert_eq!(attribute(&messages[0], signing::HEADER_ID), id, "the same delivery id after replay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqs_service_that_cannot_be_reached_is_retried_until_it_answers() {
    // The service's address is known but nothing listens there yet.
    let port = free_port();
    let env = TestEnv::start_with(sending_to(&format!("http://127.0.0.1:{port}"))).await;
    sqs_endpoint(&env, "later", json!({ "retry_schedule_secs": [1], "max_attempts": 50 })).await;
    let event = env.post_event("order.created", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();
    let waiting = env
        .wait_for_deliveries_within(&event, WAIT, |all| {
            all.len() == 1 && all[0]["status"] == "scheduled" && all[0]["attempt_count"].as_i64() >= Some(1)
        })
        .await;
    let id = waiting[0]["id"].as_str().unwrap().to_owned();
    let attempts = env.get(&format!("/v1/deliveries/{id}/attempts")).await.body["data"].as_array().unwrap().clone();
    assert!(attempts[0]["error"].as_str().unwrap_or_default().starts_with("aws_sqs"), "{attempts:?}");

    let moto = MotoServer::start_on(port).await;
    let queue = moto.create_queue("later").await;
    env.wait_for_status(&event, "delivered").await;
    let messages = moto.receive(&queue, 1).await;
    assert_eq!(attribute(&messages[0], signing::HEADER_ID), id);
    let attempt: i64 = attribute(&messages[0], signing::HEADER_ATTEMPT).parse().unwrap();
    assert!(attempt >= 2, "sent by a retry: attempt {attempt}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_or_failing_sqs_service_is_retried_and_the_attempts_name_its_codes() {
    let moto = MotoServer::start().await;
    let queue = moto.create_queue("busy").await;
    let faults = vec![
        ServiceFault { status: 500, code: "InternalError" },
        // SQS throttles with a 400: retried by its code, not its status.
        ServiceFault { status: 400, code: "ThrottlingException" },
    ];
    let front = FaultyFront::start(&moto, FrontPlan { faults, ..FrontPlan::default() }).await;
    let env = TestEnv::start_with(sending_to(&front.endpoint)).await;
    sqs_endpoint(&env, "busy", json!({ "retry_schedule_secs": [1] })).await;
    let event = env.post_event("order.created", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();
    let delivered = env.wait_for_status(&event, "delivered").await;
    let id = delivered["id"].as_str().unwrap();
    let attempts = env.get(&format!("/v1/deliveries/{id}/attempts")).await.body["data"].as_array().unwrap().clone();
    let seen: Vec<(Value, String)> = attempts
        .iter()
        .map(|attempt| (attempt["http_status"].clone(), attempt["error"].as_str().unwrap_or_default().to_owned()))
        .collect();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[0].0, 500);
    assert!(seen[0].1.contains("InternalError"), "{seen:?}");
    assert_eq!(seen[1].0, 400);
    assert!(seen[1].1.contains("ThrottlingException"), "{seen:?}");
    assert_eq!(seen[2], (json!(200), String::new()));
    let messages = moto.receive(&queue, 1).await;
    assert_eq!(attribute(&messages[0], signing::HEADER_ATTEMPT), "3");
    assert_eq!(front.calls(), 3, "one call per attempt: the SDK itself does not retry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqs_queue_that_denies_access_fails_the_delivery_at_once() {
    let moto = MotoServer::start().await;
    let denied = FrontPlan {
        faults: vec![ServiceFault { status: 403, code: "AccessDenied" }],
        repeat_last: true,
        ..FrontPlan::default()
    };
    let front = FaultyFront::start(&moto, denied).await;
    let env = TestEnv::start_with(sending_to(&front.endpoint)).await;
    sqs_endpoint(&env, "locked", json!({ "retry_schedule_secs": [1] })).await;
    let event = env.post_event("order.created", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();
    let failed = env.wait_for_status(&event, "failed").await;
    assert_eq!(failed["last_http_status"], 403);
    assert!(failed["last_error"].as_str().unwrap().contains("AccessDenied"), "{failed:?}");
    assert_eq!(failed["attempt_count"], 1, "not retried");
    assert_eq!(front.calls(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqs_destination_takes_only_an_aws_queue_url_at_creation_and_on_patch() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..TestConfig::default() }).await;
    for url in [
        format!("{}/sim/ok", env.simulator_url),
        format!("https://sqs.us-east-1.amazonaws.com.evil.example/{ACCOUNT}/q"),
        format!("http://sqs.us-east-1.amazonaws.com/{ACCOUNT}/q"),
        "https://sqs.us-east-1.amazonaws.com/42/q".to_owned(),
    ] {
        let body = json!({ "url": url, "destination": "aws_sqs", "event_types": ["*"] });
        let detail = env.post("/v1/endpoints", body).await.expect_problem(422);
        assert!(detail.contains("url"), "names the field for {url}: {detail}");
    }
    assert_eq!(env.count("webhook_endpoints").await, 0, "nothing written");
    let unknown = json!({ "url": aws_queue_url("q"), "destination": "carrier_pigeon", "event_types": ["*"] });
    let answer = env.post("/v1/endpoints", unknown).await;
    assert!((400..500).contains(&answer.status), "{:?}", answer.body);

    let endpoint = sqs_endpoint(&env, "q", json!({})).await;
    let path = format!("/v1/endpoints/{}", endpoint["id"].as_str().unwrap());
    let patch = |body| env.request(reqwest::Method::PATCH, &path, Some(&env.api_key), Some(body));
    patch(json!({ "url": format!("{}/sim/ok", env.simulator_url) })).await.expect_problem(422);
    let moved = patch(json!({ "url": aws_queue_url("other") })).await;
    assert_eq!(moved.status, 200, "{:?}", moved.body);
    assert_eq!(moved.body["url"], aws_queue_url("other"));
    assert_eq!(moved.body["destination"], "aws_sqs");
    let listed = env.get("/v1/endpoints").await;
    assert_eq!(listed.body["data"][0]["destination"], "aws_sqs");

    // The console says where the endpoint's deliveries go.
    let console = ConsoleClient::sign_in(&env.api_url, &env.admin_email, &env.admin_password).await;
    let (status, list) = console.get("/console/endpoints").await;
    assert_eq!(status, 200);
    assert!(list.contains(">SQS</span>"), "{list}");
    let (status, page) = console.get(&format!("/console/endpoints/{}", endpoint["id"].as_str().unwrap())).await;
    assert_eq!(status, 200);
    assert!(page.contains("Amazon SQS queue in us-east-1"), "{page}");
}

/// A worker killed after SQS took the message but before the attempt was
/// recorded loses nothing: another worker sends it again once the lease ends.
/// A standard queue then holds it twice with one `webhook-id` (at least once:
/// consumers deduplicate on it); a FIFO queue drops the second by its
/// deduplication id (the delivery id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_send_to_sqs_loses_nothing_and_a_fifo_queue_drops_the_resend() {
    let moto = MotoServer::start().await;
    let standard = moto.create_queue("killed").await;
    let fifo = moto.create_fifo_queue("killed.fifo").await;
    // The first call of each front reaches moto at once and is answered 30 s
    // later: the worker is killed while it waits.
    let late = || FrontPlan { first_answer_after: Some(std::time::Duration::from_secs(30)), ..FrontPlan::default() };
    for (name, queue, copies) in [("killed", &standard, 2), ("killed.fifo", &fifo, 1)] {
        let front = FaultyFront::start(&moto, late()).await;
        let mut config = TestConfig { run_worker: false, ..sending_to(&front.endpoint) };
        config.worker.request_timeout = std::time::Duration::from_secs(5);
        config.worker.lease = std::time::Duration::from_secs(6);
        let env = TestEnv::start_with(config).await;
        sqs_endpoint(&env, name, json!({})).await;
        let mut doomed = env.spawn_role("worker", &[]);
        let event = env.post_event("order.created", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();
        env.wait_for_status(&event, "in_progress").await;
        relayops_tests::eventually(WAIT, || async {
            if front.calls() >= 1 {
                Ok(())
            } else {
                Err("no call reached the service yet".to_owned())
            }
        })
        .await;
        doomed.kill();

        let _survivor = env.spawn_role("worker", &[]);
        let delivered = env.wait_for_status(&event, "delivered").await;
        let id = delivered["id"].as_str().unwrap();
        let messages = moto.receive(queue, copies).await;
        assert!(messages.iter().all(|message| attribute(message, signing::HEADER_ID) == id), "{name}: {messages:?}");
        assert!(moto.is_empty(queue).await, "{name}: no other copy");
        assert_eq!(front.calls(), 2, "{name}: the killed call and the one after it");
        assert_eq!(env.count("delivery_attempts").await, 1, "{name}: the killed attempt left no row");
    }
}

/// The role in the queue owner's account the endpoints below name.
const ROLE: &str = "arn:aws:iam::123456789012:role/relayops-sender";

/// With a role, the worker assumes it once (signed with its own identity,
/// the tenant's id as `ExternalId`) and signs every `SendMessage` with the
/// role's credentials; a trust policy that expects another `ExternalId`
/// refuses it, and the delivery fails at once without a message sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqs_destination_with_a_role_is_sent_as_that_role_only_with_the_tenants_external_id() {
    let moto = MotoServer::start().await;
    let queue = moto.create_queue("as-role").await;
    let mut env = TestEnv::start_with(TestConfig { run_worker: false, ..TestConfig::default() }).await;
    let external_id = env.tenant_id.to_string();
    let trusting = FrontPlan { trusted_external_id: Some(external_id.clone()), ..FrontPlan::default() };
    let front = FaultyFront::start(&moto, trusting).await;
    env.config.worker = sending_to(&front.endpoint).worker;
    env.start_worker().await;
    let endpoint = sqs_endpoint(&env, "as-role", json!({ "aws_role_arn": ROLE })).await;
    assert_eq!(endpoint["aws_role_arn"], ROLE);
    assert_eq!(endpoint["aws_external_id"], external_id.as_str(), "the tenant's id, for the trust policy");
    post_delivered(&env, 3).await;
    moto.receive(&queue, 3).await;
    let seen = front.seen();
    let assumed: Vec<_> = seen.iter().filter(|call| call.service == "sts").collect();
    assert_eq!(assumed.len(), 1, "assumed once, then cached: {seen:?}");
    assert_eq!(assumed[0].access_key_id, "test", "assumed with the worker's own identity");
    let sends: Vec<_> = seen.iter().filter(|call| call.service == "sqs").collect();
    assert_eq!(sends.len(), 3, "{seen:?}");
    assert!(sends.iter().all(|call| call.access_key_id != "test"), "sent as the role, not as itself: {seen:?}");

    // The same role trusted for another tenant only: refused, final.
    let distrusting = FrontPlan { trusted_external_id: Some("ten_someone_else".into()), ..FrontPlan::default() };
    let refusing = FaultyFront::start(&moto, distrusting).await;
    let other = TestEnv::start_with(sending_to(&refusing.endpoint)).await;
    sqs_endpoint(&other, "as-role", json!({ "aws_role_arn": ROLE, "retry_schedule_secs": [1] })).await;
    let event = other.post_event("order.created", json!({ "n": 9 })).await.body["id"].as_str().unwrap().to_owned();
    let failed = other.wait_for_status(&event, "failed").await;
    assert_eq!(failed["last_http_status"], 403);
    let error = failed["last_error"].as_str().unwrap();
    assert!(error.starts_with("aws_sts: AccessDenied"), "{error}");
    assert!(refusing.seen().iter().all(|call| call.service == "sts"), "no message sent: {:?}", refusing.seen());
    assert!(moto.is_empty(&queue).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_is_for_aws_destinations_only_must_be_an_iam_role_and_can_be_changed() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..TestConfig::default() }).await;
    let webhook = json!({ "url": "https://example.com/hook", "event_types": ["*"], "aws_role_arn": ROLE });
    let detail = env.post("/v1/endpoints", webhook).await.expect_problem(422);
    assert!(detail.contains("aws_role_arn"), "{detail}");
    let user = json!({ "url": aws_queue_url("q"), "destination": "aws_sqs", "event_types": ["*"],
        "aws_role_arn": "arn:aws:iam::123456789012:user/someone" });
    let detail = env.post("/v1/endpoints", user).await.expect_problem(422);
    assert!(detail.contains("aws_role_arn"), "{detail}");
    assert_eq!(env.count("webhook_endpoints").await, 0, "nothing written");

    let endpoint = sqs_endpoint(&env, "q", json!({})).await;
    assert_eq!(endpoint["aws_role_arn"], Value::Null);
    let path = format!("/v1/endpoints/{}", endpoint["id"].as_str().unwrap());
    let patch = |body| env.request(reqwest::Method::PATCH, &path, Some(&env.api_key), Some(body));
    let changed = patch(json!({ "aws_role_arn": ROLE })).await;
    assert_eq!(changed.status, 200, "{:?}", changed.body);
    assert_eq!(changed.body["aws_role_arn"], ROLE);
    patch(json!({ "aws_role_arn": "not-an-arn" })).await.expect_problem(422);
    let cleared = patch(json!({ "aws_role_arn": null })).await;
    assert_eq!(cleared.body["aws_role_arn"], Value::Null, "{:?}", cleared.body);
    let hook = env.post("/v1/endpoints", json!({ "url": "https://example.com/hook", "event_types": ["*"] })).await;
    let hook_path = format!("/v1/endpoints/{}", hook.body["id"].as_str().unwrap());
    let refused =
        env.request(reqwest::Method::PATCH, &hook_path, Some(&env.api_key), Some(json!({ "aws_role_arn": ROLE })));
    refused.await.expect_problem(422);
    assert_eq!(hook.body["aws_external_id"], Value::Null, "a webhook has none");
}

/// A container credentials endpoint on loopback, as ECS and EKS Pod Identity
/// serve a task's role: answers `token`-authorised requests with credentials
/// for an hour; counts the requests.
async fn credentials_endpoint(token: &'static str) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let served = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&served);
    let handler = move |headers: axum::http::HeaderMap| {
        let counted = std::sync::Arc::clone(&counted);
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            if headers.get("authorization").and_then(|value| value.to_str().ok()) != Some(token) {
                return (axum::http::StatusCode::FORBIDDEN, axum::Json(json!({}))).into_response();
            }
            let expiration = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
            axum::Json(json!({
                "AccessKeyId": "ASIACONTAINERROLE",
                "SecretAccessKey": "container-secret",
                "Token": "container-session-token",
                "Expiration": expiration,
            }))
            .into_response()
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/credentials", listener.local_addr().unwrap());
    let router = axum::Router::new().route("/v1/credentials", axum::routing::get(handler));
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (url, served)
}

/// On ECS or EKS the worker has no keys in its environment: it signs with the
/// task role's credentials from the container credentials endpoint (with its
/// authorisation token), fetched once while they last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_keys_the_worker_signs_with_its_containers_role_credentials() {
    let moto = MotoServer::start().await;
    let queue = moto.create_queue("from-a-task").await;
    let front = FaultyFront::start(&moto, FrontPlan::default()).await;
    let (url, served) = credentials_endpoint("pod-identity-token").await;
    let mut config = sending_to(&front.endpoint);
    config.worker.aws_identity =
        Some(AwsIdentity::Container { url, token: Some(ContainerToken::Value("pod-identity-token".into())) });
    let env = TestEnv::start_with(config).await;
    sqs_endpoint(&env, "from-a-task", json!({})).await;
    post_delivered(&env, 3).await;
    moto.receive(&queue, 3).await;
    let seen = front.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen.iter().all(|call| call.access_key_id == "ASIACONTAINERROLE"), "{seen:?}");
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 1, "fetched once while they last");
}

/// Credentials SQS calls expired before their time (revoked, or clocks
/// apart) are dropped: the retry assumes the role again and goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_sqs_calls_expired_are_assumed_again_for_the_retry() {
    let moto = MotoServer::start().await;
    let queue = moto.create_queue("expired").await;
    let expired = FrontPlan {
        faults: vec![ServiceFault { status: 403, code: "ExpiredToken" }],
        faults_for: Some("sqs"),
        ..FrontPlan::default()
    };
    let front = FaultyFront::start(&moto, expired).await;
    let env = TestEnv::start_with(sending_to(&front.endpoint)).await;
    sqs_endpoint(&env, "expired", json!({ "aws_role_arn": ROLE, "retry_schedule_secs": [1] })).await;
    let event = env.post_event("order.created", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();
    let delivered = env.wait_for_status(&event, "delivered").await;
    assert_eq!(delivered["attempt_count"], 2, "{delivered:?}");
    let id = delivered["id"].as_str().unwrap();
    let attempts = env.get(&format!("/v1/deliveries/{id}/attempts")).await.body["data"].as_array().unwrap().clone();
    assert!(attempts[0]["error"].as_str().unwrap_or_default().contains("ExpiredToken"), "{attempts:?}");
    moto.receive(&queue, 1).await;
    let assumed = front.seen().iter().filter(|call| call.service == "sts").count();
    assert_eq!(assumed, 2, "assumed again after the expiry: {:?}", front.seen());
}

/// Without credentials of its own — none in the environment, or a container
/// credentials endpoint that refuses the worker's token — the worker sends
/// nothing; the attempt says why and the delivery waits for its retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_credentials_nothing_is_sent_and_the_delivery_is_retried() {
    let moto = MotoServer::start().await;
    let queue = moto.create_queue("no-identity").await;
    let (url, served) = credentials_endpoint("the-right-token").await;
    let refused = AwsIdentity::Container { url, token: Some(ContainerToken::Value("a-wrong-token".into())) };
    for (identity, why) in [(None, "aws_sqs: no AWS credentials"), (Some(refused), "answered 403")] {
        let mut config = sending_to(&moto.endpoint);
        config.worker.aws_identity = identity;
        let env = TestEnv::start_with(config).await;
        sqs_endpoint(&env, "no-identity", json!({ "retry_schedule_secs": [60] })).await;
        let event = env.post_event("order.created", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();
        let waiting = env
            .wait_for_deliveries_within(&event, WAIT, |all| {
                all.len() == 1 && all[0]["status"] == "scheduled" && all[0]["attempt_count"] == 1
            })
            .await;
        let error = waiting[0]["last_error"].as_str().unwrap_or_default();
        assert!(error.starts_with("aws_sqs") && error.contains(why), "{error}");
    }
    assert!(served.load(std::sync::atomic::Ordering::SeqCst) >= 1, "the endpoint was asked");
    assert!(moto.is_empty(&queue).await, "nothing sent");
}
