//! The outbound filter on real deliveries: special addresses are refused before
//! any connection (so nothing leaves this machine), whatever the spelling or
//! the DNS answer; redirects are not followed.
use relayops_tests::{TestConfig, TestEnv};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_to_refused_addresses_fail_with_the_reason_and_send_nothing() {
    let mut config = TestConfig::default();
    config.worker.outbound_allow = Vec::new(); // production: nothing special allowed
    let env = TestEnv::start_with(config).await;
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
