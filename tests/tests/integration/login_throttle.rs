//! Login throttling against password guessing: failures are counted per
//! account and per client address (shared by replicas through Redis, per
//! process without it); once spent, logins are refused with 429 +
//! `Retry-After` whatever the password; a success starts the account afresh.
//! Oversized passwords are refused before any of this.
use std::net::IpAddr;

use relayops_tests::{Answer, TestConfig, TestEnv};
use serde_json::json;

/// A client connecting from `address` (any of 127/8 on Linux).
fn client_from(address: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder().local_address(IpAddr::from(address)).build().unwrap()
}

async fn login_via(env: &TestEnv, client: &reqwest::Client, email: &str, password: &str) -> Answer {
    login_at(client, &env.api_url, email, password, None).await
}

async fn login_at(client: &reqwest::Client, api: &str, email: &str, password: &str, via: Option<&str>) -> Answer {
    let mut request =
        client.post(format!("{api}/v1/auth/login")).json(&json!({ "email": email, "password": password }));
    if let Some(forwarded) = via {
        request = request.header("x-forwarded-for", forwarded);
    }
    Answer::from(request.send().await.expect("login request")).await
}

/// The 429 a throttled login gets: a problem body and a `Retry-After`.
fn assert_throttled(answer: &Answer, whom: &str) -> u64 {
    let detail = answer.expect_problem(429);
    assert!(detail.contains(whom), "{detail}");
    assert_eq!(answer.body["type"], "https://relayops.dev/problems/rate-limited");
    let retry_after: u64 = answer.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry_after >= 1, "{retry_after}");
    retry_after
}

