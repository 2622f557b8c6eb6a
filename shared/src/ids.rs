//! Prefixed ID newtypes. In the database every ID is a UUID; on the wire it is
//! `<prefix>_<32 hex>` so a reader can tell an event id from a delivery id, and
//! an id of the wrong kind is refused at the edge.
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

/// The text of an ID was not `<prefix>_<uuid>` for the expected prefix.
#[derive(Debug, Clone, thiserror::Error)]
#[error("`{text}` is not a valid {kind} id (expected `{prefix}_` followed by 32 hex digits)")]
pub struct IdParseError {
    kind: &'static str,
    prefix: &'static str,
    text: String,
}

macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Uuid);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// A new, time-ordered id (UUIDv7), so inserts stay index-friendly.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }

            pub fn from_uuid(uuid: Uuid) -> Self {
                Self(uuid)
            }

            pub fn as_uuid(&self) -> Uuid {
                self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}_{}", $prefix, self.0.simple())
            }
        }

        impl FromStr for $name {
            type Err = IdParseError;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                let error = || IdParseError { kind: $kind, prefix: $prefix, text: text.chars().take(80).collect() };
                let rest = text
                    .strip_prefix($prefix)
                    .and_then(|rest| rest.strip_prefix('_'))
                    .ok_or_else(error)?;
                if rest.len() != 32 {
                    return Err(error());
                }
                Uuid::try_parse(rest).map(Self).map_err(|_| error())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

prefixed_id!(
    /// A tenant: the unit of isolation. Never accepted from a client.
    TenantId, "ten", "tenant");
prefixed_id!(
    /// A user account of a tenant.
    UserId, "usr", "user");
prefixed_id!(
    /// An API key row (not the key's secret).
    ApiKeyId, "key", "API key");
prefixed_id!(
    /// A webhook endpoint.
    EndpointId, "ep", "endpoint");
prefixed_id!(
    /// A subscription of an endpoint to an event type pattern.
    SubscriptionId, "sub", "subscription");
prefixed_id!(
    /// An event posted by a tenant.
    EventId, "evt", "event");
prefixed_id!(
    /// One event to one endpoint; stable across retries and replays, so receivers
    /// can deduplicate on it.
    DeliveryId, "dlv", "delivery");
prefixed_id!(
    /// One HTTP attempt of a delivery.
    AttemptId, "att", "attempt");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_round_trips_through_text() {
        let id = EventId::new();
        let text = id.to_string();
        assert!(text.starts_with("evt_"));
        assert_eq!(text.parse::<EventId>().unwrap(), id);
    }

    #[test]
    fn id_of_another_kind_is_refused() {
        let text = DeliveryId::new().to_string();
        assert!(text.parse::<EventId>().is_err());
        assert!("evt_nothex".parse::<EventId>().is_err());
        assert!("evt".parse::<EventId>().is_err());
    }
}
