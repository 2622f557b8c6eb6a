//! The SQS publisher wake-up against moto's SQS server: ingest through its
//! Lambda path sends one debounced wake-up message, the publisher Lambda
//! handles the SQS event it triggers; with SQS unreachable, ingest still
//! answers 201 and the scheduled tick delivers the event.
use std::sync::Arc;
use std::time::{Duration, Instant};

use relayops_publisher::lambda::Trigger;
use relayops_shared::api::lambda::LambdaHttp;
use relayops_shared::config::PublisherBudgetConfig;
use relayops_shared::sqs_wakeup::{SqsWakeup, WAKEUP_BODY};
use relayops_tests::lambda::{event_fixture, http_api_event, invoke_http, invoke_publisher};
use relayops_tests::moto::{free_port, sqs_client, MotoServer};
use relayops_tests::{TestConfig, TestEnv};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_sends_one_debounced_sqs_wakeup_that_triggers_the_publisher() {
    let env = TestEnv::start_with(TestConfig { run_publisher: false, ..TestConfig::default() }).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let moto = MotoServer::start().await;
    let queue_url = moto.create_queue("relayops-publisher-wakeup").await;
    // A long debounce, so the second ingest provably sends nothing.
    let sqs =
        Arc::new(SqsWakeup::new(moto.client(), queue_url.clone(), Duration::from_secs(30), Duration::from_secs(1)));
    let ingest = LambdaHttp::new(env.lambda_state(), Some(sqs)).app(relayops_ingest::router);

    let mut event_ids = Vec::new();
    for n in 0..2 {
        let body = json!({ "event_type": "order.created", "payload": { "n": n } });
        let answer = invoke_http(&ingest, http_api_event("POST", "/v1/events", Some(&env.api_key), Some(&body))).await;
        assert_eq!(answer.status, 201, "{:?}", answer.body);
        event_ids.push(answer.body["id"].as_str().unwrap().to_owned());
    }

    // The response waited for its wake-up, so the queue already holds it.
    let received = moto
        .client()
        .receive_message()
        .queue_url(&queue_url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await
        .expect("receive");
    let messages = received.messages();
    assert_eq!(messages.len(), 1, "one wake-up for two ingests within the debounce: {messages:?}");
    assert_eq!(messages[0].body(), Some(WAKEUP_BODY));

    // The queue's event source hands the message to the publisher.
    let mut sqs_event = event_fixture("sqs-wakeup.json");
    sqs_event["Records"][0]["messageId"] = json!(messages[0].message_id());
    sqs_event["Records"][0]["body"] = json!(messages[0].body());
    let budget = PublisherBudgetConfig::default();
    let publisher = env.lambda_publisher();
    let report = invoke_publisher(&publisher, &budget, sqs_event, Duration::from_secs(60)).await;
    assert_eq!(report.trigger, Trigger::Sqs { messages: 1 });
    assert_eq!(report.report.published, 2, "{report:?}");
    for event_id in &event_ids {
        env.wait_for_status(event_id, "delivered").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sqs_unreachable_ingest_succeeds_and_the_schedule_delivers() {
    let env = TestEnv::start_with(TestConfig { run_publisher: false, ..TestConfig::default() }).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    // Nothing listens on this port: every send fails to connect.
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let queue_url = format!("{nowhere}/123456789012/relayops-publisher-wakeup");
    let sqs = Arc::new(SqsWakeup::new(
        sqs_client(Some(nowhere)),
        queue_url,
        Duration::from_millis(100),
        Duration::from_secs(1),
    ));
    let ingest = LambdaHttp::new(env.lambda_state(), Some(sqs)).app(relayops_ingest::router);

    let started = Instant::now();
    let body = json!({ "event_type": "order.created", "payload": { "n": 1 } });
    let answer = invoke_http(&ingest, http_api_event("POST", "/v1/events", Some(&env.api_key), Some(&body))).await;
    assert_eq!(answer.status, 201, "{:?}", answer.body);
    assert!(started.elapsed() < Duration::from_secs(5), "a failing wake-up held the response {:?}", started.elapsed());
    let event_id = answer.body["id"].as_str().unwrap().to_owned();
    assert_eq!(env.count("outbox_messages").await, 1, "the outbox has the work");

    let tick = invoke_publisher(
        &env.lambda_publisher(),
        &PublisherBudgetConfig::default(),
        event_fixture("schedule.json"),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(tick.trigger, Trigger::Schedule);
    assert_eq!(tick.report.published, 1, "{tick:?}");
    env.wait_for_status(&event_id, "delivered").await;
}

/// SQS takes the connection and never answers: the response waits for the
/// wake-up no longer than the send timeout (plus a little), then answers 201
/// with the work safely in the outbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sqs_silent_ingest_answers_after_the_send_timeout_at_most() {
    let (address, _holder) = relayops_tests::silent_listener().await;
    let env = TestEnv::start_with(TestConfig { run_publisher: false, ..TestConfig::default() }).await;
    // A subscriber, so the event has deliveries and ingest wakes the publisher.
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let endpoint = format!("http://{address}");
    let send_timeout = Duration::from_secs(1);
    let sqs = Arc::new(SqsWakeup::new(
        sqs_client(Some(endpoint.clone())),
        format!("{endpoint}/123456789012/relayops-publisher-wakeup"),
        Duration::from_millis(100),
        send_timeout,
    ));
    let ingest = LambdaHttp::new(env.lambda_state(), Some(sqs)).app(relayops_ingest::router);

    let started = Instant::now();
    let body = json!({ "event_type": "order.created", "payload": { "n": 1 } });
    let answer = invoke_http(&ingest, http_api_event("POST", "/v1/events", Some(&env.api_key), Some(&body))).await;
    let waited = started.elapsed();
    assert_eq!(answer.status, 201, "{:?}", answer.body);
    // The send timeout, the 250 ms settle margin, and room for a busy machine.
    assert!(waited < send_timeout + Duration::from_secs(2), "a silent SQS held the response {waited:?}");
    assert_eq!(env.count("events").await, 1);
}
