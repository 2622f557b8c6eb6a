//! An endpoint's signing secret in the Standard Webhooks format:
//! `whsec_` + base64 of 24 to 64 random bytes. The HMAC key is the decoded bytes.
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rand::RngCore;

use super::ValidationError;

const PREFIX: &str = "whsec_";
const GENERATED_BYTES: usize = 32;

#[derive(Clone, PartialEq, Eq)]
pub struct SigningSecret {
    text: String,
    key: Vec<u8>,
}

impl std::fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningSecret(redacted)")
    }
}

impl SigningSecret {
    pub fn generate() -> Self {
        let mut key = vec![0u8; GENERATED_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut key);
        Self { text: format!("{PREFIX}{}", STANDARD.encode(&key)), key }
    }

    pub fn parse(text: &str) -> Result<Self, ValidationError> {
        let field = "secret";
        let encoded =
            text.strip_prefix(PREFIX).ok_or_else(|| ValidationError::new(field, "must start with \"whsec_\""))?;
        let key = STANDARD
            .decode(encoded)
            .map_err(|_| ValidationError::new(field, "must be \"whsec_\" followed by base64"))?;
        if !(24..=64).contains(&key.len()) {
            return Err(ValidationError::new(field, "must encode 24 to 64 bytes"));
        }
        Ok(Self { text: text.to_owned(), key })
    }

    /// The secret as shown to its owner (`whsec_…`).
    pub fn expose(&self) -> &str {
        &self.text
    }

    /// The HMAC key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_secret_parses_back() {
        let secret = SigningSecret::generate();
        assert!(secret.expose().starts_with("whsec_"));
        assert_eq!(SigningSecret::parse(secret.expose()).unwrap(), secret);
        assert!(SigningSecret::parse("whsec_c2hvcnQ=").is_err());
        assert!(SigningSecret::parse("nope").is_err());
        assert_eq!(format!("{secret:?}"), "SigningSecret(redacted)");
    }
}
