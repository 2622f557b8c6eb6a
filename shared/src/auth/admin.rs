//! The platform operators' credential for the admin API: one token from the
//! environment, known to the processes only as its SHA-256 and compared in
//! constant time. It is not a tenant credential: tenant routes do not accept
//! it, and the admin API accepts nothing else.
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub fn token_sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Whether `presented` is the token whose hash is `expected`.
pub fn matches(presented: &str, expected: &[u8; 32]) -> bool {
    bool::from(token_sha256(presented).ct_eq(expected))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_token_itself_matches_its_hash() {
        let expected = token_sha256("operators-token-0123456789-abcdefghij");
        assert!(matches("operators-token-0123456789-abcdefghij", &expected));
        assert!(!matches("operators-token-0123456789-abcdefghiJ", &expected));
        assert!(!matches("", &expected));
    }
}
