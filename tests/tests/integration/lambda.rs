//! The functions as AWS Lambda runs them: API Gateway HTTP API (v2) events
//! through lambda_http into each HTTP function, and the publisher's handler
//! with scheduled and SQS events, its time budget and a 10k backlog.
use std::time::Duration;

use relayops_publisher::lambda::Trigger;
use relayops_shared::api::lambda::LambdaHttp;
use relayops_shared::broker::{DeliveryTask, QueueMessage};
use relayops_shared::config::PublisherBudgetConfig;
use relayops_tests::lambda::{event_fixture, http_api_event, invoke_http, invoke_publisher};
use relayops_tests::{eventually, TestConfig, TestEnv, WAIT};
use serde::Deserialize;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_functions_answer_api_gateway_v2_events_through_lambda_http() {
    let env = TestEnv::start().await;
    let key = Some(env.api_key.as_str());
    let ingest = LambdaHttp::new(env.lambda_state(), None).app(relayops_ingest::router);
    let query = LambdaHttp::new(env.lambda_state(), None).app(relayops_query::router);
    let replay = LambdaHttp::new(env.lambda_state(), None).app(relayops_replay::router);
    let manage = LambdaHttp::new(env.lambda_state(), None).app(relayops_manage::router);

    // manage: an endpoint that refuses everything (400: the delivery fails, so it can be replayed).
    let endpoint = json!({ "url": format!("{}/sim/status/400", env.simulator_url), "event_types": ["order.*"] });
    let created = invoke_http(&manage, http_api_event("POST", "/v1/endpoints", key, Some(&endpoint))).await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    env.simulator.register_secret(created.body["secret"].as_str().expect("secret")).expect("secret accepted");

    // ingest: refused without a credential (an RFC 7807 problem), accepted with one.
    let event = json!({ "event_type": "order.created", "payload": { "order_id": 1 } });
    let refused = invoke_http(&ingest, http_api_event("POST", "/v1/events", None, Some(&event))).await;
    assert_eq!(refused.status, 401, "{:?}", refused.body);
    assert_eq!(refused.header("content-type"), Some("application/problem+json"));
    let accepted = invoke_http(&ingest, http_api_event("POST", "/v1/events", key, Some(&event))).await;
    assert_eq!(accepted.status, 201, "{:?}", accepted.body);
    assert_eq!(accepted.header("content-type"), Some("application/json"));
    assert_eq!(accepted.body["deliveries"], 1);
    let event_id = accepted.body["id"].as_str().expect("event id").to_owned();

    // query: the delivery fails (the endpoint answers 400); a query string filters the list.
    let deliveries_path = format!("/v1/events/{event_id}/deliveries");
    let failed = eventually(WAIT, || async {
        let answer = invoke_http(&query, http_api_event("GET", &deliveries_path, key, None)).await;
        match answer.body["data"][0]["status"].as_str() {
            Some("failed") => Ok(answer.body["data"][0].clone()),
            _ => Err(format!("not failed yet: {} {:?}", answer.status, answer.body)),
        }
    })
    .await;
    let delivery_id = failed["id"].as_str().expect("delivery id").to_owned();
    let listed = invoke_http(&query, http_api_event("GET", "/v1/deliveries?status=failed", key, None)).await;
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    assert_eq!(listed.body["data"][0]["id"], delivery_id.as_str(), "{:?}", listed.body);
    let none = invoke_http(&query, http_api_event("GET", "/v1/deliveries?status=delivered", key, None)).await;
    assert_eq!(none.body["data"].as_array().map(Vec::len), Some(0), "{:?}", none.body);

    // replay: back to pending, and the worker tries again (attempt 2).
    let replay_path = format!("/v1/deliveries/{delivery_id}/replay");
    let replayed = invoke_http(&replay, http_api_event("POST", &replay_path, key, Some(&json!({})))).await;
    assert_eq!(replayed.status, 202, "{:?}", replayed.body);
    eventually(WAIT, || async {
        let answer = invoke_http(&query, http_api_event("GET", &deliveries_path, key, None)).await;
        let delivery = &answer.body["data"][0];
        if delivery["status"] == "failed" && delivery["attempt_count"] == 2 {
            Ok(())
        } else {
            Err(format!("replay not attempted yet: {delivery:?}"))
        }
    })
    .await;

    // A route another function serves is this function's 404 problem.
    let elsewhere = invoke_http(&query, http_api_event("POST", "/v1/events", key, Some(&event))).await;
    assert_eq!(elsewhere.status, 405, "{:?}", elsewhere.body);
    let unknown = invoke_http(&replay, http_api_event("GET", "/v1/nothing-here", key, None)).await;
    assert_eq!(unknown.status, 404, "{:?}", unknown.body);
    assert_eq!(unknown.header("content-type"), Some("application/problem+json"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publisher_lambda_publishes_on_a_schedule_tick_and_on_an_sqs_wakeup() {
    let env = TestEnv::start_with(TestConfig { run_publisher: false, ..TestConfig::default() }).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let publisher = env.lambda_publisher();
    let budget = PublisherBudgetConfig::default();

    let first = env.post_event("order.created", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();
    let tick = invoke_publisher(&publisher, &budget, event_fixture("schedule.json"), Duration::from_secs(60)).await;
    assert_eq!(tick.trigger, Trigger::Schedule);
    assert_eq!(tick.report.published, 1, "{tick:?}");
    assert!(tick.budget_ms > 50_000 && tick.budget_ms <= 55_000, "deadline minus the margin: {tick:?}");
    env.wait_for_status(&first, "delivered").await;

    let second = env.post_event("order.created", json!({ "n": 2 })).await.body["id"].as_str().unwrap().to_owned();
    let woken = invoke_publisher(&publisher, &budget, event_fixture("sqs-wakeup.json"), Duration::from_secs(60)).await;
    assert_eq!(woken.trigger, Trigger::Sqs { messages: 1 });
    assert_eq!(woken.report.published, 1, "{woken:?}");
    env.wait_for_status(&second, "delivered").await;

    // Under `cargo lambda watch` the deadline is in 1970: the configured budget applies.
    let mut context = lambda_runtime::Context::default();
    context.deadline = 600_000;
    let event = lambda_runtime::LambdaEvent::new(event_fixture("schedule.json"), context);
    let idle = relayops_publisher::lambda::handle(&publisher, &budget, event).await.expect("invocation");
    assert_eq!(idle.budget_ms, 50_000);
    assert_eq!(idle.report.published, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publisher_lambda_drains_a_10k_backlog_in_one_invocation_and_stops_before_its_deadline() {
    let env =
        TestEnv::start_with(TestConfig { run_publisher: false, run_worker: false, ..TestConfig::default() }).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let ingest = |chunks: usize| {
        let env = &env;
        async move {
            for chunk in 0..chunks {
                let events: Vec<_> = (0..500)
                    .map(|n| json!({ "event_type": "bulk.created", "payload": { "chunk": chunk, "n": n } }))
                    .collect();
                let answer = env.post("/v1/events/batch", json!({ "events": events })).await;
                assert_eq!(answer.status, 200, "{:?}", answer.body);
            }
        }
    };
    let client = env.pool.get().await.unwrap();
    let count = |status: &'static str| {
        let client = &client;
        async move {
            let sql = "SELECT count(*) FROM relayops.outbox_messages WHERE status = $1";
            client.query_one(sql, &[&status]).await.unwrap().get::<_, i64>(0)
        }
    };
    let publisher = env.lambda_publisher();
    publisher.connect().await.expect("broker session, as the Lambda opens it at init");

    // A normal invocation (60 s timeout, 5 s margin) drains 10k rows alone.
    ingest(20).await;
    assert_eq!(count("pending").await, 10_000);
    let budget = PublisherBudgetConfig::default();
    let full = invoke_publisher(&publisher, &budget, event_fixture("schedule.json"), Duration::from_secs(60)).await;
    assert_eq!(full.report.published, 10_000, "{full:?}");
    assert!(full.elapsed_ms < 55_000, "{full:?}");
    assert_eq!(count("pending").await + count("claimed").await, 0, "every published row deleted");
    // Every delivery is on the queue once, packed several to a message
    // (events claimed together travel together, up to 32 a message).
    let messages = env.take_ready_messages().await;
    let carried: Vec<Vec<DeliveryTask>> =
        messages.iter().map(|message| QueueMessage::deserialize(message).unwrap().tasks()).collect();
    let mut ids: Vec<String> = carried.iter().flatten().map(|task| task.delivery_id.to_string()).collect();
    assert_eq!(ids.len(), 10_000, "every delivery is on the queue");
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 10_000, "each once");
    let most = relayops_shared::repo::outbox_fanout::DELIVERIES_PER_MESSAGE;
    assert!(carried.iter().all(|ids| (1..=most).contains(&ids.len())), "1 to {most} deliveries a message");
    assert!(messages.len() < 10_000 / 2, "several deliveries a message: {} messages", messages.len());

    // One second left, half kept free: it stops before the deadline with
    // nothing left claimed (every started batch finished). Only a first batch
    // could overrun, as nothing told it how long a batch takes here.
    ingest(10).await;
    let tight = PublisherBudgetConfig { safety_margin: Duration::from_millis(500), ..PublisherBudgetConfig::default() };
    let short = invoke_publisher(&publisher, &tight, event_fixture("schedule.json"), Duration::from_secs(1)).await;
    assert!(short.elapsed_ms < 1_000 || short.report.batches == 1, "overran the deadline: {short:?}");
    assert!(short.report.published < 5_000, "{short:?}");
    assert_eq!(count("claimed").await, 0, "a batch was left unfinished");
    assert_eq!(count("pending").await, 5_000 - short.report.published as i64);
    eprintln!("10k backlog: {full:?}; then with 1 s left: {short:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_postgres_down_the_functions_answer_errors_not_panics_and_recover() {
    let env = TestEnv::start_with(TestConfig { run_publisher: false, ..TestConfig::default() }).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let ingest = LambdaHttp::new(env.lambda_state(), None).app(relayops_ingest::router);
    let publisher = env.lambda_publisher();
    let budget = PublisherBudgetConfig::default();
    let event = json!({ "event_type": "order.created", "payload": { "n": 1 } });
    let post = || http_api_event("POST", "/v1/events", Some(&env.api_key), Some(&event));

    env.cut_database().await;
    let refused = invoke_http(&ingest, post()).await;
    assert_eq!(refused.status, 503, "{:?}", refused.body);
    assert_eq!(refused.header("content-type"), Some("application/problem+json"));
    let context = relayops_tests::lambda::context_with_deadline(Duration::from_secs(60));
    let tick = lambda_runtime::LambdaEvent::new(event_fixture("schedule.json"), context);
    let failed = relayops_publisher::lambda::handle(&publisher, &budget, tick).await;
    assert!(failed.is_err(), "an unreachable database is the invocation's error: {failed:?}");

    // The same warm container (state, pool, publisher) serves again once Postgres is back.
    env.restore_database().await;
    let accepted = eventually(WAIT, || async {
        let answer = invoke_http(&ingest, post()).await;
        if answer.status == 201 {
            Ok(answer)
        } else {
            Err(format!("{} {:?}", answer.status, answer.body))
        }
    })
    .await;
    let report = invoke_publisher(&publisher, &budget, event_fixture("schedule.json"), Duration::from_secs(60)).await;
    assert_eq!(report.report.published, 1, "{report:?}");
    env.wait_for_status(accepted.body["id"].as_str().unwrap(), "delivered").await;
}
