//! Failover and outages under load (they stop or kill shared services, so they
//! run with the other `exclusive_` tests, one at a time): a hard Postgres stop
//! strands nothing, and ingest keeps answering 201 through broker outages.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use relayops_tests::{eventually, send_following_protocol, TestConfig, TestEnv};
use serde_json::{json, Value};

const LONG_WAIT: Duration = Duration::from_secs(240);

/// A paced client that keeps posting events while a fault comes and goes. It
/// follows the protocol: a 503 or 429 is retried after its `Retry-After` with
/// the same Idempotency-Key, until accepted. It counts the answer each first try got, apart for the
/// tries made while `outage` was set.
pub(crate) struct Load {
    stop: Arc<AtomicBool>,
    outage: Arc<AtomicBool>,
    tally: Arc<Mutex<Tally>>,
    clients: Vec<tokio::task::JoinHandle<()>>,
}

#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// First answers during the outage, by status (0: no answer).
    pub(crate) during_outage: HashMap<u16, u64>,
    /// First answers outside it.
    pub(crate) outside: HashMap<u16, u64>,
    /// Events accepted in the end (after retries).
    pub(crate) accepted: Vec<String>,
}

impl Load {
    /// `clients` tasks, each posting one event every `every`.
    pub(crate) fn start(env: &Arc<TestEnv>, clients: usize, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let outage = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Mutex::new(Tally::default()));
        let clients = (0..clients)
            .map(|client| {
                let (env, stop, outage, tally) = (env.clone(), stop.clone(), outage.clone(), tally.clone());
                tokio::spawn(async move {
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let started = Instant::now();
                        let key = format!("load-{client}-{n}");
                        let during = outage.load(Ordering::Relaxed);
                        let (first, id) = post_until_accepted(&env, &key, json!({ "client": client, "n": n })).await;
                        {
                            let mut tally = tally.lock().unwrap();
                            let answers = if during { &mut tally.during_outage } else { &mut tally.outside };
                            *answers.entry(first).or_default() += 1;
                            tally.accepted.push(id);
                        }
                        n += 1;
                        tokio::time::sleep(every.saturating_sub(started.elapsed())).await;
                    }
                })
            })
            .collect();
        Self { stop, outage, tally, clients }
    }

    pub(crate) fn outage(&self, on: bool) {
        self.outage.store(on, Ordering::Relaxed);
    }

    pub(crate) async fn finish(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        for client in self.clients {
            client.await.expect("load client");
        }
        Arc::try_unwrap(self.tally).expect("clients done").into_inner().unwrap()
    }
}

/// Posts until accepted (as [`send_following_protocol`] does); returns the
/// first answer's status and the event id.
async fn post_until_accepted(env: &TestEnv, key: &str, payload: Value) -> (u16, String) {
    let url = format!("{}/v1/events", env.api_url);
    let body = json!({ "event_type": "load.tick", "payload": payload });
    let persisted = send_following_protocol(|| {
        env.http.post(&url).bearer_auth(&env.api_key).header("Idempotency-Key", key).json(&body)
    })
    .await;
    let answer = persisted.answer;
    assert!(matches!(answer.status, 200 | 201), "never accepted: {} {:?}", answer.status, answer.body);
    let first = persisted.refused.first().copied().unwrap_or(answer.status);
    (first, answer.body["id"].as_str().expect("event id").to_owned())
}

/// Waits until every delivery of the test is terminal and there are as many
/// as `expected`; returns the count by status.
pub(crate) async fn settled(env: &TestEnv, expected: i64, within: Duration) -> HashMap<String, i64> {
    eventually(within, || async {
        let client = env.pool.get().await.map_err(|error| format!("database: {error}"))?;
        let rows = client
            .query("SELECT status, count(*) FROM relayops.deliveries GROUP BY status", &[])
            .await
            .map_err(|error| format!("database: {error}"))?;
        let counts: HashMap<String, i64> = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
        let total: i64 = counts.values().sum();
        let open: i64 = ["pending", "scheduled", "in_progress", "parked"].iter().filter_map(|s| counts.get(*s)).sum();
        if total == expected && open == 0 {
            Ok(counts)
        } else {
            Err(format!("{total} of {expected} deliveries, not yet terminal: {counts:?}"))
        }
    })
    .await
}

