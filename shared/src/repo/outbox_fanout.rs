//! The outbox rows that stand for a whole event (`event_deliveries.v1`, one
//! per unordered event, written by ingest) turned into the broker messages
//! they stand for: the event's deliveries still `pending`, found by the claim
//! itself (`outbox::claim_batch`) — one alone as a `delivery.v1`, several
//! as `deliveries.v1` bundles of up to [`DELIVERIES_PER_MESSAGE`] (one
//! message through the broker instead of one per delivery). Rows of any
//! other kind pass through as they are.
//!
//! A row is settled by its messages together ([`settle`]): deleted only once
//! every one is confirmed (a row with none left at once), released when the
//! broker refused any, left claimed (reclaimed when its claim expires) when
//! the channel broke before all were confirmed. Publishing a row again sends
//! only what is still `pending`; a message for a delivery the worker already
//! claimed is a duplicate its claim absorbs.
//!
//! Acts on ids read from the outbox, never from a client; each delivery is
//! still matched on its event's tenant.
use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::broker::{DeliveryBundle, EventDeliveries, QueueMessage};
use crate::repo::outbox::OutboxMessage;

/// The most deliveries one `deliveries.v1` message carries: an event with
/// more goes out as several, so a large fan-out still spreads over workers.
pub const DELIVERIES_PER_MESSAGE: usize = 32;

/// A broker message to send for the outbox row `row`.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub row: i64,
    pub envelope: Value,
    /// Deliveries it carries (a message of another kind counts one).
    pub deliveries: usize,
}

impl Outgoing {
    fn single(row: i64, envelope: Value) -> Self {
        Self { row, envelope, deliveries: 1 }
    }
}

/// The messages of `rows` (claimed, in id order), in that order: an
/// `event_deliveries.v1` row becomes its event's deliveries pending at the
/// claim (one `delivery.v1`, or `deliveries.v1` bundles; none when none is
/// left), any other row its own envelope.
pub fn expand(rows: &[OutboxMessage]) -> Vec<Outgoing> {
    let mut expanded: HashSet<EventDeliveries> = HashSet::new();
    let mut outgoing = Vec::with_capacity(rows.len());
    for row in rows {
        match EventDeliveries::from_envelope(&row.envelope) {
            None => outgoing.push(Outgoing::single(row.id, row.envelope.clone())),
            // A second row for the same event (a rare duplicate) sends nothing more.
            Some(event) if !expanded.insert(event) => {}
            Some(_) if row.pending.len() == 1 => {
                outgoing.push(Outgoing::single(row.id, QueueMessage::DeliveryV1(row.pending[0]).to_json()))
            }
            Some(event) => outgoing.extend(row.pending.chunks(DELIVERIES_PER_MESSAGE).map(|tasks| Outgoing {
                row: row.id,
                envelope: QueueMessage::DeliveriesV1(DeliveryBundle::of(event, tasks)).to_json(),
                deliveries: tasks.len(),
            })),
        }
    }
    outgoing
}

