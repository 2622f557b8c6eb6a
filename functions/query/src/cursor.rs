//! Opaque page cursors. A cursor is the position of the last row of a page,
//! tagged with the list it belongs to, base64url-encoded; clients pass
//! `next_cursor` back unchanged. Anything else (edited, truncated, or from
//! another list) is a 400, never a wrong page.
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::DateTime;
use relayops_shared::api::ApiError;
use relayops_shared::repo::delivery_queries::TimeKey;
use uuid::Uuid;

/// Which list a cursor was issued by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorKind {
    Events,
    Deliveries,
    Attempts,
    BlockedLanes,
}

impl CursorKind {
    fn tag(self) -> &'static str {
        match self {
            Self::Events => "evt1",
            Self::Deliveries => "dlv1",
            Self::Attempts => "att1",
            Self::BlockedLanes => "lan1",
        }
    }
}

fn invalid() -> ApiError {
    ApiError::BadRequest(
        "`cursor` is not a cursor this list issued; pass the previous page's `next_cursor` unchanged".into(),
    )
}

fn encode(kind: CursorKind, body: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{}:{body}", kind.tag()))
}

/// The parts after the tag, if `text` is a well-formed cursor of `kind`.
fn decode(kind: CursorKind, text: &str) -> Result<String, ApiError> {
    if text.len() > 200 {
        return Err(invalid());
    }
    let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| invalid())?;
    let text = String::from_utf8(bytes).map_err(|_| invalid())?;
    let body = text.strip_prefix(kind.tag()).and_then(|rest| rest.strip_prefix(':')).ok_or_else(invalid)?;
    Ok(body.to_owned())
}

/// A cursor for a newest-first list, after `key`.
pub fn encode_time_key(kind: CursorKind, key: TimeKey) -> String {
    encode(kind, &format!("{}:{}", key.at.timestamp_micros(), key.id.simple()))
}

pub fn decode_time_key(kind: CursorKind, text: &str) -> Result<TimeKey, ApiError> {
    let body = decode(kind, text)?;
    let (micros, id) = body.split_once(':').ok_or_else(invalid)?;
    let at = micros.parse::<i64>().ok().and_then(DateTime::from_timestamp_micros).ok_or_else(invalid)?;
    let id = Uuid::try_parse(id).map_err(|_| invalid())?;
    Ok(TimeKey { at, id })
}

/// A cursor for the attempt history, after attempt `number`.
pub fn encode_attempt(number: i32) -> String {
    encode(CursorKind::Attempts, &number.to_string())
}

pub fn decode_attempt(text: &str) -> Result<i32, ApiError> {
    decode(CursorKind::Attempts, text)?.parse::<i32>().ok().filter(|number| *number >= 0).ok_or_else(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_key_round_trips_and_is_bound_to_its_list() {
        let key = TimeKey { at: DateTime::from_timestamp_micros(1_764_000_000_123_456).unwrap(), id: Uuid::now_v7() };
        let cursor = encode_time_key(CursorKind::Deliveries, key);
        assert_eq!(decode_time_key(CursorKind::Deliveries, &cursor).unwrap(), key);
        assert!(decode_time_key(CursorKind::Events, &cursor).is_err());
    }

    #[test]
    fn garbage_is_refused() {
        for text in ["", "abc", "!!!!", &URL_SAFE_NO_PAD.encode("dlv1:x:y"), &URL_SAFE_NO_PAD.encode("dlv1:1:zz")] {
            assert!(decode_time_key(CursorKind::Deliveries, text).is_err(), "{text}");
        }
        assert!(decode_attempt(&URL_SAFE_NO_PAD.encode("att1:-4")).is_err());
        assert_eq!(decode_attempt(&encode_attempt(7)).unwrap(), 7);
    }
}
