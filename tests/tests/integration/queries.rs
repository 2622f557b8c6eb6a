//! The query API as an operator uses it: walking long lists page by page while
//! new work arrives, filtering, an endpoint's counts by status, and a
//! delivery's attempt history.
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use relayops_tests::relayops_shared::ids::DeliveryId;
use relayops_tests::{eventually, TestConfig, TestEnv, WAIT};
use serde_json::{json, Value};

/// Posts `count` events of `event_type` in batches of at most 500.
async fn post_events(env: &TestEnv, event_type: &str, count: usize) {
    let mut left = count;
    while left > 0 {
        let size = left.min(500);
        let events: Vec<Value> =
            (0..size).map(|n| json!({ "event_type": event_type, "payload": { "n": n } })).collect();
        let body = json!({ "events": events });
        // A loaded machine can make ingest refuse (503, nothing written): post again.
        let answer = eventually(WAIT, || async {
            let answer = env.post("/v1/events/batch", body.clone()).await;
            match answer.status {
                200 => Ok(answer),
                503 => Err(format!("{:?}", answer.body)),
                other => panic!("batch answered {other}: {:?}", answer.body),
            }
        })
        .await;
        assert_eq!(answer.body["accepted"], size, "{:?}", answer.body["results"][0]);
        left -= size;
    }
}

/// Every page of `path` (which already has a `?`), following `next_cursor`.
async fn walk(env: &TestEnv, path: &str) -> Vec<Value> {
    walk_inserting(env, path, 0).await
}

/// As [`walk`], posting `events_between_pages` events after each page.
async fn walk_inserting(env: &TestEnv, path: &str, events_between_pages: usize) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(cursor) => format!("{path}&cursor={cursor}"),
            None => path.to_owned(),
        };
        let page = env.get(&url).await;
        assert_eq!(page.status, 200, "{url}: {:?}", page.body);
        rows.extend(page.body["data"].as_array().expect("data").iter().cloned());
        if events_between_pages > 0 {
            post_events(env, "order.created", events_between_pages).await;
        }
        match page.body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return rows,
        }
    }
}

