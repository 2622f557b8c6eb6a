//! An event's ordering key: the deliveries of the events that share one go to
//! each endpoint one at a time, in the order the events were accepted (an
//! ordering lane, `repo::lanes`).
use super::ValidationError;

/// In characters; the database checks the same bound (`ordering_lanes`).
pub const MAX_ORDERING_KEY_CHARS: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OrderingKey(String);

impl OrderingKey {
    pub fn parse(text: &str) -> Result<Self, ValidationError> {
        let field = "ordering_key";
        let chars = text.chars().count();
        if chars == 0 || chars > MAX_ORDERING_KEY_CHARS {
            return Err(ValidationError::new(
                field,
                format!("must be 1 to {MAX_ORDERING_KEY_CHARS} characters (got {chars})"),
            ));
        }
        if text.chars().any(char::is_control) {
            return Err(ValidationError::new(field, "must not contain control characters"));
        }
        if text.trim() != text {
            return Err(ValidationError::new(field, "must not start or end with whitespace"));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What a dead letter does to its ordering lane (an endpoint setting).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DeadLetterLane {
    /// The next delivery of the key goes on (the dead one can be replayed).
    #[default]
    Release,
    /// The lane waits until the dead delivery is replayed or skipped.
    Block,
}

impl DeadLetterLane {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Release => "release",
            Self::Block => "block",
        }
    }

    /// A stored value (the database allows only these two).
    pub fn from_stored(text: &str) -> Self {
        if text == "block" {
            Self::Block
        } else {
            Self::Release
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_bounded_text_without_control_characters() {
        assert!(OrderingKey::parse("order-42").is_ok());
        assert!(OrderingKey::parse("kunde/ä 7").is_ok());
        assert!(OrderingKey::parse(&"é".repeat(256)).is_ok());
        assert!(OrderingKey::parse(&"é".repeat(257)).is_err());
        assert!(OrderingKey::parse("").is_err());
        assert!(OrderingKey::parse("a\nb").is_err());
        assert!(OrderingKey::parse(" padded").is_err());
        let error = OrderingKey::parse(&"k".repeat(300)).unwrap_err();
        assert_eq!(error.field, "ordering_key");
        assert!(error.message.contains("1 to 256"), "{}", error.message);
    }
}
