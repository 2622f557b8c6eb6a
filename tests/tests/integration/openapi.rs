//! The OpenAPI document: generated from the code, committed as
//! `docs/openapi.json`, served at `/openapi.json`, and true to the routes.
use relayops_tests::TestEnv;
use reqwest::Method;
use serde_json::Value;

const REGENERATE: &str = "cargo run -q -p relayops -- openapi > docs/openapi.json";

#[test]
fn the_committed_document_is_the_generated_one() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    let generated = relayops::openapi::document_json();
    assert!(
        committed == generated,
        "docs/openapi.json is not what the code generates; regenerate it with `{REGENERATE}` and commit it"
    );
}

#[test]
fn every_reference_resolves_and_every_error_is_a_problem() {
    let document: Value = serde_json::from_str(&relayops::openapi::document_json()).unwrap();
    assert_eq!(document["openapi"], "3.1.0");
    let text = document.to_string();
    for reference in text.split("\"$ref\":\"").skip(1).map(|rest| &rest[..rest.find('"').unwrap()]) {
        let pointer = reference.strip_prefix('#').expect("local reference");
        assert!(document.pointer(pointer).is_some(), "dangling reference {reference}");
    }
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            for (status, response) in operation["responses"].as_object().unwrap() {
                if status.starts_with('4') || status.starts_with('5') {
                    assert!(
                        response["content"]["application/problem+json"].is_object(),
                        "{method} {path} {status} documents the problem body"
                    );
                }
            }
            let secured = operation["security"].as_array().is_some_and(|s| !s.is_empty());
            let public = ["/v1/auth/login", "/v1/bootstrap", "/openapi.json"].contains(&path.as_str());
            assert_eq!(secured, !public, "{method} {path}: bearer security on every route but the public ones");
        }
    }
}

/// Placeholder ids of the right shape, so a path reaches its handler.
fn concrete(path: &str) -> String {
    let mut out = path.to_owned();
    for (name, prefix) in [("event_id", "evt"), ("delivery_id", "dlv"), ("endpoint_id", "ep"), ("key_id", "key")] {
        out = out.replace(&format!("{{{name}}}"), &format!("{prefix}_{}", "0".repeat(32)));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_serves_the_document_and_routes_every_documented_operation() {
    let env = TestEnv::start().await;
    let served = env.request(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(served.status, 200, "served without credentials");
    assert_eq!(served.content_type, "application/json");
    let generated: Value = serde_json::from_str(&relayops::openapi::document_json()).unwrap();
    assert_eq!(served.body, generated);

    for (path, item) in generated["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let method: Method = method.to_uppercase().parse().unwrap();
            let answer = env.request(method.clone(), &concrete(path), Some(&env.api_key), None).await;
            assert_ne!(answer.status, 405, "{method} {path} is documented but not routed");
            if answer.status == 404 {
                assert_ne!(answer.body["detail"], "route not found", "{method} {path} is documented but not routed");
            }
        }
    }
}