/// Splits an expanded batch where its deliveries would pass `max_deliveries`:
/// the rows (and their messages) that fit, at least the first row whatever
/// its size (a row is never split), and the rows left over, to give back
/// unpublished. Keeps a batch of events with a large fan-out within what the
/// broker confirms before the confirm timeout, and what one batch hands the
/// workers.
pub fn fit(rows: &[i64], outgoing: Vec<Outgoing>, max_deliveries: usize) -> (Vec<i64>, Vec<Outgoing>, Vec<i64>) {
    let mut per_row: HashMap<i64, usize> = HashMap::new();
    for message in &outgoing {
        *per_row.entry(message.row).or_default() += message.deliveries;
    }
    let (mut kept, mut sent) = (0, 0);
    for row in rows {
        let deliveries = per_row.get(row).copied().unwrap_or_default();
        if kept > 0 && sent + deliveries > max_deliveries {
            break;
        }
        kept += 1;
        sent += deliveries;
    }
    let (kept_rows, left) = rows.split_at(kept);
    let left_over: HashSet<i64> = left.iter().copied().collect();
    let outgoing = outgoing.into_iter().filter(|message| !left_over.contains(&message.row)).collect();
    (kept_rows.to_vec(), outgoing, left.to_vec())
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

/// Settles `rows` given the row of each message sent (`outgoing`) and the row
/// of each message confirmed and refused (one entry per message). A row with
/// a message in neither list (the channel broke) is in neither result: it
/// stays claimed until its claim expires.
pub fn settle(rows: &[i64], outgoing: &[Outgoing], confirmed: &[i64], refused: &[i64]) -> Settlement {
    let mut expected: HashMap<i64, u64> = rows.iter().map(|&row| (row, 0)).collect();
    let mut deliveries: HashMap<i64, u64> = HashMap::new();
    for message in outgoing {
        *expected.entry(message.row).or_default() += 1;
        *deliveries.entry(message.row).or_default() += message.deliveries as u64;
    }
    let mut acked: HashMap<i64, u64> = HashMap::new();
    for &row in confirmed {
        *acked.entry(row).or_default() += 1;
    }
    let refused: HashSet<i64> = refused.iter().copied().collect();
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

    fn messages(rows: &[i64]) -> Vec<Outgoing> {
        rows.iter().map(|&row| Outgoing::single(row, Value::Null)).collect()
    }

    #[test]
    fn a_row_is_confirmed_only_when_every_one_of_its_messages_is() {
        // Row 1: one message; row 2: three (an event); row 3: none left.
        let sent = messages(&[1, 2, 2, 2]);
        let all = settle(&[1, 2, 3], &sent, &[1, 2, 2, 2], &[]);
        assert_eq!(all.deliveries_of(&[1, 2, 3]), 4);
        assert_eq!((all.confirmed, all.refused), (vec![1, 2, 3], vec![]));

        let broken = settle(&[1, 2, 3], &sent, &[1, 2], &[]);
        assert_eq!((broken.confirmed, broken.refused), (vec![1, 3], vec![]), "row 2 stays claimed");
    }

    #[test]
    fn a_batch_keeps_whole_rows_up_to_the_message_limit_and_at_least_one() {
        let sent = messages(&[1, 2, 2, 2, 3]);
        let (rows, outgoing, left) = fit(&[1, 2, 3], sent.clone(), 4);
        assert_eq!((rows, outgoing.len(), left), (vec![1, 2], 4, vec![3]));
        let (rows, outgoing, left) = fit(&[2, 3], messages(&[2, 2, 2, 3]), 2);
        assert_eq!((rows, outgoing.len(), left), (vec![2], 3, vec![3]), "a row is never split");
        let (rows, outgoing, left) = fit(&[1, 2, 3], sent, 100);
        assert_eq!((rows, outgoing.len(), left), (vec![1, 2, 3], 5, vec![]));
    }

    fn event_row(id: i64, deliveries: usize) -> OutboxMessage {
        let (event, pending) = EventDeliveries::made_up(deliveries);
        OutboxMessage { id, envelope: event.envelope(), pending }
    }

    #[test]
    fn an_events_deliveries_go_one_alone_and_several_in_bundles_of_at_most_the_limit() {
        let rows = [event_row(1, 1), event_row(2, 2 * DELIVERIES_PER_MESSAGE + 6), event_row(3, 0)];
        let outgoing = expand(&rows);
        let shape: Vec<(i64, &str, usize)> =
            outgoing.iter().map(|m| (m.row, m.envelope["type"].as_str().unwrap(), m.deliveries)).collect();
        let per = DELIVERIES_PER_MESSAGE;
        assert_eq!(
            shape,
            [(1, "delivery.v1", 1), (2, "deliveries.v1", per), (2, "deliveries.v1", per), (2, "deliveries.v1", 6)]
        );
        // Every pending delivery of row 2 is in exactly one bundle.
        let mut bundled: Vec<String> = outgoing[1..]
            .iter()
            .flat_map(|m| m.envelope["deliveries"].as_array().unwrap().iter().map(|d| d["delivery_id"].to_string()))
            .collect();
        bundled.sort();
        bundled.dedup();
        assert_eq!(bundled.len(), 2 * per + 6);
        // Settled and fitted by deliveries, not messages.
        let settled = settle(&[1, 2, 3], &outgoing, &[1, 2, 2, 2], &[]);
        assert_eq!((settled.confirmed.clone(), settled.deliveries_of(&[1, 2, 3])), (vec![1, 2, 3], 2 * per as u64 + 7));
        let (kept, _, left) = fit(&[1, 2, 3], outgoing, per);
        assert_eq!((kept, left), (vec![1], vec![2, 3]), "row 2's deliveries do not fit beside row 1's");
    }

    #[test]
    fn one_refused_message_releases_its_whole_row() {
        let sent = messages(&[1, 2, 2]);
        let settled = settle(&[1, 2], &sent, &[1, 2], &[2]);
        assert_eq!((settled.confirmed, settled.refused), (vec![1], vec![2]));
    }
}
