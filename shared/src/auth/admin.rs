//! The platform operators' credential for the admin API: one token from the
//! environment, known to the processes only as its SHA-256 and compared in
//! constant time. It is not a tenant credential: tenant routes do not accept
//! it, and the admin API accepts nothing else.
pub use super::token_hash::{matches, token_sha256};

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
