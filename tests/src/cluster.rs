//! The local three-node RabbitMQ cluster the cluster tests run against
//! (`scripts/cluster-services.sh`, which `make test` runs): its
//! address list, killing one node as a crash would, and bringing it back.
use std::process::Command;

/// The cluster's nodes, in the order `RELAYOPS_AMQP_URL` lists them.
pub const RABBITMQ_NODES: [(&str, u16); 3] =
    [("relayops-c1@localhost", 5681), ("relayops-c2@localhost", 5682), ("relayops-c3@localhost", 5683)];

/// `RELAYOPS_AMQP_URL` for the cluster: one URL per node, comma-separated.
pub fn rabbitmq_cluster_url() -> String {
    RABBITMQ_NODES
        .iter()
        .map(|(_, port)| format!("amqp://guest:guest@127.0.0.1:{port}/%2f"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Starts whatever node of the cluster is down and waits until all three run
/// together (the script is idempotent); panics with the script's output if
/// it cannot.
pub fn ensure_rabbitmq_cluster() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/cluster-services.sh");
    let output = Command::new("bash").arg(script).output().expect("bash");
    assert!(
        output.status.success(),
        "the local RabbitMQ cluster (scripts/cluster-services.sh) is not running: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Kills one node's Erlang VM with SIGKILL (a crash, not a stop) and waits
/// until it is gone.
pub fn kill_rabbitmq_cluster_node(index: usize) {
    crate::kill_rabbitmq_vm(&["-n", RABBITMQ_NODES[index].0]);
}

/// Brings the cluster back to three nodes when dropped (also when the test
/// panics), so the next test finds it whole.
pub struct RestoresRabbitmqCluster;

impl Drop for RestoresRabbitmqCluster {
    fn drop(&mut self) {
        ensure_rabbitmq_cluster();
    }
}
