//! Event types (`order.created`) and the subscription patterns that match them
//! (`order.created`, `order.*`, `*`).
use super::ValidationError;

const MAX_LEN: usize = 128;

/// A dot-separated event type: segments of ASCII letters, digits, `_` and `-`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventType(String);

fn valid_segments(text: &str) -> bool {
    text.split('.').all(|segment| {
        !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    })
}

impl EventType {
    pub fn parse(text: &str) -> Result<Self, ValidationError> {
        let field = "event_type";
        if text.is_empty() || text.len() > MAX_LEN {
            return Err(ValidationError::new(field, format!("must be 1 to {MAX_LEN} characters")));
        }
        if !valid_segments(text) {
            return Err(ValidationError::new(
                field,
                "must be dot-separated segments of letters, digits, '_' or '-' (e.g. \"order.created\")",
            ));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What an endpoint subscribes to: an exact type, a `prefix.*` wildcard, or `*`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventTypePattern(String);

impl EventTypePattern {
    pub fn parse(text: &str) -> Result<Self, ValidationError> {
        if text == "*" {
            return Ok(Self(text.to_owned()));
        }
        // The whole pattern, `.*` included, fits where patterns are stored.
        if text.len() > MAX_LEN {
            return Err(ValidationError::new("event_types", format!("`{text}`: must be at most {MAX_LEN} characters")));
        }
        let exact = text.strip_suffix(".*").unwrap_or(text);
        EventType::parse(exact).map_err(|error| {
            ValidationError::new(
                "event_types",
                format!("`{text}`: {} (or end with \".*\", or be \"*\")", error.message),
            )
        })?;
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The same rule the ingest SQL applies; kept here for readers and tests.
    pub fn matches(&self, event_type: &EventType) -> bool {
        match self.0.strip_suffix('*') {
            Some(prefix) => event_type.as_str().starts_with(prefix),
            None => self.0 == event_type.as_str(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_fits_where_patterns_are_stored() {
        assert!(EventTypePattern::parse(&format!("{}.*", "x".repeat(126))).is_ok());
        assert!(EventTypePattern::parse(&format!("{}.*", "x".repeat(127))).is_err(), "129 characters");
        assert!(EventTypePattern::parse(&format!("{}.*", "x".repeat(128))).is_err());
    }

    #[test]
    fn event_types_parse_or_explain() {
        assert!(EventType::parse("order.created").is_ok());
        assert!(EventType::parse("a_b-c.D9").is_ok());
        for bad in ["", ".x", "x.", "a..b", "order.*", "has space", &"x".repeat(129)] {
            assert!(EventType::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn patterns_match_exact_prefix_and_all() {
        let created = EventType::parse("order.created").unwrap();
        let other = EventType::parse("orders.created").unwrap();
        assert!(EventTypePattern::parse("order.created").unwrap().matches(&created));
        assert!(EventTypePattern::parse("order.*").unwrap().matches(&created));
        assert!(!EventTypePattern::parse("order.*").unwrap().matches(&other));
        assert!(EventTypePattern::parse("*").unwrap().matches(&other));
        assert!(EventTypePattern::parse("order.**").is_err());
        assert!(EventTypePattern::parse("*.created").is_err());
    }
}
