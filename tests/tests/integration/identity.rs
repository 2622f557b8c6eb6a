//! Identity: logins and sign-outs, password changes, a tenant's users, API
//! keys and their scopes, the one-time bootstrap token, and credentials never
//! kept or logged in clear.

use relayops_tests::{TestConfig, TestEnv};
use reqwest::Method;
use serde_json::json;

async fn login(env: &TestEnv, email: &str, password: &str) -> relayops_tests::Answer {
    env.request(Method::POST, "/v1/auth/login", None, Some(json!({ "email": email, "password": password }))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_token_works_like_an_admin_key_and_bad_logins_learn_nothing() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    let answer = login(&env, &env.admin_email.to_uppercase(), &env.admin_password).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let token = answer.body["token"].as_str().unwrap().to_owned();
    assert_eq!(answer.body["tenant_id"], env.tenant_id.to_string());

    let endpoints = env.request(Method::GET, "/v1/endpoints", Some(&token), None).await;
    assert_eq!(endpoints.status, 200);
    let posted =
        env.request(Method::POST, "/v1/events", Some(&token), Some(json!({ "event_type": "a.b", "payload": {} })));
    assert_eq!(posted.await.status, 201);

    let wrong = login(&env, &env.admin_email, "not-the-password").await;
    let unknown = login(&env, "nobody@example.com", "not-the-password").await;
    let (wrong_detail, unknown_detail) = (wrong.expect_problem(401), unknown.expect_problem(401));
    assert_eq!(wrong_detail, unknown_detail, "the answer does not reveal which emails exist");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_expired_tampered_and_orphaned_tokens_are_refused() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    let token = login(&env, &env.admin_email, &env.admin_password).await.body["token"].as_str().unwrap().to_owned();
    let secret = env.config.auth.jwt_secret.clone().unwrap();

    #[derive(serde::Serialize)]
    struct Claims {
        sub: String,
        tid: String,
        role: String,
        iss: String,
        iat: i64,
        exp: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        sid: Option<String>,
    }
    // The login token's own session, read from its payload.
    let payload = token.split('.').nth(1).unwrap();
    let payload: serde_json::Value = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, payload).unwrap(),
    )
    .unwrap();
    let session = payload["sid"].as_str().expect("the token names its session").to_owned();
    let user = env.pool.get().await.unwrap().query_one("SELECT id FROM relayops.user_accounts", &[]).await.unwrap();
    let user: uuid::Uuid = user.get(0);
    let claims = |exp: i64| Claims {
        sub: format!("usr_{}", user.simple()),
        tid: env.tenant_id.to_string(),
        role: "admin".into(),
        iss: "relayops".into(),
        iat: 0,
        exp,
        sid: Some(session.clone()),
    };
    let sign = |claims: &Claims, key: &[u8]| {
        jsonwebtoken::encode(&jsonwebtoken::Header::default(), claims, &jsonwebtoken::EncodingKey::from_secret(key))
            .unwrap()
    };
    let now = chrono::Utc::now().timestamp();
    let valid_again = sign(&claims(now + 600), secret.as_bytes());
    assert_eq!(env.request(Method::GET, "/v1/endpoints", Some(&valid_again), None).await.status, 200, "control");

    let forged = sign(&claims(now + 600), b"some-other-secret-of-32-bytes-or-more!!");
    let expired = sign(&claims(now - 600), secret.as_bytes());
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    parts[1] = parts[1].chars().rev().collect();
    let tampered = parts.join(".");
    // Signed right, but naming no session (as tokens issued before sessions
    // were kept), or a session that never was.
    let sessionless = sign(&Claims { sid: None, ..claims(now + 600) }, secret.as_bytes());
    let unknown_session =
        sign(&Claims { sid: Some(uuid::Uuid::new_v4().to_string()), ..claims(now + 600) }, secret.as_bytes());
    for bad in [forged.as_str(), expired.as_str(), tampered.as_str(), "not.a.jwt", &sessionless, &unknown_session] {
        env.request(Method::GET, "/v1/endpoints", Some(bad), None).await.expect_problem(401);
    }
    // A deleted user's token stops working at once.
    env.pool.get().await.unwrap().execute("DELETE FROM relayops.user_accounts", &[]).await.unwrap();
    env.request(Method::GET, "/v1/endpoints", Some(&token), None).await.expect_problem(401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_are_shown_once_scoped_listed_without_secrets_and_revocable() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    let created = env.post("/v1/api-keys", json!({ "name": "ingest only", "scopes": ["ingest"] })).await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let key = created.body["key"].as_str().unwrap().to_owned();
    assert!(key.starts_with("rk_live_"));
    let key_id = created.body["id"].as_str().unwrap().to_owned();

    let body = json!({ "event_type": "a.b", "payload": {} });
    assert_eq!(env.request(Method::POST, "/v1/events", Some(&key), Some(body.clone())).await.status, 201);
    for (method, path) in [(Method::GET, "/v1/endpoints"), (Method::GET, "/v1/api-keys"), (Method::POST, "/v1/replays")]
    {
        let answer = env.request(method, path, Some(&key), Some(json!({}))).await;
        let detail = answer.expect_problem(403);
        assert!(detail.contains("admin"), "{detail}");
    }

    let listed = env.get("/v1/api-keys").await;
    let text = listed.body.to_string();
    assert!(!text.contains(&key), "a list never shows a secret");
    let entry = listed.body["data"].as_array().unwrap().iter().find(|k| k["id"] == key_id.as_str()).unwrap().clone();
    assert_eq!(entry["prefix"], &key[..20]);
    assert_eq!(entry["scopes"], json!(["ingest"]));

    let (_, other) = env.second_tenant().await;
    let path = format!("/v1/api-keys/{key_id}");
    env.request(Method::DELETE, &path, Some(&other), None).await.expect_problem(404);
    assert_eq!(env.request(Method::DELETE, &path, Some(&env.api_key), None).await.status, 204);
    env.request(Method::POST, "/v1/events", Some(&key), Some(body)).await.expect_problem(401);
    env.post("/v1/api-keys", json!({ "name": "x", "scopes": ["root"] })).await.expect_problem(422);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bootstrap_token_creates_one_tenant_once() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    let token = env.config.auth.bootstrap_token.clone().unwrap();
    let body = |token: &str| json!({ "token": token, "tenant_name": "Acme", "admin_email": "ops@acme.example", "admin_password": "a-long-password-1" });
    env.request(Method::POST, "/v1/bootstrap", None, Some(body("wrong"))).await.expect_problem(401);
    let created = env.request(Method::POST, "/v1/bootstrap", None, Some(body(&token))).await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let key = created.body["api_key"].as_str().unwrap();
    assert_eq!(env.request(Method::GET, "/v1/endpoints", Some(key), None).await.status, 200);
    env.request(Method::POST, "/v1/bootstrap", None, Some(body(&token))).await.expect_problem(409);

    let client = env.pool.get().await.unwrap();
    let stored: String = client
        .query_one("SELECT row_to_json(t)::text FROM relayops.used_bootstrap_tokens t", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!stored.contains(&token), "only the token's hash is kept");
    let tenants: i64 = client.query_one("SELECT count(*) FROM relayops.tenants", &[]).await.unwrap().get(0);
    assert_eq!(tenants, 2, "the test's own tenant and exactly one bootstrapped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_payloads_and_signatures_never_appear_in_the_database_or_logs() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    let log = relayops_tests::log_file("log");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let debug = [("RELAYOPS_API_LISTEN", listen.as_str()), ("RELAYOPS_LOG", "debug,lapin=info,h2=info,hyper=info")];
    let _api = env.spawn_role_logging("api", &debug, Some(&log));
    let _worker = env.spawn_role_logging("worker", &debug, Some(&log));
    let api = format!("http://{listen}");
    let http = reqwest::Client::new();
    relayops_tests::wait_until_ready(&http, &api).await;

    let password = "correct-horse-battery-staple";
    let token = env.config.auth.bootstrap_token.clone().unwrap();
    let boot =
        json!({ "token": token, "tenant_name": "Logs", "admin_email": "logs@example.com", "admin_password": password });
    // POSTs JSON to the child API with an optional bearer credential.
    let call = |path: &str, bearer: Option<&str>, body: serde_json::Value| {
        let mut request = http.post(format!("{api}{path}")).json(&body);
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.json::<serde_json::Value>().await.unwrap_or_default())
        }
    };
    let (_, created) = call("/v1/bootstrap", None, boot).await;
    let key = created["api_key"].as_str().unwrap().to_owned();
    let (_, login) = call("/v1/auth/login", None, json!({ "email": "logs@example.com", "password": password })).await;
    let jwt = login["token"].as_str().unwrap().to_owned();
    let endpoint_body = json!({ "url": format!("{}/sim/ok", env.simulator_url), "event_types": ["*"] });
    let (_, endpoint) = call("/v1/endpoints", Some(&jwt), endpoint_body).await;
    let secret = endpoint["secret"].as_str().unwrap().to_owned();
    let marker = format!("payload-marker-{}", uuid::Uuid::new_v4().simple());
    let (status, _) =
        call("/v1/events", Some(&key), json!({ "event_type": "a.b", "payload": { "card": marker } })).await;
    assert_eq!(status, 201);
    let received = env.simulator.wait_until(relayops_tests::WAIT, |all| !all.is_empty()).await;
    // Recorded means the worker has logged the attempt (it logs before recording).
    env.wait_for_sql("attempt recorded", "SELECT count(*) = 1 FROM relayops.deliveries WHERE status = 'delivered'")
        .await;
    let signature = received[0].webhook_signature.clone().unwrap();
    let signature_value = signature.trim_start_matches("v1,").to_owned();

    let client = env.pool.get().await.unwrap();
    for table in ["user_accounts", "api_keys", "used_bootstrap_tokens", "delivery_attempts"] {
        let rows = client.query(&format!("SELECT row_to_json(t)::text FROM relayops.{table} t"), &[]).await.unwrap();
        for row in rows {
            let text: String = row.get(0);
            for (what, needle) in [
                ("password", password),
                ("API key", &key),
                ("bootstrap token", &token),
                ("signature", &signature_value),
            ] {
                assert!(!text.contains(needle), "{table} holds the {what} in clear: {text}");
            }
        }
    }
    // Stop the processes so every log line is written, then read the logs.
    drop(_api);
    drop(_worker);
    let logs = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(logs.contains("event accepted") && logs.contains("delivery attempt"), "the processes did log: {logs:.500}");
    for (what, needle) in [
        ("password", password),
        ("API key", key.as_str()),
        ("login token", jwt.as_str()),
        ("bootstrap token", token.as_str()),
        ("endpoint secret", secret.as_str()),
        ("payload", marker.as_str()),
        ("signature", signature_value.as_str()),
    ] {
        assert!(!logs.contains(needle), "the logs contain the {what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_bootstrap_request_does_not_use_up_the_token() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    let token = env.config.auth.bootstrap_token.clone().unwrap();
    let body = |email: &str, password: &str| json!({ "token": token, "tenant_name": "Acme", "admin_email": email, "admin_password": password });
    for (email, password, field) in
        [("not-an-email", "a-long-password-1", "email"), ("ops@acme.example", "short", "password")]
    {
        let detail =
            env.request(Method::POST, "/v1/bootstrap", None, Some(body(email, password))).await.expect_problem(422);
        assert!(detail.contains(field), "{detail}");
    }
    let login = env.request(Method::POST, "/v1/auth/login", None, Some(json!({ "email": "x" }))).await;
    login.expect_problem(422);
    assert_eq!(env.count("used_bootstrap_tokens").await, 0, "refused requests use nothing");
    let created =
        env.request(Method::POST, "/v1/bootstrap", None, Some(body("ops@acme.example", "a-long-password-1"))).await;
    assert_eq!(created.status, 201, "{:?}", created.body);
}

/// Signing out ends a login session server-side: its token is refused at
/// once (not when it would have expired), other sessions of the user go on
/// until "sign out everywhere" ends them all; an API key has no session to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_out_ends_the_session_at_once_and_everywhere_ends_them_all() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    let token = |answer: relayops_tests::Answer| answer.body["token"].as_str().unwrap().to_owned();
    let first = token(login(&env, &env.admin_email, &env.admin_password).await);
    let second = token(login(&env, &env.admin_email, &env.admin_password).await);
    let third = token(login(&env, &env.admin_email, &env.admin_password).await);
    for live in [&first, &second, &third] {
        assert_eq!(env.request(Method::GET, "/v1/endpoints", Some(live), None).await.status, 200);
    }

    let out = env.request(Method::POST, "/v1/auth/logout", Some(&first), None).await;
    assert_eq!(out.status, 204, "{:?}", out.body);
    env.request(Method::GET, "/v1/endpoints", Some(&first), None).await.expect_problem(401);
    env.request(Method::POST, "/v1/auth/logout", Some(&first), None).await.expect_problem(401);
    assert_eq!(env.request(Method::GET, "/v1/endpoints", Some(&second), None).await.status, 200, "others go on");

    let api_key = env.api_key.clone();
    env.request(Method::POST, "/v1/auth/logout", Some(&api_key), None).await.expect_problem(401);
    assert_eq!(
        env.request(Method::GET, "/v1/endpoints", Some(&api_key), None).await.status,
        200,
        "the key still works"
    );

    let out = env.request(Method::POST, "/v1/auth/logout-everywhere", Some(&second), None).await;
    assert_eq!(out.status, 204, "{:?}", out.body);
    for ended in [&second, &third] {
        env.request(Method::GET, "/v1/endpoints", Some(ended), None).await.expect_problem(401);
    }
    let ended = env.query_i64("SELECT count(*) FROM relayops.login_sessions WHERE revoked_at IS NOT NULL").await;
    assert_eq!(ended, 3, "every session ended, each in Postgres");
    let fresh = token(login(&env, &env.admin_email, &env.admin_password).await);
    assert_eq!(
        env.request(Method::GET, "/v1/endpoints", Some(&fresh), None).await.status,
        200,
        "signing in again works"
    );
}

