//! The outbound filter on real deliveries: special addresses are refused before
//! any connection (so nothing leaves this machine), whatever the spelling or
//! the DNS answer; redirects are not followed.
use relayops_tests::{TestConfig, TestEnv};
use serde_json::json;

/// The endpoints are stored while an allow-list opens their addresses (the API
/// refuses special literals otherwise, see `destinations`), as if an operator
/// narrowed the list afterwards; the worker, with the production list, refuses
/// each one when sending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_to_refused_addresses_fail_with_the_reason_and_send_nothing() {
    let mut config = TestConfig { run_worker: false, ..TestConfig::default() };
    config.worker.outbound_allow =
        relayops_shared::net_policy::parse_allow_list("127.0.0.0/8, ::1, 169.254.0.0/16, 10.0.0.0/8, fd00::/8")
            .unwrap();
    let mut env = TestEnv::start_with(config).await;
    let port = env.simulator_url.rsplit(':').next().unwrap().to_owned();
    let urls = [
        format!("http://127.0.0.1:{port}/sim/ok"),
        format!("http://localhost:{port}/sim/ok"),
        format!("http://2130706433:{port}/sim/ok"),
        format!("http://0x7f.0.0.1:{port}/sim/ok"),
        format!("http://[::ffff:127.0.0.1]:{port}/sim/ok"),
        format!("http://[::1]:{port}/sim/ok"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://10.0.0.1/hook".to_owned(),
        "http://[fd00::1]/hook".to_owned(),
    ];
    for (n, url) in urls.iter().enumerate() {
        let answer = env.post("/v1/endpoints", json!({ "url": url, "event_types": [format!("t.e{n}")] })).await;
        assert_eq!(answer.status, 201, "{url}: {:?}", answer.body);
    }
    env.config.worker.outbound_allow = Default::default(); // production: nothing special allowed
    env.start_worker().await;
    let mut events = Vec::new();
    for n in 0..urls.len() {
        events.push(env.post_event(&format!("t.e{n}"), json!({})).await.body["id"].as_str().unwrap().to_owned());
    }
    for (event, url) in events.iter().zip(&urls) {
        let delivery = env.wait_for_status(event, "failed").await;
        assert_eq!(delivery["attempt_count"], 1, "{url}: refused once, never retried");
        let id = delivery["id"].as_str().unwrap();
        let attempts = env.get(&format!("/v1/deliveries/{id}/attempts")).await.body["data"].clone();
        let error = attempts[0]["error"].as_str().unwrap_or_default();
        assert!(error.contains("may not be sent") || error.contains("refused addresses"), "{url}: {error}");
        assert!(attempts[0]["http_status"].is_null());
    }
    assert!(env.simulator.received().is_empty(), "no request reached the receiver");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_not_followed() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/redirect", &["*"], json!({})).await;
    let event = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();
    let delivery = env.wait_for_status(&event, "failed").await;
    assert_eq!(delivery["last_http_status"], 302);
    assert_eq!(delivery["attempt_count"], 1);
    assert_eq!(env.simulator.received().len(), 1, "only the redirecting receiver was called");
}

/// `relayops all` opens its simulator's address and port, nothing else there:
/// another service on the same loopback address stays unreachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_address_and_port_opens_that_port_only() {
    // The API keeps the default (loopback) list, so the endpoints are stored;
    // the worker gets the narrow one.
    let mut env = TestEnv::start_with(TestConfig { run_worker: false, ..TestConfig::default() }).await;
    let simulator: std::net::SocketAddr = env.simulator_url.trim_start_matches("http://").parse().unwrap();
    env.config.worker.outbound_allow =
        relayops_shared::net_policy::parse_allow_list(&simulator.to_string()).expect("address:port");
    env.start_worker().await;
    // Another HTTP service on the same address, another port.
    let other = relayops_simulator::Simulator::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other_port = listener.local_addr().unwrap().port();
    let router = relayops_simulator::router(other.clone());
    tokio::spawn(async move { axum::serve(listener, router).await });

    env.create_endpoint("/sim/ok", &["t.allowed"], json!({})).await;
    for (event_type, url) in [
        ("t.other_port", format!("http://127.0.0.1:{other_port}/sim/ok")),
        ("t.by_name", format!("http://localhost:{}/sim/ok", simulator.port())),
    ] {
        let answer = env.post("/v1/endpoints", json!({ "url": url, "event_types": [event_type] })).await;
        assert_eq!(answer.status, 201, "{url}: {:?}", answer.body);
    }
    let allowed = env.post_event("t.allowed", json!({})).await.body["id"].as_str().unwrap().to_owned();
    env.wait_for_status(&allowed, "delivered").await;
    for event_type in ["t.other_port", "t.by_name"] {
        let event = env.post_event(event_type, json!({})).await.body["id"].as_str().unwrap().to_owned();
        let delivery = env.wait_for_status(&event, "failed").await;
        let error = delivery["last_error"].as_str().unwrap_or_default();
        assert!(error.contains("loopback"), "{event_type}: {error}");
    }
    assert!(other.received().is_empty(), "the other port was never reached");
    assert_eq!(env.simulator.received().len(), 1);
}
