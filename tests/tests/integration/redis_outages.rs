//! Redis going away under load (SPEC §3.2 and its fault table): killed hard,
//! or paused so it holds connections open and never answers. Ingest and
//! delivery go on under per-process limits, readiness and metrics say
//! "degraded", and the shared limits resume by themselves when Redis answers
//! again. The tests that stop the shared Redis are `exclusive_` tests (run
//! after the others, one at a time); Redis is restarted as
//! `scripts/services.sh` starts it, even when a test fails. A Redis that
//! never answers is also a silent listener of the test's own (no shared
//! service touched), which runs with the other tests.
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use relayops_tests::prometheus::{sample, scrape};
use relayops_tests::{eventually, free_loopback_address, send_following_protocol, TestConfig, TestEnv};
use serde_json::{json, Value};

const LONG_WAIT: Duration = Duration::from_secs(180);
/// How long Redis stays away while load runs.
const OUTAGE: Duration = Duration::from_secs(10);
/// Load before and after the outage.
const CALM: Duration = Duration::from_secs(3);
const CLIENTS: usize = 4;
/// Events each client offers per second (paced, not flat out).
const CLIENT_RATE: f64 = 10.0;
const WORKERS: u32 = 2;
/// The slow endpoint's `max_in_flight`.
const MAX_IN_FLIGHT: u32 = 2;
const SLOW: &str = "/sim/slow/50";

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// `kill -9` of the server; restarted by `scripts/services.sh`.
    Kill,
    /// SIGSTOP: connections stay open and nothing answers; SIGCONT ends it.
    Pause,
}