async fn delivery_ids_in_database(env: &TestEnv) -> Vec<String> {
    let client = env.pool.get().await.unwrap();
    let rows = client.query("SELECT id FROM relayops.deliveries", &[]).await.unwrap();
    rows.iter().map(|row| DeliveryId::from_uuid(row.get(0)).to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pages_walk_every_delivery_exactly_once_while_new_ones_arrive() {
    // Nothing is sent: the rows stay as ingest wrote them.
    let env = TestEnv::start_with(TestConfig { run_worker: false, run_publisher: false, ..Default::default() }).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    // Two batches: 500 deliveries share each transaction's `created_at`, so
    // only the id orders them within a batch.
    post_events(&env, "order.created", 1_000).await;
    let before: HashSet<String> = delivery_ids_in_database(&env).await.into_iter().collect();
    assert_eq!(before.len(), 1_000);

    // A writer keeps posting events (5 deliveries at a time, 50 times a second) for as long as the walk lasts.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (api_url, key) = (env.api_url.clone(), env.api_key.clone());
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            // Paced, not flat out: a tight loop of commits saturates the shared
            // disk's fsyncs and stalls the broker for the tests running beside it.
            let mut pace = tokio::time::interval(std::time::Duration::from_millis(20));
            while !stop.load(Ordering::SeqCst) {
                pace.tick().await;
                let events: Vec<Value> =
                    (0..5).map(|n| json!({ "event_type": "order.created", "payload": { "n": n } })).collect();
                let request = http.post(format!("{api_url}/v1/events/batch")).bearer_auth(&key);
                // Refusals under load (503) write nothing and do not matter here.
                let _ = request.json(&json!({ "events": events })).send().await;
            }
        })
    };
    // And the walker itself posts 3 more after every page, so new rows certainly
    // arrive between the pages, however fast or slow the writer is.
    let seen = walk_inserting(&env, "/v1/deliveries?limit=37", 3).await;
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    let pages = 1_000_usize.div_ceil(37);
    let total = delivery_ids_in_database(&env).await.len();
    assert!(total >= 1_000 + 3 * pages, "{total} deliveries: new ones arrived during the walk");
    assert!(seen.len() >= 1_000, "saw {} rows", seen.len());

    let mut times = HashMap::new();
    for row in &seen {
        let id = row["id"].as_str().unwrap().to_owned();
        assert!(times.insert(id.clone(), row["created_at"].clone()).is_none(), "{id} appeared twice");
    }
    let missing: Vec<&String> = before.iter().filter(|id| !times.contains_key(*id)).collect();
    assert!(missing.is_empty(), "{} pre-existing deliveries never appeared, e.g. {:?}", missing.len(), missing.first());
    // Newest first, throughout.
    let order: Vec<(chrono::DateTime<chrono::Utc>, uuid::Uuid)> = seen
        .iter()
        .map(|row| {
            let at = row["created_at"].as_str().unwrap().parse().unwrap();
            let id = row["id"].as_str().unwrap().parse::<DeliveryId>().unwrap().as_uuid();
            (at, id)
        })
        .collect();
    assert!(order.windows(2).all(|pair| pair[0] > pair[1]), "pages are in (created_at, id) descending order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_narrow_every_list_and_bad_parameters_are_400s() {
    let env = TestEnv::start().await;
    let good = env.create_endpoint("/sim/ok", &["order.*"], json!({})).await;
    let refused = env.create_endpoint("/sim/status/422", &["order.created"], json!({})).await;
    let created = env.post_event("order.created", json!({})).await.body["id"].as_str().unwrap().to_owned();
    let shipped = env.post_event("order.shipped", json!({})).await.body["id"].as_str().unwrap().to_owned();
    env.wait_for_deliveries(&created, |rows| {
        rows.len() == 2 && rows.iter().all(|row| row["status"] == "delivered" || row["status"] == "failed")
    })
    .await;
    env.wait_for_status(&shipped, "delivered").await;

    let ids = |answer: &Value| -> Vec<String> {
        answer["data"].as_array().unwrap().iter().map(|row| row["event_id"].as_str().unwrap().to_owned()).collect()
    };
    let by_endpoint = env.get(&format!("/v1/deliveries?endpoint_id={}", refused["id"].as_str().unwrap())).await;
    assert_eq!(ids(&by_endpoint.body), vec![created.clone()]);
    let failed = env.get("/v1/deliveries?status=failed").await;
    assert_eq!(failed.body["data"][0]["endpoint_id"], refused["id"]);
    assert_eq!(failed.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(ids(&env.get("/v1/deliveries?event_type=order.shipped").await.body), vec![shipped.clone()]);
    let both = format!("/v1/deliveries?event_type=order.created&endpoint_id={}", good["id"].as_str().unwrap());
    assert_eq!(ids(&env.get(&both).await.body), vec![created.clone()]);
    let events = env.get("/v1/events?event_type=order.shipped").await;
    assert_eq!(events.body["data"][0]["id"], shipped.as_str());
    assert_eq!(events.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(events.body["next_cursor"], Value::Null);

    // Time ranges: everything so far is before `now`, nothing after.
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let past = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    assert_eq!(env.get(&format!("/v1/deliveries?until={now}")).await.body["data"].as_array().unwrap().len(), 3);
    assert_eq!(env.get(&format!("/v1/deliveries?since={now}")).await.body["data"], json!([]));
    assert_eq!(
        env.get(&format!("/v1/events?since={past}&until={now}")).await.body["data"].as_array().unwrap().len(),
        2
    );

    // A cursor from one list is not a cursor of another, and garbage is refused.
    let first = env.get("/v1/events?limit=1").await;
    let events_cursor = first.body["next_cursor"].as_str().expect("a second page").to_owned();
    let a_delivery = failed.body["data"][0]["id"].as_str().unwrap().to_owned();
    for (path, names) in [
        (format!("/v1/deliveries?cursor={events_cursor}"), "cursor"),
        ("/v1/deliveries?cursor=not-a-cursor".to_owned(), "cursor"),
        ("/v1/events?cursor=%00%01".to_owned(), "cursor"),
        ("/v1/deliveries?limit=0".to_owned(), "limit"),
        ("/v1/events?limit=501".to_owned(), "limit"),
        (format!("/v1/deliveries/{a_delivery}/attempts?limit=501"), "limit"),
        (format!("/v1/deliveries/{a_delivery}/attempts?page=2"), "page"),
        (format!("/v1/endpoints/{}/stats?window=1h", good["id"].as_str().unwrap()), "window"),
        ("/v1/deliveries?limit=many".to_owned(), "limit"),
        ("/v1/deliveries?status=zombie".to_owned(), "status"),
        ("/v1/deliveries?endpoint_id=ep_nothex".to_owned(), "endpoint_id"),
        ("/v1/deliveries?event_type=no%20spaces".to_owned(), "event_type"),
        ("/v1/events?since=yesterday".to_owned(), "since"),
        (format!("/v1/events?since={now}&until={past}"), "since"),
        ("/v1/deliveries?stauts=dead".to_owned(), "stauts"),
        (format!("/v1/endpoints/{}/stats?until=soon", good["id"].as_str().unwrap()), "until"),
    ] {
        let detail = env.get(&path).await.expect_problem(400);
        assert!(detail.contains(names), "{path}: the detail names `{names}`: {detail}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_stats_count_its_deliveries_by_status() {
    let env = TestEnv::start().await;
    let healthy = env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let broken = env.create_endpoint("/sim/status/404", &["order.*"], json!({})).await;
    let mut events = Vec::new();
    for n in 0..3 {
        events.push(env.post_event("order.created", json!({ "n": n })).await.body["id"].as_str().unwrap().to_owned());
    }
    events.push(env.post_event("invoice.paid", json!({})).await.body["id"].as_str().unwrap().to_owned());
    for event in &events {
        env.wait_for_deliveries(event, |rows| {
            rows.iter().all(|row| row["status"] == "delivered" || row["status"] == "failed")
        })
        .await;
    }

    let stats = env.get(&format!("/v1/endpoints/{}/stats", healthy["id"].as_str().unwrap())).await;
    assert_eq!(stats.status, 200, "{:?}", stats.body);
    assert_eq!(stats.body["total"], 4);
    assert_eq!(stats.body["by_status"]["delivered"], 4);
    assert_eq!(stats.body["by_status"]["failed"], 0);
    let stats = env.get(&format!("/v1/endpoints/{}/stats", broken["id"].as_str().unwrap())).await;
    assert_eq!((stats.body["total"].as_i64(), stats.body["by_status"]["failed"].as_i64()), (Some(3), Some(3)));
    assert_eq!(stats.body["by_status"]["delivered"], 0);
    // A window after everything counts nothing.
    let later = (chrono::Utc::now() + chrono::Duration::minutes(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let empty = env.get(&format!("/v1/endpoints/{}/stats?since={later}", broken["id"].as_str().unwrap())).await;
    assert_eq!(empty.body["total"], 0);
    env.get("/v1/endpoints/ep_00000000000000000000000000000000/stats").await.expect_problem(404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_history_shows_what_was_sent_and_what_came_back_page_by_page() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/flaky/2", &["*"], json!({ "retry_schedule_secs": [0] })).await;
    let event =
        env.post_event("order.created", json!({ "secret_sauce": 1 })).await.body["id"].as_str().unwrap().to_owned();
    let delivery = env.wait_for_status(&event, "delivered").await;
    let id = delivery["id"].as_str().unwrap();

    let attempts = walk(&env, &format!("/v1/deliveries/{id}/attempts?limit=1")).await;
    let numbers: Vec<i64> = attempts.iter().map(|a| a["attempt_number"].as_i64().unwrap()).collect();
    assert_eq!(numbers, vec![1, 2, 3], "oldest first, each once across pages of one");
    let statuses: Vec<Value> = attempts.iter().map(|a| a["http_status"].clone()).collect();
    assert_eq!(statuses, vec![json!(503), json!(503), json!(200)]);
    assert_eq!(attempts[0]["outcome"], "retry");
    assert_eq!(attempts[2]["outcome"], "delivered");
    assert_eq!(attempts[0]["response_body"], "flaky", "the start of what the receiver answered");
    for attempt in &attempts {
        let headers = attempt["request_headers"].as_object().expect("headers sent");
        assert_eq!(headers.get("webhook-id").and_then(Value::as_str), Some(id), "{headers:?}");
        assert!(!headers.contains_key("webhook-signature"), "the signature is never stored: {headers:?}");
        assert!(attempt["latency_ms"].as_i64().is_some_and(|ms| ms >= 0));
        assert!(attempt["response_body"].is_string(), "{attempt:?}");
        assert!(attempt.get("error").is_some(), "the error field is always there (null when a response came)");
    }
    let last_page = env.get(&format!("/v1/deliveries/{id}/attempts")).await;
    assert_eq!(last_page.body["data"].as_array().unwrap().len(), 3);
    assert_eq!(last_page.body["next_cursor"], Value::Null);
    env.get(&format!("/v1/deliveries/{id}/attempts?cursor=garbage")).await.expect_problem(400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_come_back_whatever_numbers_they_hold_and_nul_characters_are_refused() {
    let env = TestEnv::start().await;
    // Postgres renders these f64 values as long decimals that an f64 parser
    // refuses ("number out of range"); the API passes the JSON on as it is.
    let posted = env.post_event("order.created", json!({ "max": f64::MAX, "tiny": 5e-324, "n": -1e300 })).await;
    assert_eq!(posted.status, 201, "{:?}", posted.body);
    let id = posted.body["id"].as_str().unwrap();
    // (Read as text: the test's own f64 parser would refuse them too.)
    let http = reqwest::Client::new();
    for path in [format!("/v1/events/{id}"), "/v1/events".to_owned()] {
        let answer = http.get(format!("{}{path}", env.api_url)).bearer_auth(&env.api_key).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{path}");
        let text = answer.text().await.unwrap();
        assert!(text.contains(id) && text.contains("\"max\": 1797693134862315"), "{path}: {text}");
    }

    // U+0000 is valid JSON but neither `text` nor `jsonb` can hold it: a 422, not a 500.
    let nul_in_payload = env.post("/v1/events", json!({ "event_type": "a.b", "payload": { "k\u{0}": "v" } })).await;
    assert!(nul_in_payload.expect_problem(422).contains("U+0000"));
    let nul_in_email = json!({ "email": "a\u{0}@example.com", "password": "whatever-password" });
    env.request(reqwest::Method::POST, "/v1/auth/login", None, Some(nul_in_email)).await.expect_problem(422);
    // An escaped backslash followed by the text `u0000` is fine.
    let text = env.post_event("a.b", json!({ "k": "\\u0000" })).await;
    assert_eq!(text.status, 201, "{:?}", text.body);
}

/// The lists that take no parameters refuse any, as the others refuse unknown
/// ones: a 400 problem naming the parameter, never a silently unfiltered list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_without_parameters_answer_400_naming_any_parameter_given() {
    let env = TestEnv::start_with(relayops_tests::TestConfig { run_worker: false, ..Default::default() }).await;
    let endpoint = env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let subscriptions = format!("/v1/endpoints/{}/subscriptions", endpoint["id"].as_str().unwrap());
    for list in ["/v1/endpoints", "/v1/api-keys", subscriptions.as_str()] {
        for (query, name) in
            [("limit=5", "limit"), ("limit=-1", "limit"), ("cursor=x", "cursor"), ("enabled", "enabled")]
        {
            let path = format!("{list}?{query}");
            let detail = env.get(&path).await.expect_problem(400);
            assert!(detail.contains(&format!("`{name}`")), "{path}: the detail names `{name}`: {detail}");
        }
        for plain in [list.to_owned(), format!("{list}?")] {
            let answer = env.get(&plain).await;
            assert_eq!(answer.status, 200, "{plain}: {:?}", answer.body);
            assert!(!answer.body["data"].as_array().unwrap().is_empty(), "{plain}");
        }
    }
}
