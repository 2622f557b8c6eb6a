//! The local three-node RabbitMQ cluster the cluster tests run against
//! (`scripts/cluster-services.sh`, which `scripts/services.sh` runs): its
//! address list, killing one node as a crash would, and bringing it back.
use std::process::{Command, Stdio};
use std::time::Duration;

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

/// Runs `rabbitmqctl` against one node of the cluster; its standard output.
pub fn rabbitmqctl_on(node: &str, args: &[&str]) -> String {
    let output = Command::new("rabbitmqctl").arg("-q").arg("-n").arg(node).args(args).output().expect("rabbitmqctl");
    assert!(output.status.success(), "rabbitmqctl -n {node} {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Kills one node's Erlang VM with SIGKILL (a crash, not a stop) and waits
/// until its AMQP port refuses connections.
pub fn kill_rabbitmq_cluster_node(index: usize) {
    let (node, port) = RABBITMQ_NODES[index];
    let pid: String = rabbitmqctl_on(node, &["eval", "os:getpid()."]).chars().filter(char::is_ascii_digit).collect();
    assert!(!pid.is_empty(), "no pid for {node}");
    let killed = Command::new("kill").args(["-KILL", &pid]).stdout(Stdio::null()).status();
    assert!(killed.is_ok_and(|s| s.success()), "kill -KILL {pid} ({node}) failed");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(std::time::Instant::now() < deadline, "{node} still answers after kill -9");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Brings the cluster back to three nodes when dropped (also when the test
/// panics), so the next test finds it whole.
pub struct RestoresRabbitmqCluster;

impl Drop for RestoresRabbitmqCluster {
    fn drop(&mut self) {
        ensure_rabbitmq_cluster();
    }
}
