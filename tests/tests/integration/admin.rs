//! The platform admin API (issue 16, SPEC §10): operators create tenants,
//! suspend and resume them and set their limits with the platform token;
//! tenants' credentials never reach it and the platform token is no tenant
//! credential.
use relayops_tests::{eventually, TestEnv, WAIT};
use reqwest::Method;
use serde_json::{json, Value};

fn admin(env: &TestEnv) -> Option<&str> {
    Some(env.config.admin_token.as_str())
}

async fn create_tenant(env: &TestEnv, email: &str) -> Value {
    let body = json!({ "name": "Acme", "admin_email": email, "admin_password": "acme-password-1" });
    let created = env.request(Method::POST, "/admin/v1/tenants", admin(env), Some(body)).await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    created.body
}

/// Posts events once each until one is answered `status` (a change made
/// through the admin API applies within the API-key cache's lifetime).
/// Posts `probe.sent` events (which no endpoint of these tests subscribes
/// to, so the probing itself makes no deliveries) until one is answered `status`.
async fn post_until_answered(env: &TestEnv, status: u16) -> relayops_tests::Answer {
    eventually(WAIT, || async {
        let answer = env.post_event_once("probe.sent", json!({})).await;
        if answer.status == status {
            Ok(answer)
        } else {
            Err(format!("{} {:?}", answer.status, answer.body))
        }
    })
    .await
}

