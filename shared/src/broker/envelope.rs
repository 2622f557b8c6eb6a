//! The versioned message format on the queues. The outbox stores exactly this
//! JSON, and the worker parses it; a new shape gets a new variant, so old
//! messages still in flight stay readable.
use serde::{Deserialize, Serialize};

use crate::ids::{DeliveryId, EndpointId, EventId, TenantId};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum QueueMessage {
    /// "Attempt this delivery." Carries ids only: the database is the truth, so
    /// a stale or duplicated message can never send stale content.
    #[serde(rename = "delivery.v1")]
    DeliveryV1(DeliveryTask),
    /// "Attempt each of these deliveries of one event": an unordered event's
    /// pending deliveries published together, one message instead of one per
    /// delivery. The worker attempts each as if it had come alone; one that
    /// must go round again (a retry, a postponement) goes as a `delivery.v1`
    /// of its own, and the message is acknowledged once every one is settled
    /// or sent round.
    #[serde(rename = "deliveries.v1")]
    DeliveriesV1(DeliveryBundle),
    /// "Attempt each of these deliveries of one tenant", of several events:
    /// the publisher packs the pending deliveries of the event rows it
    /// claimed together (up to 32 a message), so a flow of events with one
    /// subscriber each crosses the broker in a few messages, not one per
    /// event. Handled exactly as a `deliveries.v1`; each delivery names its
    /// own event. Workers read it from this release on: upgrade workers
    /// before publishers (an older worker rejects it, and its deliveries
    /// wait for recovery's lost-`pending` sweep: late, not lost).
    #[serde(rename = "deliveries.v2")]
    DeliveriesV2(TenantDeliveries),
    /// "This delivery is dead" — for operators, on the operations DLQ.
    #[serde(rename = "dead_letter.v1")]
    DeadLetterV1(DeadLetter),
}

/// Where a message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    /// A ready queue: one of this tenant's shards.
    Ready {
        tenant: TenantId,
    },
    DeadLetters,
}

/// What operators need to act on a dead delivery without another lookup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub tenant_id: TenantId,
    pub delivery_id: DeliveryId,
    pub event_id: EventId,
    pub endpoint_id: EndpointId,
    pub attempts: i32,
    pub last_http_status: Option<i32>,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryTask {
    pub tenant_id: TenantId,
    pub delivery_id: DeliveryId,
    pub event_id: EventId,
    pub endpoint_id: EndpointId,
}

/// Deliveries of one event of one tenant ([`QueueMessage::DeliveriesV1`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryBundle {
    pub tenant_id: TenantId,
    pub event_id: EventId,
    pub deliveries: Vec<BundledDelivery>,
}

/// One delivery of a [`DeliveryBundle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundledDelivery {
    pub delivery_id: DeliveryId,
    pub endpoint_id: EndpointId,
}

impl DeliveryBundle {
    /// `tasks` (deliveries of one event, as the publisher's claim found them) together.
    pub fn of(event: EventDeliveries, tasks: &[DeliveryTask]) -> Self {
        let deliveries = tasks
            .iter()
            .map(|task| BundledDelivery { delivery_id: task.delivery_id, endpoint_id: task.endpoint_id })
            .collect();
        Self { tenant_id: event.tenant_id, event_id: event.event_id, deliveries }
    }

    /// Each delivery as the message it would be alone.
    pub fn tasks(&self) -> impl Iterator<Item = DeliveryTask> + '_ {
        self.deliveries.iter().map(|delivery| DeliveryTask {
            tenant_id: self.tenant_id,
            delivery_id: delivery.delivery_id,
            event_id: self.event_id,
            endpoint_id: delivery.endpoint_id,
        })
    }
}

/// Deliveries of one tenant, of one or several events ([`QueueMessage::DeliveriesV2`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantDeliveries {
    pub tenant_id: TenantId,
    pub deliveries: Vec<EventDelivery>,
}

/// One delivery of a [`TenantDeliveries`], with its event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventDelivery {
    pub delivery_id: DeliveryId,
    pub event_id: EventId,
    pub endpoint_id: EndpointId,
}

impl TenantDeliveries {
    /// `tasks` (deliveries of one tenant) together.
    pub fn of(tenant_id: TenantId, tasks: &[DeliveryTask]) -> Self {
        let deliveries = tasks
            .iter()
            .map(|task| EventDelivery {
                delivery_id: task.delivery_id,
                event_id: task.event_id,
                endpoint_id: task.endpoint_id,
            })
            .collect();
        Self { tenant_id, deliveries }
    }

