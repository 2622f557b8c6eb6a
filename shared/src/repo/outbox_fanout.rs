//! The outbox rows that stand for a whole event (`event_deliveries.v1`, one
//! per unordered event, written by ingest) turned into the broker messages
//! they stand for: one `delivery.v1` per delivery of the event still
//! `pending`, found by the claim itself (`outbox::claim_batch`). Rows of any
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

use crate::broker::{EventDeliveries, QueueMessage};
use crate::repo::outbox::OutboxMessage;

/// A broker message to send for the outbox row `row`.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub row: i64,
    pub envelope: Value,
}

/// The messages of `rows` (claimed, in id order), in that order: an
/// `event_deliveries.v1` row becomes a `delivery.v1` per delivery of its
/// event pending at the claim (none when none is left), any other row its
/// own envelope.
pub fn expand(rows: &[OutboxMessage]) -> Vec<Outgoing> {
    let mut expanded: HashSet<EventDeliveries> = HashSet::new();
    let mut outgoing = Vec::with_capacity(rows.len());
    for row in rows {
        match EventDeliveries::from_envelope(&row.envelope) {
            None => outgoing.push(Outgoing { row: row.id, envelope: row.envelope.clone() }),
            // A second row for the same event (a rare duplicate) sends nothing more.
            Some(event) if !expanded.insert(event) => {}
            Some(_) => outgoing.extend(
                row.pending
                    .iter()
                    .map(|task| Outgoing { row: row.id, envelope: QueueMessage::DeliveryV1(*task).to_json() }),
            ),
        }
    }
    outgoing
}

/// Splits an expanded batch where its messages would pass `max_messages`:
/// the rows (and their messages) that fit, at least the first row whatever
/// its size (a row is never split), and the rows left over, to give back
/// unpublished. Keeps a batch of events with a large fan-out within what the
/// broker confirms before the confirm timeout.
pub fn fit(rows: &[i64], outgoing: Vec<Outgoing>, max_messages: usize) -> (Vec<i64>, Vec<Outgoing>, Vec<i64>) {
    let mut per_row: HashMap<i64, usize> = HashMap::new();
    for message in &outgoing {
        *per_row.entry(message.row).or_default() += 1;
    }
    let (mut kept, mut sent) = (0, 0);
    for row in rows {
        let messages = per_row.get(row).copied().unwrap_or_default();
        if kept > 0 && sent + messages > max_messages {
            break;
        }
        kept += 1;
        sent += messages;
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
    /// How many messages each row had.
    messages: HashMap<i64, u64>,
}

impl Settlement {
    /// The messages of `rows` (those deleted, say).
    pub fn messages_of(&self, rows: &[i64]) -> u64 {
        rows.iter().map(|row| self.messages.get(row).copied().unwrap_or_default()).sum()
    }
}

/// Settles `rows` given the row of each message sent (`outgoing`) and the row
/// of each message confirmed and refused (one entry per message). A row with
/// a message in neither list (the channel broke) is in neither result: it
/// stays claimed until its claim expires.
pub fn settle(rows: &[i64], outgoing: &[Outgoing], confirmed: &[i64], refused: &[i64]) -> Settlement {
    let mut expected: HashMap<i64, u64> = rows.iter().map(|&row| (row, 0)).collect();
    for message in outgoing {
        *expected.entry(message.row).or_default() += 1;
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
    settlement.messages = expected;
    settlement
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(rows: &[i64]) -> Vec<Outgoing> {
        rows.iter().map(|&row| Outgoing { row, envelope: Value::Null }).collect()
    }

    #[test]
    fn a_row_is_confirmed_only_when_every_one_of_its_messages_is() {
        // Row 1: one message; row 2: three (an event); row 3: none left.
        let sent = messages(&[1, 2, 2, 2]);
        let all = settle(&[1, 2, 3], &sent, &[1, 2, 2, 2], &[]);
        assert_eq!(all.messages_of(&[1, 2, 3]), 4);
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

    #[test]
    fn one_refused_message_releases_its_whole_row() {
        let sent = messages(&[1, 2, 2]);
        let settled = settle(&[1, 2], &sent, &[1, 2], &[2]);
        assert_eq!((settled.confirmed, settled.refused), (vec![1], vec![2]));
    }
}