async fn post_event_as(env: &TestEnv, key: &str, path: &str, body: Value) -> relayops_tests::Answer {
    env.request(Method::POST, path, Some(key), Some(body)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_create_tenants_that_work_at_once() {
    let env = TestEnv::start().await;
    let created = create_tenant(&env, "ops-created@example.com").await;
    let tenant_id = created["tenant"]["id"].as_str().unwrap();
    assert_eq!(created["tenant"]["suspended"], false);
    let key = created["api_key"].as_str().unwrap();
    assert!(key.starts_with("rk_live_"));

    // The key works, and only within its own tenant.
    let endpoints = env.request(Method::GET, "/v1/endpoints", Some(key), None).await;
    assert_eq!(endpoints.status, 200);
    assert_eq!(endpoints.body["data"], json!([]), "a new tenant sees none of the first tenant's endpoints");
    let event = post_event_as(&env, key, "/v1/events", json!({ "event_type": "a.b", "payload": {} })).await;
    assert_eq!(event.status, 201, "{:?}", event.body);
    // The first admin can sign in.
    let login = json!({ "email": "ops-created@example.com", "password": "acme-password-1" });
    let session = env.request(Method::POST, "/v1/auth/login", None, Some(login)).await;
    assert_eq!(session.status, 200);
    assert_eq!(session.body["tenant_id"], tenant_id);

    let listed = env.request(Method::GET, "/admin/v1/tenants", admin(&env), None).await;
    let ids: Vec<_> = listed.body["data"].as_array().unwrap().iter().map(|t| t["id"].clone()).collect();
    assert_eq!(ids.len(), 2, "the test's tenant and the new one");
    assert_eq!(ids[0], tenant_id, "newest first");
    let one = env.request(Method::GET, &format!("/admin/v1/tenants/{tenant_id}"), admin(&env), None).await;
    assert_eq!(one.body["name"], "Acme");

    // Bad input: clear problems, nothing written.
    let duplicate =
        json!({ "name": "Again", "admin_email": "OPS-created@example.com", "admin_password": "acme-password-1" });
    env.request(Method::POST, "/admin/v1/tenants", admin(&env), Some(duplicate)).await.expect_problem(409);
    let short = json!({ "name": "X", "admin_email": "x@example.com", "admin_password": "short" });
    env.request(Method::POST, "/admin/v1/tenants", admin(&env), Some(short)).await.expect_problem(422);
    assert_eq!(env.count("tenants").await, 2);
    env.request(Method::GET, "/admin/v1/tenants/ten_nothex", admin(&env), None).await.expect_problem(400);
    let missing = format!("/admin/v1/tenants/ten_{}", "0".repeat(32));
    env.request(Method::GET, &missing, admin(&env), None).await.expect_problem(404);
    env.request(Method::GET, "/admin/v1/tenants?limit=0", admin(&env), None).await.expect_problem(400);
    env.request(Method::GET, "/admin/v1/tenants?color=red", admin(&env), None).await.expect_problem(400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_credentials_never_reach_the_admin_api_and_the_admin_token_is_no_tenant_credential() {
    let env = TestEnv::start().await;
    let login = json!({ "email": env.admin_email, "password": env.admin_password });
    let session = env.request(Method::POST, "/v1/auth/login", None, Some(login)).await;
    let login_token = session.body["token"].as_str().unwrap().to_owned();
    let tenant_path = format!("/admin/v1/tenants/{}", env.tenant_id);
    let suspend = format!("{tenant_path}/suspend");
    for credential in [Some(env.api_key.as_str()), Some(login_token.as_str()), None, Some("admin-token-wrong")] {
        for (method, path, body) in [
            (Method::GET, "/admin/v1/tenants", None),
            (Method::GET, tenant_path.as_str(), None),
            (Method::POST, suspend.as_str(), Some(json!({ "reason": "self-service" }))),
            (
                Method::POST,
                "/admin/v1/tenants",
                Some(json!({ "name": "x", "admin_email": "x@e.com", "admin_password": "0123456789" })),
            ),
        ] {
            let answer = env.request(method.clone(), path, credential, body).await;
            answer.expect_problem(401);
        }
    }
    let tenant = env.request(Method::GET, &tenant_path, admin(&env), None).await;
    assert_eq!(tenant.body["suspended"], false, "no tenant credential suspended anything");
    assert_eq!(env.count("tenants").await, 1);

    // The platform token opens no tenant route.
    for (method, path) in [(Method::GET, "/v1/endpoints"), (Method::GET, "/v1/events"), (Method::GET, "/v1/api-keys")] {
        env.request(method, path, admin(&env), None).await.expect_problem(401);
    }
    let event = json!({ "event_type": "a.b", "payload": {} });
    env.request(Method::POST, "/v1/events", admin(&env), Some(event)).await.expect_problem(401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_tenant_cannot_ingest_but_its_accepted_events_are_delivered() {
    let env = TestEnv::start().await;
    // Fails twice, then accepts: its retries run while the tenant is suspended.
    env.create_endpoint("/sim/flaky/2", &["order.*"], json!({ "retry_schedule_secs": [1] })).await;
    let accepted = env.post_event("order.created", json!({})).await.body["id"].as_str().unwrap().to_owned();

    let path = format!("/admin/v1/tenants/{}", env.tenant_id);
    let suspended =
        env.request(Method::POST, &format!("{path}/suspend"), admin(&env), Some(json!({ "reason": "unpaid" }))).await;
    assert_eq!(suspended.status, 200, "{:?}", suspended.body);
    assert_eq!(suspended.body["suspended"], true);
    assert_eq!(suspended.body["suspended_reason"], "unpaid");

    // Refused (within the API-key cache's 2 s), single and batch, with nothing written.
    let refusal = post_until_answered(&env, 403).await;
    assert_eq!(refusal.body["type"], "https://relayops.dev/problems/tenant-suspended");
    assert!(refusal.body["detail"].as_str().unwrap().contains("suspended"));
    let events_before = env.count("events").await;
    let batch = env.post("/v1/events/batch", json!({ "events": [{ "event_type": "a.b", "payload": {} }] })).await;
    batch.expect_problem(403);
    assert_eq!(env.count("events").await, events_before);
    // Its data stays readable, and what was accepted is delivered.
    assert_eq!(env.get("/v1/endpoints").await.status, 200);
    let delivered = env.wait_for_status(&accepted, "delivered").await;
    assert_eq!(delivered["attempt_count"], 3);

    let resumed = env.request(Method::POST, &format!("{path}/resume"), admin(&env), None).await;
    assert_eq!(resumed.body["suspended"], false);
    assert!(resumed.body["suspended_at"].is_null());
    post_until_answered(&env, 201).await;
    let empty =
        env.request(Method::POST, &format!("{path}/suspend"), admin(&env), Some(json!({ "reason": " " }))).await;
    empty.expect_problem(422);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_set_a_tenants_ingest_limit() {
    let env = TestEnv::start().await;
    let path = format!("/admin/v1/tenants/{}/limits", env.tenant_id);
    let set = env
        .request(Method::PUT, &path, admin(&env), Some(json!({ "ingest_rate_per_sec": 1, "ingest_burst": 1 })))
        .await;
    assert_eq!(set.status, 200, "{:?}", set.body);
    assert_eq!(set.body["ingest_rate_per_sec"], 1);
    assert_eq!(set.body["ingest_burst"], 1);
    // Within the key cache's lifetime, a second event in the same second is refused.
    let limited = post_until_answered(&env, 429).await;
    assert!(limited.headers.contains_key("retry-after"));
    assert!(limited.body["detail"].as_str().unwrap().contains("1 events per second"), "{:?}", limited.body);

    for bad in
        [json!({ "ingest_burst": 5 }), json!({ "ingest_rate_per_sec": 0 }), json!({ "ingest_rate_per_sec": 1, "x": 1 })]
    {
        env.request(Method::PUT, &path, admin(&env), Some(bad)).await.expect_problem(422);
    }
    let cleared = env.request(Method::PUT, &path, admin(&env), Some(json!({}))).await;
    assert!(cleared.body["ingest_rate_per_sec"].is_null(), "back to the platform default");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_function_answers_api_gateway_events_through_lambda_http() {
    use relayops_shared::api::lambda::LambdaHttp;
    use relayops_tests::lambda::{http_api_event, invoke_http};

    let env = TestEnv::start_with(relayops_tests::TestConfig { run_worker: false, ..Default::default() }).await;
    let function = LambdaHttp::new(env.lambda_state(), None).app(relayops_admin::router);
    let path = format!("/admin/v1/tenants/{}/suspend", env.tenant_id);
    let body = json!({ "reason": "through Lambda" });
    let refused = invoke_http(&function, http_api_event("POST", &path, Some(&env.api_key), Some(&body))).await;
    assert_eq!(refused.status, 401, "a tenant key: {:?}", refused.body);
    let suspended = invoke_http(&function, http_api_event("POST", &path, admin(&env), Some(&body))).await;
    assert_eq!(suspended.status, 200, "{:?}", suspended.body);
    assert_eq!(suspended.body["suspended"], true);
    let ingest = LambdaHttp::new(env.lambda_state(), None).app(relayops_ingest::router);
    let event = json!({ "event_type": "a.b", "payload": {} });
    let answer = invoke_http(&ingest, http_api_event("POST", "/v1/events", Some(&env.api_key), Some(&event))).await;
    assert_eq!(answer.status, 403, "a fresh container sees the suspension at once: {:?}", answer.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_configured_admin_token_the_admin_api_says_it_is_not_enabled() {
    let config = relayops_tests::TestConfig { run_worker: false, run_publisher: false, ..Default::default() };
    let env = TestEnv::start_with(config.without_admin_token()).await;
    let tenants_before = env.count("tenants").await;
    let body = json!({ "name": "Acme", "admin_email": "ops@example.com", "admin_password": "acme-password-1" });
    // Whatever is presented: the token the test would have had, a tenant key, nothing.
    for token in [admin(&env), Some(env.api_key.as_str()), None] {
        for (method, body) in [(Method::GET, None), (Method::POST, Some(body.clone()))] {
            let answer = env.request(method.clone(), "/admin/v1/tenants", token, body).await;
            let detail = answer.expect_problem(403);
            assert!(detail.contains("admin API is not enabled"), "{method} with {token:?}: {detail}");
        }
    }
    assert_eq!(env.count("tenants").await, tenants_before, "no tenant was created");
}

/// One finished event two days old per tenant ($1, $2), with its endpoint
/// ($3, $4) and delivered delivery: history as it looks two days on.
const SEED_OLD_EVENTS: &str = "
INSERT INTO relayops.webhook_endpoints (id, tenant_id, url, secret) VALUES
    ($3, $1, 'http://127.0.0.1:9/a', 'whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdA=='),
    ($4, $2, 'http://127.0.0.1:9/b', 'whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdA==');
CREATE TEMP TABLE seed AS
SELECT tenant, endpoint, now() - interval '2 days' AS at,
       (left(relayops.uuid_floor(now() - interval '2 days')::text, 13) || '-7'
        || substr(gen_random_uuid()::text, 16))::uuid AS event_id
FROM (VALUES ($1, $3), ($2, $4)) AS v(tenant, endpoint);
INSERT INTO relayops.events (id, tenant_id, event_type, payload, request_hash, received_at)
SELECT event_id, tenant, 'a.b', '{}'::jsonb, sha256('x'::bytea), at FROM seed;
INSERT INTO relayops.deliveries (id, tenant_id, event_id, endpoint_id, status, created_at)
SELECT relayops.delivery_id_for(event_id), tenant, event_id, endpoint, 'delivered', at FROM seed;
DROP TABLE seed;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_shorten_a_tenants_retention_and_only_its_old_history_goes() {
    use relayops_shared::ids::{EventId, TenantId};
    use relayops_tests::scratch::{inline_params, uuid_literal};
    let mut config = relayops_tests::TestConfig::default();
    // Week-long partitions (two days back is in one that exists), history
    // maintenance every second (platform retention: the default 30 days).
    config.publisher.history.partition = std::time::Duration::from_secs(7 * 86_400);
    config.publisher.history.maintenance_interval = std::time::Duration::from_secs(1);
    let env = TestEnv::start_with(config).await;
    let other = create_tenant(&env, "retention-other@example.com").await;
    let other_key = other["api_key"].as_str().unwrap().to_owned();
    let other_id: TenantId = other["tenant"]["id"].as_str().unwrap().parse().unwrap();
    let ids = [env.tenant_id.as_uuid(), other_id.as_uuid(), uuid::Uuid::now_v7(), uuid::Uuid::now_v7()];
    let client = env.pool.get().await.unwrap();
    client.batch_execute(&inline_params(SEED_OLD_EVENTS, &ids.map(uuid_literal))).await.unwrap();
    let old_events: Vec<String> = client
        .query("SELECT id FROM relayops.events ORDER BY tenant_id = $1 DESC", &[&ids[0]])
        .await
        .unwrap()
        .iter()
        .map(|row| EventId::from_uuid(row.get(0)).to_string())
        .collect();
    let (mine, theirs) = (&old_events[0], &old_events[1]);
    let fresh = env.post_event("a.b", json!({})).await.body["id"].as_str().unwrap().to_owned();

    // Validated: at least a day, at most the platform default.
    let path = format!("/admin/v1/tenants/{}/retention", env.tenant_id);
    let above = env.request(Method::PUT, &path, admin(&env), Some(json!({ "retention_days": 31 }))).await;
    let detail = above.expect_problem(422);
    assert!(detail.contains("above the platform default of 30 days"), "{detail}");
    for bad in [json!({ "retention_days": 0 }), json!({ "retention_days": "1" }), json!({ "days": 1 })] {
        env.request(Method::PUT, &path, admin(&env), Some(bad)).await.expect_problem(422);
    }
    let tenant_path = format!("/admin/v1/tenants/{}", env.tenant_id);
    assert!(env.request(Method::GET, &tenant_path, admin(&env), None).await.body["retention_days"].is_null());

    let set = env.request(Method::PUT, &path, admin(&env), Some(json!({ "retention_days": 1 }))).await;
    assert_eq!(set.status, 200, "{:?}", set.body);
    assert_eq!(set.body["retention_days"], 1);
    assert_eq!(env.request(Method::GET, &tenant_path, admin(&env), None).await.body["retention_days"], 1);

    // The publisher's history maintenance removes the tenant's two-day-old
    // event; the other tenant's, as old, stays, and so does today's.
    eventually(WAIT, || async {
        match env.get(&format!("/v1/events/{mine}")).await.status {
            404 => Ok(()),
            status => Err(format!("the old event still answers {status}")),
        }
    })
    .await;
    let kept = env.request(Method::GET, &format!("/v1/events/{theirs}"), Some(&other_key), None).await;
    assert_eq!(kept.status, 200, "the other tenant keeps the platform's retention: {:?}", kept.body);
    assert_eq!(env.get(&format!("/v1/events/{fresh}")).await.status, 200, "today's event stays");

    let cleared = env.request(Method::PUT, &path, admin(&env), Some(json!({ "retention_days": null }))).await;
    assert_eq!(cleared.status, 200, "{:?}", cleared.body);
    assert!(cleared.body["retention_days"].is_null(), "back to the platform default");
}
