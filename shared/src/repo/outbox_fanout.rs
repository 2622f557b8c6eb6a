//! The outbox rows that stand for a whole event (`event_deliveries.v1`, one
//! per unordered event, written by ingest) turned into the broker messages
//! they stand for: the events' deliveries still `pending`, found by the claim
//! itself (`outbox::claim_batch`). The deliveries of every event row claimed
//! together are packed per tenant into messages of up to
//! [`DELIVERIES_PER_MESSAGE`] (`broker::message_for`: one alone as a
//! `delivery.v1`, several of one event as `deliveries.v1`, of several events
//! as `deliveries.v2`) — one message through the broker instead of one per
//! delivery, or per event when each event has one subscriber. Rows of any
//! other kind pass through as they are, a message each.
//!
//! A row is settled by the messages that carry its deliveries, together
//! ([`settle`]): deleted only once every one is confirmed (a row with none
//! left at once), released when the broker refused any, left claimed
//! (reclaimed when its claim expires) when the channel broke before all were
//! confirmed. A message may carry several rows' deliveries: its confirm
//! counts for each. Publishing a row again sends only what is still
//! `pending`; a message for a delivery the worker already claimed is a
//! duplicate its claim absorbs.
//!
//! Acts on ids read from the outbox, never from a client; each delivery is
//! still matched on its event's tenant, and a message names one tenant.
use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::broker::{message_for, DeliveryTask, EventDeliveries};
use crate::ids::TenantId;
use crate::repo::outbox::OutboxMessage;

/// The most deliveries one `deliveries.v1`/`v2` message carries: more go out
/// as several, so a large fan-out (or a large batch) still spreads over workers.
pub const DELIVERIES_PER_MESSAGE: usize = 32;

/// A broker message to send for the claimed outbox rows in `rows`.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// Each outbox row whose deliveries it carries, with how many (a
    /// message of another kind: its own row, counting one).
    pub rows: Vec<(i64, usize)>,
    pub envelope: Value,
}

impl Outgoing {
    fn single(row: i64, envelope: Value) -> Self {
        Self { rows: vec![(row, 1)], envelope }
    }

    /// Deliveries it carries (a message of another kind counts one).
    pub fn deliveries(&self) -> usize {
        self.rows.iter().map(|(_, deliveries)| deliveries).sum()
    }
}

/// The messages of `rows` (claimed, in id order): any row other than an
/// `event_deliveries.v1` as its own envelope, in order; then the event
/// rows' deliveries pending at the claim, per tenant (in the order each
/// tenant first appears), in messages of up to [`DELIVERIES_PER_MESSAGE`].
/// An event row with no delivery left sends nothing.
pub fn expand(rows: &[OutboxMessage]) -> Vec<Outgoing> {
    let mut expanded: HashSet<EventDeliveries> = HashSet::new();
    let mut outgoing = Vec::with_capacity(rows.len());
    let mut per_tenant: Vec<(TenantId, Vec<(i64, DeliveryTask)>)> = Vec::new();
    for row in rows {
        match EventDeliveries::from_envelope(&row.envelope) {
            None => outgoing.push(Outgoing::single(row.id, row.envelope.clone())),
            // A second row for the same event (a rare duplicate) sends nothing more.
            Some(event) if !expanded.insert(event) => {}
            Some(event) => {
                let at = match per_tenant.iter().position(|(tenant, _)| *tenant == event.tenant_id) {
                    Some(at) => at,
                    None => {
                        per_tenant.push((event.tenant_id, Vec::new()));
                        per_tenant.len() - 1
                    }
                };
                per_tenant[at].1.extend(row.pending.iter().map(|task| (row.id, *task)));
            }
        }
    }
    for (_, deliveries) in &per_tenant {
        for chunk in deliveries.chunks(DELIVERIES_PER_MESSAGE) {
            let tasks: Vec<DeliveryTask> = chunk.iter().map(|(_, task)| *task).collect();
            let Some(message) = message_for(&tasks) else { continue };
            outgoing.push(Outgoing { rows: rows_counted(chunk), envelope: message.to_json() });
        }
    }
    outgoing
}