fn run(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
    output.status.success().then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

fn redis_answers() -> bool {
    run("redis-cli", &["-h", "127.0.0.1", "-p", "6379", "ping"]).is_some_and(|out| out.trim() == "PONG")
}

/// The shared Redis server's process id, as it reports it.
fn redis_pid() -> String {
    let info = run("redis-cli", &["-h", "127.0.0.1", "-p", "6379", "info", "server"]).expect("redis answers");
    let pid = info.lines().find_map(|line| line.strip_prefix("process_id:")).expect("process_id in INFO");
    pid.trim().to_owned()
}

/// A Redis fault in progress; ending it (or dropping it, if the test failed
/// first) brings Redis back.
struct RedisFault {
    fault: Fault,
    pid: String,
    ended: bool,
}

impl RedisFault {
    fn begin(fault: Fault) -> Self {
        let pid = redis_pid();
        let signal = match fault {
            Fault::Kill => "-KILL",
            Fault::Pause => "-STOP",
        };
        assert!(run("kill", &[signal, &pid]).is_some(), "kill {signal} {pid}");
        Self { fault, pid, ended: false }
    }

    /// Restarts or resumes Redis and waits until it answers.
    fn end(&mut self) {
        assert!(self.restore(), "redis did not come back after {:?}", self.fault);
    }

    /// As [`end`](Self::end), without panicking (for `Drop`).
    fn restore(&mut self) -> bool {
        self.ended = true;
        let restarted = match self.fault {
            Fault::Kill => {
                let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/services.sh");
                let status = Command::new("bash").arg(script).env("RELAYOPS_SKIP_INSTALL", "1").status();
                status.is_ok_and(|s| s.success())
            }
            Fault::Pause => run("kill", &["-CONT", &self.pid]).is_some(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while restarted && !redis_answers() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        restarted
    }
}

impl Drop for RedisFault {
    fn drop(&mut self) {
        if !self.ended && !self.restore() {
            eprintln!("redis could not be brought back after {:?}: run scripts/services.sh", self.fault);
        }
    }
}

/// One answer a load client got: when its request was sent, and its status.
#[derive(Clone, Copy)]
struct Seen {
    at: Instant,
    status: u16,
}

/// Readiness of the api (its port) or a worker (its operations port).
async fn readiness(http: &reqwest::Client, base: &str) -> (u16, Value) {
    match http.get(format!("{base}/health/ready")).send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            (status, response.json().await.unwrap_or_default())
        }
        Err(error) => (0, json!({ "error": error.to_string() })),
    }
}

/// Waits until every base answers readiness 200 with `"redis": redis`.
async fn wait_for_redis_state(http: &reqwest::Client, bases: &[String], redis: &str) {
    for base in bases {
        eventually(LONG_WAIT, || async {
            let (status, body) = readiness(http, base).await;
            if status == 200 && body["redis"] == redis {
                Ok(body)
            } else {
                Err(format!("{base}: readiness {status} {body}, wanted 200 with redis {redis}"))
            }
        })
        .await;
    }
}

async fn metric(http: &reqwest::Client, base: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    sample(&scrape(http, base).await, name, labels)
}

async fn redis_outage_during_load(fault: Fault) {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    env.create_endpoint(SLOW, &["*"], json!({ "max_in_flight": MAX_IN_FLIGHT })).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let mut bases = vec![env.api_url.clone()];
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let ops = free_loopback_address();
        workers.push(env.spawn_role("worker", &[("RELAYOPS_WORKER_HEALTH_LISTEN", ops.as_str())]));
        bases.push(format!("http://{ops}"));
    }
    wait_for_redis_state(&env.http, &bases, "ok").await;

    // Paced clients that follow the protocol; every answer is kept.
    let env = Arc::new(env);
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let accepted: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let (env, seen, accepted, stop) = (env.clone(), seen.clone(), accepted.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / CLIENT_RATE));
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                ticks.tick().await;
                let key = format!("redis-outage-{client}-{n}");
                let body = json!({ "event_type": "load.x", "payload": { "client": client, "n": n } });
                let url = format!("{}/v1/events", env.api_url);
                let mut sent = Vec::new();
                let outcome = send_following_protocol(|| {
                    sent.push(Instant::now());
                    env.http.post(&url).bearer_auth(&env.api_key).header("idempotency-key", &key).json(&body)
                })
                .await;
                let statuses = outcome.refused.iter().copied().chain([outcome.answer.status]);
                seen.lock().unwrap().extend(sent.iter().zip(statuses).map(|(at, status)| Seen { at: *at, status }));
                assert_eq!(outcome.answer.status, 201, "{:?}", outcome.answer.body);
                accepted.lock().unwrap().push(outcome.answer.body["id"].as_str().unwrap().to_owned());
                n += 1;
            }
        }));
    }

    tokio::time::sleep(CALM).await; // load before the fault
    let outage_began = Instant::now();
    let mut redis = tokio::task::spawn_blocking(move || RedisFault::begin(fault)).await.unwrap();
    wait_for_redis_state(&env.http, &bases, "degraded").await;
    for base in &bases {
        assert_eq!(metric(&env.http, base, "relayops_flow_degraded", &[]).await, 1.0, "{base} says degraded");
    }
    let (_, body) = readiness(&env.http, &env.api_url).await;
    assert_eq!(body["status"], "degraded", "{body}");
    // The outage lasts a while under load; this sleep is the fault, not a wait for a condition.
    tokio::time::sleep(OUTAGE.saturating_sub(outage_began.elapsed())).await;
    redis = tokio::task::spawn_blocking(move || {
        redis.end();
        redis
    })
    .await
    .unwrap();
    let outage_ended = Instant::now();
    wait_for_redis_state(&env.http, &bases, "ok").await;
    tokio::time::sleep(CALM).await; // load after the fault
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for client in clients {
        client.await.expect("a load client failed");
    }
    drop(redis);

    // Ingest stayed available: ≥ 99 % of the answers to requests sent during the outage were 201.
    let seen = seen.lock().unwrap().clone();
    let during: Vec<Seen> = seen.iter().copied().filter(|s| s.at >= outage_began && s.at < outage_ended).collect();
    let created = during.iter().filter(|s| s.status == 201).count();
    let availability = created as f64 / during.len().max(1) as f64;
    // Nothing lost: every accepted event's deliveries are delivered.
    let accepted = accepted.lock().unwrap().clone();
    let drain_started = Instant::now();
    let expected = accepted.len() as i64 * 2;
    eventually(LONG_WAIT, || async {
        let client = env.pool.get().await.map_err(|error| error.to_string())?;
        let row = client
            .query_one("SELECT count(*), count(*) FILTER (WHERE status = 'delivered') FROM relayops.deliveries", &[])
            .await
            .map_err(|error| error.to_string())?;
        let (total, delivered): (i64, i64) = (row.get(0), row.get(1));
        if total == expected && delivered == total {
            Ok(())
        } else {
            Err(format!("{delivered} of {total} deliveries delivered ({expected} expected)"))
        }
    })
    .await;
    let drained_after = outage_ended.elapsed().as_secs_f64();
    let drain = drain_started.elapsed().as_secs_f64();
    let slow_peak = env.simulator.max_in_flight(SLOW);
    println!(
        "redis {fault:?} for {:.1} s under {} events/s: {created} of {} ingest answers 201 during it ({:.2} %); \
         {} events, {expected} deliveries, all delivered {drained_after:.1} s after redis returned \
         ({drain:.1} s after the load stopped); slow endpoint peak in flight {slow_peak} \
         (max_in_flight {MAX_IN_FLIGHT} × {WORKERS} workers)",
        (outage_ended - outage_began).as_secs_f64(),
        CLIENTS as f64 * CLIENT_RATE,
        during.len(),
        availability * 100.0,
        accepted.len(),
    );
    assert!(during.len() >= 20, "load ran during the outage: {} answers", during.len());
    assert!(availability >= 0.99, "only {:.2} % of ingest answers were 201 during the outage", availability * 100.0);
    assert_eq!(env.count("events").await, accepted.len() as i64, "every accepted event stored once, nothing else");
    let received: std::collections::HashSet<String> = env
        .simulator
        .received()
        .into_iter()
        .filter(|r| r.answered_status == 200)
        .filter_map(|r| r.delivery_id)
        .collect();
    assert_eq!(received.len() as i64, expected, "the receivers got every delivery");
    assert!(
        slow_peak <= MAX_IN_FLIGHT * WORKERS,
        "the slow endpoint saw {slow_peak} requests at once; max_in_flight {MAX_IN_FLIGHT} × {WORKERS} workers"
    );

    // Shared limits resume: decisions come from Redis again, none locally,
    // and the tenant's bucket lives in Redis.
    let local_before = metric(&env.http, &env.api_url, "relayops_flow_local_decisions_total", &[]).await;
    for n in 0..20 {
        assert_eq!(env.post_event("after.x", json!({ "n": n })).await.status, 201);
    }
    let local_after = metric(&env.http, &env.api_url, "relayops_flow_local_decisions_total", &[]).await;
    assert_eq!(local_after, local_before, "after the outage ingest asks Redis again");
    assert_eq!(metric(&env.http, &env.api_url, "relayops_flow_degraded", &[]).await, 0.0);
    let pattern = format!("{}:tenant:*", env.config.flow.key_prefix);
    let keys = run("redis-cli", &["-h", "127.0.0.1", "-p", "6379", "--scan", "--pattern", &pattern]).unwrap();
    assert!(!keys.trim().is_empty(), "the tenant's shared bucket is in Redis");
    drop(workers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_redis_killed_under_load_ingest_and_delivery_go_on_under_per_process_limits() {
    redis_outage_during_load(Fault::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_redis_paused_under_load_ingest_and_delivery_go_on_under_per_process_limits() {
    redis_outage_during_load(Fault::Pause).await;
}

/// A Redis that accepts connections and never answers (as a paused or
/// overloaded one): requests are not held up by it — only one call per retry
/// interval waits out the timeout — and nothing is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_never_answers_costs_ingest_one_timeout_per_retry_interval_not_one_per_request() {
    let (silent, _holder) = relayops_tests::silent_listener().await;
    let mut config = TestConfig::default();
    config.flow.redis_url = format!("redis://{silent}");
    config.flow.redis_timeout = Duration::from_secs(1);
    config.flow.redis_retry = Duration::from_secs(2);
    let env = TestEnv::start_with(config).await;
    env.create_endpoint(SLOW, &["*"], json!({ "max_in_flight": MAX_IN_FLIGHT })).await;

    let started = Instant::now();
    let (mut events, mut waited) = (Vec::new(), 0);
    for n in 0..30 {
        let sent = Instant::now();
        let answer = env.post_event_once("a.b", json!({ "n": n })).await;
        assert_eq!(answer.status, 201, "never refused for Redis: {:?}", answer.body);
        if sent.elapsed() >= Duration::from_secs(1) {
            waited += 1;
        }
        events.push(answer.body["id"].as_str().unwrap().to_owned());
    }
    let elapsed = started.elapsed();
    // One probe per 2 s retry interval may wait its 1 s timeout; the rest decide at once.
    let allowed = (elapsed.as_secs_f64() / 2.0).ceil() as usize + 1;
    println!("silent redis: 30 posts in {:.2} s, {waited} waited on redis (at most {allowed})", elapsed.as_secs_f64());
    assert!(waited <= allowed, "{waited} of 30 posts waited on redis in {elapsed:?}");

    let (_, ready) = readiness(&env.http, &env.api_url).await;
    assert_eq!((ready["status"].as_str(), ready["redis"].as_str()), (Some("degraded"), Some("degraded")), "{ready}");
    let metrics = scrape(&env.http, &env.api_url).await;
    assert_eq!(sample(&metrics, "relayops_flow_degraded", &[]), 1.0);
    assert!(sample(&metrics, "relayops_flow_local_decisions_total", &[("limit", "tenant")]) >= 29.0);
    // The in-process worker delivers under its own cap.
    for event in &events {
        env.wait_for_status(event, "delivered").await;
    }
    let peak = env.simulator.max_in_flight(SLOW);
    assert!(peak <= MAX_IN_FLIGHT, "one worker, max_in_flight {MAX_IN_FLIGHT}: {peak} at once");
}

/// With Redis unreachable, admission reserves a parked delivery's slot from
/// the process's own share of the endpoint (the same local decision a
/// message's delivery gets): a saturated endpoint's backlog still waits
/// parked, is admitted as slots free, and is delivered once each, never past
/// `max_in_flight`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_unreachable_parked_deliveries_are_admitted_under_the_process_limits() {
    let mut config = TestConfig::default();
    config.flow.redis_url = "redis://127.0.0.1:1".into(); // nothing listens there
    let env = TestEnv::start_with(config).await;
    env.create_endpoint("/sim/slow/200", &["*"], json!({ "max_in_flight": 1 })).await;
    let events = env.post_numbered_events("a.b", 6).await;
    for event in &events {
        env.wait_for_status(event, "delivered").await;
    }
    let metrics = scrape(&env.http, &env.api_url).await;
    assert_eq!(sample(&metrics, "relayops_flow_degraded", &[]), 1.0, "flow control decided locally");
    let parked = sample(&metrics, "relayops_deliveries_parked_total", &[]);
    assert!(parked >= 1.0, "the backlog waited parked: {parked}");
    assert_eq!(sample(&metrics, "relayops_deliveries_admitted_total", &[]), parked, "each admitted once");
    assert_eq!(env.count("delivery_attempts").await, 6, "each sent once");
    assert_eq!(env.simulator.max_in_flight("/sim/slow/200"), 1, "the endpoint's limit held");
}
