//! The tenant console's protocol over plain HTTP: CSRF refusals, the session
//! cookie's attributes and expiry, the Content-Security-Policy, tenant
//! isolation on every route, bulk replay's dry run. (What a person sees and
//! clicks is in `console_browser`.)
use std::time::Duration;

use relayops_tests::console::{cookie_from, no_redirects, submit_login, ConsoleClient};
use relayops_tests::{eventually, TestConfig, TestEnv};
use reqwest::header::{CONTENT_SECURITY_POLICY, LOCATION};
use serde_json::{json, Value};

/// An endpoint whose first attempt per delivery fails (503) with one attempt
/// allowed, so its deliveries die; a replay then delivers them.
async fn dead_delivery(env: &TestEnv) -> (String, String, String) {
    let endpoint = env.create_endpoint("/sim/flaky/1", &["order.*"], json!({ "max_attempts": 1 })).await;
    let event_id =
        env.post_event("order.created", json!({ "order_id": 7 })).await.body["id"].as_str().unwrap().to_owned();
    let dead = env.wait_for_status(&event_id, "dead").await;
    (endpoint["id"].as_str().unwrap().to_owned(), event_id, dead["id"].as_str().unwrap().to_owned())
}

async fn status_of(env: &TestEnv, delivery_id: &str) -> Value {
    env.get(&format!("/v1/deliveries/{delivery_id}")).await.body["status"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_form_without_the_csrf_token_is_refused_and_changes_nothing() {
    let env = TestEnv::start().await;
    let (_, _, delivery_id) = dead_delivery(&env).await;
    let console = ConsoleClient::sign_in(&env.api_url, &env.admin_email, &env.admin_password).await;
    let path = format!("/console/deliveries/{delivery_id}/replay");

    let missing = console.post(&path, &[]).await;
    assert_eq!(missing.status(), 403, "no token");
    let wrong = console.post(&path, &[("csrf", "forged-token")]).await;
    assert_eq!(wrong.status(), 403, "a wrong token");
    assert_eq!(status_of(&env, &delivery_id).await, "dead", "nothing was replayed");

    // Another session's token (another user's) does not work in this one.
    let account = env.second_account().await;
    let other = ConsoleClient::sign_in(&env.api_url, &account.email, &account.password).await;
    assert_eq!(console.post(&path, &[("csrf", &other.csrf().await)]).await.status(), 403, "another session's token");
    assert_eq!(status_of(&env, &delivery_id).await, "dead", "nothing was replayed");

    let accepted = console.post(&path, &[("csrf", &console.csrf().await)]).await;
    assert_eq!(accepted.status(), 303, "with the session's token");
    assert_eq!(accepted.headers()[LOCATION], format!("/console/deliveries/{delivery_id}?replayed=1"));
    let event = env.get(&format!("/v1/deliveries/{delivery_id}")).await.body["event_id"].as_str().unwrap().to_owned();
    env.wait_for_status(&event, "delivered").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_sign_in_needs_its_form_token_and_right_password() {
    let env = TestEnv::start().await;
    let http = no_redirects();
    let url = format!("{}/console/login", env.api_url);
    let credentials = [("email", env.admin_email.as_str()), ("password", env.admin_password.as_str())];
    let without_cookie = http.post(&url).form(&credentials).send().await.unwrap();
    assert_eq!(without_cookie.status(), 403, "no double-submit token");
    assert!(cookie_from(&without_cookie, "relayops_session").is_none());

    let (_, wrong_password) = submit_login(&http, &env.api_url, &env.admin_email, "not-the-password", &[]).await;
    assert_eq!(wrong_password.status(), 401);
    assert!(cookie_from(&wrong_password, "relayops_session").is_none());
    assert!(wrong_password.text().await.unwrap().contains("invalid email or password"));

    // Not signed in: every page sends the browser to the sign-in form.
    let page = http.get(format!("{}/console/deliveries", env.api_url)).send().await.unwrap();
    assert_eq!(page.status(), 303);
    assert_eq!(page.headers()[LOCATION], "/console/login");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_pages_forbid_scripts_and_the_session_cookie_is_http_only_and_strict() {
    let env = TestEnv::start().await;
    let console = ConsoleClient::sign_in(&env.api_url, &env.admin_email, &env.admin_password).await;
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console", "Max-Age="] {
        assert!(console.set_cookie.contains(attribute), "{attribute} in {}", console.set_cookie);
    }
    assert!(!console.set_cookie.contains("Secure"), "plain HTTP: no Secure flag ({})", console.set_cookie);
    for path in
        ["/console/endpoints", "/console/deliveries", "/console/dead-letters", "/console/events", "/console/api-keys"]
    {
        let response = console.request(reqwest::Method::GET, path, None).await;
        assert_eq!(response.status(), 200, "{path}");
        let policy = response.headers()[CONTENT_SECURITY_POLICY].to_str().unwrap().to_owned();
        assert!(policy.contains("script-src 'none'") && policy.contains("default-src 'none'"), "{path}: {policy}");
        let html = response.text().await.unwrap();
        assert!(!html.contains("<script"), "{path} has no script");
        assert!(!html.contains(" style="), "{path} has no inline style (the CSP would block it)");
    }

    // Behind HTTPS (API Gateway says so), the cookie is Secure.
    let behind_https = [("x-forwarded-proto", "https")];
    let (login_set_cookie, signed_in) =
        submit_login(&no_redirects(), &env.api_url, &env.admin_email, &env.admin_password, &behind_https).await;
    assert!(login_set_cookie.contains("; Secure"), "{login_set_cookie}");
    let (_, session) = cookie_from(&signed_in, "relayops_session").unwrap();
    assert!(session.contains("; Secure") && session.contains("HttpOnly"), "{session}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_session_ends_when_its_token_expires_and_on_sign_out() {
    let mut config = TestConfig::default();
    config.auth.jwt_ttl = Duration::from_secs(1);
    let env = TestEnv::start_with(config).await;
    let console = ConsoleClient::sign_in(&env.api_url, &env.admin_email, &env.admin_password).await;
    assert!(console.set_cookie.contains("Max-Age=1"), "the cookie lives as long as the token: {}", console.set_cookie);
    let (status, _) = console.get("/console/endpoints").await;
    assert_eq!(status, 200, "a fresh session works");
    // The token's expiry (plus the verifier's 5 s leeway) passes.
    eventually(Duration::from_secs(20), || async {
        let response = console.request(reqwest::Method::GET, "/console/endpoints", None).await;
        match response.headers().get(LOCATION) {
            Some(location) if response.status() == 303 && location == "/console/login?expired=1" => Ok(()),
            _ => Err(format!("still signed in: {}", response.status())),
        }
    })
    .await;

    let env = TestEnv::start().await;
    let console = ConsoleClient::sign_in(&env.api_url, &env.admin_email, &env.admin_password).await;
    let out = console.post("/console/logout", &[("csrf", &console.csrf().await)]).await;
    assert_eq!(out.status(), 303);
    assert_eq!(out.headers()[LOCATION], "/console/login");
    let (cleared, _) = cookie_from(&out, "relayops_session").unwrap();
    assert_eq!(cleared, "", "the session cookie is removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_of_another_tenant_finds_none_of_this_tenants_objects() {
    let env = TestEnv::start().await;
    let (endpoint_id, event_id, delivery_id) = dead_delivery(&env).await;
    let keys = env.get("/v1/api-keys").await.body["data"].clone();
    let key_id = keys[0]["id"].as_str().unwrap().to_owned();

    let account = env.second_account().await;
    let b = ConsoleClient::sign_in(&env.api_url, &account.email, &account.password).await;
    let csrf = b.csrf().await;

    for path in [
        format!("/console/endpoints/{endpoint_id}"),
        format!("/console/deliveries/{delivery_id}"),
        format!("/console/events/{event_id}"),
    ] {
        let (status, page) = b.get(&path).await;
        assert_eq!(status, 404, "{path}");
        assert!(!page.contains(&env.simulator_url) && !page.contains("order.created"), "{path} shows nothing of A");
    }
    for path in [
        format!("/console/deliveries/{delivery_id}/replay"),
        format!("/console/endpoints/{endpoint_id}/rotate-secret"),
        format!("/console/api-keys/{key_id}/revoke"),
    ] {
        assert_eq!(b.post(&path, &[("csrf", &csrf)]).await.status(), 404, "{path}");
    }
    let disable =
        b.post(&format!("/console/endpoints/{endpoint_id}/enabled"), &[("csrf", &csrf), ("enabled", "false")]).await;
    assert_eq!(disable.status(), 404);
    for path in ["/console/deliveries", "/console/dead-letters", "/console/events", "/console/endpoints"] {
        let (status, page) = b.get(path).await;
        assert_eq!(status, 200, "{path}");
        assert!(!page.contains(&delivery_id) && !page.contains(&event_id) && !page.contains(&endpoint_id), "{path}");
    }
    let preview = b.post("/console/dead-letters/replay-preview", &[("csrf", &csrf)]).await.text().await.unwrap();
    assert!(preview.contains("<strong>0</strong> dead deliveries match"), "{preview}");

    // Tenant A's objects are as they were.
    assert_eq!(status_of(&env, &delivery_id).await, "dead");
    assert_eq!(env.get(&format!("/v1/endpoints/{endpoint_id}")).await.body["enabled"], true);
    assert!(env.get("/v1/api-keys").await.body["data"][0]["revoked_at"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_bulk_replay_shows_the_dry_run_count_before_replaying() {
    let env = TestEnv::start().await;
    let endpoint = env.create_endpoint("/sim/flaky/1", &["order.*"], json!({ "max_attempts": 1 })).await;
    let mut events = Vec::new();
    for order in 0..3 {
        let answer = env.post_event("order.created", json!({ "order_id": order })).await;
        events.push(answer.body["id"].as_str().unwrap().to_owned());
    }
    for event in &events {
        env.wait_for_status(event, "dead").await;
    }
    let console = ConsoleClient::sign_in(&env.api_url, &env.admin_email, &env.admin_password).await;
    let csrf = console.csrf().await;
    let filters = [("csrf", csrf.as_str()), ("endpoint", endpoint["id"].as_str().unwrap()), ("event_type", "")];

    let preview = console.post("/console/dead-letters/replay-preview", &filters).await;
    assert_eq!(preview.status(), 200);
    let preview = preview.text().await.unwrap();
    assert!(preview.contains("<strong>3</strong> dead deliveries match"), "{preview}");
    assert!(preview.contains("Replay 3 deliveries"), "{preview}");
    for event in &events {
        assert_eq!(env.wait_for_status(event, "dead").await["status"], "dead", "the dry run changed nothing");
    }

    let replayed = console.post("/console/dead-letters/replay", &filters).await.text().await.unwrap();
    assert!(replayed.contains("<strong>3</strong> deliveries are back in line"), "{replayed}");
    for event in &events {
        assert_eq!(env.wait_for_status(event, "delivered").await["attempt_count"], 2);
    }
}
