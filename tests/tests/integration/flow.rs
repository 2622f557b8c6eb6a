//! Flow control: tenant ingest limits shared by API replicas, endpoint rate
//! limits and concurrency leases that isolate endpoints from each other.
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use relayops_tests::prometheus::{sample, scrape};
use relayops_tests::{TestConfig, TestEnv};
use serde_json::json;

async fn set_tenant_limit(env: &TestEnv, rate: i32, burst: i32) {
    let client = env.pool.get().await.unwrap();
    client
        .execute("UPDATE relayops.tenants SET ingest_rate_per_sec = $1, ingest_burst = $2", &[&rate, &burst])
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_over_its_ingest_rate_gets_429_with_retry_after_and_nothing_written() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    set_tenant_limit(&env, 1, 2).await;
    assert_eq!(env.post_event("a.b", json!({ "n": 1 })).await.status, 201);
    assert_eq!(env.post_event("a.b", json!({ "n": 2 })).await.status, 201);
    let refused = env.post_event_once("a.b", json!({ "n": 3 })).await;
    let detail = refused.expect_problem(429);
    assert!(detail.contains("per second"), "{detail}");
    let retry_after: u64 = refused.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry_after), "Retry-After {retry_after}");
    assert_eq!(env.count("events").await, 2);
    // Another tenant has its own bucket.
    let (_, other) = env.second_tenant().await;
    let body = json!({ "event_type": "a.b", "payload": {} });
    assert_eq!(env.request(reqwest::Method::POST, "/v1/events", Some(&other), Some(body)).await.status, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_api_processes_enforce_one_shared_tenant_limit() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, run_publisher: false, ..Default::default() }).await;
    const RATE: i32 = 20;
    // A bucket of one second's tokens: a client stalled by a busy machine for
    // less than that loses no token, so what is measured is the limiter, not
    // how fast eight clients can ask. The full bucket is spent at the start
    // and taken out of the rate below.
    const BURST: i32 = RATE;
    set_tenant_limit(&env, RATE, BURST).await;
    let mut apis = Vec::new();
    let mut urls = Vec::new();
    for _ in 0..2 {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let listen = format!("127.0.0.1:{port}");
        apis.push(env.spawn_role("api", &[("RELAYOPS_API_LISTEN", listen.as_str())]));
        urls.push(format!("http://{listen}"));
    }
    let http = reqwest::Client::new();
    for url in &urls {
        relayops_tests::wait_until_ready(&http, url).await;
    }

    // Four clients per process hammer both for a fixed window.
    const WINDOW: Duration = Duration::from_secs(3);
    let started = Instant::now();
    let mut clients = Vec::new();
    for (index, url) in urls.iter().cycle().take(8).enumerate() {
        let (http, url, key) = (http.clone(), url.clone(), env.api_key.clone());
        clients.push(tokio::spawn(async move {
            let (mut accepted, mut limited) = (0u32, 0u32);
            while started.elapsed() < WINDOW {
                let body = json!({ "event_type": "a.b", "payload": { "client": index } });
                let response = http.post(format!("{url}/v1/events")).bearer_auth(&key).json(&body).send().await;
                match response.map(|r| r.status().as_u16()) {
                    Ok(201) => accepted += 1,
                    Ok(429) => limited += 1,
                    other => panic!("unexpected answer {other:?}"),
                }
            }
            (accepted, limited)
        }));
    }
    let (mut accepted, mut limited) = (0, 0);
    for client in clients {
        let (a, l) = client.await.unwrap();
        accepted += a;
        limited += l;
    }
    let rate = f64::from(accepted.saturating_sub(BURST as u32)) / WINDOW.as_secs_f64();
    println!("shared tenant limit {RATE}/s: accepted {accepted} ({rate:.1}/s), limited {limited}");
    assert!(limited > 0, "the clients did push past the limit");
    assert!(
        (f64::from(RATE) * 0.9..=f64::from(RATE) * 1.1).contains(&rate),
        "accepted {rate:.1}/s for a {RATE}/s limit"
    );
    assert_eq!(env.count("events").await, i64::from(accepted));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_rate_limit_holds_the_observed_rate_without_spending_attempts() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/ok", &["*"], json!({ "rate_limit_per_sec": 5, "rate_limit_burst": 1 })).await;
    let mut events = Vec::new();
    for n in 0..15 {
        events.push(env.post_event("a.b", json!({ "n": n })).await.body["id"].as_str().unwrap().to_owned());
    }
    for event in &events {
        let delivery = env.wait_for_status(event, "delivered").await;
        assert_eq!(delivery["attempt_count"], 1, "limiter waits are not attempts");
    }
    let mut arrivals: Vec<DateTime<Utc>> = env.simulator.received().iter().map(|r| r.received_at).collect();
    arrivals.sort();
    assert_eq!(arrivals.len(), 15);
    let span = (arrivals[14] - arrivals[0]).to_std().unwrap().as_secs_f64();
    let rate = 14.0 / span;
    println!("endpoint limit 5/s: observed {rate:.2}/s over {span:.2} s");
    assert!(rate <= 5.0 * 1.1, "observed {rate:.2}/s against a 5/s limit");
    let metrics = scrape(&env.http, &env.api_url).await;
    let turned_away = sample(&metrics, "relayops_deliveries_parked_total", &[("reason", "rate_limited")]);
    assert!(turned_away > 0.0, "the limit turned deliveries away");
    let parked = sample(&metrics, "relayops_deliveries_parked_total", &[]);
    assert_eq!(sample(&metrics, "relayops_deliveries_admitted_total", &[]), parked, "each waited parked once");
    assert_eq!(sample(&metrics, "relayops_outbox_published_total", &[]), 15.0, "each published once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_endpoint_cannot_starve_a_fast_one() {
    let mut config = TestConfig::default();
    config.worker.request_timeout = Duration::from_secs(8);
    config.worker.lease = Duration::from_secs(10);
    let env = TestEnv::start_with(config).await;
    env.create_endpoint("/sim/slow/5000", &["slow.*"], json!({ "max_in_flight": 2, "timeout_ms": 8000 })).await;
    env.create_endpoint("/sim/ok", &["fast.*"], json!({})).await;
    for n in 0..20 {
        assert_eq!(env.post_event("slow.x", json!({ "n": n })).await.status, 201);
    }
    // The slow endpoint is saturated; now measure the fast one.
    env.simulator.wait_until(relayops_tests::WAIT, |_| env.simulator.max_in_flight("/sim/slow/5000") >= 2).await;
    let mut posted = Vec::new();
    for n in 0..20 {
        let answer = env.post_event("fast.x", json!({ "n": n })).await;
        posted.push((answer.body["id"].as_str().unwrap().to_owned(), Utc::now()));
        tokio::time::sleep(Duration::from_millis(20)).await; // a steady trickle, not a burst
    }
    let received = env
        .simulator
        .wait_until(relayops_tests::WAIT, |all| all.iter().filter(|r| r.path == "/sim/ok").count() == 20)
        .await;
    let deliveries: Vec<(String, DateTime<Utc>)> = {
        let client = env.pool.get().await.unwrap();
        let rows = client
            .query(
                "SELECT d.id, e.id FROM relayops.deliveries d JOIN relayops.events e ON e.id = d.event_id
                 WHERE e.event_type = 'fast.x'",
                &[],
            )
            .await
            .unwrap();
        rows.iter()
            .map(|row| {
                let (delivery, event): (uuid::Uuid, uuid::Uuid) = (row.get(0), row.get(1));
                let event = format!("evt_{}", event.simple());
                let posted_at = posted.iter().find(|(id, _)| *id == event).unwrap().1;
                (format!("dlv_{}", delivery.simple()), posted_at)
            })
            .collect()
    };
    let mut latencies: Vec<f64> = deliveries
        .iter()
        .map(|(delivery, posted_at)| {
            let arrival = received.iter().find(|r| r.delivery_id.as_deref() == Some(delivery)).unwrap().received_at;
            (arrival - *posted_at).num_milliseconds() as f64
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let p95 = latencies[(latencies.len() * 95 / 100).min(latencies.len() - 1)];
    println!("fast endpoint next to a saturated slow one: p95 {p95:.0} ms");
    assert!(p95 < 1000.0, "fast endpoint p95 {p95} ms while the slow one is saturated");
    assert_eq!(env.simulator.max_in_flight("/sim/slow/5000"), 2, "never more than max_in_flight open");
    let attempts = env.query_i64("SELECT coalesce(max(attempt_count), 0)::bigint FROM relayops.deliveries").await;
    assert!(attempts <= 1, "lease misses are not attempts");
}

/// A saturated endpoint's backlog waits parked in Postgres, not going round
/// the broker: every delivery is published once (no postponement, no
/// deferral), admitted into a slot as one frees, goes out exactly once, and
/// never more than `max_in_flight` at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_endpoints_backlog_waits_parked_and_is_published_once() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/slow/300", &["*"], json!({ "max_in_flight": 1 })).await;
    let events = env.post_numbered_events("a.b", 12).await;
    for event in &events {
        env.wait_for_status(event, "delivered").await;
    }
    assert_eq!(env.simulator.max_in_flight("/sim/slow/300"), 1, "the endpoint's limit held");
    assert_eq!(env.count("delivery_attempts").await, 12, "one attempt each: waiting is not an attempt");
    let metrics = scrape(&env.http, &env.api_url).await;
    let turned_away = sample(&metrics, "relayops_deliveries_parked_total", &[("reason", "endpoint_full")]);
    assert!(turned_away > 0.0, "the endpoint was saturated");
    let parked = sample(&metrics, "relayops_deliveries_parked_total", &[]);
    let admitted = sample(&metrics, "relayops_deliveries_admitted_total", &[]);
    assert_eq!(admitted, parked, "every delivery parked for a slot was admitted into one");
    let published = sample(&metrics, "relayops_outbox_published_total", &[]);
    assert_eq!(published, 12.0, "each delivery published once");
}

/// A worker killed while it sends deliveries it admitted from the parked
/// ones (crash: nothing settled, leases left behind) loses none: the next
/// worker admits what is still parked, and recovery sends again what the
/// dead one had leased once its lease expired. Every delivery reaches the
/// receiver, and each one's row ends `delivered`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_while_admitting_parked_deliveries_loses_none() {
    let mut config = TestConfig::default();
    config.publisher.recovery_grace = Duration::from_secs(2);
    let mut env = TestEnv::start_with(config).await;
    env.create_endpoint("/sim/slow/1000", &["*"], json!({ "max_in_flight": 1 })).await;
    let events = env.post_numbered_events("a.b", 6).await;
    // One admitted from the parked ones is in flight, others still parked.
    relayops_tests::eventually(relayops_tests::WAIT, || async {
        let admitted = sample(&scrape(&env.http, &env.api_url).await, "relayops_deliveries_admitted_total", &[]);
        let parked = env.query_i64("SELECT count(*) FROM relayops.deliveries WHERE status = 'parked'").await;
        let leased = env.query_i64("SELECT count(*) FROM relayops.deliveries WHERE status = 'in_progress'").await;
        if admitted >= 1.0 && parked >= 2 && leased == 1 {
            Ok(())
        } else {
            Err(format!("{admitted} admitted, {parked} parked, {leased} in flight"))
        }
    })
    .await;
    env.kill_worker().await;
    env.start_worker().await;
    for event in &events {
        env.wait_for_status(event, "delivered").await;
    }
    let received = env.simulator.received();
    let distinct: std::collections::HashSet<_> = received.iter().filter_map(|r| r.delivery_id.clone()).collect();
    assert_eq!(distinct.len(), 6, "the receiver saw every delivery");
    assert_eq!(env.query_i64("SELECT count(*) FROM relayops.deliveries WHERE status <> 'delivered'").await, 0);
}
