//! Past one node: RabbitMQ as a three-node cluster (the local stand-in for
//! Amazon MQ's cluster deployment) and Redis in cluster mode (the stand-in
//! for ElastiCache cluster mode), both from `scripts/cluster-services.sh`.
//! The tests kill a node, so they run with the other `exclusive_` tests, one
//! at a time.
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use relayops_tests::cluster::{self, RABBITMQ_NODES};
use relayops_tests::prometheus::{sample, scrape};
use relayops_tests::{eventually, free_loopback_address, log_file, TestConfig, TestEnv, WAIT};
use serde_json::{json, Value};

use crate::failover::{availability, settled, Load};

const LONG_WAIT: Duration = Duration::from_secs(240);

/// The node every process connects to first is killed with SIGKILL while
/// events flow: its queues keep their replicas on the other two nodes, the
/// worker and the publisher reconnect to another node by themselves (one
/// WARN each naming the node left and the node joined) and go on; ingest
/// answers 201 throughout; every event is delivered, and the duplicates the
/// receiver sees are few and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_a_rabbitmq_cluster_node_killed_under_load_loses_nothing_and_no_process_restarts() {
    tokio::task::spawn_blocking(cluster::ensure_clusters).await.unwrap();
    let _restores = cluster::RestoresClusters;
    let mut config = TestConfig { run_worker: false, run_publisher: false, ..Default::default() };
    config.services.amqp_url = cluster::rabbitmq_cluster_url();
    let env = Arc::new(TestEnv::start_with(config).await);
    env.create_endpoint("/sim/ok", &["load.*"], json!({})).await;

    // Every queue of the namespace is a quorum queue with a member on each node.
    let (first_node, first_port) = RABBITMQ_NODES[0];
    let queues: Vec<Value> = serde_json::from_str(&relayops_tests::rabbitmqctl_on(
        RABBITMQ_NODES[1].0,
        &["list_queues", "name", "members", "--formatter", "json"],
    ))
    .expect("queue list");
    let ours: Vec<&Value> =
        queues.iter().filter(|q| q["name"].as_str().is_some_and(|n| n.starts_with(&env.broker.namespace))).collect();
    assert!(ours.len() >= 10, "the namespace's queues are declared: {ours:?}");
    for queue in &ours {
        assert_eq!(queue["members"].as_array().map(Vec::len), Some(3), "replicated to every node: {queue}");
    }

    let (worker_log, publisher_log) = (log_file("cluster-worker"), log_file("cluster-publisher"));
    let mut worker = env.spawn_role_logging("worker", &[], Some(&worker_log));
    let mut publisher = env.spawn_role_logging("publisher", &[], Some(&publisher_log));
    env.post_event("load.first", json!({ "before": "the kill" })).await;
    env.simulator.wait_until(WAIT, |received| !received.is_empty()).await;

    // About 50 events a second throughout.
    let load = Load::start(&env, 5, Duration::from_millis(100));
    tokio::time::sleep(Duration::from_secs(3)).await; // traffic before the fault
    load.outage(true);
    tokio::task::spawn_blocking(|| cluster::kill_rabbitmq_cluster_node(0)).await.unwrap();
    let killed = Instant::now();
    let marker = env.post_event("load.marker", json!({ "after": "the kill" })).await;
    assert_eq!(marker.status, 201, "{:?}", marker.body);
    env.wait_for_status(marker.body["id"].as_str().expect("event id"), "delivered").await;
    let resumed = killed.elapsed();
    load.outage(false);
    tokio::time::sleep(Duration::from_secs(3)).await; // traffic after
    let tally = load.finish().await;

    let expected = tally.accepted.len() as i64 + 2;
    let counts = settled(&env, expected, LONG_WAIT).await;
    assert_eq!(counts.get("delivered"), Some(&expected), "every delivery delivered: {counts:?}");
    let received = env.simulator.received();
    let distinct: HashSet<_> = received.iter().filter_map(|r| r.delivery_id.clone()).collect();
    assert_eq!(distinct.len() as i64, expected, "the receiver saw every delivery");
    let duplicates = received.len() - distinct.len();
    println!(
        "rabbitmq node {first_node} killed: delivery resumed {:.1} s after, {} events, {} requests at the receiver ({duplicates} duplicates), first answers {:?} / {:?}",
        resumed.as_secs_f64(),
        tally.accepted.len() + 2,
        received.len(),
        tally.during_outage,
        tally.outside,
    );
    assert!(duplicates <= 16, "duplicates bounded by what was in flight: {duplicates}");
    assert_eq!(availability(&tally.during_outage), 1.0, "ingest answered 201 through the kill: {tally:?}");
    assert!(tally.during_outage.values().sum::<u64>() > 0, "events were posted while the node was down");

    for (role, process, log) in [("worker", &mut worker, &worker_log), ("publisher", &mut publisher, &publisher_log)] {
        assert!(process.exited(Duration::ZERO).await.is_none(), "the {role} kept running");
        let text = std::fs::read_to_string(log).unwrap();
        let switches: Vec<&str> =
            text.lines().filter(|line| line.contains("connected to another node of the cluster")).collect();
        assert_eq!(switches.len(), 1, "the {role} logs its switch once: {text}");
        assert!(switches[0].contains(&format!("\"left\":\"127.0.0.1:{first_port}\"")), "{}", switches[0]);
    }
}

