//! Ordering lanes against races the happy path never meets: a worker that
//! loses its lease while it lives (cut off from Postgres, its receiver
//! hanging) must have dropped its ordered request before another worker
//! sends the key's next event; and concurrent batches naming the same keys in
//! opposite orders must neither deadlock (a 503) nor break a key's order.
use std::collections::HashMap;
use std::time::Duration;

use relayops_tests::lanes::{first_request_of_position_0, LaneReceiver, Reply};
use relayops_tests::relay::FreezableRelay;
use relayops_tests::relayops_shared::config::{DatabaseConfig, WorkerConfig};
use relayops_tests::relayops_shared::db;
use relayops_tests::{Answer, TestConfig, TestEnv, WAIT};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_loses_its_lease_alive_drops_its_ordered_send_before_the_key_goes_on() {
    // One ready queue: worker A's prefetch of one is then all it can hold
    // (with shards it has a prefetch per shard, and could take the
    // re-enqueued delivery too, and hang claiming it through the frozen relay).
    let mut config = TestConfig { run_worker: false, ready_shards: 1, ..Default::default() };
    config.worker.lease = Duration::from_secs(3);
    // Only the lease's end can stop the hanging request: the timeout is far longer.
    config.worker.request_timeout = Duration::from_secs(60);
    let env = TestEnv::start_with(config.clone()).await;
    // Position 0's first request hangs; everything else is answered at once.
    let (receiver, url) = LaneReceiver::start(first_request_of_position_0(Reply::Hang)).await;
    env.create_lane_endpoint(&url, json!({})).await;

    // Worker A reaches Postgres through a relay the test freezes. Its prefetch
    // of one keeps the broker from handing it anything while it holds the
    // message it is stuck on.
    let relay = FreezableRelay::start(&env.database_url).await;
    let pool = db::connect_pool(&DatabaseConfig::new(relay.url(&env.database_url), 4)).expect("pool");
    let cut_off = WorkerConfig { worker_id: "worker-cut-off".into(), concurrency: 1, ..config.worker.clone() };
    let _a = env.spawn_worker(pool, cut_off).await;
    let mut events = Vec::new();
    for n in 0..2 {
        let answer = env.post_ordered("order.updated", json!({ "key": "k", "n": n }), "k").await;
        events.push(answer.body["id"].as_str().unwrap().to_owned());
    }
    receiver.wait_until(WAIT, |arrivals| !arrivals.is_empty()).await;
    // A is sending position 0 to a receiver that does not answer, and can no
    // longer extend its lease. Worker B, on Postgres directly, takes the
    // delivery over once the lease has run out.
    relay.freeze();
    let taker = WorkerConfig { worker_id: "worker-taker".into(), ..config.worker.clone() };
    let _b = env.spawn_worker(env.pool.clone(), taker).await;
    for event in &events {
        env.wait_for_status_within(event, "delivered", Duration::from_secs(40)).await;
    }

    let arrivals = receiver.arrivals();
    let positions: Vec<(i64, u32)> = arrivals.iter().map(|arrival| (arrival.n, arrival.seen)).collect();
    assert_eq!(positions, [(0, 1), (0, 2), (1, 1)], "A's attempt, B's repeat of it, then the next event");
    let first = &arrivals[0];
    let Some(ended) = first.ended else {
        panic!("A's request for position 0 is still open, yet position 1 was delivered: {arrivals:#?}")
    };
    for later in &arrivals[1..] {
        assert!(
            later.at > ended,
            "position {} arrived {:?} before A's request for position 0 was dropped",
            later.n,
            ended - later.at
        );
    }
    assert!(ended - first.at < config.worker.lease, "dropped at the lease's end ({:?})", ended - first.at);
    relay.thaw();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_batches_naming_keys_in_opposite_orders_all_commit_in_request_order_per_key() {
    const BATCHES: i64 = 24;
    const PER_KEY: i64 = 3;
    const KEYS: [&str; 3] = ["key-a", "key-b", "key-c"];
    let config = TestConfig { run_worker: false, run_publisher: false, ..Default::default() };
    let env = TestEnv::start_with(config).await;
    // Two endpoints: every event joins two lanes (one per endpoint).
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;

    // Even batches name the keys a, b, c, a, b, c…; odd ones c, b, a, c, b, a….
    let batches = (0..BATCHES).map(|batch| {
        let mut keys = KEYS.to_vec();
        if batch % 2 == 1 {
            keys.reverse();
        }
        let events: Vec<Value> = (0..PER_KEY)
            .flat_map(|n| {
                keys.iter().map(move |key| {
                    let payload = json!({ "batch": batch, "n": n });
                    json!({ "event_type": "order.updated", "payload": payload, "ordering_key": key })
                })
            })
            .collect();
        let env = &env;
        async move { (batch, env.post("/v1/events/batch", json!({ "events": events })).await) }
    });
    let answers: Vec<(i64, Answer)> = futures_util::future::join_all(batches).await;
    for (batch, answer) in &answers {
        assert_eq!(answer.status, 200, "batch {batch} refused (a deadlock is answered 503): {:?}", answer.body);
        assert_eq!(answer.body["accepted"], 3 * PER_KEY, "batch {batch}: {:?}", answer.body);
    }

    // Each lane's positions: the head is position 1, the rest wait by `seq`.
    let client = env.pool.get().await.unwrap();
    let rows = client
        .query(
            "SELECT (e.payload->>'batch')::bigint AS batch, (e.payload->>'n')::bigint AS n,
                    d.endpoint_id::text AS endpoint, d.ordering_key,
                    coalesce(w.seq, CASE WHEN l.head_delivery_id = d.id THEN 1 END) AS position
             FROM relayops.deliveries d
             JOIN relayops.events e ON e.tenant_id = d.tenant_id AND e.id = d.event_id
             LEFT JOIN relayops.ordering_lane_waiting w ON w.tenant_id = d.tenant_id AND w.delivery_id = d.id
             LEFT JOIN relayops.ordering_lanes l ON l.tenant_id = d.tenant_id AND l.endpoint_id = d.endpoint_id
                                                AND l.ordering_key = d.ordering_key
             ORDER BY d.endpoint_id, d.ordering_key, position",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len() as i64, 2 * BATCHES * 3 * PER_KEY, "every event, to both endpoints");
    // Per (endpoint, ordering key): (position, batch, n), by position.
    let mut lanes: HashMap<(String, String), Vec<Taken>> = HashMap::new();
    for row in &rows {
        let position: Option<i64> = row.get("position");
        let position = position.unwrap_or_else(|| panic!("a delivery outside its lane: {row:?}"));
        let lane = (row.get("endpoint"), row.get("ordering_key"));
        lanes.entry(lane).or_default().push(Taken { position, batch: row.get("batch"), n: row.get("n") });
    }
    assert_eq!(lanes.len(), 2 * KEYS.len());
    for (lane, taken) in &lanes {
        let positions: Vec<i64> = taken.iter().map(|taken| taken.position).collect();
        assert_eq!(positions, (1..=BATCHES * PER_KEY).collect::<Vec<_>>(), "{lane:?}: one position each");
        for batch in 0..BATCHES {
            let order: Vec<i64> = taken.iter().filter(|taken| taken.batch == batch).map(|taken| taken.n).collect();
            assert_eq!(order, (0..PER_KEY).collect::<Vec<_>>(), "{lane:?}, batch {batch}: request order");
        }
    }
}

/// A lane position and the event that took it.
struct Taken {
    position: i64,
    batch: i64,
    n: i64,
}