/// A session unused for the idle timeout has ended, though its lifetime has not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_unused_for_the_idle_timeout_has_ended() {
    let mut config = TestConfig { run_worker: false, ..Default::default() };
    config.auth.session_idle = std::time::Duration::from_secs(1);
    let env = TestEnv::start_with(config).await;
    let answer = login(&env, &env.admin_email, &env.admin_password).await;
    let token = answer.body["token"].as_str().unwrap().to_owned();
    assert_eq!(env.request(Method::GET, "/v1/endpoints", Some(&token), None).await.status, 200);
    // Idle past the timeout (as the database's clock counts it).
    env.pool
        .get()
        .await
        .unwrap()
        .execute("UPDATE relayops.login_sessions SET last_seen_at = now() - interval '2 seconds'", &[])
        .await
        .unwrap();
    env.request(Method::GET, "/v1/endpoints", Some(&token), None).await.expect_problem(401);
}

/// A password change ends every other session of the user at once (a browser
/// left signed in elsewhere, a copied token), keeps the one it was made in,
/// and the old password no longer signs in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_change_ends_every_other_session_and_the_old_password() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    let token = |answer: relayops_tests::Answer| answer.body["token"].as_str().unwrap().to_owned();
    let here = token(login(&env, &env.admin_email, &env.admin_password).await);
    let elsewhere = token(login(&env, &env.admin_email, &env.admin_password).await);
    let change = |current: &str, new: &str| json!({ "current_password": current, "new_password": new });

    // Refused changes change nothing.
    let wrong = env.request(Method::POST, "/v1/auth/password", Some(&here), Some(change("nope", "a-new-password-1")));
    assert!(wrong.await.expect_problem(403).contains("current password"));
    let short = env.request(Method::POST, "/v1/auth/password", Some(&here), Some(change(&env.admin_password, "short")));
    assert!(short.await.expect_problem(422).contains("new_password"));
    let by_key = env.request(
        Method::POST,
        "/v1/auth/password",
        Some(&env.api_key),
        Some(change(&env.admin_password, "a-new-password-1")),
    );
    by_key.await.expect_problem(401);
    assert_eq!(env.request(Method::GET, "/v1/endpoints", Some(&elsewhere), None).await.status, 200);

    let changed = env
        .request(Method::POST, "/v1/auth/password", Some(&here), Some(change(&env.admin_password, "a-new-password-1")))
        .await;
    assert_eq!(changed.status, 204, "{:?}", changed.body);
    env.request(Method::GET, "/v1/endpoints", Some(&elsewhere), None).await.expect_problem(401);
    assert_eq!(env.request(Method::GET, "/v1/endpoints", Some(&here), None).await.status, 200, "this one goes on");
    login(&env, &env.admin_email, &env.admin_password).await.expect_problem(401);
    assert_eq!(login(&env, &env.admin_email, "a-new-password-1").await.status, 200);
}

