//! The client's idempotency key: at most one event per (tenant, key), forever.
use super::ValidationError;

const MAX_LEN: usize = 255;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn parse(text: &str) -> Result<Self, ValidationError> {
        let field = "idempotency_key";
        if text.is_empty() || text.len() > MAX_LEN {
            return Err(ValidationError::new(field, format!("must be 1 to {MAX_LEN} characters")));
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ValidationError::new(field, "must be printable ASCII without spaces"));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_printable_ascii_and_bounded() {
        assert!(IdempotencyKey::parse("order-42:v1").is_ok());
        assert!(IdempotencyKey::parse("").is_err());
        assert!(IdempotencyKey::parse("has space").is_err());
        assert!(IdempotencyKey::parse("é").is_err());
        assert!(IdempotencyKey::parse(&"k".repeat(256)).is_err());
    }
}