    /// Each delivery as the message it would be alone.
    pub fn tasks(&self) -> impl Iterator<Item = DeliveryTask> + '_ {
        self.deliveries.iter().map(|delivery| DeliveryTask {
            tenant_id: self.tenant_id,
            delivery_id: delivery.delivery_id,
            event_id: delivery.event_id,
            endpoint_id: delivery.endpoint_id,
        })
    }
}

/// The message for `tasks` (deliveries of one tenant; `None` for none), in
/// the oldest shape that carries them: `delivery.v1` for one alone,
/// `deliveries.v1` for several of one event, `deliveries.v2` for several
/// events' — so workers of the previous release read all but the last.
pub fn message_for(tasks: &[DeliveryTask]) -> Option<QueueMessage> {
    let first = tasks.first()?;
    Some(match tasks {
        [one] => QueueMessage::DeliveryV1(*one),
        _ if tasks.iter().all(|task| task.event_id == first.event_id) => {
            let event = EventDeliveries { tenant_id: first.tenant_id, event_id: first.event_id };
            QueueMessage::DeliveriesV1(DeliveryBundle::of(event, tasks))
        }
        _ => QueueMessage::DeliveriesV2(TenantDeliveries::of(first.tenant_id, tasks)),
    })
}

/// The `type` of the outbox row ingest writes for an unordered event with at
/// least one delivery: "every delivery of this event still `pending`". The
/// publisher turns it into the messages of those deliveries — one
/// `delivery.v1`, or `deliveries.v1` bundles of several (`repo::outbox_fanout`);
/// it never goes on a queue itself, so it is not a [`QueueMessage`].
pub const EVENT_DELIVERIES_V1: &str = "event_deliveries.v1";

/// What an `event_deliveries.v1` outbox row names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EventDeliveries {
    pub tenant_id: TenantId,
    pub event_id: EventId,
}

impl EventDeliveries {
    /// The envelope of its outbox row, as the ingest statements build it in SQL.
    pub fn envelope(&self) -> serde_json::Value {
        serde_json::json!({
            "type": EVENT_DELIVERIES_V1,
            "tenant_id": self.tenant_id.to_string(),
            "event_id": self.event_id.to_string(),
        })
    }

    /// The event an outbox envelope stands for, if it is an
    /// `event_deliveries.v1` row (anything else is published as it is).
    pub fn from_envelope(envelope: &serde_json::Value) -> Option<Self> {
        Self::is_envelope(envelope).then(|| Self::deserialize(envelope).ok()).flatten()
    }

    /// Whether an outbox envelope is an `event_deliveries.v1` row's, by its
    /// `type` alone (nothing parsed).
    pub fn is_envelope(envelope: &serde_json::Value) -> bool {
        envelope.get("type").and_then(serde_json::Value::as_str) == Some(EVENT_DELIVERIES_V1)
    }
}

#[cfg(test)]
impl EventDeliveries {
    /// A made-up event with `n` made-up deliveries (tests).
    pub(crate) fn made_up(n: usize) -> (Self, Vec<DeliveryTask>) {
        let event = Self { tenant_id: TenantId::new(), event_id: EventId::new() };
        let task = |_| DeliveryTask {
            tenant_id: event.tenant_id,
            delivery_id: DeliveryId::new(),
            event_id: event.event_id,
            endpoint_id: EndpointId::new(),
        };
        (event, (0..n).map(task).collect())
    }
}

impl QueueMessage {
    pub fn destination(&self) -> Destination {
        match self {
            Self::DeliveryV1(task) => Destination::Ready { tenant: task.tenant_id },
            Self::DeliveriesV1(bundle) => Destination::Ready { tenant: bundle.tenant_id },
            Self::DeliveriesV2(bundle) => Destination::Ready { tenant: bundle.tenant_id },
            Self::DeadLetterV1(_) => Destination::DeadLetters,
        }
    }

