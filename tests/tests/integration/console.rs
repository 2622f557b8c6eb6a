//! The tenant console's protocol over plain HTTP: CSRF refusals, the session
//! cookies' attributes and expiry, links and forms from another site, the Content-Security-Policy, tenant
//! isolation on every route, bulk replay's dry run, blocked ordering lanes
//! and their skip (bad input and another tenant's ids change nothing).
//! (What a person sees and clicks is in `console_browser`.)
use std::time::Duration;

use relayops_tests::console::{cookie_from, no_redirects, submit_login, ConsoleClient, Initiator};
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
    // And clears no cookie it was not sent: a request that arrives without
    // the session cookie must not delete a good session.
    assert!(page.headers().get(reqwest::header::SET_COOKIE).is_none(), "{:?}", page.headers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_pages_forbid_scripts_and_the_session_cookies_are_http_only_lax_to_open_and_strict_to_change() {
    let env = TestEnv::start().await;
    let console = ConsoleClient::sign_in(&env.api_url, &env.admin_email, &env.admin_password).await;
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/console", "Max-Age="] {
        assert!(console.set_cookie.contains(attribute), "{attribute} in {}", console.set_cookie);
    }
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console", "Max-Age="] {
        assert!(console.strict_set_cookie.contains(attribute), "{attribute} in {}", console.strict_set_cookie);
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

    // Behind HTTPS (API Gateway says so), the cookies are Secure.
    let behind_https = [("x-forwarded-proto", "https")];
    let (login_set_cookie, signed_in) =
        submit_login(&no_redirects(), &env.api_url, &env.admin_email, &env.admin_password, &behind_https).await;
    assert!(login_set_cookie.contains("; Secure"), "{login_set_cookie}");
    for name in ["relayops_session", "relayops_session_strict"] {
        let (_, session) = cookie_from(&signed_in, name).unwrap();
        assert!(session.contains("; Secure") && session.contains("HttpOnly"), "{session}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_from_another_site_opens_a_console_page_and_a_form_from_another_site_changes_nothing() {
    let env = TestEnv::start().await;
    let (_, _, delivery_id) = dead_delivery(&env).await;
    let console = ConsoleClient::sign_in(&env.api_url, &env.admin_email, &env.admin_password).await;
    let page = format!("/console/deliveries/{delivery_id}");

    // A link in mail or chat: the browser sends only the Lax cookie.
    let opened = console.request_from(Initiator::CrossSiteNavigation, reqwest::Method::GET, &page, None).await;
    assert_eq!(opened.status(), 200, "the page opens signed in");
    assert!(opened.headers().get(reqwest::header::SET_COOKIE).is_none(), "no cookie is touched");
    assert!(opened.text().await.unwrap().contains(&delivery_id));

    // A form that did not start on the console changes nothing, even with
    // the session's CSRF token and the Lax cookie (a browser would not even
    // send that one on another site's POST).
    let csrf = console.csrf().await;
    let replay = format!("{page}/replay");
    let cross = console
        .request_from(Initiator::CrossSiteNavigation, reqwest::Method::POST, &replay, Some(&[("csrf", &csrf)]))
        .await;
    assert_eq!(cross.status(), 403, "no strict cookie, no change");
    assert!(cross.headers().get(reqwest::header::SET_COOKIE).is_none(), "the good session is kept");
    let cookieless =
        no_redirects().post(format!("{}{replay}", env.api_url)).form(&[("csrf", &csrf)]).send().await.unwrap();
    assert_eq!(cookieless.status(), 303, "no cookie at all: to the sign-in page");
    assert!(cookieless.headers().get(reqwest::header::SET_COOKIE).is_none());
    assert_eq!(status_of(&env, &delivery_id).await, "dead", "nothing was replayed");

    // The session goes on, and the same form from the console works.
    let replayed = console.post(&replay, &[("csrf", &csrf)]).await;
    assert_eq!(replayed.status(), 303);
    assert_ne!(status_of(&env, &delivery_id).await, "dead", "replayed from the console itself");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_session_ends_when_its_token_expires_and_on_sign_out() {
    let mut config = TestConfig::default();
    config.auth.session_lifetime = Duration::from_secs(1);
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
    let other_browser = ConsoleClient::sign_in(&env.api_url, &env.admin_email, &env.admin_password).await;
    let csrf = console.csrf().await;
    let out = console.post("/console/logout", &[("csrf", &csrf)]).await;
    assert_eq!(out.status(), 303);
    assert_eq!(out.headers()[LOCATION], "/console/login");
    for name in ["relayops_session", "relayops_session_strict"] {
        let (cleared, _) = cookie_from(&out, name).unwrap();
        assert_eq!(cleared, "", "the session cookie {name} is removed");
    }

    // The session ended server-side: the old cookie value, kept (a copy from
    // a shared machine or a proxy log), opens no page, posts no form (with
    // its CSRF token) and is no bearer token.
    let page = console.request(reqwest::Method::GET, "/console/endpoints", None).await;
    assert_eq!(page.status(), 303, "the old cookie opens nothing");
    assert_eq!(page.headers()[LOCATION], "/console/login?expired=1");
    for name in ["relayops_session", "relayops_session_strict"] {
        let (cleared, _) = cookie_from(&page, name).expect("the dead cookies it was sent are cleared");
        assert_eq!(cleared, "");
    }
    let keys_before = env.count("api_keys").await;
    let form = console.post("/console/api-keys", &[("csrf", &csrf), ("name", "after sign-out")]).await;
    assert_eq!(form.status(), 303, "the old cookie posts nothing");
    assert_eq!(env.count("api_keys").await, keys_before, "no key was created");
    let bearer = env.request(reqwest::Method::GET, "/v1/endpoints", Some(&console.session_cookie), None).await;
    bearer.expect_problem(401);
    let (status, _) = other_browser.get("/console/endpoints").await;
    assert_eq!(status, 200, "a session in another browser goes on");

    // "Sign out everywhere" ends that one too.
    let everywhere = other_browser.post("/console/logout-everywhere", &[("csrf", &other_browser.csrf().await)]).await;
    assert_eq!(everywhere.status(), 303);
    let page = other_browser.request(reqwest::Method::GET, "/console/endpoints", None).await;
    assert_eq!(page.status(), 303, "every session ended");
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

/// The endpoint's blocked lanes as the API lists them.
async fn blocked_lanes(env: &TestEnv, endpoint_id: &str) -> Value {
    let answer = env.get(&format!("/v1/endpoints/{endpoint_id}/blocked-lanes")).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    answer.body["data"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_endpoint_page_lists_a_blocked_lane_whose_skip_moves_it_on() {
    let env = TestEnv::start().await;
    let lane = env.block_a_lane("order-7", 3).await;
    let (endpoint_id, dead_id) = (lane.endpoint_id.as_str(), lane.dead_delivery.as_str());
    let console = ConsoleClient::sign_in(&env.api_url, &env.admin_email, &env.admin_password).await;
    let endpoint_page = format!("/console/endpoints/{endpoint_id}");

    let (status, page) = console.get(&endpoint_page).await;
    assert_eq!(status, 200);
    assert!(page.contains(&format!(r#"<tr data-lane="order-7" data-delivery="{dead_id}">"#)), "{page}");
    assert!(page.contains(&format!(r#"href="/console/deliveries/{dead_id}""#)), "a link to the dead delivery");
    assert!(page.contains(r#"<td class="num waiting">2</td>"#), "two wait behind it: {page}");
    assert!(page.contains(&format!(r#"action="/console/deliveries/{dead_id}/skip""#)), "a skip form");
    assert!(page.contains("the lane waits for a replay or a skip"), "the endpoint's setting is shown");

    // The ordering key shows on the delivery and filters the delivery log.
    let (_, delivery_page) = console.get(&format!("/console/deliveries/{dead_id}")).await;
    assert!(delivery_page.contains("<code>order-7</code>"), "{delivery_page}");
    assert!(delivery_page.contains(&format!(r#"href="/console/endpoints/{endpoint_id}#blocked-lanes""#)));
    let (status, log) = console.get("/console/deliveries?ordering_key=order-7").await;
    assert_eq!(status, 200);
    assert_eq!(log.matches("<tr data-delivery=").count(), 3, "the key's three deliveries: {log}");
    let (_, other_key) = console.get("/console/deliveries?ordering_key=order-8").await;
    assert!(other_key.contains("No deliveries match."), "{other_key}");
    let (status, refused) = console.get("/console/deliveries?ordering_key=%20padded").await;
    assert_eq!(status, 400);
    assert!(refused.contains("ordering key"), "the message names the field: {refused}");

    // Skip: the lane goes on, its next deliveries reach the receiver in order.
    let skipped =
        console.post(&format!("/console/deliveries/{dead_id}/skip"), &[("csrf", &console.csrf().await)]).await;
    assert_eq!(skipped.status(), 303);
    assert_eq!(skipped.headers()[LOCATION], format!("{endpoint_page}?skipped=1"));
    for event in &lane.events[1..] {
        env.wait_for_status(event, "delivered").await;
    }
    let positions: Vec<i64> = lane.receiver.arrivals().iter().map(|arrival| arrival.n).collect();
    assert_eq!(positions, [0, 1, 2]);
    assert_eq!(status_of(&env, dead_id).await, "dead", "the skipped delivery stays dead");
    let (_, page) = console.get(&format!("{endpoint_page}?skipped=1")).await;
    assert!(page.contains(r#"id="skipped""#) && page.contains(r#"id="no-blocked-lanes""#), "{page}");
    assert_eq!(blocked_lanes(&env, endpoint_id).await, json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_skip_of_another_tenants_or_an_unblocked_delivery_is_refused_and_changes_nothing() {
    let env = TestEnv::start().await;
    let lane = env.block_a_lane("order-7", 2).await;
    let (endpoint_id, dead_id) = (lane.endpoint_id.as_str(), lane.dead_delivery.as_str());
    let waiting = env.wait_for_status(&lane.events[1], "scheduled").await;
    let waiting_id = waiting["id"].as_str().unwrap();
    let before = blocked_lanes(&env, endpoint_id).await;
    assert_eq!(before[0]["delivery_id"], dead_id, "{before:?}");

    // Tenant B: A's endpoint page and A's delivery are not found.
    let account = env.second_account().await;
    let b = ConsoleClient::sign_in(&env.api_url, &account.email, &account.password).await;
    let (status, page) = b.get(&format!("/console/endpoints/{endpoint_id}")).await;
    assert_eq!(status, 404);
    assert!(!page.contains("order-7") && !page.contains(dead_id), "{page}");
    let answer = b.post(&format!("/console/deliveries/{dead_id}/skip"), &[("csrf", &b.csrf().await)]).await;
    assert_eq!(answer.status(), 404);
    assert!(answer.text().await.unwrap().contains("No such delivery in this tenant."));

    // Tenant A, with bad input: an unknown id, a malformed one, a delivery
    // waiting in the lane (not its dead head), and no CSRF token.
    let console = ConsoleClient::sign_in(&env.api_url, &env.admin_email, &env.admin_password).await;
    let csrf = console.csrf().await;
    for id in [format!("dlv_{}", uuid::Uuid::now_v7().simple()), "not-an-id".to_owned()] {
        let answer = console.post(&format!("/console/deliveries/{id}/skip"), &[("csrf", &csrf)]).await;
        assert_eq!(answer.status(), 404, "{id}");
        assert!(answer.text().await.unwrap().contains("No such delivery in this tenant."), "{id}");
    }
    let answer = console.post(&format!("/console/deliveries/{waiting_id}/skip"), &[("csrf", &csrf)]).await;
    assert_eq!(answer.status(), 409);
    let message = answer.text().await.unwrap();
    assert!(message.contains("this delivery is scheduled and holds no blocked ordering lane"), "{message}");
    assert_eq!(console.post(&format!("/console/deliveries/{dead_id}/skip"), &[]).await.status(), 403, "no token");

    // Nothing moved: the lane is held as it was, nothing behind it was sent.
    assert_eq!(blocked_lanes(&env, endpoint_id).await, before);
    assert_eq!(status_of(&env, dead_id).await, "dead");
    assert_eq!(status_of(&env, waiting_id).await, "scheduled");
    assert!(lane.receiver.arrivals().iter().all(|arrival| arrival.n == 0), "nothing sent past the dead delivery");
}

/// The endpoints list's filter and order come from the address bar: one it
/// does not know is a 400 page naming what it takes, not an empty list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_endpoint_filter_or_order_is_refused_with_what_it_takes() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;
    let console = ConsoleClient::sign_in(&env.api_url, &env.admin_email, &env.admin_password).await;
    let (status, page) = console.get("/console/endpoints?health=broken").await;
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("failing, degraded, recovering, disabled, healthy, idle"), "{page}");
    let (status, page) = console.get("/console/endpoints?sort=oldest").await;
    assert_eq!(status, 400, "{page}");
    let (status, page) = console.get("/console/endpoints?sort=url&health=idle").await;
    assert_eq!(status, 200, "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_console_path_answers_the_consoles_own_404_page_with_its_headers() {
    let env = TestEnv::start().await;
    let console = ConsoleClient::sign_in(&env.api_url, &env.admin_email, &env.admin_password).await;
    let anonymous = no_redirects();
    for (method, path, signed_in) in [
        (reqwest::Method::GET, "/console/no-such-page", true),
        (reqwest::Method::GET, "/console/endpoints/ep_1/no-such-view", true),
        (reqwest::Method::POST, "/console/no-such-action", true),
        (reqwest::Method::GET, "/console/no-such-page", false),
    ] {
        let response = if signed_in {
            console.request(method.clone(), path, None).await
        } else {
            anonymous.request(method.clone(), format!("{}{path}", env.api_url)).send().await.unwrap()
        };
        assert_eq!(response.status(), 404, "{method} {path}");
        let headers = response.headers();
        let policy = headers[CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(policy.contains("script-src 'none'") && policy.contains("frame-ancestors 'none'"), "{path}: {policy}");
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(headers["referrer-policy"], "same-origin", "{path}");
        assert_eq!(headers["cache-control"], "no-store", "{path}");
        assert!(headers["content-type"].to_str().unwrap().starts_with("text/html"), "{path}");
        assert!(response.text().await.unwrap().contains("No such page"), "{path}");
    }
    // The API's own unknown paths still answer its JSON problem.
    let api = anonymous.get(format!("{}/v1/no-such-thing", env.api_url)).send().await.unwrap();
    assert_eq!(api.status(), 404);
    assert!(api.headers()["content-type"].to_str().unwrap().contains("json"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_pages_name_a_favicon_that_is_served() {
    let env = TestEnv::start().await;
    let console = ConsoleClient::sign_in(&env.api_url, &env.admin_email, &env.admin_password).await;
    let page = console.request(reqwest::Method::GET, "/console/endpoints", None).await.text().await.unwrap();
    assert!(page.contains(r#"rel="icon""#) && page.contains("/console/assets/favicon.svg"), "{page}");
    let icon = no_redirects().get(format!("{}/console/assets/favicon.svg", env.api_url)).send().await.unwrap();
    assert_eq!(icon.status(), 200);
    assert_eq!(icon.headers()["content-type"], "image/svg+xml");
    assert!(icon.text().await.unwrap().starts_with("<svg"));
}

/// The account page's password form, posted; the status and page.
async fn change_password(console: &ConsoleClient, csrf: &str, current: &str, new: &str, again: &str) -> (u16, String) {
    let fields = [("csrf", csrf), ("current_password", current), ("new_password", new), ("confirm_password", again)];
    let response = console.post("/console/account/password", &fields).await;
    (response.status().as_u16(), response.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_password_change_ends_the_other_sessions_and_keeps_this_one() {
    let env = TestEnv::start().await;
    let console = ConsoleClient::sign_in(&env.api_url, &env.admin_email, &env.admin_password).await;
    let other_browser = ConsoleClient::sign_in(&env.api_url, &env.admin_email, &env.admin_password).await;
    let (status, page) = console.get("/console/account").await;
    assert_eq!(status, 200);
    assert!(page.contains(&env.admin_email), "the account page names who is signed in");
    let csrf = console.csrf().await;
    let new = "a-new-password-1";

    let (status, page) = change_password(&console, &csrf, &env.admin_password, new, "a-new-password-2").await;
    assert_eq!(status, 422, "{page}");
    assert!(page.contains("differ"), "{page}");
    let (status, page) = change_password(&console, &csrf, "not-the-password", new, new).await;
    assert_eq!(status, 403, "{page}");
    assert!(page.contains("current password is wrong"), "{page}");
    assert_eq!(other_browser.get("/console/endpoints").await.0, 200, "nothing changed yet");

    let (status, page) = change_password(&console, &csrf, &env.admin_password, new, new).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(r#"id="password-changed""#), "{page}");
    assert_eq!(console.get("/console/endpoints").await.0, 200, "this session goes on");
    let ended = other_browser.request(reqwest::Method::GET, "/console/endpoints", None).await;
    assert_eq!(ended.status(), 303, "the other browser's session ended");
    assert_eq!(ended.headers()[LOCATION], "/console/login?expired=1");
    ConsoleClient::sign_in(&env.api_url, &env.admin_email, new).await;
}
