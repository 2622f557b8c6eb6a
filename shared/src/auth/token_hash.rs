//! Operator tokens from the environment (the admin token, the one-time
//! bootstrap token), known to the processes only as their SHA-256 and compared
//! in constant time.
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub fn token_sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Whether `presented` is the token whose hash is `expected`.
pub fn matches(presented: &str, expected: &[u8; 32]) -> bool {
    bool::from(token_sha256(presented).ct_eq(expected))
}
