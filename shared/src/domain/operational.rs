//! Operational events: what RelayOps tells a tenant about its own endpoints
//! (`endpoint.disabled`, `endpoint.enabled`, `delivery.dead`), delivered to the
//! tenant's *operational* endpoints through the same pipeline as its events.
//!
//! Loop rule: nothing that happens to an operational endpoint produces an
//! operational event (not to itself, not to another operational endpoint), so
//! two failing operational endpoints can never feed each other.
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};

use super::{EventPayload, EventType, EventTypePattern, ValidationError};
use crate::ids::{DeliveryId, EndpointId, EventId, TenantId};

/// What an endpoint receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointKind {
    /// The tenant's own events, by its subscriptions.
    Webhook,
    /// Operational events about the tenant's other endpoints.
    Operational,
}

impl EndpointKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Webhook => "webhook",
            Self::Operational => "operational",
        }
    }

    /// As stored (the column's CHECK allows only the two names).
    pub fn from_stored(text: &str) -> Self {
        if text == "operational" {
            Self::Operational
        } else {
            Self::Webhook
        }
    }
}

/// Every operational event type, as receivers see it.
pub const OPERATIONAL_EVENT_TYPES: &[&str] = &[ENDPOINT_DISABLED, ENDPOINT_ENABLED, DELIVERY_DEAD];
pub const ENDPOINT_DISABLED: &str = "endpoint.disabled";
pub const ENDPOINT_ENABLED: &str = "endpoint.enabled";
pub const DELIVERY_DEAD: &str = "delivery.dead";

/// An operational endpoint subscribes to operational types only: one of them
/// exactly, `endpoint.*`, `delivery.*` or `*` (all of them).
pub fn check_operational_pattern(pattern: &EventTypePattern) -> Result<(), ValidationError> {
    let text = pattern.as_str();
    let prefix = text.strip_suffix(".*");
    let known = text == "*"
        || OPERATIONAL_EVENT_TYPES.contains(&text)
        || prefix.is_some_and(|prefix| OPERATIONAL_EVENT_TYPES.iter().any(|t| t.starts_with(&format!("{prefix}."))));
    if known {
        Ok(())
    } else {
        Err(ValidationError::new(
            "event_types",
            format!(
                "`{text}`: an operational endpoint receives only {} (or a `prefix.*` of them, or `*`)",
                OPERATIONAL_EVENT_TYPES.join(", ")
            ),
        ))
    }
}

/// Who or what disabled an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisabledBy {
    /// Every attempt failed for the configured window.
    Health,
    /// The receiver answered 410 Gone.
    ReceiverGone,
    /// A tenant's user or key (PATCH).
    Operator,
}

impl DisabledBy {
    fn as_str(self) -> &'static str {
        match self {
            Self::Health => "health",
            Self::ReceiverGone => "receiver_gone",
            Self::Operator => "operator",
        }
    }
}

/// The endpoint an event is about.
#[derive(Debug, Clone)]
pub struct Subject {
    pub id: EndpointId,
    pub kind: EndpointKind,
    pub url: String,
}

/// One operational event, ready to be stored as the tenant's event.
#[derive(Debug, Clone)]
pub struct OperationalEvent {
    /// The endpoint it is about; an operational one means no event at all.
    pub subject_kind: EndpointKind,
    pub event_type: EventType,
    pub payload: EventPayload,
}

fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn event(subject: &Subject, event_type: &'static str, tenant: TenantId, data: Value) -> OperationalEvent {
    let mut payload = Map::new();
    payload.insert("type".into(), event_type.into());
    payload.insert("tenant_id".into(), tenant.to_string().into());
    payload.insert("timestamp".into(), timestamp(Utc::now()).into());
    payload.insert("data".into(), data);
    OperationalEvent {
        subject_kind: subject.kind,
        event_type: EventType::parse(event_type).expect("operational event types are valid"),
        payload: EventPayload::parse(Value::Object(payload)).expect("an operational payload is a small object"),
    }
}

impl OperationalEvent {
    /// Whether it may be emitted at all (the loop rule).
    pub fn is_emitted(&self) -> bool {
        self.subject_kind == EndpointKind::Webhook
    }

    pub fn endpoint_disabled(
        tenant: TenantId,
        subject: &Subject,
        by: DisabledBy,
        reason: &str,
        failing_since: Option<DateTime<Utc>>,
    ) -> Self {
        let data = json!({
            "endpoint_id": subject.id.to_string(),
            "url": subject.url,
            "disabled_by": by.as_str(),
            "reason": reason,
            "failing_since": failing_since.map(timestamp),
        });
        event(subject, ENDPOINT_DISABLED, tenant, data)
    }

    pub fn endpoint_enabled(tenant: TenantId, subject: &Subject) -> Self {
        let data = json!({ "endpoint_id": subject.id.to_string(), "url": subject.url });
        event(subject, ENDPOINT_ENABLED, tenant, data)
    }

    pub fn delivery_dead(tenant: TenantId, subject: &Subject, dead: &DeadDelivery<'_>) -> Self {
        let data = json!({
            "delivery_id": dead.delivery_id.to_string(),
            "event_id": dead.event_id.to_string(),
            "event_type": dead.event_type,
            "endpoint_id": subject.id.to_string(),
            "url": subject.url,
            "attempts": dead.attempts,
            "last_http_status": dead.last_http_status,
            "last_error": dead.last_error,
        });
        event(subject, DELIVERY_DEAD, tenant, data)
    }
}

/// What `delivery.dead` says about the delivery.
#[derive(Debug)]
pub struct DeadDelivery<'a> {
    pub delivery_id: DeliveryId,
    pub event_id: EventId,
    pub event_type: &'a str,
    pub attempts: i32,
    pub last_http_status: Option<i32>,
    pub last_error: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> EventTypePattern {
        EventTypePattern::parse(text).expect("pattern")
    }

    #[test]
    fn operational_endpoints_subscribe_only_to_operational_types() {
        for ok in ["*", "endpoint.disabled", "endpoint.enabled", "delivery.dead", "endpoint.*", "delivery.*"] {
            assert_eq!(check_operational_pattern(&pattern(ok)), Ok(()), "{ok}");
        }
        for refused in ["order.created", "order.*", "endpoint.deleted", "endpoint.disabled.*", "delivery.dea"] {
            assert!(check_operational_pattern(&pattern(refused)).is_err(), "{refused}");
        }
    }

    #[test]
    fn nothing_about_an_operational_endpoint_is_emitted() {
        let tenant = TenantId::new();
        let mut subject =
            Subject { id: EndpointId::new(), kind: EndpointKind::Webhook, url: "https://a.example/".into() };
        let event = OperationalEvent::endpoint_enabled(tenant, &subject);
        assert!(event.is_emitted());
        assert_eq!(event.event_type.as_str(), "endpoint.enabled");
        assert_eq!(event.payload.as_json()["data"]["endpoint_id"], subject.id.to_string());
        subject.kind = EndpointKind::Operational;
        let event = OperationalEvent::endpoint_disabled(tenant, &subject, DisabledBy::Health, "failing", None);
        assert!(!event.is_emitted());
    }
}
