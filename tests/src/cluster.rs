//! The local clusters the cluster tests run against
//! (`scripts/cluster-services.sh`, which `make test` runs): a three-node
//! RabbitMQ, a Redis cluster in cluster mode (three masters, a replica each)
//! and a streaming standby of the Postgres server. Their addresses, killing
//! or stopping one node as a crash or an operator would, and bringing it back.
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

/// Starts whatever node of the clusters is down and waits until each cluster
/// is whole again (the script is idempotent); panics with the script's output
/// if it cannot.
pub fn ensure_clusters() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/cluster-services.sh");
    let output = Command::new("bash").arg(script).output().expect("bash");
    assert!(
        output.status.success(),
        "the local clusters (scripts/cluster-services.sh) are not running: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Kills one node's Erlang VM with SIGKILL (a crash, not a stop) and waits
/// until it is gone.
pub fn kill_rabbitmq_cluster_node(index: usize) {
    crate::kill_rabbitmq_vm(&["-n", RABBITMQ_NODES[index].0]);
}

/// Brings the clusters back to every node when dropped (also when the test
/// panics), so the next test finds them whole.
pub struct RestoresClusters;

impl Drop for RestoresClusters {
    fn drop(&mut self) {
        ensure_clusters();
    }
}

/// The Redis cluster's nodes: masters first as formed, then their replicas
/// (a failover swaps the roles).
pub const REDIS_CLUSTER_PORTS: [u16; 6] = [7001, 7002, 7003, 7004, 7005, 7006];

/// `RELAYOPS_REDIS_URL` for the Redis cluster: its first three nodes as
/// seeds (the client learns the rest from them).
pub fn redis_cluster_url() -> String {
    REDIS_CLUSTER_PORTS[..3].iter().map(|port| format!("redis://127.0.0.1:{port}")).collect::<Vec<_>>().join(",")
}

/// `redis-cli -p port args…`: its output, or `None` when the node does not answer.
pub fn redis_cli(port: u16, args: &[&str]) -> Option<String> {
    let output = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    (output.status.success() && !text.starts_with("Could not connect")).then_some(text)
}

/// A node of the cluster that answers and says the cluster is whole.
fn healthy_node(except: Option<u16>) -> Option<u16> {
    REDIS_CLUSTER_PORTS
        .iter()
        .copied()
        .filter(|port| Some(*port) != except)
        .find(|port| redis_cli(*port, &["cluster", "info"]).is_some_and(|info| info.contains("cluster_state:ok")))
}

/// The port of the master serving `key`'s hash slot now, as a healthy node
/// of the cluster sees it (`None` while no node says the cluster is whole).
pub fn redis_master_of(key: &str, except: Option<u16>) -> Option<u16> {
    let node = healthy_node(except)?;
    let slot: u16 = redis_cli(node, &["cluster", "keyslot", key])?.trim().parse().ok()?;
    let nodes = redis_cli(node, &["cluster", "nodes"])?;
    nodes.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let is_live_master = fields.get(2)?.split(',').any(|flag| flag == "master")
            && !fields[2].contains("fail")
            && fields.get(7) == Some(&"connected");
        let serves = fields.iter().skip(8).any(|range| {
            let mut bounds = range.split('-').map(|bound| bound.parse::<u16>());
            match (bounds.next(), bounds.next()) {
                (Some(Ok(first)), Some(Ok(last))) => (first..=last).contains(&slot),
                (Some(Ok(only)), None) => only == slot,
                _ => false,
            }
        });
        let port = fields.get(1)?.split('@').next()?.rsplit(':').next()?.parse().ok()?;
        (is_live_master && serves).then_some(port)
    })
}

/// Kills the Redis node on `port` with SIGKILL (a crash, not a stop).
pub fn kill_redis_node(port: u16) {
    let info = redis_cli(port, &["info", "server"]).expect("the node answers");
    let pid = info.lines().find_map(|line| line.strip_prefix("process_id:")).expect("process_id in INFO").trim();
    let status = Command::new("kill").args(["-KILL", pid]).status().expect("kill");
    assert!(status.success(), "kill -KILL {pid}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while redis_cli(port, &["ping"]).is_some() {
        assert!(Instant::now() < deadline, "redis :{port} still answers after SIGKILL");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the cluster is whole without the node on `killed` (a replica
/// took over its slots) and serves `key` from another master; returns how
/// long that took.
pub fn wait_for_redis_failover(killed: u16, key: &str, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if let Some(master) = redis_master_of(key, Some(killed)) {
            if master != killed {
                return started.elapsed();
            }
        }
        assert!(started.elapsed() < within, "no replica took over from :{killed} within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The streaming standby of the Postgres server on :5432 (the local stand-in
/// for an RDS/Aurora reader endpoint).
pub const POSTGRES_STANDBY_PORT: u16 = 5434;

/// `pg_ctlcluster <version> standby <args>`: e.g. `["stop", "-m", "fast"]`.
pub fn standby_cluster(args: &[&str]) {
    let status = Command::new("pg_ctlcluster")
        .arg(crate::postgres_version().to_string())
        .arg("standby")
        .args(args)
        .stdout(Stdio::null())
        .status();
    assert!(status.is_ok_and(|s| s.success()), "pg_ctlcluster standby {args:?} failed");
}

/// Runs `sql` on the standby as the `postgres` superuser (e.g.
/// `SELECT pg_wal_replay_pause()`).
pub fn standby_sql(sql: &str) {
    let port = POSTGRES_STANDBY_PORT.to_string();
    let status = Command::new("runuser")
        .args(["-u", "postgres", "--", "psql", "-X", "-q", "-h", "/var/run/postgresql", "-p", &port, "-c", sql])
        .stdout(Stdio::null())
        .status();
    assert!(status.is_ok_and(|s| s.success()), "psql on the standby: {sql}");
}

/// Replay paused on the standby (it lags the writer by everything written
/// since) until dropped.
pub struct PausedReplay;

impl PausedReplay {
    pub fn begin() -> Self {
        standby_sql("SELECT pg_wal_replay_pause()");
        Self
    }
}

impl Drop for PausedReplay {
    fn drop(&mut self) {
        if Command::new("pg_isready")
            .args(["-q", "-h", "127.0.0.1", "-p", &POSTGRES_STANDBY_PORT.to_string()])
            .status()
            .is_ok_and(|s| s.success())
        {
            standby_sql("SELECT pg_wal_replay_resume()");
        }
    }
}
