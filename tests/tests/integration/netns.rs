//! The connect-time guard on addresses loopback cannot show: receivers listen
//! on private and link-local addresses (10.x, 192.168.x, 169.254.169.254) in a
//! network namespace this test creates, and host names resolve there through
//! the worker's own `/etc/hosts` (a private mount namespace; the machine's file
//! is untouched). With the production allow-list every delivery is refused
//! and no connection reaches a listener; with the allow-list naming those
//! ranges (the control) the same deliveries arrive, signed. Root only (CI runs
//! as root); exclusive because it adds routes to the machine while it runs.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use relayops_shared::net_policy::parse_allow_list;
use relayops_tests::netns::{is_root, TestNetns};
use relayops_tests::{TestConfig, TestEnv};
use serde_json::json;

/// Accepts connections and counts them (the guard's promise is about
/// connections, not only requests).
struct CountingListener {
    inner: tokio::net::TcpListener,
    accepted: Arc<AtomicUsize>,
}

impl axum::serve::Listener for CountingListener {
    type Io = tokio::net::TcpStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            if let Ok(connection) = self.inner.accept().await {
                self.accepted.fetch_add(1, Ordering::SeqCst);
                return connection;
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// (host name, address inside the namespace, what the refusal must name).
const RECEIVERS: [(&str, &str, &str); 3] = [
    ("metadata.relayops.test", "169.254.169.254", "169.254.0.0/16"),
    ("private10.relayops.test", "10.213.77.2", "10.0.0.0/8"),
    ("private192.relayops.test", "192.168.213.2", "192.168.0.0/16"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_names_resolving_to_private_and_link_local_receivers_are_refused_unless_allowed() {
    if !is_root() {
        eprintln!("SKIPPED: creating a network namespace needs root (CI runs as root)");
        return;
    }
    let namespace =
        TestNetns::create("rops-ssrf", "10.213.77.1/24", &["10.213.77.2/24", "192.168.213.2/24", "169.254.169.254/32"])
            .expect("network namespace");
    let simulator = relayops_simulator::Simulator::new();
    let mut counts = Vec::new();
    for (_, address, _) in RECEIVERS {
        let listener = namespace.bind(format!("{address}:8080").parse().unwrap()).expect("bind inside");
        let accepted = Arc::new(AtomicUsize::new(0));
        let listener = CountingListener { inner: tokio::net::TcpListener::from_std(listener).unwrap(), accepted };
        counts.push(Arc::clone(&listener.accepted));
        let router = relayops_simulator::router(simulator.clone());
        tokio::spawn(async move { axum::serve(listener, router).await });
    }
    let hosts = std::env::temp_dir().join(format!("relayops-netns-hosts-{}", std::process::id()));
    let lines: Vec<String> = RECEIVERS.iter().map(|(name, address, _)| format!("{address} {name}")).collect();
    std::fs::write(&hosts, format!("127.0.0.1 localhost\n{}\n", lines.join("\n"))).unwrap();

    let mut config = TestConfig { run_worker: false, ..TestConfig::default() };
    config.worker.outbound_allow = Default::default(); // production
    let mut env = TestEnv::start_with(config).await;
    for (n, (name, _, _)) in RECEIVERS.iter().enumerate() {
        let url = format!("http://{name}:8080/sim/ok");
        // Created (201): names are judged when connecting.
        env.create_endpoint_on(&simulator, &url, &[&format!("t.r{n}")], json!({})).await;
    }

    // Production: each name resolves inward, so nothing is dialled.
    let mut worker = env.spawn_role_with_hosts("worker", &[], &hosts);
    for (n, (name, _, range)) in RECEIVERS.iter().enumerate() {
        let event = env.post_event(&format!("t.r{n}"), json!({ "n": n })).await.body["id"].as_str().unwrap().to_owned();
        let delivery = env.wait_for_status(&event, "failed").await;
        let error = delivery["last_error"].as_str().unwrap_or_default();
        assert!(error.contains(name) && error.contains("refused addresses") && error.contains(range), "{error}");
        assert_eq!(delivery["attempt_count"], 1);
    }
    let refused: Vec<usize> = counts.iter().map(|count| count.load(Ordering::SeqCst)).collect();
    assert_eq!(refused, [0, 0, 0], "no connection reached any listener");
    assert!(simulator.received().is_empty());
    worker.kill();

    // The control: the allow-list names those ranges, and the same deliveries arrive.
    env.config.worker.outbound_allow =
        parse_allow_list("169.254.169.254/32, 10.213.77.0/24, 192.168.213.0/24").unwrap();
    let _worker = env.spawn_role_with_hosts("worker", &[], &hosts);
    for n in 0..RECEIVERS.len() {
        let event = env.post_event(&format!("t.r{n}"), json!({ "n": n })).await.body["id"].as_str().unwrap().to_owned();
        env.wait_for_status(&event, "delivered").await;
    }
    let allowed: Vec<usize> = counts.iter().map(|count| count.load(Ordering::SeqCst)).collect();
    assert!(allowed.iter().all(|&count| count >= 1), "each receiver was connected to: {allowed:?}");
    let received = simulator.received();
    assert_eq!(received.len(), RECEIVERS.len());
    assert!(received.iter().all(|request| request.verified_by >= 1), "each request was signed");
    let _ = std::fs::remove_file(&hosts);
}