/// A tenant's admins add people, change their role (in effect on their next
/// request) and remove them (their sessions end at once); the last admin
/// stays; another tenant's users are out of reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admins_add_demote_and_remove_users_whose_sessions_end_with_them() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    let email = format!("colleague-{}@example.com", uuid::Uuid::new_v4().simple());
    let added =
        env.post("/v1/users", json!({ "email": email, "password": "colleague-password", "role": "admin" })).await;
    assert_eq!(added.status, 201, "{:?}", added.body);
    let user_id = added.body["id"].as_str().unwrap().to_owned();
    assert_eq!(added.body["role"], "admin");
    assert!(added.body.get("password_hash").is_none() && !added.body.to_string().contains("colleague-password"));
    let taken = env.post("/v1/users", json!({ "email": email.to_uppercase(), "password": "another-password" })).await;
    taken.expect_problem(409);
    env.post("/v1/users", json!({ "email": "x@example.com", "password": "pw", "role": "owner" }))
        .await
        .expect_problem(422);
    let listed = env.get("/v1/users").await;
    assert!(listed.body["data"].as_array().unwrap().iter().any(|user| user["id"] == user_id.as_str()));

    let session = login(&env, &email, "colleague-password").await.body["token"].as_str().unwrap().to_owned();
    let created = |name: &str| json!({ "name": name, "scopes": ["ingest"] });
    let as_admin = env.request(Method::POST, "/v1/api-keys", Some(&session), Some(created("by colleague"))).await;
    assert_eq!(as_admin.status, 201);

    // Demoted: the next request is a viewer's.
    let path = format!("/v1/users/{user_id}");
    let demoted = env.request(Method::PATCH, &path, Some(&env.api_key), Some(json!({ "role": "viewer" }))).await;
    assert_eq!(demoted.status, 200, "{:?}", demoted.body);
    env.request(Method::POST, "/v1/api-keys", Some(&session), Some(created("as viewer"))).await.expect_problem(403);
    assert_eq!(env.request(Method::GET, "/v1/events", Some(&session), None).await.status, 200, "a viewer reads");

    // Another tenant cannot see or remove them.
    let other = env.second_account().await;
    env.request(Method::DELETE, &path, Some(&other.api_key), None).await.expect_problem(404);
    let others = env.request(Method::GET, "/v1/users", Some(&other.api_key), None).await;
    assert!(!others.body.to_string().contains(&user_id));

    // Removed: their session ends at once.
    let removed = env.request(Method::DELETE, &path, Some(&env.api_key), None).await;
    assert_eq!(removed.status, 204, "{:?}", removed.body);
    env.request(Method::GET, "/v1/events", Some(&session), None).await.expect_problem(401);
    login(&env, &email, "colleague-password").await.expect_problem(401);
    env.request(Method::DELETE, &path, Some(&env.api_key), None).await.expect_problem(404);

    // The tenant's last admin can be neither demoted nor removed.
    let admin = env.get("/v1/users").await.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|user| user["role"] == "admin")
        .map(|user| user["id"].as_str().unwrap().to_owned())
        .expect("the tenant's admin");
    let last = format!("/v1/users/{admin}");
    env.request(Method::PATCH, &last, Some(&env.api_key), Some(json!({ "role": "viewer" }))).await.expect_problem(409);
    env.request(Method::DELETE, &last, Some(&env.api_key), None).await.expect_problem(409);
    assert_eq!(login(&env, &env.admin_email, &env.admin_password).await.status, 200);
}

