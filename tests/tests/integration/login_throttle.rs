//! Login throttling against password guessing: failures are counted per
//! account from one address, per address, and per account from every address
//! together, where a browser that signed in before is not counted (shared
//! by replicas through Redis, per process without it); once spent, logins
//! are refused with 429 + `Retry-After` whatever the password; a success
//! starts the account afresh; nobody can lock an owner out from elsewhere.
//! Oversized passwords are refused before any of this.
use std::net::IpAddr;

use relayops_tests::console::{cookie_from, submit_login};
use relayops_tests::{Answer, TestConfig, TestEnv};
use serde_json::json;

/// A client connecting from `address` (any of 127/8 on Linux).
fn client_from(address: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder().local_address(IpAddr::from(address)).build().unwrap()
}

/// A browser at `address`, as the console tests drive one (redirects not followed).
fn browser_from(address: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from(address))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
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
async fn bad_passwords_for_one_account_lock_out_their_address_even_for_the_right_password_and_nobody_else() {
    let env = TestEnv::start_with(config()).await;
    let (email, password) = (&env.admin_email, &env.admin_password);
    let (attacker, owner) = (client_from([127, 0, 0, 1]), client_from([127, 0, 0, 2]));
    for _ in 0..env.config.login.per_account {
        login_via(&env, &attacker, email, "wrong-password").await.expect_problem(401);
    }
    let retry_after =
        assert_throttled(&login_via(&env, &attacker, email, password).await, "to this account from this address");
    // 5 failures refill over 15 min: one more try in at most 3 min (less the
    // time the failures took, which refilled a part).
    assert!((60..=180).contains(&retry_after), "{retry_after}");
    // Knowing an address is not enough to lock its owner out: the account
    // from another address signs in (whatever case the email is typed in).
    let answer = login_via(&env, &owner, &email.to_uppercase(), password).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    // And another account from the guessing address is unaffected.
    let other = env.second_account().await;
    let answer = login_via(&env, &attacker, &other.email, &other.password).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
}

/// Guessing spread over many addresses meets the account's allowance from
/// every address together — which does not hold back a browser that signed
/// in to the account before (the console's known-device cookie).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guessing_spread_over_addresses_is_throttled_but_not_for_a_browser_that_signed_in_before() {
    let mut config = config();
    config.login.per_account = 2;
    config.login.per_account_all_addresses = 4;
    let env = TestEnv::start_with(config).await;
    let (email, password) = (&env.admin_email, &env.admin_password);
    // The owner's browser signed in once (and so holds a device cookie).
    let browser = browser_from([127, 0, 0, 9]);
    let (_, signed_in) = submit_login(&browser, &env.api_url, email, password, &[]).await;
    assert_eq!(signed_in.status(), 303);
    let (device, device_cookie) = cookie_from(&signed_in, "relayops_device").expect("a known-device cookie");
    assert!(device_cookie.contains("HttpOnly") && device_cookie.contains("SameSite=Strict"), "{device_cookie}");

    for address in [[127, 0, 0, 3], [127, 0, 0, 4]] {
        for _ in 0..2 {
            login_via(&env, &client_from(address), email, "wrong-password").await.expect_problem(401);
        }
    }
    let fresh = login_via(&env, &client_from([127, 0, 0, 5]), email, password).await;
    assert_throttled(&fresh, "to this account from all addresses");
    // A browser without the cookie is refused too; the owner's is let in.
    let cookie = ("cookie", format!("relayops_device={device}"));
    let (_, stranger) = submit_login(&browser_from([127, 0, 0, 6]), &env.api_url, email, password, &[]).await;
    assert_eq!(stranger.status(), 429);
    assert!(stranger.headers().contains_key("retry-after"), "{:?}", stranger.headers());
    let (_, owner) = submit_login(&browser, &env.api_url, email, password, &[(cookie.0, cookie.1.as_str())]).await;
    assert_eq!(owner.status(), 303, "the known browser signs in");
    // A forged or another account's device value is no pass.
    let forged = ("cookie", format!("relayops_device={}", device.replace('.', ".x")));
    let (_, forged) =
        submit_login(&browser_from([127, 0, 0, 7]), &env.api_url, email, password, &[(forged.0, forged.1.as_str())])
            .await;
    assert_eq!(forged.status(), 429);
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
    assert_throttled(&login_via(&env, &client, email, password).await, "to this account from this address");
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
