//! The tenant console in a real headless browser (Debian's chromium through
//! chromedriver): a person signs in, sees the failing endpoint marked failing,
//! opens its dead delivery, replays it and sees it delivered; a `<script>` in
//! a payload shows as text; another tenant finds nothing; a blocked ordering
//! lane is skipped with a click and the next delivery reaches its receiver;
//! a link from another site opens a page signed in while a form from there
//! changes nothing; a guesser at another address cannot lock the owner out.
//! Screenshots of the main pages land in `<target>/console-screenshots/`.
use fantoccini::Locator;
use relayops_tests::browser::{another_site, Browser};
use relayops_tests::console::submit_login;
use relayops_tests::TestEnv;
use serde_json::json;

const XSS: &str = r#"<script>document.title='pwned'</script><img src=x onerror="document.title='pwned'">"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_in_a_browser_finds_the_failing_endpoint_and_replays_its_dead_delivery() {
    let env = TestEnv::start().await;
    let healthy = env.create_endpoint("/sim/ok", &["order.*"], json!({ "description": "fulfilment" })).await;
    // Fails the first attempt of each delivery (503) and allows one: dead.
    let failing =
        env.create_endpoint("/sim/flaky/1", &["order.*"], json!({ "max_attempts": 1, "description": "billing" })).await;
    let (healthy_id, failing_id) = (healthy["id"].as_str().unwrap(), failing["id"].as_str().unwrap());
    // Three orders: each delivered to one endpoint and dead at the other.
    let mut dead_ones = Vec::new();
    for order_id in [1001, 1002, 1003] {
        let event = env.post_event("order.created", json!({ "order_id": order_id, "total": "42.00" })).await;
        let event_id = event.body["id"].as_str().unwrap().to_owned();
        let settled = env
            .wait_for_deliveries(&event_id, |all| {
                all.len() == 2 && all.iter().all(|d| matches!(d["status"].as_str(), Some("delivered" | "dead")))
            })
            .await;
        dead_ones.push(settled.into_iter().find(|d| d["status"] == "dead").expect("a dead delivery"));
    }
    let dead = &dead_ones[0];
    let dead_id = dead["id"].as_str().unwrap().to_owned();
    assert_eq!(dead["endpoint_id"], failing_id);

    let browser = Browser::start(&env.api_url, 1280).await;
    browser.sign_in(&env.admin_email, &env.admin_password).await;
    assert_eq!(browser.path().await, "/console/endpoints", "signed in, on the endpoints page");

    // The failing endpoint is marked failing, the other healthy.
    let card = |id: &str| format!(r#"section.endpoint[data-endpoint="{id}"]"#);
    let failing_card = browser.client.find(Locator::Css(&card(failing_id))).await.expect("failing endpoint card");
    assert_eq!(failing_card.attr("data-health").await.unwrap().as_deref(), Some("failing"));
    let badge = failing_card.find(Locator::Css(".health")).await.unwrap().text().await.unwrap();
    assert_eq!(badge.to_lowercase(), "failing");
    let healthy_card = browser.client.find(Locator::Css(&card(healthy_id))).await.unwrap();
    assert_eq!(healthy_card.attr("data-health").await.unwrap().as_deref(), Some("healthy"));
    assert_eq!(browser.client.find_all(Locator::Css("svg.chart rect")).await.unwrap().len(), 2, "one bar each");
    browser.screenshot("endpoints").await;

    // Dead letters → the delivery → every attempt.
    browser.click(r#"header nav a[href="/console/dead-letters"]"#).await;
    browser.wait_for("form.bulk").await;
    assert_eq!(browser.path().await, "/console/dead-letters");
    browser.screenshot("dead-letters").await;
    let row = format!(r#"tr[data-delivery="{dead_id}"]"#);
    assert_eq!(browser.text(&format!("{row} td.event-type")).await, "order.created", "the event type is listed");
    browser.click(&format!("{row} a")).await;
    browser.wait_for("#status").await;
    assert_eq!(browser.path().await, format!("/console/deliveries/{dead_id}"));
    assert_eq!(browser.text("header nav a.current").await, "Dead letters", "still in the section it came from");
    assert_eq!(browser.text("#status").await, "dead");
    let attempt = browser.text(r#"details.attempt[data-attempt="1"] summary"#).await;
    assert!(attempt.contains("HTTP 503"), "{attempt}");
    let headers = browser.text(r#"details.attempt[data-attempt="1"] table.headers"#).await;
    assert!(headers.contains(&dead_id) && headers.contains("webhook-id"), "headers sent: {headers}");
    assert!(!headers.contains("v1,"), "the signature is never shown: {headers}");
    assert!(browser.text("pre.payload").await.contains("\"order_id\": 1001"));
    browser.screenshot("delivery-dead").await;

    // Replay it, and watch it become delivered: the page follows it by
    // itself, nobody reloads it.
    browser.click("#replay").await;
    browser.wait_for("p.notice").await;
    assert_eq!(browser.path().await, format!("/console/deliveries/{dead_id}"));
    browser.wait_for_status_shown("delivered").await;
    assert!(browser.text("p.notice").await.contains("now delivered"), "{}", browser.text("p.notice").await);
    assert_eq!(browser.text("header nav a.current").await, "Dead letters");
    assert_eq!(browser.client.find_all(Locator::Css("details.attempt")).await.unwrap().len(), 2);
    browser.screenshot("delivery-replayed").await;
    assert_eq!(env.get(&format!("/v1/deliveries/{dead_id}")).await.body["status"], "delivered");

    // The endpoint is no longer marked failing (one delivered of four in
    // the hour): it works again, and the list can show only the endpoints
    // in that state.
    browser.goto("/console/endpoints").await;
    let recovered = browser.client.find(Locator::Css(&card(failing_id))).await.unwrap();
    assert_eq!(recovered.attr("data-health").await.unwrap().as_deref(), Some("recovering"));
    browser.click(r#"nav.toolbar a[data-filter="recovering"]"#).await;
    browser.wait_for("nav.toolbar a.current[data-filter]").await;
    let shown = browser.client.find_all(Locator::Css("section.endpoint")).await.unwrap();
    assert_eq!(shown.len(), 1, "only the recovering endpoint");
    assert_eq!(shown[0].attr("data-endpoint").await.unwrap().as_deref(), Some(failing_id));

    // The other pages a person walks through.
    browser.goto(&format!("/console/endpoints/{failing_id}")).await;
    assert!(browser.text("main").await.contains("order.*"), "subscriptions shown");
    browser.screenshot("endpoint").await;
    browser.goto("/console/deliveries").await;
    assert_eq!(browser.client.find_all(Locator::Css("tr[data-delivery]")).await.unwrap().len(), 6);
    browser.screenshot("deliveries").await;
    browser.goto("/console/events").await;
    browser.screenshot("events").await;

    // An API key: the secret is shown once and works; revoking stops it.
    browser.goto("/console/api-keys").await;
    let form = browser.client.form(Locator::Css("form.create")).await.unwrap();
    form.set_by_name("name", "browser-made key").await.unwrap();
    form.submit().await.unwrap();
    let key = browser.wait_for("#new-key").await.text().await.unwrap();
    assert!(key.starts_with("rk_live_"), "{key}");
    let with_key = env.request(reqwest::Method::GET, "/v1/events", Some(&key), None).await;
    assert_eq!(with_key.status, 200, "the new key works");
    browser.screenshot("api-key-created").await;
    browser.goto("/console/api-keys").await;
    assert!(!browser.text("main").await.contains(&key), "never shown again");
    let row = browser.client.find(Locator::XPath("//tr[td[text()='browser-made key']]")).await.unwrap();
    row.find(Locator::Css("button.danger")).await.unwrap().click().await.unwrap();
    browser.wait_for("tr[data-key] span.badge.bad").await;
    let revoked = env.request(reqwest::Method::GET, "/v1/events", Some(&key), None).await;
    assert_eq!(revoked.status, 401, "revoked in the console");

    // A narrow screen: the endpoints page still fits.
    browser.client.set_window_size(390, 844).await.unwrap();
    browser.goto("/console/endpoints").await;
    let failing_card = browser.client.find(Locator::Css(&card(failing_id))).await.unwrap();
    let (x, _, width, _) = failing_card.rectangle().await.unwrap();
    assert!(x >= 0.0 && x + width <= 390.0, "the card fits a 390 px screen: x {x}, width {width}");
    browser.screenshot("endpoints-narrow").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_in_a_browser_shows_a_script_payload_as_text_and_another_tenant_nothing() {
    let env = TestEnv::start().await;
    env.create_endpoint("/sim/ok", &["note.*"], json!({ "description": XSS })).await;
    let event = env.post_event("note.created", json!({ "note": XSS })).await;
    let event_id = event.body["id"].as_str().unwrap().to_owned();
    let delivered = env.wait_for_status(&event_id, "delivered").await;
    let delivery_id = delivered["id"].as_str().unwrap().to_owned();

    let browser = Browser::start(&env.api_url, 1280).await;
    browser.sign_in(&env.admin_email, &env.admin_password).await;
    for page in [
        "/console/endpoints".to_owned(),
        format!("/console/events/{event_id}"),
        format!("/console/deliveries/{delivery_id}"),
    ] {
        browser.goto(&page).await;
        let text = browser.text("main").await;
        assert!(text.contains("<script>document.title='pwned'</script>"), "{page} shows the script as text: {text}");
        assert!(browser.client.find_all(Locator::Css("script")).await.unwrap().is_empty(), "{page}: no script element");
        assert!(browser.client.find_all(Locator::Css("main img")).await.unwrap().is_empty(), "{page}: no img element");
        assert_ne!(browser.client.title().await.unwrap(), "pwned", "{page}: nothing ran");
    }
    browser.screenshot("payload-as-text").await;

    // Sign out: the pages ask to sign in again.
    let kept = browser.client.get_named_cookie("relayops_session").await.expect("the session cookie");
    browser.click("form.signout button").await;
    browser.wait_for("form.login").await;
    assert_eq!(browser.path().await, "/console/login");
    browser.goto("/console/endpoints").await;
    assert_eq!(browser.path().await, "/console/login");
    // The session ended server-side: the old cookie, put back (a copy kept
    // from before), opens nothing either.
    browser.client.add_cookie(kept).await.expect("the old cookie put back");
    browser.goto("/console/endpoints").await;
    assert_eq!(browser.path().await, "/console/login", "the old session cookie opens nothing");

    // Tenant B, signed in, cannot open tenant A's delivery or event.
    let account = env.second_account().await;
    browser.sign_in(&account.email, &account.password).await;
    assert_eq!(browser.path().await, "/console/endpoints");
    for page in [format!("/console/deliveries/{delivery_id}"), format!("/console/events/{event_id}")] {
        browser.goto(&page).await;
        assert_eq!(browser.text("h1").await, "Not Found", "{page}");
        let source = browser.client.source().await.unwrap();
        assert!(!source.contains("pwned") && !source.contains(&env.simulator_url), "{page} shows nothing of A");
    }
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_in_a_browser_skips_a_blocked_lane_and_the_next_delivery_arrives() {
    const KEY: &str = "cart 7/β&x";
    let env = TestEnv::start().await;
    let lane = env.block_a_lane(KEY, 3).await;
    let endpoint_page = format!("/console/endpoints/{}", lane.endpoint_id);
    let row = format!(r#"tr[data-lane="{KEY}"]"#);

    let browser = Browser::start(&env.api_url, 1280).await;
    browser.sign_in(&env.admin_email, &env.admin_password).await;
    browser.goto(&endpoint_page).await;
    assert_eq!(browser.text(&format!("{row} td.waiting")).await, "2", "two wait behind the dead delivery");
    assert_eq!(browser.text(&format!("{row} a.id")).await, lane.dead_delivery);
    browser.screenshot("blocked-lane").await;

    // The key's link opens the delivery log filtered by it: all three.
    browser.click(&format!("{row} td:first-child a")).await;
    browser.wait_for("form.filters").await;
    assert_eq!(browser.path().await, "/console/deliveries");
    let filter = browser.client.find(Locator::Css(r#"input[name="ordering_key"]"#)).await.unwrap();
    assert_eq!(filter.prop("value").await.unwrap().as_deref(), Some(KEY), "the key survived the link");
    assert_eq!(browser.client.find_all(Locator::Css("tr[data-delivery]")).await.unwrap().len(), 3);

    // Skip: back on the endpoint page, the lane is no longer held.
    browser.goto(&endpoint_page).await;
    browser.click(&format!("{row} button.skip")).await;
    browser.wait_for("#skipped").await;
    assert_eq!(browser.path().await, endpoint_page);
    assert!(browser.client.find_all(Locator::Css(&row)).await.unwrap().is_empty(), "the lane moved on");
    browser.wait_for("#no-blocked-lanes").await;
    browser.screenshot("lane-skipped").await;

    // The next delivery reaches the receiver, and the console shows it delivered.
    let next = env.wait_for_status(&lane.events[1], "delivered").await;
    let next_page = format!("/console/deliveries/{}", next["id"].as_str().unwrap());
    browser.wait_for_delivery_status(&next_page, "delivered").await;
    assert!(browser.text("#ordering-key").await.contains(KEY));
    env.wait_for_status(&lane.events[2], "delivered").await;
    let positions: Vec<i64> = lane.receiver.arrivals().iter().map(|arrival| arrival.n).collect();
    assert_eq!(positions, [0, 1, 2], "the dead one, then the rest of the key in order");
    browser.goto(&format!("/console/deliveries/{}", lane.dead_delivery)).await;
    assert_eq!(browser.text("#status").await, "dead", "the skipped delivery stays dead");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_in_a_browser_opens_from_another_sites_link_and_ignores_its_form() {
    let env = TestEnv::start().await;
    let endpoint = env.create_endpoint("/sim/ok", &["order.*"], json!({ "description": "fulfilment" })).await;
    let endpoint_id = endpoint["id"].as_str().unwrap().to_owned();
    let browser = Browser::start(&env.api_url, 1280).await;
    browser.sign_in(&env.admin_email, &env.admin_password).await;

    // Another site (127.0.0.2 is another host to the browser) links to the
    // endpoint's page and carries a form that would disable it — with the
    // session's own CSRF token, as if it had leaked.
    let endpoint_page = format!("/console/endpoints/{endpoint_id}");
    browser.goto(&endpoint_page).await;
    let csrf_field = browser.client.find(Locator::Css(r#"input[name="csrf"]"#)).await.unwrap();
    let csrf = csrf_field.attr("value").await.unwrap().expect("a csrf value");
    let target = format!("{}{endpoint_page}", env.api_url);
    let site = another_site(format!(
        r#"<!doctype html><html><body>
        <a id="link" href="{target}">the endpoint</a>
        <form id="evil" method="post" action="{target}/enabled">
          <input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="enabled" value="false">
          <button id="submit" type="submit">claim your prize</button>
        </form></body></html>"#
    ))
    .await;

    // The link opens the page signed in.
    browser.client.goto(&site).await.unwrap();
    browser.click("#link").await;
    browser.wait_for("form.signout").await;
    assert_eq!(browser.path().await, endpoint_page, "a link from another site opens the page");

    // The form changes nothing, and the session survives it.
    browser.client.goto(&site).await.unwrap();
    browser.click("#submit").await;
    browser.wait_for("form.login").await;
    assert_eq!(env.get(&format!("/v1/endpoints/{endpoint_id}")).await.body["enabled"], true, "still enabled");
    browser.goto(&endpoint_page).await;
    browser.wait_for("form.signout").await;
    assert_eq!(browser.path().await, endpoint_page, "still signed in");

    // A page that does not exist is the console's own (its headers are
    // checked over HTTP in `console`): no JSON, the way back offered.
    browser.goto("/console/no-such-page").await;
    assert_eq!(browser.text("h1").await, "Not Found");
    assert!(browser.text("main").await.contains("Back to the console"));

    // A session ended elsewhere (its token signed out through the API): a
    // form already on the screen posts nothing.
    browser.goto("/console/api-keys").await;
    let token = browser.client.get_named_cookie("relayops_session").await.expect("the session cookie");
    let logout = env.request(reqwest::Method::POST, "/v1/auth/logout", Some(token.value()), None).await;
    assert_eq!(logout.status, 204);
    let keys_before = env.count("api_keys").await;
    let form = browser.client.form(Locator::Css("form.create")).await.unwrap();
    form.set_by_name("name", "after the session ended").await.unwrap();
    form.submit().await.unwrap();
    browser.wait_for("form.login").await;
    assert_eq!(env.count("api_keys").await, keys_before, "no key was created");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_in_a_browser_signs_in_while_another_address_is_locked_out_of_the_account() {
    let env = TestEnv::start().await;
    // Someone at another address (127.0.0.2) guesses the admin's password
    // on the console's sign-in form until it refuses them.
    let guesser = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for _ in 0..env.config.login.per_account {
        let (_, answer) = submit_login(&guesser, &env.api_url, &env.admin_email, "wrong-password", &[]).await;
        assert_eq!(answer.status(), 401);
    }
    let (_, refused) = submit_login(&guesser, &env.api_url, &env.admin_email, &env.admin_password, &[]).await;
    assert_eq!(refused.status(), 429, "locked out there, whatever the password");
    let retry_after: u64 = refused.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry_after >= 1, "{retry_after}");
    assert!(refused.text().await.unwrap().contains("too many failed logins"));

    // The owner, in a browser at their own address, signs in as usual.
    let browser = Browser::start(&env.api_url, 1280).await;
    browser.sign_in(&env.admin_email, &env.admin_password).await;
    assert_eq!(browser.path().await, "/console/endpoints", "the owner is not locked out");
    browser.close().await;
}