/// Guessing the current password through a stolen session meets the sign-in
/// throttle: 429 with `Retry-After`, whatever the password, and nothing
/// changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guessing_the_current_password_is_throttled_and_changes_nothing() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    let token = |answer: relayops_tests::Answer| answer.body["token"].as_str().unwrap().to_owned();
    let stolen = token(login(&env, &env.admin_email, &env.admin_password).await);
    let elsewhere = token(login(&env, &env.admin_email, &env.admin_password).await);
    let change = |current: &str| json!({ "current_password": current, "new_password": "a-new-password-1" });
    for _ in 0..env.config.login.per_account {
        let wrong = env.request(Method::POST, "/v1/auth/password", Some(&stolen), Some(change("a-guess-1234"))).await;
        wrong.expect_problem(403);
    }
    let throttled =
        env.request(Method::POST, "/v1/auth/password", Some(&stolen), Some(change(&env.admin_password))).await;
    throttled.expect_problem(429);
    let retry_after: u64 = throttled.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry_after >= 1, "{retry_after}");
    assert_eq!(
        env.request(Method::GET, "/v1/endpoints", Some(&elsewhere), None).await.status,
        200,
        "no change was made: the other session goes on"
    );
}

/// Every bad field of a user's addition or role change is refused with a
/// problem naming it, and adds or changes nobody: the list is as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_user_fields_are_refused_with_the_field_named_and_change_nobody() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..Default::default() }).await;
    let before = env.get("/v1/users").await.body;
    for (body, field) in [
        (json!({ "email": "not-an-email", "password": "a-long-password" }), "email"),
        (json!({ "email": "new@example.com", "password": "short" }), "password"),
        (json!({ "email": "new@example.com", "password": "x".repeat(1025) }), "password"),
        (json!({ "email": "new@example.com", "password": "a-long-password", "role": "owner" }), "role"),
        (json!({ "email": "new@example.com", "password": "a-long-password", "admin": true }), "admin"),
    ] {
        let detail = env.post("/v1/users", body.clone()).await.expect_problem(422);
        assert!(detail.contains(field), "{body}: {detail}");
    }
    let admin = before["data"][0]["id"].as_str().expect("the bootstrap admin").to_owned();
    let path = format!("/v1/users/{admin}");
    let detail = env
        .request(Method::PATCH, &path, Some(&env.api_key), Some(json!({ "role": "root" })))
        .await
        .expect_problem(422);
    assert!(detail.contains("role"), "{detail}");
    for method in [Method::PATCH, Method::DELETE] {
        let body = (method == Method::PATCH).then(|| json!({ "role": "viewer" }));
        let answer = env.request(method.clone(), "/v1/users/usr_not-an-id", Some(&env.api_key), body).await;
        answer.expect_problem(400);
    }
    assert_eq!(env.get("/v1/users").await.body, before, "nobody added or changed");
}