/// The rows of a chunk's deliveries (grouped, as a row's deliveries are
/// consecutive), each with how many it has there.
fn rows_counted(chunk: &[(i64, DeliveryTask)]) -> Vec<(i64, usize)> {
    let mut rows: Vec<(i64, usize)> = Vec::new();
    for (row, _) in chunk {
        match rows.last_mut() {
            Some((last, count)) if last == row => *count += 1,
            _ => rows.push((*row, 1)),
        }
    }
    rows
}

/// How many of `rows` (a prefix) a batch keeps so that their deliveries stay
/// within `max_deliveries`: at least the first row whatever its size (a row
/// is never split); the rest go back unpublished. Keeps a batch of events
/// with a large fan-out within what the broker confirms before the confirm
/// timeout, and what one batch hands the workers.
pub fn fit(rows: &[OutboxMessage], max_deliveries: usize) -> usize {
    let (mut kept, mut sent) = (0, 0);
    for row in rows {
        let deliveries = if EventDeliveries::is_envelope(&row.envelope) { row.pending.len() } else { 1 };
        if kept > 0 && sent + deliveries > max_deliveries {
            break;
        }
        kept += 1;
        sent += deliveries;
    }
    kept
}

/// How the claimed rows came out, from how their messages did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Settlement {
    /// Rows whose every message the broker confirmed: to delete.
    pub confirmed: Vec<i64>,
    /// Rows with a message the broker refused: to release for another try.
    pub refused: Vec<i64>,
    /// How many deliveries each row's messages carried.
    deliveries: HashMap<i64, u64>,
}

impl Settlement {
    /// The deliveries of `rows` (those deleted, say).
    pub fn deliveries_of(&self, rows: &[i64]) -> u64 {
        rows.iter().map(|row| self.deliveries.get(row).copied().unwrap_or_default()).sum()
    }
}