/// The share of first answers that were 201.
pub(crate) fn availability(answers: &HashMap<u16, u64>) -> f64 {
    let total: u64 = answers.values().sum();
    answers.get(&201).copied().unwrap_or(0) as f64 / total.max(1) as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_postgres_hard_stop_for_a_minute_strands_nothing() {
    let mut config = TestConfig { run_worker: false, ..Default::default() };
    config.publisher.recovery_grace = Duration::from_secs(10);
    config.worker.concurrency = 64;
    let env = TestEnv::start_with(config).await;
    for endpoint in 0..5 {
        env.create_endpoint("/sim/ok", &[&format!("burst.{endpoint}"), "burst.all"], json!({})).await;
    }
    // 600 events x 5 endpoints = 3,000 deliveries, all on the ready queues.
    for chunk in 0..3 {
        let items: Vec<_> =
            (0..200).map(|n| json!({ "event_type": "burst.all", "payload": { "chunk": chunk, "n": n } })).collect();
        let batch = env.post("/v1/events/batch", json!({ "events": items })).await;
        assert_eq!(batch.body["accepted"], 200, "{:?}", batch.body);
    }
    env.wait_for_outbox_drained().await;
    env.wait_for_messages_published(3_000).await;
    // Packed up to 32 a message, events published together sharing messages.
    let depth = env.ready_depth().await;
    let most = relayops_shared::repo::outbox_fanout::DELIVERIES_PER_MESSAGE as u32;
    assert!((3_000_u32.div_ceil(most)..600).contains(&depth), "3,000 deliveries in {depth} messages");

    // Two worker processes start on the full queue; the database stops hard
    // (as a failover looks from the application) while they work.
    let _workers = [env.spawn_role("worker", &[]), env.spawn_role("worker", &[])];
    eventually(LONG_WAIT, || async {
        match env.simulator.received().len() {
            0 => Err("no delivery yet".to_owned()),
            _ => Ok(()),
        }
    })
    .await;
    tokio::task::spawn_blocking(|| relayops_tests::postgres_cluster(&["stop", "-m", "immediate"])).await.unwrap();
    let down = Instant::now();
    let refused = env.post_event_once("burst.all", json!({ "during": "outage" })).await;
    refused.expect_problem(503);
    assert!(refused.headers.contains_key("retry-after"));
    // The outage lasts a minute: this sleep is the fault, not a wait for a condition.
    tokio::time::sleep(Duration::from_secs(60).saturating_sub(down.elapsed())).await;
    tokio::task::spawn_blocking(|| relayops_tests::postgres_cluster(&["start"])).await.unwrap();

    let counts = settled(&env, 3_000, LONG_WAIT).await;
    assert_eq!(counts.get("delivered"), Some(&3_000), "every delivery delivered: {counts:?}");
    let received = env.simulator.received();
    let distinct: std::collections::HashSet<_> = received.iter().filter_map(|r| r.delivery_id.clone()).collect();
    assert_eq!(distinct.len(), 3_000, "the receiver saw every delivery");
    println!(
        "postgres hard stop 60 s: 3000 deliveries, {} requests at the receiver ({} duplicates), settled {:.0} s after the restart",
        received.len(),
        received.len() - distinct.len(),
        down.elapsed().as_secs_f64() - 60.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_broker_outages_keep_ingest_answering_and_lose_nothing() {
    let config = TestConfig {
        run_worker: false,
        backpressure: Some(relayops_shared::config::BackpressureConfig::default()),
        ..Default::default()
    };
    let env = Arc::new(TestEnv::start_with(config).await);
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    env.create_endpoint("/sim/ok", &["load.*"], json!({})).await;
    let worker_ops = relayops_tests::free_loopback_address();
    let _worker = env.spawn_role("worker", &[("RELAYOPS_WORKER_HEALTH_LISTEN", worker_ops.as_str())]);
    let worker_ready = format!("http://{worker_ops}/health/ready");
    let worker_readiness = |ready: bool| readiness(worker_ready.clone(), ready);
    let publisher_ops = relayops_tests::free_loopback_address();
    let _publisher = env.spawn_role("publisher", &[("RELAYOPS_WORKER_HEALTH_LISTEN", publisher_ops.as_str())]);
    let publisher_ready = format!("http://{publisher_ops}/health/ready");
    let publisher_readiness = |ready: bool| readiness(publisher_ready.clone(), ready);
    publisher_readiness(true).await;
    worker_readiness(true).await;
    env.wait_for_readiness(true).await;

    // About 100 events a second (with fan-out 2) throughout.
    let load = Load::start(&env, 10, Duration::from_millis(100));
    let mut outages = Vec::new();
    for (fault, stop, start) in [
        ("stop_app 15 s", broker_stop_app as fn(), broker_start_app as fn()),
        (
            "kill -9 of the node, 15 s",
            relayops_tests::kill_rabbitmq_node as fn(),
            relayops_tests::start_rabbitmq_node as fn(),
        ),
    ] {
        tokio::time::sleep(Duration::from_secs(2)).await; // traffic before the fault
        load.outage(true);
        let started = Instant::now();
        tokio::task::spawn_blocking(stop).await.unwrap();
        // While the broker is away the api stays ready (it can store events)
        // and names the broker; a standalone publisher is unready.
        let ready = env.wait_for_readiness(true).await;
        let unready = publisher_readiness(false).await;
        assert_eq!(unready["rabbitmq"]["publisher"], "unreachable", "{unready}");
        let unready = worker_readiness(false).await;
        assert_eq!(unready["rabbitmq"]["worker"], "not consuming", "{unready}");
        tokio::time::sleep(Duration::from_secs(15).saturating_sub(started.elapsed())).await; // the fault
        tokio::task::spawn_blocking(start).await.unwrap();
        load.outage(false);
        publisher_readiness(true).await;
        worker_readiness(true).await;
        outages.push((fault, ready, started.elapsed()));
    }
    tokio::time::sleep(Duration::from_secs(2)).await; // traffic after the faults
    let tally = load.finish().await;

    let expected = tally.accepted.len() as i64 * 2;
    let started = Instant::now();
    let counts = settled(&env, expected, LONG_WAIT).await;
    assert_eq!(counts.get("delivered"), Some(&expected), "{counts:?}");
    let during = availability(&tally.during_outage);
    println!(
        "broker outages ({:?}): first answers during them {:?} ({:.2} % 201), outside {:?}; {} events, {} deliveries, drained {:.1} s after the load",
        outages.iter().map(|(fault, _, lasted)| format!("{fault}: {:.1} s", lasted.as_secs_f64())).collect::<Vec<_>>(),
        tally.during_outage,
        during * 100.0,
        tally.outside,
        tally.accepted.len(),
        expected,
        started.elapsed().as_secs_f64()
    );
    for (fault, ready, _) in &outages {
        assert_ne!(ready["postgres"], "unreachable", "{fault}: {ready}");
    }
    assert!(tally.during_outage.values().sum::<u64>() >= 500, "load ran through the outages: {tally:?}");
    assert!(during >= 0.99, "at least 99 % of ingest answers during the outages are 201: {tally:?}");
}

fn broker_stop_app() {
    relayops_tests::rabbitmqctl(&["stop_app"]);
}

fn broker_start_app() {
    relayops_tests::rabbitmqctl(&["start_app"]);
    relayops_tests::rabbitmqctl(&["await_startup"]);
}

/// Polls a readiness URL until it answers `ready` (200) or not; returns the body.
async fn readiness(url: String, ready: bool) -> Value {
    let http = reqwest::Client::new();
    eventually(LONG_WAIT, || {
        let (http, url) = (http.clone(), url.clone());
        async move {
            let response = http.get(&url).send().await.map_err(|error| error.to_string())?;
            let status = response.status();
            let body: Value = response.json().await.unwrap_or_default();
            if status.is_success() == ready {
                Ok(body)
            } else {
                Err(format!("readiness never became {ready}: {status} {body}"))
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_a_request_in_flight_when_the_broker_connection_drops_is_still_recorded() {
    let mut config = TestConfig::default();
    config.worker.request_timeout = Duration::from_secs(10);
    config.worker.lease = Duration::from_secs(15);
    config.publisher.recovery_grace = Duration::from_secs(2);
    let env = TestEnv::start_with(config).await;
    env.create_endpoint("/sim/slow/4000", &["*"], json!({ "timeout_ms": 10_000 })).await;
    let event_id = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    env.wait_for_status(&event_id, "in_progress").await;

    // Every AMQP connection drops (the broker's own doing, as in a failover of
    // the broker node) while the receiver is still answering.
    tokio::task::spawn_blocking(|| relayops_tests::rabbitmqctl(&["close_all_connections", "failover test"]))
        .await
        .unwrap();
    assert_eq!(env.simulator.received().len(), 0, "the request was still open when the connection dropped");

    let delivered = env.wait_for_status_within(&event_id, "delivered", LONG_WAIT).await;
    assert_eq!(delivered["attempt_count"], 1);
    let history = env.get(&format!("/v1/deliveries/{}/attempts", delivered["id"].as_str().unwrap())).await;
    assert_eq!(history.body["data"].as_array().map(Vec::len), Some(1), "{:?}", history.body);
    assert_eq!(history.body["data"][0]["outcome"], "delivered");
    assert_eq!(env.simulator.received().len(), 1, "what the receiver got is what the history shows");
}