fn config() -> TestConfig {
    TestConfig { run_worker: false, run_publisher: false, ..TestConfig::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_passwords_for_one_account_lock_it_even_for_the_right_password_and_nobody_else() {
    let env = TestEnv::start_with(config()).await;
    let (email, password) = (&env.admin_email, &env.admin_password);
    let (attacker, other_client) = (client_from([127, 0, 0, 1]), client_from([127, 0, 0, 2]));
    for _ in 0..env.config.login.per_account {
        login_via(&env, &attacker, email, "wrong-password").await.expect_problem(401);
    }
    let retry_after = assert_throttled(&login_via(&env, &attacker, email, password).await, "this account");
    // 5 failures refill over 15 min: one more try in at most 3 min (less the
    // time the failures took, which refilled a part).
    assert!((60..=180).contains(&retry_after), "{retry_after}");
    // The account, from another address too (guessing spread over addresses).
    assert_throttled(&login_via(&env, &other_client, &email.to_uppercase(), password).await, "this account");
    // Another account from another address is unaffected.
    let other = env.second_account().await;
    let answer = login_via(&env, &other_client, &other.email, &other.password).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successful_login_starts_the_account_afresh() {
    let env = TestEnv::start_with(config()).await;
    let (email, password) = (&env.admin_email, &env.admin_password);
    let client = client_from([127, 0, 0, 1]);
    let allowed = env.config.login.per_account;
    for _ in 1..allowed {
        login_via(&env, &client, email, "wrong-password").await.expect_problem(401);
    }
    assert_eq!(login_via(&env, &client, email, password).await.status, 200);
    // All failures are allowed again, not just the one left before.
    for _ in 0..allowed {
        login_via(&env, &client, email, "wrong-password").await.expect_problem(401);
    }
    assert_throttled(&login_via(&env, &client, email, password).await, "this account");
}

/// A lock ends by itself: after the `Retry-After` it gave, one more try is
/// allowed, and the right password logs in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_account_may_try_again_once_retry_after_has_passed() {
    let mut config = config();
    // 3 failures refilling over 30 s: one more try every 10 s once spent.
    config.login.per_account = 3;
    config.login.window = std::time::Duration::from_secs(30);
    let env = TestEnv::start_with(config).await;
    let (email, password) = (&env.admin_email, &env.admin_password);
    let client = client_from([127, 0, 0, 1]);
    // Guess until locked: on a busy machine slow password checks may refill
    // a try while the guesses go on.
    let mut guesses = 0;
    let locked = loop {
        let answer = login_via(&env, &client, email, "wrong-password").await;
        if answer.status == 429 {
            break answer;
        }
        answer.expect_problem(401);
        guesses += 1;
        assert!(guesses <= 10, "10 wrong passwords and still not locked");
    };
    let retry_after = assert_throttled(&locked, "this account");
    assert!(retry_after <= 10, "one try refills in 10 s: {retry_after}");
    // The client honours Retry-After: the lock's own length is what is tested.
    tokio::time::sleep(std::time::Duration::from_secs(retry_after)).await;
    let answer = login_via(&env, &client, email, password).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_guessing_across_accounts_is_throttled_and_forwarded_for_is_not_believed() {
    let mut config = config();
    config.login.per_address = 6;
    let env = TestEnv::start_with(config).await;
    let guesser = client_from([127, 0, 0, 1]);
    for n in 0..6 {
        login_via(&env, &guesser, &format!("user{n}@example.com"), "wrong-password").await.expect_problem(401);
    }
    // A spoofed header from an untrusted peer changes nothing.
    let spoofed = login_at(&guesser, &env.api_url, &env.admin_email, &env.admin_password, Some("198.51.100.7")).await;
    assert_throttled(&spoofed, "this address");
    let elsewhere = login_via(&env, &client_from([127, 0, 0, 3]), &env.admin_email, &env.admin_password).await;
    assert_eq!(elsewhere.status, 200, "the account itself is not locked: {:?}", elsewhere.body);
}

/// Behind a trusted proxy, `X-Forwarded-For` names the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_allowance() {
    let mut config = config();
    config.login.per_address = 3;
    config.login.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
    let env = TestEnv::start_with(config).await;
    let proxy = client_from([127, 0, 0, 1]);
    for n in 0..3 {
        let email = format!("user{n}@example.com");
        login_at(&proxy, &env.api_url, &email, "wrong-password", Some("198.51.100.7")).await.expect_problem(401);
    }
    let (email, password) = (&env.admin_email, &env.admin_password);
    assert_throttled(&login_at(&proxy, &env.api_url, email, password, Some("198.51.100.7")).await, "this address");
    // The client's own claim left of the proxy's entry proves nothing.
    let claimed = login_at(&proxy, &env.api_url, email, password, Some("203.0.113.1, 198.51.100.7")).await;
    assert_throttled(&claimed, "this address");
    let other = login_at(&proxy, &env.api_url, email, password, Some("198.51.100.8")).await;
    assert_eq!(other.status, 200, "{:?}", other.body);
}

/// Failures counted by one replica count on another (the bucket is in Redis).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_on_one_replica_count_on_another() {
    let env = TestEnv::start_with(config()).await;
    let address = relayops_tests::free_loopback_address();
    let _replica = env.spawn_role("api", &[("RELAYOPS_API_LISTEN", &address)]);
    let replica = format!("http://{address}");
    let client = client_from([127, 0, 0, 1]);
    relayops_tests::wait_until_ready(&client, &replica).await;
    let (email, password) = (&env.admin_email, &env.admin_password);
    for n in 0..env.config.login.per_account {
        let api = if n % 2 == 0 { env.api_url.as_str() } else { replica.as_str() };
        login_at(&client, api, email, "wrong-password", None).await.expect_problem(401);
    }
    for api in [env.api_url.as_str(), replica.as_str()] {
        assert_throttled(&login_at(&client, api, email, password, None).await, "this account");
    }
}

/// Without Redis every process still throttles on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_each_process_still_throttles() {
    let mut config = config();
    config.flow.redis_url = "redis://127.0.0.1:1".into(); // nothing listens there
    let env = TestEnv::start_with(config).await;
    let client = client_from([127, 0, 0, 1]);
    for _ in 0..env.config.login.per_account {
        login_via(&env, &client, &env.admin_email, "wrong-password").await.expect_problem(401);
    }
    assert_throttled(&login_via(&env, &client, &env.admin_email, &env.admin_password).await, "this account");
}

/// Oversized fields are refused before the throttle and the hash: they neither
/// cost Argon2 time nor count as failures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_over_1024_characters_are_422_and_do_not_count() {
    let env = TestEnv::start_with(config()).await;
    let client = client_from([127, 0, 0, 1]);
    for password in ["x".repeat(1025), "é".repeat(1025), "x".repeat(1024 * 1024)] {
        for _ in 0..env.config.login.per_account + 1 {
            let detail = login_via(&env, &client, &env.admin_email, &password).await.expect_problem(422);
            assert!(detail.contains("password") && detail.contains("1024"), "{detail}");
        }
    }
    let long_email = format!("{}@example.com", "a".repeat(400));
    login_via(&env, &client, &long_email, "wrong-password").await.expect_problem(422);
    let answer = login_via(&env, &client, &env.admin_email, &env.admin_password).await;
    assert_eq!(answer.status, 200, "none of the refusals counted: {:?}", answer.body);
    // 1024 characters is a password like any other (wrong here).
    login_via(&env, &client, &env.admin_email, &"x".repeat(1024)).await.expect_problem(401);
}
