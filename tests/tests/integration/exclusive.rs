//! Tests that need the machine to themselves: they restart the shared broker or
//! load it heavily (the Redis outages are in `redis_outages`). `make test` runs them after the others, one at a time
//! (`exclusive::` in their names is the filter).
use std::time::{Duration, Instant};

use relayops_tests::{rabbitmqctl, TestConfig, TestEnv};
use serde_json::json;

const LONG_WAIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_rabbitmq_restart_still_delivers_the_retries_that_were_waiting() {
    let mut config = TestConfig::default();
    // The retry queues are quorum queues with at-least-once dead-lettering, and
    // usually bring every retry back across a restart; when a restart still
    // drops some, recovery re-enqueues them after this grace. The promise under
    // test is the user's: every retry is still delivered.
    config.publisher.recovery_grace = Duration::from_secs(10);
    let env = TestEnv::start_with(config).await;
    env.create_endpoint("/sim/flaky/1", &["*"], json!({ "retry_schedule_secs": [5] })).await;
    let mut events = Vec::new();
    for n in 0..5 {
        events.push(env.post_event("a.b", json!({ "n": n })).await.body["id"].as_str().unwrap().to_owned());
    }
    for event in &events {
        env.wait_for_status(event, "scheduled").await;
    }
    let deadline = Instant::now() + LONG_WAIT;
    while env.retry_queue_depth().await < 5 {
        assert!(Instant::now() < deadline, "retries never reached the retry queues");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    tokio::task::spawn_blocking(|| {
        rabbitmqctl(&["stop_app"]);
        rabbitmqctl(&["start_app"]);
        rabbitmqctl(&["await_startup"]);
    })
    .await
    .unwrap();

    for event in &events {
        let delivered = env.wait_for_status_within(event, "delivered", LONG_WAIT).await;
        assert_eq!(delivered["attempt_count"], 2);
    }
    let through_recovery = env.messages_published().await as i64 - 5;
    println!("rabbitmq restart: {} of 5 retries came back through the retry queues", 5 - through_recovery);
}

/// `RELAYOPS_SOAK_EVENTS` sets the size (default 20000; smaller for quick local runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_soak_with_chaos_and_killed_workers_loses_nothing() {
    let events: usize = std::env::var("RELAYOPS_SOAK_EVENTS").ok().and_then(|n| n.parse().ok()).unwrap_or(20_000);
    let mut config = TestConfig { run_worker: false, ..Default::default() };
    config.worker.request_timeout = Duration::from_millis(1500);
    config.worker.lease = Duration::from_secs(3);
    config.worker.concurrency = 64;
    config.publisher.recovery_grace = Duration::from_secs(5);
    let env = TestEnv::start_with(config).await;
    for endpoint in 0..20 {
        let extra = json!({ "max_attempts": 8, "retry_schedule_secs": [0, 1, 1, 2], "timeout_ms": 1000 });
        env.create_endpoint("/sim/chaos", &[&format!("soak.e{endpoint}")], extra).await;
    }
    let started = Instant::now();
    let mut workers = [env.spawn_role("worker", &[]), env.spawn_role("worker", &[])];

    // Ingest with 8 concurrent clients that follow the protocol (503 and 429
    // are retried after Retry-After with the same idempotency key), as a
    // loaded machine can make the API refuse for a moment.
    let posted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let env = std::sync::Arc::new(env);
    let mut clients = Vec::new();
    for client in 0..8 {
        let (env, posted) = (env.clone(), posted.clone());
        clients.push(tokio::spawn(async move {
            for n in (client..events).step_by(8) {
                let answer = env.post_event(&format!("soak.e{}", n % 20), json!({ "n": n })).await;
                assert_eq!(answer.status, 201, "{:?}", answer.body);
                posted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }));
    }

    // Kill -9 a worker and start a new one, three times, while work flows.
    let mut kills = 0;
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let client = env.pool.get().await.unwrap();
        let row = client
            .query_one(
                "SELECT count(*), count(*) FILTER (WHERE status IN ('delivered', 'dead')) FROM relayops.deliveries",
                &[],
            )
            .await
            .unwrap();
        let (total, settled): (i64, i64) = (row.get(0), row.get(1));
        if total == events as i64 && settled == total {
            break;
        }
        assert!(Instant::now() < deadline, "soak did not settle: {settled}/{total} of {events}");
        // A client that gave up fails the soak now, not after the deadline.
        if let Some(finished) = clients.iter().position(|client| client.is_finished()) {
            clients.swap_remove(finished).await.expect("an ingest client failed");
        }
        if kills < 3 && settled > (kills + 1) * events as i64 / 5 {
            workers[0].kill();
            workers[0] = env.spawn_role("worker", &[]);
            kills += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for client in clients {
        client.await.unwrap();
    }
    let elapsed = started.elapsed();

    let client = env.pool.get().await.unwrap();
    let figures = client
        .query_one(
            "SELECT (SELECT count(*) FROM relayops.events),
                    (SELECT count(*) FROM relayops.deliveries),
                    (SELECT count(*) FROM relayops.deliveries WHERE status = 'delivered'),
                    (SELECT count(*) FROM relayops.deliveries WHERE status = 'dead'),
                    (SELECT count(*) FROM relayops.delivery_attempts),
                    (SELECT count(*) FROM relayops.deliveries d WHERE d.attempt_count <>
                        (SELECT count(*) FROM relayops.delivery_attempts a WHERE a.delivery_id = d.id)),
                    (SELECT count(*) FROM (SELECT delivery_id FROM relayops.delivery_attempts
                        GROUP BY delivery_id HAVING max(attempt_number) <> count(*)) gaps)",
            &[],
        )
        .await
        .unwrap();
    let (events_stored, deliveries, delivered, dead, attempts, miscounted, gaps): (i64, i64, i64, i64, i64, i64, i64) =
        (figures.get(0), figures.get(1), figures.get(2), figures.get(3), figures.get(4), figures.get(5), figures.get(6));
    let received = env.simulator.received();
    let acknowledged: std::collections::HashSet<&str> =
        received.iter().filter(|r| r.answered_status == 200).filter_map(|r| r.delivery_id.as_deref()).collect();
    println!(
        "soak: {events} events, {deliveries} deliveries ({delivered} delivered, {dead} dead), {attempts} attempts, \
         {} requests at the receiver, {kills} worker kills, {:.1} s",
        received.len(),
        elapsed.as_secs_f64()
    );
    assert_eq!(events_stored, events as i64);
    assert_eq!(deliveries, events as i64, "one delivery per event, none lost");
    assert_eq!(delivered + dead, deliveries, "every delivery settled");
    assert_eq!(miscounted, 0, "attempt_count matches the attempt rows");
    assert_eq!(gaps, 0, "attempt numbers are 1..n without repeats or gaps");
    assert_eq!(kills, 3);
    assert!(acknowledged.len() as i64 >= delivered, "every delivered delivery was answered 200 by the receiver");
}
