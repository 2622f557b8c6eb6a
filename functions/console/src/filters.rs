//! The console's list filters and page cursors, from the query string of a
//! filter form: empty fields mean "any"; a malformed value is a 400 page that
//! names the field, never a silently wider list. Times are UTC, as the
//! pages show them (`datetime-local` inputs, or RFC 3339).
use chrono::{DateTime, NaiveDateTime, Utc};
use relayops_shared::domain::{DeliveryStatus, EventType, OrderingKey};
use relayops_shared::ids::EndpointId;
use relayops_shared::repo::delivery_queries::{DeliveryFilter, TimeKey};
use serde::Deserialize;
use uuid::Uuid;

use crate::error::ConsoleError;

/// Rows per page of the console's lists.
pub const PAGE_SIZE: i64 = 50;

/// The delivery log's and dead-letter view's query string.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct DeliveryQuery {
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub endpoint: String,
    #[serde(default)]
    pub event_type: String,
    /// The delivery log only (bulk replay does not filter by it).
    #[serde(default)]
    pub ordering_key: String,
    #[serde(default)]
    pub since: String,
    #[serde(default)]
    pub until: String,
    #[serde(default)]
    pub cursor: String,
}

fn bad(field: &str, message: &str) -> ConsoleError {
    ConsoleError::BadRequest(format!("{field}: {message}"))
}

fn present(text: &str) -> Option<&str> {
    Some(text.trim()).filter(|text| !text.is_empty())
}

/// A time from a `datetime-local` field (read as UTC) or RFC 3339.
pub fn time(field: &str, text: &str) -> Result<Option<DateTime<Utc>>, ConsoleError> {
    let Some(text) = present(text) else { return Ok(None) };
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(Some(at.with_timezone(&Utc)));
    }
    ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"]
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
        .map(|naive| Some(naive.and_utc()))
        .ok_or_else(|| bad(field, "must be a date and time such as 2026-12-01T16:00 (UTC)"))
}

pub fn endpoint(text: &str) -> Result<Option<EndpointId>, ConsoleError> {
    present(text).map(|text| text.parse().map_err(|_| bad("endpoint", "must be an endpoint id (ep_…)"))).transpose()
}

pub fn ordering_key(text: &str) -> Result<Option<OrderingKey>, ConsoleError> {
    // Not trimmed: a key is matched exactly, and one with spaces at its ends is refused.
    Some(text)
        .filter(|text| !text.is_empty())
        .map(|text| OrderingKey::parse(text).map_err(|error| bad("ordering key", &error.message)))
        .transpose()
}

pub fn event_type(text: &str) -> Result<Option<EventType>, ConsoleError> {
    present(text).map(|text| EventType::parse(text).map_err(|error| bad("event type", &error.message))).transpose()
}

impl DeliveryQuery {
    /// The repository filter these fields ask for (`status` overrides the form's).
    pub fn filter(&self, status: Option<DeliveryStatus>) -> Result<DeliveryFilter, ConsoleError> {
        let status = match (status, present(&self.status)) {
            (Some(status), _) => Some(status),
            (None, Some(text)) => Some(DeliveryStatus::parse(text).ok_or_else(|| bad("status", "unknown status"))?),
            (None, None) => None,
        };
        let (since, until) = (time("since", &self.since)?, time("until", &self.until)?);
        if let (Some(since), Some(until)) = (since, until) {
            if since >= until {
                return Err(bad("since", "must be before `until`"));
            }
        }
        Ok(DeliveryFilter {
            status,
            endpoint: endpoint(&self.endpoint)?,
            event_type: event_type(&self.event_type)?,
            ordering_key: ordering_key(&self.ordering_key)?,
            since,
            until,
        })
    }

    /// The query string of the same filters at another page.
    pub fn with_cursor(&self, cursor: &str) -> String {
        let pairs = [
            ("status", &self.status),
            ("endpoint", &self.endpoint),
            ("event_type", &self.event_type),
            ("ordering_key", &self.ordering_key),
            ("since", &self.since),
            ("until", &self.until),
        ];
        let mut query: Vec<String> = pairs
            .iter()
            .filter(|(_, value)| !value.trim().is_empty())
            .map(|(key, value)| format!("{key}={}", encode(value.trim())))
            .collect();
        query.push(format!("cursor={}", encode(cursor)));
        query.join("&")
    }
}

/// Percent-encodes a query-string value.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (byte as char).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// A page cursor: the last row's time (µs) and id.
pub fn encode_cursor(key: TimeKey) -> String {
    format!("{}.{}", key.at.timestamp_micros(), key.id.simple())
}

pub fn decode_cursor(text: &str) -> Result<Option<TimeKey>, ConsoleError> {
    let Some(text) = present(text) else { return Ok(None) };
    let invalid = || bad("cursor", "not a cursor from this list; go back to the first page");
    let (micros, id) = text.split_once('.').ok_or_else(invalid)?;
    let at = micros.parse::<i64>().ok().and_then(DateTime::from_timestamp_micros).ok_or_else(invalid)?;
    let id = Uuid::try_parse(id).map_err(|_| invalid())?;
    Ok(Some(TimeKey { at, id }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_parse_and_mistakes_name_their_field() {
        assert_eq!(time("since", "").unwrap(), None);
        let at = time("since", "2026-12-01T16:05").unwrap().unwrap();
        assert_eq!(at.to_rfc3339(), "2026-12-01T16:05:00+00:00");
        assert!(matches!(time("since", "yesterday"), Err(ConsoleError::BadRequest(m)) if m.starts_with("since")));
        let key = TimeKey { at, id: Uuid::now_v7() };
        assert_eq!(decode_cursor(&encode_cursor(key)).unwrap(), Some(key));
        assert!(decode_cursor("12.zz").is_err());
        let query = DeliveryQuery { status: "dead".into(), event_type: "a b".into(), ..Default::default() };
        assert_eq!(query.with_cursor("1.2"), "status=dead&event_type=a%20b&cursor=1.2");
    }
}