/// The slow endpoints' `max_in_flight` in the Redis cluster test.
const MAX_IN_FLIGHT: u32 = 2;
const WORKERS: u32 = 2;

/// Readiness of a worker's operations port says `"redis": state`.
async fn wait_for_redis_state(env: &TestEnv, base: &str, state: &str) {
    eventually(LONG_WAIT, || async {
        let answer = env.http.get(format!("{base}/health/ready")).send().await.map_err(|error| error.to_string())?;
        let body: Value = answer.json().await.map_err(|error| error.to_string())?;
        if body["redis"] == state {
            Ok(())
        } else {
            Err(format!("{base}: {body}, wanted redis {state}"))
        }
    })
    .await;
}

/// Flow control on a Redis cluster in cluster mode: the tenant bucket and
/// every endpoint's lease live in their keys' hash slots across the masters,
/// and two workers share each endpoint's `max_in_flight`. A master is killed
/// with SIGKILL while events flow: its replica takes over, the keys of its
/// slots are decided per process meanwhile (an endpoint there may see
/// `max_in_flight` × workers), the other masters' keys stay shared (never
/// more than `max_in_flight`), ingest answers 201 throughout, every event is
/// delivered once, and the shared limits resume on the new master without
/// any process restarting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_a_redis_cluster_master_killed_under_load_degrades_only_its_slots_and_loses_nothing() {
    tokio::task::spawn_blocking(cluster::ensure_clusters).await.unwrap();
    let _restores = cluster::RestoresClusters;
    let mut config = TestConfig { run_worker: false, ..Default::default() };
    config.flow.redis_url = cluster::redis_cluster_url();
    config.flow.redis_cluster = true;
    let env = Arc::new(TestEnv::start_with(config).await);
    let prefix = env.config.flow.key_prefix.clone();

    // Slow endpoints until their leases live on two masters at least (the
    // slot a key lands in is the key's hash: no choice of ours).
    let mut endpoints: Vec<(String, u16)> = Vec::new(); // (simulator path, its lease's master)
    let mut masters: BTreeMap<u16, usize> = BTreeMap::new();
    let mut victim_key = None;
    for n in 0..24 {
        let path = format!("/sim/slow/{}", 100 + n);
        let endpoint = env.create_endpoint(&path, &["load.*"], json!({ "max_in_flight": MAX_IN_FLIGHT })).await;
        let key = format!("{prefix}:endpoint-lease:{}", endpoint["id"].as_str().expect("endpoint id"));
        let master = cluster::redis_master_of(&key, None).expect("the cluster is whole");
        *masters.entry(master).or_default() += 1;
        endpoints.push((path, master));
        victim_key.get_or_insert(key);
        if masters.len() >= 2 && endpoints.len() >= 3 {
            break;
        }
    }
    assert!(masters.len() >= 2, "24 endpoints' keys all on one master: {masters:?}");
    // The first endpoint's master is killed; the others' keys are on it or not.
    let (victim_key, victim) = (victim_key.expect("an endpoint"), endpoints[0].1);

    let mut bases = Vec::new();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let ops = free_loopback_address();
        workers.push(env.spawn_role("worker", &[("RELAYOPS_WORKER_HEALTH_LISTEN", ops.as_str())]));
        bases.push(format!("http://{ops}"));
    }
    for base in &bases {
        wait_for_redis_state(&env, base, "ok").await;
    }
    env.post_event("load.first", json!({ "before": "the kill" })).await;
    env.simulator.wait_until(WAIT, |received| !received.is_empty()).await;
    let tenant_key = format!("{prefix}:tenant:{}", env.tenant_id);
    assert!(cluster::redis_master_of(&tenant_key, None).is_some());

    // About 20 events a second, each to every endpoint: more than two at a
    // time would be open at a 100 ms endpoint if nothing held them back.
    let load = Load::start(&env, 2, Duration::from_millis(100));
    tokio::time::sleep(Duration::from_secs(3)).await; // traffic before the fault
    load.outage(true);
    tokio::task::spawn_blocking(move || cluster::kill_redis_node(victim)).await.unwrap();
    let failover = tokio::task::spawn_blocking(move || {
        cluster::wait_for_redis_failover(victim, &victim_key, Duration::from_secs(60))
    })
    .await
    .unwrap();
    let killed_for = Instant::now();
    for base in &bases {
        wait_for_redis_state(&env, base, "ok").await;
    }
    let shared_again = killed_for.elapsed() + failover;
    load.outage(false);
    let mut local_before = Vec::new();
    for base in &bases {
        local_before.push(sample(&scrape(&env.http, base).await, "relayops_flow_local_decisions_total", &[]));
    }
    tokio::time::sleep(Duration::from_secs(3)).await; // traffic after
    let tally = load.finish().await;

    let expected = (tally.accepted.len() as i64 + 1) * endpoints.len() as i64;
    let counts = settled(&env, expected, LONG_WAIT).await;
    assert_eq!(counts.get("delivered"), Some(&expected), "every delivery delivered: {counts:?}");
    let received = env.simulator.received();
    let distinct: HashSet<_> = received.iter().filter_map(|r| r.delivery_id.clone()).collect();
    assert_eq!(distinct.len() as i64, expected, "the receiver saw every delivery");
    assert_eq!(received.len(), distinct.len(), "a Redis failover sends nothing twice");
    assert_eq!(availability(&tally.during_outage), 1.0, "ingest answered 201 through the kill: {tally:?}");
    assert!(tally.during_outage.values().sum::<u64>() > 0, "events were posted while the master was down");

    let peaks: Vec<(String, bool, u32)> = endpoints
        .iter()
        .map(|(path, master)| (path.clone(), *master == victim, env.simulator.max_in_flight(path)))
        .collect();
    println!(
        "redis cluster master :{victim} killed under load: its replica served its slots {:.1} s after, \
         shared limits everywhere {:.1} s after; {} events, {expected} deliveries, 0 duplicates; \
         endpoint peaks (path, on the killed master, peak in flight): {peaks:?}",
        failover.as_secs_f64(),
        shared_again.as_secs_f64(),
        tally.accepted.len() + 1,
    );
    for (path, on_victim, peak) in &peaks {
        if *on_victim {
            assert!(*peak <= MAX_IN_FLIGHT * WORKERS, "{path}: {peak} at once, past the per-process caps");
        } else {
            assert!(*peak <= MAX_IN_FLIGHT, "{path}: {peak} at once although its master never failed");
        }
    }

    // Shared limits resumed on the new master: the workers decide nothing locally any more.
    for (base, before) in bases.iter().zip(local_before) {
        let after = sample(&scrape(&env.http, base).await, "relayops_flow_local_decisions_total", &[]);
        assert_eq!(after, before, "{base} decides in Redis again after the failover");
        assert_eq!(sample(&scrape(&env.http, base).await, "relayops_flow_degraded", &[]), 0.0);
    }
    for (n, process) in workers.iter_mut().enumerate() {
        assert!(process.exited(Duration::ZERO).await.is_none(), "worker {n} kept running");
    }
}

