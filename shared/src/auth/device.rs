//! Known devices, for sign-in throttling: after a successful sign-in the
//! console gives the browser a device token for that account (a cookie),
//! and a later sign-in presenting it is not counted against the account's
//! allowance from every address together (`api::login_throttle`), so a
//! guesser spread over many addresses cannot lock the owner out of the
//! browser they use. Its allowance per address still applies.
//!
//! A token is `<expiry, unix seconds>.<MAC>`: HMAC-SHA256, under a key
//! derived from the login secret (`RELAYOPS_JWT_SECRET`), of the account's
//! throttle key and the expiry. It names no account (the account is the one
//! being signed in to), grants nothing but the throttle's exemption, and is
//! checked in constant time.
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

const KEY_LABEL: &[u8] = b"relayops-known-device-key\0";

/// The key device tokens are signed with.
#[derive(Clone)]
pub struct DeviceKey([u8; 32]);

impl DeviceKey {
    /// Derived from the login secret (so every replica derives the same).
    pub fn derive(secret: &[u8]) -> Self {
        Self(mac(secret, &[KEY_LABEL]))
    }

    /// A token for `account` (its throttle key) valid until `expires_unix`.
    pub fn issue(&self, account: &str, expires_unix: i64) -> String {
        let expires = expires_unix.to_string();
        let tag = mac(&self.0, &[account.as_bytes(), b".", expires.as_bytes()]);
        format!("{expires}.{}", URL_SAFE_NO_PAD.encode(tag))
    }

    /// Whether `token` was issued for `account` and is still valid at `now_unix`.
    pub fn recognises(&self, token: &str, account: &str, now_unix: i64) -> bool {
        let Some((expires, tag)) = token.split_once('.') else { return false };
        let Ok(expires_unix) = expires.parse::<i64>() else { return false };
        if expires_unix <= now_unix {
            return false;
        }
        let Ok(tag) = URL_SAFE_NO_PAD.decode(tag) else { return false };
        // Compared in constant time.
        hmac(&self.0, &[account.as_bytes(), b".", expires.as_bytes()]).verify_slice(&tag).is_ok()
    }
}

/// HMAC-SHA256 of `parts` under `key`, not yet finalised.
fn hmac(key: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    // HMAC takes a key of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    for part in parts {
        mac.update(part);
    }
    mac
}

fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    hmac(key, parts).finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_recognised_for_its_account_until_it_expires_and_not_when_altered() {
        let key = DeviceKey::derive(b"a login secret of at least thirty-two bytes");
        let token = key.issue("account-a", 1_000);
        assert!(key.recognises(&token, "account-a", 999));
        assert!(!key.recognises(&token, "account-a", 1_000), "expired");
        assert!(!key.recognises(&token, "account-b", 999), "another account");
        assert!(!key.recognises(&token.replacen("1000", "9000", 1), "account-a", 999), "a later expiry forged");
        let other = DeviceKey::derive(b"another login secret, thirty-two bytes or more");
        assert!(!other.recognises(&token, "account-a", 999), "another installation's key");
        assert!(!key.recognises("", "account-a", 0) && !key.recognises("1000.", "account-a", 0));
    }
}
