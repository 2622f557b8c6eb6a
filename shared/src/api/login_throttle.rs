//! Throttling password guessing without handing anyone a lockout lever.
//! Failed logins are counted in flow control's token buckets — shared by
//! every replica through Redis, per process while Redis cannot be asked, as
//! ingest limits are — each refilling over `RELAYOPS_LOGIN_WINDOW_SECS`:
//! - an account **from one address** (`RELAYOPS_LOGIN_FAILURES_PER_ACCOUNT`,
//!   the email hashed; IPv6 addresses by their /64): the limit a guesser
//!   meets. It is the only per-account limit an address can spend, so
//!   guessing from one address locks that address out of that account, and
//!   the account's owner signing in from anywhere else is not held back;
//! - an address, whatever the accounts (`…_PER_ADDRESS`): one source spraying
//!   many accounts;
//! - an account from every address together (`…_PER_ACCOUNT_ALL_ADDRESSES`,
//!   far larger): guessing spread over many addresses. A browser that has
//!   signed in to the account before ([`crate::auth::device`]: a signed
//!   cookie the console sets) is not counted against it, so even a spread-out
//!   attack cannot lock the owner out of the browser they use.
//!
//! [`LoginThrottle::admit`] takes a token from each bucket before the
//! password is looked at — so concurrent guesses cannot all slip through
//! before the first failure is counted — and answers 429 with `Retry-After`
//! when one is empty, whatever the password (giving back what it took from
//! the others). A failure keeps the tokens; a success
//! ([`Admitted::succeeded`]) refills the account's allowance from that
//! address and gives the other buckets their token back. Unknown emails are
//! counted like known ones, so the throttle says nothing about which
//! accounts exist. Reusable by any login form (the console's too).
use std::net::IpAddr;

use ipnet::IpNet;
use sha2::{Digest, Sha256};

use super::ApiError;
use crate::config::LoginThrottleConfig;
use crate::flow::{FlowControl, Limit, TokenDecision};

/// An account from one address.
const ACCOUNT_FROM_ADDRESS: &str = "login-account-address";
const ADDRESS: &str = "login-address";
/// An account from every address.
const ACCOUNT: &str = "login-account";

#[derive(Clone)]
pub struct LoginThrottle {
    flow: FlowControl,
    config: LoginThrottleConfig,
}

/// A login attempt let through; report a success with [`succeeded`](Self::succeeded).
#[must_use = "a successful login must refill its allowance"]
pub struct Admitted<'a> {
    throttle: &'a LoginThrottle,
    /// Every bucket a token was taken from, with its limit.
    taken: Vec<(&'static str, String, Limit)>,
}

/// Where a login attempt comes from.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoginSource {
    /// The client's address, when known.
    pub address: Option<IpAddr>,
    /// Whether it comes from a browser that signed in to the account before
    /// (a device token the account's key verifies).
    pub known_device: bool,
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

    /// Counts an attempt at `email` from `source` up front; 429 when any of
    /// its allowances is spent (see the module).
    pub async fn admit(&self, email: &str, source: LoginSource) -> Result<Admitted<'_>, ApiError> {
        let account = account_key(email);
        let address = source.address.map(address_key);
        let mut buckets = vec![(
            ACCOUNT_FROM_ADDRESS,
            match &address {
                Some(address) => format!("{account}/{address}"),
                None => account.clone(),
            },
            self.limit(self.config.per_account),
            "to this account from this address",
        )];
        if let Some(address) = address {
            buckets.push((ADDRESS, address, self.limit(self.config.per_address), "from this address"));
        }
        if !source.known_device {
            buckets.push((
                ACCOUNT,
                account,
                self.limit(self.config.per_account_all_addresses),
                "to this account from all addresses",
            ));
        }
        let mut admitted = Admitted { throttle: self, taken: Vec::with_capacity(buckets.len()) };
        for (kind, id, limit, whom) in buckets {
            if let TokenDecision::Wait(wait) = self.flow.take_tokens(kind, &id, limit, 1).await {
                admitted.give_back().await;
                return Err(refusal(whom, wait));
            }
            admitted.taken.push((kind, id, limit));
        }
        Ok(admitted)
    }
}

impl Admitted<'_> {
    /// The password was right: the account starts afresh from this
    /// address, and the other allowances get back the try they lent (their
    /// other failures still count).
    pub async fn succeeded(self) {
        let flow = &self.throttle.flow;
        for (kind, id, limit) in &self.taken {
            match *kind {
                ACCOUNT_FROM_ADDRESS => flow.refill(kind, id).await,
                _ => flow.give_back_token(kind, id, *limit).await,
            }
        }
    }

    async fn give_back(&self) {
        for (kind, id, limit) in &self.taken {
            self.throttle.flow.give_back_token(kind, id, *limit).await;
        }
    }
}

fn refusal(whom: &str, wait: std::time::Duration) -> ApiError {
    let retry_after_secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    tracing::warn!(whom, retry_after_secs, "login throttled");
    ApiError::RateLimited {
        detail: format!("too many failed logins {whom}; retry after {retry_after_secs} s"),
        retry_after_secs,
    }
}

/// The email as a bucket id: hashed (no address in Redis), case and
/// surrounding spaces ignored, as the lookup is case-insensitive.
pub fn account_key(email: &str) -> String {
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
