//! Deliveries to HTTPS receivers: the certificate is verified against the
//! URL's host name (also the SNI sent) while the connection goes to the
//! resolver's pinned, SSRF-checked address; operators add private roots with
//! `RELAYOPS_OUTBOUND_CA_FILE`; HTTP/2 is used when the receiver offers it; a
//! certificate for another host, an expired one or one from an unknown CA is
//! refused with a `last_error` that says so.
use relayops_simulator::Simulator;
use relayops_tests::https::{HttpsReceiver, LeafKind, TestCa};
use relayops_tests::{TestConfig, TestEnv};
use serde_json::{json, Value};

async fn env_trusting(ca: &TestCa) -> TestEnv {
    let mut config = TestConfig::default();
    config.worker.outbound_ca_files = vec![ca.write_pem()];
    TestEnv::start_with(config).await
}

/// An endpoint at `https://localhost:<port>/sim/ok` whose secret `simulator` knows.
async fn https_endpoint(env: &TestEnv, receiver: &HttpsReceiver, simulator: &Simulator, event_type: &str) -> Value {
    let url = format!("https://localhost:{}/sim/ok", receiver.port);
    let answer = env.post("/v1/endpoints", json!({ "url": url, "event_types": [event_type], "max_attempts": 1 })).await;
    assert_eq!(answer.status, 201, "{:?}", answer.body);
    simulator.register_secret(answer.body["secret"].as_str().unwrap()).unwrap();
    answer.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_receiver_gets_a_verified_http2_delivery_with_the_url_host_as_sni() {
    let ca = TestCa::new("receivers' private CA");
    let env = env_trusting(&ca).await;
    let simulator = Simulator::new();
    let receiver =
        HttpsReceiver::start(ca.leaf(LeafKind::For(&["localhost"])), relayops_simulator::router(simulator.clone()))
            .await;
    https_endpoint(&env, &receiver, &simulator, "order.created").await;

    let answer = env.post_event("order.created", json!({ "order": 1 })).await;
    assert_eq!(answer.status, 201);
    let delivery = env.wait_for_status(answer.body["id"].as_str().unwrap(), "delivered").await;
    assert_eq!(delivery["last_http_status"], 200);

    let received = simulator.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].signature_valid, Some(true), "the receiver verified the signature");
    let sessions = receiver.sessions();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0].sni.as_deref(), Some("localhost"), "SNI is the URL's host, not the pinned address");
    assert_eq!(sessions[0].alpn.as_deref(), Some("h2"));
    assert_eq!(receiver.versions(), vec!["HTTP/2.0".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_for_another_host_expired_or_from_an_unknown_ca_are_refused_with_a_clear_last_error() {
    let ca = TestCa::new("receivers' private CA");
    let env = env_trusting(&ca).await;
    let stranger = TestCa::new("nobody's CA");
    let cases = [
        ("cert.wrong_host", ca.leaf(LeafKind::For(&["receiver.example"])), "not valid for name \"localhost\""),
        ("cert.expired", ca.leaf(LeafKind::Expired(&["localhost"])), "certificate expired"),
        ("cert.unknown_ca", stranger.leaf(LeafKind::For(&["localhost"])), "UnknownIssuer"),
    ];
    let mut running = Vec::new();
    for (event_type, leaf, expected) in cases {
        let simulator = Simulator::new();
        let receiver = HttpsReceiver::start(leaf, relayops_simulator::router(simulator.clone())).await;
        https_endpoint(&env, &receiver, &simulator, event_type).await;
        let answer = env.post_event(event_type, json!({})).await;
        assert_eq!(answer.status, 201);
        running.push((answer.body["id"].as_str().unwrap().to_owned(), expected, simulator, receiver));
    }
    for (event_id, expected, simulator, _receiver) in &running {
        let delivery = env.wait_for_status(event_id, "dead").await;
        let last_error = delivery["last_error"].as_str().unwrap_or_default();
        assert!(last_error.contains("invalid peer certificate"), "{last_error}");
        assert!(last_error.contains(expected), "expected {expected:?} in {last_error:?}");
        assert!(simulator.received().is_empty(), "nothing reached the receiver");
    }
}
