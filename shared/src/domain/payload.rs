//! An event's payload: a JSON object of bounded size.
use serde_json::{Map, Value};

use super::ValidationError;

/// The largest serialized payload accepted, in bytes.
pub const MAX_PAYLOAD_BYTES: usize = 256 * 1024;

#[derive(Debug, Clone, PartialEq)]
pub struct EventPayload(Map<String, Value>);

/// Why a payload was refused: not an object (422), or too large (413).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    #[error("payload: is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}")]
    TooLarge { size: usize },
}

impl EventPayload {
    pub fn parse(value: Value) -> Result<Self, PayloadError> {
        let Value::Object(object) = value else {
            return Err(ValidationError::new("payload", "must be a JSON object").into());
        };
        // Serializing a parsed Value cannot fail; measure what will be stored.
        let size = serde_json::to_vec(&object).map(|bytes| bytes.len()).unwrap_or(usize::MAX);
        if size > MAX_PAYLOAD_BYTES {
            return Err(PayloadError::TooLarge { size });
        }
        Ok(Self(object))
    }

    pub fn as_json(&self) -> &Map<String, Value> {
        &self.0
    }

    pub fn into_value(self) -> Value {
        Value::Object(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn payload_must_be_an_object_within_the_limit() {
        assert!(EventPayload::parse(json!({"a": 1})).is_ok());
        assert!(EventPayload::parse(json!([1])).is_err());
        assert!(EventPayload::parse(json!("x")).is_err());
        // `{"big":"…"}` is 10 bytes around the string.
        let exactly = "x".repeat(MAX_PAYLOAD_BYTES - 10);
        assert!(EventPayload::parse(json!({ "big": exactly })).is_ok());
        let over = "x".repeat(MAX_PAYLOAD_BYTES - 9);
        assert_eq!(
            EventPayload::parse(json!({ "big": over })),
            Err(PayloadError::TooLarge { size: MAX_PAYLOAD_BYTES + 1 })
        );
    }
}
