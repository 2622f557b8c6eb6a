//! Endpoint URLs naming a special address are refused when they are set —
//! at creation and on `PATCH` — with a 422 naming the range, by the same
//! judgement (and allow-list) the worker applies before sending. Host names
//! stay a connect-time matter (`ssrf`, `netns`).
use relayops_shared::net_policy::parse_allow_list;
use relayops_tests::{TestConfig, TestEnv};
use serde_json::json;

/// The outside suite's list, and the other special forms, with the range each
/// refusal must name.
const SPECIAL: &[(&str, &str)] = &[
    ("http://169.254.169.254/latest/meta-data/", "169.254.0.0/16"),
    ("http://169.254.170.2/v2/credentials", "169.254.0.0/16"),
    ("http://[fd00:ec2::254]/latest/meta-data/", "fc00::/7"),
    ("http://10.0.0.1/", "10.0.0.0/8"),
    ("http://172.16.0.1/", "172.16.0.0/12"),
    ("http://192.168.1.1/", "192.168.0.0/16"),
    ("http://100.64.0.1/", "100.64.0.0/10"),
    ("http://198.18.0.1/", "198.18.0.0/15"),
    ("http://224.0.0.1/", "224.0.0.0/4"),
    ("http://255.255.255.255/", "broadcast (240.0.0.0/4)"),
    ("http://0.0.0.0/", "0.0.0.0/8"),
    ("http://127.0.0.1:8080/", "127.0.0.0/8"),
    ("http://2130706433/", "127.0.0.0/8"),
    ("http://[fe80::1]/", "fe80::/10"),
    ("http://[fc00::1]/", "fc00::/7"),
    ("http://[ff02::1]/", "ff00::/8"),
    ("http://[64:ff9b::7f00:1]/", "127.0.0.0/8) address inside NAT64 (64:ff9b::/96)"),
    ("http://[64:ff9b::a9fe:a9fe]/", "169.254.0.0/16) address inside NAT64"),
    ("http://[2002:7f00:1::]/", "127.0.0.0/8) address inside 6to4 (2002::/16)"),
    ("http://[2002:a00:1::]/", "10.0.0.0/8) address inside 6to4"),
    ("http://[::ffff:127.0.0.1]/", "inside an IPv4-mapped address (::ffff:0:0/96)"),
    ("http://[::ffff:a9fe:a9fe]/", "169.254.0.0/16) address inside an IPv4-mapped"),
    ("http://[::1]/", "loopback (::1)"),
    ("http://[::]/", "unspecified (::)"),
];

fn production() -> TestConfig {
    let mut config = TestConfig { run_worker: false, ..TestConfig::default() };
    config.worker.outbound_allow = Default::default();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_address_literals_are_refused_at_creation_naming_the_range() {
    let env = TestEnv::start_with(production()).await;
    for (url, range) in SPECIAL {
        let detail = env.post("/v1/endpoints", json!({ "url": url, "event_types": ["*"] })).await.expect_problem(422);
        assert!(detail.starts_with("url: "), "{url}: {detail}");
        assert!(detail.contains(range), "{url}: `{detail}` should name {range}");
    }
    for malformed in ["http:///nohost", "http:nohost", "http:/nohost", "http://@example.com/", "http://exa mple.com/"] {
        let detail =
            env.post("/v1/endpoints", json!({ "url": malformed, "event_types": ["*"] })).await.expect_problem(422);
        assert!(detail.starts_with("url: "), "{malformed}: {detail}");
    }
    assert_eq!(env.count("webhook_endpoints").await, 0, "nothing stored");
    // Names are judged when connecting, on what they resolve to then.
    let by_name = env.post("/v1/endpoints", json!({ "url": "http://localhost:9/", "event_types": ["*"] })).await;
    assert_eq!(by_name.status, 201, "{:?}", by_name.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_address_literals_are_refused_on_patch_and_the_url_stays() {
    let env = TestEnv::start_with(production()).await;
    let created = env.post("/v1/endpoints", json!({ "url": "https://example.com/hook", "event_types": ["*"] })).await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let path = format!("/v1/endpoints/{}", created.body["id"].as_str().unwrap());
    let patch = |body| env.request(reqwest::Method::PATCH, &path, Some(&env.api_key), Some(body));
    for (url, range) in SPECIAL {
        let detail = patch(json!({ "url": url, "description": "changed" })).await.expect_problem(422);
        assert!(detail.contains(range), "{url}: `{detail}` should name {range}");
    }
    patch(json!({ "url": "http:///nohost" })).await.expect_problem(422);
    let stored = env.get(&path).await.body;
    assert_eq!(stored["url"], "https://example.com/hook", "a refused change changes nothing");
    assert_eq!(stored["description"], "");
    let moved = patch(json!({ "url": "https://example.org/other" })).await;
    assert_eq!(moved.status, 200, "{:?}", moved.body);
}

/// The operator's allow-list opens at creation exactly what it opens when
/// sending: a range (any port), or one address and port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_allow_list_opens_literals_at_creation_as_it_does_when_sending() {
    let mut config = production();
    config.worker.outbound_allow = parse_allow_list("10.20.0.0/16, 127.0.0.1:18090, fd00:ec2::/64").unwrap();
    let env = TestEnv::start_with(config).await;
    let create = |url: &'static str| env.post("/v1/endpoints", json!({ "url": url, "event_types": ["*"] }));
    for opened in ["http://10.20.1.1:8000/hook", "http://127.0.0.1:18090/sim/ok", "http://[fd00:ec2::254]/"] {
        let answer = create(opened).await;
        assert_eq!(answer.status, 201, "{opened}: {:?}", answer.body);
    }
    for (closed, range) in [
        ("http://10.21.0.1/", "10.0.0.0/8"),
        ("http://127.0.0.1:5432/", "127.0.0.0/8"),
        ("http://[fd00:ec3::1]/", "fc00::/7"),
    ] {
        let detail = create(closed).await.expect_problem(422);
        assert!(detail.contains(range), "{closed}: {detail}");
    }
}

/// What the API documents is what it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_text_says_special_addresses_are_refused_with_422() {
    let env = TestEnv::start_with(production()).await;
    let document = env.request(reqwest::Method::GET, "/openapi.json", None, None).await.body;
    for schema in ["CreateEndpointRequest", "UpdateEndpointRequest"] {
        let description = document["components"]["schemas"][schema]["properties"]["url"]["description"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(description.contains("special address") && description.contains("422"), "{schema}: {description}");
    }
    for (path, method) in [("/v1/endpoints", "post"), ("/v1/endpoints/{endpoint_id}", "patch")] {
        let refusal = &document["paths"][path][method]["responses"]["422"]["description"];
        assert!(refusal.as_str().is_some_and(|text| text.contains("special address")), "{method} {path}: {refusal}");
    }
    let (url, _) = SPECIAL[0];
    env.post("/v1/endpoints", json!({ "url": url, "event_types": ["*"] })).await.expect_problem(422);
}
