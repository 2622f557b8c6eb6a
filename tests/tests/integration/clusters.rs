//! Past one node: RabbitMQ as a three-node cluster (the local stand-in for
//! Amazon MQ's cluster deployment, `scripts/cluster-services.sh`). The test
//! kills a node, so it runs with the other `exclusive_` tests, one at a time.
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use relayops_tests::cluster::{self, RABBITMQ_NODES};
use relayops_tests::{log_file, TestConfig, TestEnv, WAIT};
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
    tokio::task::spawn_blocking(cluster::ensure_rabbitmq_cluster).await.unwrap();
    let _restores = cluster::RestoresRabbitmqCluster;
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