/// Settles `rows` given the messages sent (`outgoing`) and which of them
/// (indexes into `outgoing`) the broker confirmed and refused. A row with a
/// message in neither list (the channel broke) is in neither result: it
/// stays claimed until its claim expires.
pub fn settle(rows: &[i64], outgoing: &[Outgoing], confirmed: &[usize], refused: &[usize]) -> Settlement {
    let mut expected: HashMap<i64, u64> = rows.iter().map(|&row| (row, 0)).collect();
    let mut deliveries: HashMap<i64, u64> = HashMap::new();
    for message in outgoing {
        for &(row, count) in &message.rows {
            *expected.entry(row).or_default() += 1;
            *deliveries.entry(row).or_default() += count as u64;
        }
    }
    let rows_of = |indexes: &[usize]| -> Vec<i64> {
        indexes
            .iter()
            .filter_map(|&index| outgoing.get(index))
            .flat_map(|m| m.rows.iter().map(|(row, _)| *row))
            .collect()
    };
    let mut acked: HashMap<i64, u64> = HashMap::new();
    for row in rows_of(confirmed) {
        *acked.entry(row).or_default() += 1;
    }
    let refused: HashSet<i64> = rows_of(refused).into_iter().collect();
    let mut settlement = Settlement::default();
    for &row in rows {
        let count = |counts: &HashMap<i64, u64>| counts.get(&row).copied().unwrap_or_default();
        if refused.contains(&row) {
            settlement.refused.push(row);
        } else if count(&acked) == count(&expected) {
            settlement.confirmed.push(row);
        }
    }
    settlement.deliveries = deliveries;
    settlement
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::QueueMessage;
    use crate::ids::{DeliveryId, EndpointId, EventId};

    fn messages(rows: &[i64]) -> Vec<Outgoing> {
        rows.iter().map(|&row| Outgoing::single(row, Value::Null)).collect()
    }

    fn all(outgoing: &[Outgoing]) -> Vec<usize> {
        (0..outgoing.len()).collect()
    }

    /// An event row of its own made-up tenant with `deliveries` pending.
    fn event_row(id: i64, deliveries: usize) -> OutboxMessage {
        let (event, pending) = EventDeliveries::made_up(deliveries);
        OutboxMessage { id, envelope: event.envelope(), pending }
    }

    /// An event row of `tenant` with `deliveries` pending.
    fn tenant_event_row(tenant_id: TenantId, id: i64, deliveries: usize) -> OutboxMessage {
        let event = EventDeliveries { tenant_id, event_id: EventId::new() };
        let task = |_| DeliveryTask {
            tenant_id,
            delivery_id: DeliveryId::new(),
            event_id: event.event_id,
            endpoint_id: EndpointId::new(),
        };
        OutboxMessage { id, envelope: event.envelope(), pending: (0..deliveries).map(task).collect() }
    }

    fn other_row(id: i64) -> OutboxMessage {
        OutboxMessage { id, envelope: serde_json::json!({ "type": "dead_letter.v1" }), pending: Vec::new() }
    }

    fn tasks_of(message: &Outgoing) -> Vec<DeliveryTask> {
        serde_json::from_value::<QueueMessage>(message.envelope.clone()).unwrap().tasks()
    }

    #[test]
    fn a_row_is_confirmed_only_when_every_one_of_its_messages_is() {
        // Row 1: one message; row 2: three (an event); row 3: none left.
        let sent = messages(&[1, 2, 2, 2]);
        let settled = settle(&[1, 2, 3], &sent, &all(&sent), &[]);
        assert_eq!(settled.deliveries_of(&[1, 2, 3]), 4);
        assert_eq!((settled.confirmed, settled.refused), (vec![1, 2, 3], vec![]));

        let broken = settle(&[1, 2, 3], &sent, &[0, 1], &[]);
        assert_eq!((broken.confirmed, broken.refused), (vec![1, 3], vec![]), "row 2 stays claimed");
    }

    #[test]
    fn a_batch_keeps_whole_rows_up_to_the_delivery_limit_and_at_least_one() {
        let rows = [other_row(1), event_row(2, 3), other_row(3)];
        assert_eq!(fit(&rows, 4), 2);
        assert_eq!(fit(&rows[1..], 2), 1, "a row is never split");
        assert_eq!(fit(&rows, 100), 3);
        assert_eq!(fit(&[event_row(1, 2)], 0), 1, "the first row whatever its size");
    }

    #[test]
    fn an_events_deliveries_go_one_alone_and_several_in_bundles_of_at_most_the_limit() {
        // Each row of a tenant of its own: nothing to pack across rows.
        let rows = [event_row(1, 1), event_row(2, 2 * DELIVERIES_PER_MESSAGE + 6), event_row(3, 0)];
        let outgoing = expand(&rows);
        let shape: Vec<(Vec<(i64, usize)>, &str)> =
            outgoing.iter().map(|m| (m.rows.clone(), m.envelope["type"].as_str().unwrap())).collect();
        let per = DELIVERIES_PER_MESSAGE;
        assert_eq!(
            shape,
            [
                (vec![(1, 1)], "delivery.v1"),
                (vec![(2, per)], "deliveries.v1"),
                (vec![(2, per)], "deliveries.v1"),
                (vec![(2, 6)], "deliveries.v1")
            ]
        );
        // Every pending delivery of row 2 is in exactly one bundle.
        let mut bundled: Vec<DeliveryId> = outgoing[1..].iter().flat_map(tasks_of).map(|t| t.delivery_id).collect();
        bundled.sort_by_key(|id| id.to_string());
        bundled.dedup();
        assert_eq!(bundled.len(), 2 * per + 6);
        // Settled and fitted by deliveries, not messages.
        let settled = settle(&[1, 2, 3], &outgoing, &all(&outgoing), &[]);
        assert_eq!((settled.confirmed.clone(), settled.deliveries_of(&[1, 2, 3])), (vec![1, 2, 3], 2 * per as u64 + 7));
        assert_eq!(fit(&rows, per), 1, "row 2's deliveries do not fit beside row 1's");
    }

    /// Events of one subscriber each, claimed together: their deliveries
    /// cross the broker in one message per tenant, each under its own event.
    #[test]
    fn the_deliveries_of_a_tenants_events_claimed_together_travel_in_one_message_each_with_its_event() {
        let (a, b) = (TenantId::new(), TenantId::new());
        let rows = [
            tenant_event_row(a, 1, 1),
            tenant_event_row(b, 2, 1),
            other_row(3),
            tenant_event_row(a, 4, 2),
            tenant_event_row(b, 5, 1),
        ];
        let outgoing = expand(&rows);
        let shape: Vec<(Vec<(i64, usize)>, &str)> =
            outgoing.iter().map(|m| (m.rows.clone(), m.envelope["type"].as_str().unwrap())).collect();
        assert_eq!(
            shape,
            [
                (vec![(3, 1)], "dead_letter.v1"),
                (vec![(1, 1), (4, 2)], "deliveries.v2"),
                (vec![(2, 1), (5, 1)], "deliveries.v2")
            ]
        );
        let expected = |tenant: TenantId| -> Vec<DeliveryTask> {
            rows.iter().flat_map(|row| row.pending.iter().copied()).filter(|task| task.tenant_id == tenant).collect()
        };
        assert_eq!(tasks_of(&outgoing[1]), expected(a), "tenant a's deliveries, each with its own event");
        assert_eq!(tasks_of(&outgoing[2]), expected(b));
        assert_eq!(outgoing[1].envelope["tenant_id"], a.to_string(), "a message names one tenant");

        let settled = settle(&[1, 2, 3, 4, 5], &outgoing, &all(&outgoing), &[]);
        assert_eq!((settled.confirmed.clone(), settled.deliveries_of(&[1, 4])), (vec![1, 2, 3, 4, 5], 3));
        let half = settle(&[1, 2, 3, 4, 5], &outgoing, &[0, 1], &[]);
        assert_eq!(half.confirmed, [1, 3, 4], "rows 2 and 5 wait for their message's confirm");
    }

    #[test]
    fn many_events_of_one_tenant_fill_messages_up_to_the_limit_and_a_row_may_span_two() {
        let tenant = TenantId::new();
        let per = DELIVERIES_PER_MESSAGE;
        // 30 events of one delivery, then one of 10: the second message holds
        // the rest of that event's deliveries alone (one event: `deliveries.v1`).
        let mut rows: Vec<OutboxMessage> = (1..=30).map(|id| tenant_event_row(tenant, id, 1)).collect();
        rows.push(tenant_event_row(tenant, 31, 10));
        let outgoing = expand(&rows);
        let sizes: Vec<(usize, &str)> =
            outgoing.iter().map(|m| (m.deliveries(), m.envelope["type"].as_str().unwrap())).collect();
        assert_eq!(sizes, [(per, "deliveries.v2"), (40 - per, "deliveries.v1")]);
        assert_eq!(outgoing[0].rows.last(), Some(&(31, 2)), "row 31 starts in the first message");
        assert_eq!(outgoing[1].rows, [(31, 8)]);

        let ids: Vec<i64> = rows.iter().map(|row| row.id).collect();
        let first_only = settle(&ids, &outgoing, &[0], &[]);
        assert_eq!(first_only.confirmed, (1..=30).collect::<Vec<i64>>(), "row 31 waits for both its messages");
        let refused = settle(&ids, &outgoing, &[1], &[0]);
        assert_eq!(
            (refused.confirmed, refused.refused.len()),
            (vec![], 31),
            "every row of a refused message is released"
        );
    }

    #[test]
    fn one_refused_message_releases_its_whole_row() {
        let sent = messages(&[1, 2, 2]);
        let settled = settle(&[1, 2], &sent, &[0, 1], &[2]);
        assert_eq!((settled.confirmed, settled.refused), (vec![1], vec![2]));
    }
}
