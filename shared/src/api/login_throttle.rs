//! Throttling password guessing: failed logins are counted per account (the
//! email, hashed) and per client address (IPv6: its /64), in flow control's
//! token buckets — shared by every replica through Redis, per process while
//! Redis cannot be asked, as ingest limits are. A bucket holds the failures
//! allowed (`RELAYOPS_LOGIN_FAILURES_PER_ACCOUNT` / `…_PER_ADDRESS`) and
//! refills over `RELAYOPS_LOGIN_WINDOW_SECS`.
//!
//! [`LoginThrottle::admit`] takes a token from both buckets before the
//! password is looked at — so concurrent guesses cannot all slip through
//! before the first failure is counted — and answers 429 with `Retry-After`
//! when either is empty, whatever the password. A failure keeps the tokens; a
//! success ([`Admitted::succeeded`]) refills the account's bucket and gives the
//! address its token back. Unknown emails are counted like known ones, so the
//! throttle says nothing about which accounts exist. Reusable by any login
//! form (the console's too).
use std::net::IpAddr;

use ipnet::IpNet;
use sha2::{Digest, Sha256};

use super::ApiError;
use crate::config::LoginThrottleConfig;
use crate::flow::{FlowControl, Limit, TokenDecision};

const ACCOUNT: &str = "login-account";
const ADDRESS: &str = "login-address";

#[derive(Clone)]
pub struct LoginThrottle {
    flow: FlowControl,
    config: LoginThrottleConfig,
}

/// A login attempt let through; report a success with [`succeeded`](Self::succeeded).
#[must_use = "a successful login must refill its allowance"]
pub struct Admitted<'a> {
    throttle: &'a LoginThrottle,
    account: String,
    address: Option<String>,
}

impl LoginThrottle {
    pub fn new(flow: FlowControl, config: LoginThrottleConfig) -> Self {
        Self { flow, config }
    }

    pub fn trusted_proxies(&self) -> &[IpNet] {
        &self.config.trusted_proxies
    }

    fn limit(&self, failures: u32) -> Limit {
        Limit { per_second: f64::from(failures) / self.config.window.as_secs_f64().max(1.0), burst: failures }
    }

    /// Counts an attempt at `email` from `client` up front; 429 when the
    /// account or the address has no failures left.
    pub async fn admit(&self, email: &str, client: Option<IpAddr>) -> Result<Admitted<'_>, ApiError> {
        let account = account_key(email);
        let account_limit = self.limit(self.config.per_account);
        if let TokenDecision::Wait(wait) = self.flow.take_tokens(ACCOUNT, &account, account_limit, 1).await {
            return Err(refusal("this account", wait));
        }
        let address = client.map(address_key);
        if let Some(address) = &address {
            let address_limit = self.limit(self.config.per_address);
            if let TokenDecision::Wait(wait) = self.flow.take_tokens(ADDRESS, address, address_limit, 1).await {
                self.flow.give_back_token(ACCOUNT, &account, account_limit).await;
                return Err(refusal("this address", wait));
            }
        }
        Ok(Admitted { throttle: self, account, address })
    }
}

impl Admitted<'_> {
    /// The password was right: the account starts afresh, and the address
    /// gets back the try it spent (its other failures still count).
    pub async fn succeeded(self) {
        let throttle = self.throttle;
        throttle.flow.refill(ACCOUNT, &self.account).await;
        if let Some(address) = &self.address {
            throttle.flow.give_back_token(ADDRESS, address, throttle.limit(throttle.config.per_address)).await;
        }
    }
}

fn refusal(whom: &str, wait: std::time::Duration) -> ApiError {
    let retry_after_secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    tracing::warn!(whom, retry_after_secs, "login throttled");
    ApiError::RateLimited {
        detail: format!("too many failed logins from {whom}; retry after {retry_after_secs} s"),
        retry_after_secs,
    }
}

/// The email as a bucket id: hashed (no address in Redis), case and
/// surrounding spaces ignored, as the lookup is case-insensitive.
fn account_key(email: &str) -> String {
    let digest = Sha256::digest(email.trim().to_lowercase().as_bytes());
    digest.iter().take(16).map(|byte| format!("{byte:02x}")).collect()
}

/// An address as a bucket id; IPv6 by its /64, which one host usually owns.
fn address_key(address: IpAddr) -> String {
    match address {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => IpNet::new(IpAddr::V6(v6), 64).map(|net| net.trunc().to_string()).unwrap_or_default(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_ignore_case_and_ipv6_clients_are_counted_by_their_64() {
        assert_eq!(account_key(" Admin@Example.com"), account_key("admin@example.com"));
        assert_ne!(account_key("a@example.com"), account_key("b@example.com"));
        assert!(!account_key("admin@example.com").contains('@'));
        let same = |a: &str, b: &str| address_key(a.parse().unwrap()) == address_key(b.parse().unwrap());
        assert!(same("2001:db8:1:2::1", "2001:db8:1:2:ffff::9"));
        assert!(!same("2001:db8:1:2::1", "2001:db8:1:3::1"));
        assert!(same("::ffff:192.0.2.1", "192.0.2.1"));
        assert!(!same("192.0.2.1", "192.0.2.2"));
    }
}