/// The event ids a list of events answers.
async fn listed_events(env: &TestEnv) -> Vec<String> {
    let answer = env.get("/v1/events?limit=100").await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    answer.body["data"].as_array().expect("data").iter().map(|event| event["id"].as_str().unwrap().to_owned()).collect()
}

async fn reads_served_by(env: &TestEnv, pool: &str) -> f64 {
    sample(&scrape(&env.http, &env.api_url).await, "relayops_db_reads_total", &[("pool", pool)])
}

/// A Postgres reader (a streaming standby, the local stand-in for an RDS
/// reader endpoint): list reads go to it and may lag by its replay, while a
/// GET by id of something just created is found (the writer is asked when
/// the reader has not replayed it). A stopped reader sends the reads to the
/// writer (200s, never a 500), and they return to the reader once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_list_reads_go_to_a_postgres_reader_and_to_the_writer_when_it_lags_or_stops() {
    tokio::task::spawn_blocking(cluster::ensure_clusters).await.unwrap();
    let _restores = cluster::RestoresClusters;
    let mut config = TestConfig::default();
    config.services.reader_port = Some(cluster::POSTGRES_STANDBY_PORT);
    let env = TestEnv::start_with(config).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let first = env.post_event("reader.first", json!({ "n": 1 })).await.body["id"].as_str().unwrap().to_owned();
    eventually(WAIT, || async {
        let listed = listed_events(&env).await;
        listed.contains(&first).then_some(()).ok_or(format!("{first} not listed yet: {listed:?}"))
    })
    .await;
    assert!(reads_served_by(&env, "reader").await > 0.0, "lists are read from the reader");

    // Replay paused: the reader lags. A list may not show what was just
    // posted; the event itself and its deliveries are found by id.
    let paused = tokio::task::spawn_blocking(cluster::PausedReplay::begin).await.unwrap();
    let second = env.post_event("reader.second", json!({ "n": 2 })).await.body["id"].as_str().unwrap().to_owned();
    let listed = listed_events(&env).await;
    assert!(listed.contains(&first) && !listed.contains(&second), "the list is the lagging reader's: {listed:?}");
    let writer_reads = reads_served_by(&env, "writer").await;
    let by_id = env.get(&format!("/v1/events/{second}")).await;
    assert_eq!((by_id.status, by_id.body["id"].as_str()), (200, Some(second.as_str())), "{:?}", by_id.body);
    let fanned_out = env.get(&format!("/v1/events/{second}/deliveries")).await;
    assert_eq!(fanned_out.body["data"].as_array().map(Vec::len), Some(1), "{:?}", fanned_out.body);
    assert!(reads_served_by(&env, "writer").await >= writer_reads + 2.0, "the lookups by id asked the writer");
    let missing = env.get(&format!("/v1/events/evt_{}", uuid::Uuid::new_v4().simple())).await;
    assert_eq!(missing.status, 404, "{:?}", missing.body);
    drop(paused);
    eventually(WAIT, || async {
        let listed = listed_events(&env).await;
        listed.contains(&second).then_some(()).ok_or(format!("{second} not listed after replay resumed"))
    })
    .await;

    // The reader stopped: lists are answered from the writer, current.
    tokio::task::spawn_blocking(|| cluster::standby_cluster(&["stop", "-m", "fast"])).await.unwrap();
    let third = env.post_event("reader.third", json!({ "n": 3 })).await.body["id"].as_str().unwrap().to_owned();
    let writer_reads = reads_served_by(&env, "writer").await;
    let listed = listed_events(&env).await;
    assert!(listed.contains(&third), "a list with the reader down is the writer's: {listed:?}");
    let deliveries = env.get("/v1/deliveries").await;
    assert_eq!(deliveries.status, 200, "{:?}", deliveries.body);
    assert!(reads_served_by(&env, "writer").await >= writer_reads + 2.0, "both lists were read from the writer");

    // The reader back: lists return to it within the retry interval.
    tokio::task::spawn_blocking(cluster::ensure_clusters).await.unwrap();
    let reader_reads = reads_served_by(&env, "reader").await;
    eventually(WAIT, || async {
        listed_events(&env).await;
        let now = reads_served_by(&env, "reader").await;
        (now > reader_reads).then_some(()).ok_or(format!("lists still on the writer ({now} reader reads)"))
    })
    .await;
}