    /// The deliveries it asks to attempt, each as it would come alone (none
    /// for a dead letter).
    pub fn tasks(&self) -> Vec<DeliveryTask> {
        match self {
            Self::DeliveryV1(task) => vec![*task],
            Self::DeliveriesV1(bundle) => bundle.tasks().collect(),
            Self::DeliveriesV2(bundle) => bundle.tasks().collect(),
            Self::DeadLetterV1(_) => Vec::new(),
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        // A struct of ids always serializes.
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ingest builds this JSON in SQL (`repo::events::INGEST`); this pins the shape it must build.
    #[test]
    fn delivery_message_has_the_shape_ingest_builds_in_sql() {
        let task = DeliveryTask {
            tenant_id: TenantId::new(),
            delivery_id: DeliveryId::new(),
            event_id: EventId::new(),
            endpoint_id: EndpointId::new(),
        };
        let json = QueueMessage::DeliveryV1(task).to_json();
        let keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["delivery_id", "endpoint_id", "event_id", "tenant_id", "type"]);
        let built_like_sql = serde_json::json!({
            "type": "delivery.v1",
            "tenant_id": task.tenant_id.to_string(),
            "delivery_id": format!("dlv_{}", task.delivery_id.as_uuid().hyphenated().to_string().replace('-', "")),
            "event_id": task.event_id.to_string(),
            "endpoint_id": format!("ep_{}", task.endpoint_id.as_uuid().hyphenated().to_string().replace('-', "")),
        });
        assert_eq!(serde_json::from_value::<QueueMessage>(built_like_sql).unwrap(), QueueMessage::DeliveryV1(task));
    }

    /// Ingest builds this JSON in SQL too (`repo::events::INGEST`, `INGEST_MANY`).
    #[test]
    fn event_deliveries_row_is_read_from_the_shape_ingest_builds_in_sql() {
        let (tenant_id, event_id) = (TenantId::new(), EventId::new());
        let built_like_sql = serde_json::json!({
            "type": "event_deliveries.v1",
            "tenant_id": tenant_id.to_string(),
            "event_id": event_id.to_string(),
        });
        assert_eq!(EventDeliveries::from_envelope(&built_like_sql), Some(EventDeliveries { tenant_id, event_id }));
        assert_eq!(
            EventDeliveries { tenant_id, event_id }.envelope(),
            built_like_sql,
            "and built the same way in Rust"
        );
        let delivery = QueueMessage::DeliveryV1(DeliveryTask {
            tenant_id,
            delivery_id: DeliveryId::new(),
            event_id,
            endpoint_id: EndpointId::new(),
        });
        assert_eq!(EventDeliveries::from_envelope(&delivery.to_json()), None, "other rows pass through");
    }

    #[test]
    fn a_bundle_round_trips_and_gives_back_each_delivery_as_its_own_task() {
        let (event, tasks) = EventDeliveries::made_up(3);
        let message = QueueMessage::DeliveriesV1(DeliveryBundle::of(event, &tasks));
        let json = message.to_json();
        assert_eq!(json["type"], "deliveries.v1");
        assert_eq!(json["deliveries"].as_array().map(Vec::len), Some(3));
        let QueueMessage::DeliveriesV1(bundle) = serde_json::from_value::<QueueMessage>(json).unwrap() else {
            panic!("a bundle reads back as a bundle");
        };
        assert_eq!(bundle.tasks().collect::<Vec<_>>(), tasks);
        assert_eq!(message.destination(), Destination::Ready { tenant: event.tenant_id });
    }

    /// The oldest shape that carries them: what the previous release's workers read stays as it was.
    #[test]
    fn deliveries_go_in_the_oldest_shape_that_carries_them_and_a_v2_gives_back_each_with_its_event() {
        let (event, mut tasks) = EventDeliveries::made_up(3);
        assert_eq!(message_for(&[]), None);
        assert_eq!(message_for(&tasks[..1]), Some(QueueMessage::DeliveryV1(tasks[0])));
        assert_eq!(message_for(&tasks), Some(QueueMessage::DeliveriesV1(DeliveryBundle::of(event, &tasks))));
        tasks[2].event_id = EventId::new();
        let json = message_for(&tasks).unwrap().to_json();
        assert_eq!(json["type"], "deliveries.v2");
        assert_eq!(json["tenant_id"], event.tenant_id.to_string());
        let QueueMessage::DeliveriesV2(bundle) = serde_json::from_value::<QueueMessage>(json).unwrap() else {
            panic!("a v2 bundle reads back as one");
        };
        assert_eq!(bundle.tasks().collect::<Vec<_>>(), tasks, "each delivery under its own event");
        assert_eq!(QueueMessage::DeliveriesV2(bundle).destination(), Destination::Ready { tenant: event.tenant_id });
    }

    #[test]
    fn delivery_message_round_trips_with_its_version_tag() {
        let message = QueueMessage::DeliveryV1(DeliveryTask {
            tenant_id: TenantId::new(),
            delivery_id: DeliveryId::new(),
            event_id: EventId::new(),
            endpoint_id: EndpointId::new(),
        });
        let json = message.to_json();
        assert_eq!(json["type"], "delivery.v1");
        assert_eq!(serde_json::from_value::<QueueMessage>(json).unwrap(), message);
    }
}
