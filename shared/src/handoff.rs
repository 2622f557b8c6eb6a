//! The hand-off of an event's outbox row from ingest to the publisher of the
//! same process (`relayops all`, `relayops api`): ingest writes the row
//! already claimed by that publisher ([`Handoff::claim`]: `claimed_by`, the
//! claim's expiry, in the ingest statement itself) and, once the statement
//! committed, hands it over with the deliveries it stands for. A lone event
//! is then published without a wake-up, a claim statement or a `NOTIFY`
//! (issue 18: the commit → claimed hop was ~0.4 ms of a ~2.9 ms delivery).
//!
//! The claim's expiry is the safety net, as for any claimed row: a row whose
//! hand-off never reaches the publisher (the process died between the commit
//! and the publish) is made pending again by any publisher's recovery pass
//! once its claim expires (`RELAYOPS_PUBLISHER_CLAIM_TTL_MS`), then published
//! by whichever claims it. Ingest claims nothing while the publisher cannot
//! publish (its broker session is down) or its hand-off is full: rows are
//! then written `pending`, for any publisher, as before; rows handed over
//! before the publisher noticed the broker was gone are released by it at
//! once (made pending) rather than left to their claims' expiry.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use crate::repo::outbox::OutboxMessage;

/// Most rows waiting in a hand-off (a few batches' worth), in the channel
/// and taken out of it by the publisher together ([`Handoff::held`]); past
/// it ingest writes its rows pending and wakes the publisher instead. So the
/// hand-off bounds the memory its rows take end to end, while the publisher
/// still takes everything out of the channel at once (to take tenants in
/// turn: a lone event is not queued behind another tenant's thousands).
pub const CAPACITY: usize = 1024;

/// A row handed over, and when its claim was written: the claim expires
/// `claim_ttl` after that, and then recovery may make the row pending for
/// any publisher, so the publisher must not publish it late
/// (`publisher::handed`).
#[derive(Debug)]
pub struct Handed {
    pub message: OutboxMessage,
    /// Taken before the statement that wrote the claim ran: never later
    /// than the claim's start.
    pub claimed: Instant,
}

/// Ingest's end of the hand-off (cheap to clone).
#[derive(Clone)]
pub struct Handoff {
    inner: Arc<Inner>,
}

struct Inner {
    owner: String,
    claim_ttl: Duration,
    sender: mpsc::Sender<Handed>,
    /// Rows the publisher took out of the channel and holds, unpublished.
    held: Arc<AtomicUsize>,
    /// Whether the publisher's broker session is up.
    publishing: watch::Receiver<bool>,
}

/// The claim ingest writes an event's outbox row with: the publisher's
/// owner name and how long the claim lasts, and the hand-off the row then
/// goes to ([`ClaimFor::row`]).
#[derive(Clone, Copy)]
pub struct ClaimFor<'a> {
    pub owner: &'a str,
    pub ttl_ms: i64,
    handoff: &'a Handoff,
    /// When the claim was given (before the statement that writes it).
    given: Instant,
}

impl ClaimFor<'_> {
    /// A row written with this claim, to hand over.
    pub fn row(&self, message: OutboxMessage) -> HandedRow {
        HandedRow { message: Some(Handed { message, claimed: self.given }), handoff: self.handoff.clone() }
    }
}

/// The claim `handoff` gives now, if any, and the two statement parameters
/// it comes to: the owner (NULL: the row is written `pending`) and the
/// claim's length in ms.
pub fn claim_for(handoff: Option<&Handoff>) -> (Option<ClaimFor<'_>>, Option<&str>, i64) {
    let claim = handoff.and_then(Handoff::claim);
    (claim, claim.map(|claim| claim.owner), claim.map_or(0, |claim| claim.ttl_ms))
}

impl Handoff {
    /// A hand-off to the publisher named `owner` (its claims last
    /// `claim_ttl`; `publishing` says whether it reaches the broker), and the
    /// publisher's end.
    pub fn channel(owner: String, claim_ttl: Duration, publishing: watch::Receiver<bool>) -> (Self, HandoffReceiver) {
        let (sender, receiver) = mpsc::channel(CAPACITY);
        let held = Arc::new(AtomicUsize::new(0));
        let inner = Inner { owner, claim_ttl, sender, held: Arc::clone(&held), publishing };
        (Self { inner: Arc::new(inner) }, HandoffReceiver { receiver, held })
    }

    /// Rows in the hand-off now: in the channel and held by the publisher.
    pub fn held(&self) -> usize {
        let inner = &self.inner;
        let in_channel = inner.sender.max_capacity() - inner.sender.capacity();
        in_channel + inner.held.load(Ordering::Relaxed)
    }

    /// The claim to write rows with now, or none while the publisher cannot
    /// take them: its broker session is down (rows claimed then would wait
    /// for their claim to expire) or its hand-off is full.
    pub fn claim(&self) -> Option<ClaimFor<'_>> {
        let inner = &self.inner;
        let open = *inner.publishing.borrow() && inner.sender.capacity() > 0 && self.held() < CAPACITY;
        open.then(|| ClaimFor {
            owner: &inner.owner,
            ttl_ms: inner.claim_ttl.as_millis() as i64,
            handoff: self,
            given: Instant::now(),
        })
    }

    /// A row this publisher holds claimed since `claimed`, to hand over (a
    /// claim's rows go through [`ClaimFor::row`]).
    pub fn row(&self, message: OutboxMessage, claimed: Instant) -> HandedRow {
        HandedRow { message: Some(Handed { message, claimed }), handoff: self.clone() }
    }
}

/// The publisher's end of a hand-off: the channel, and the count of rows it
/// took out and still holds, which it keeps up to date ([`Handoff::held`]).
pub struct HandoffReceiver {
    pub receiver: mpsc::Receiver<Handed>,
    pub held: Arc<AtomicUsize>,
}

/// An outbox row claimed for this process's publisher: handed to it when
/// dropped — once the request is answered, or when the request is dropped
/// with it (a client that hung up) — so no path leaves it to its claim's
/// expiry but the process dying. A hand-off that is full when the row comes
/// (ingest claimed just before it filled) waits for room on a task of its own.
pub struct HandedRow {
    message: Option<Handed>,
    handoff: Handoff,
}

impl std::fmt::Debug for HandedRow {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("HandedRow")
            .field("row", &self.message.as_ref().map(|handed| handed.message.id))
            .finish()
    }
}

impl HandedRow {
    /// The outbox row's id.
    pub fn id(&self) -> Option<i64> {
        self.message.as_ref().map(|handed| handed.message.id)
    }
}

impl Drop for HandedRow {
    fn drop(&mut self) {
        let Some(message) = self.message.take() else { return };
        match self.handoff.inner.sender.try_send(message) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(message)) => {
                let sender = self.handoff.inner.sender.clone();
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move {
                        let _ = sender.send(message).await;
                    });
                }
            }
            // The publisher stopped (the process is ending): the claim expires.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: i64) -> OutboxMessage {
        OutboxMessage { id, envelope: serde_json::Value::Null, pending: Vec::new() }
    }

    #[tokio::test]
    async fn rows_are_claimed_only_while_the_publisher_reaches_the_broker() {
        let (publishing, watching) = watch::channel(false);
        let (handoff, _receiving) = Handoff::channel("publisher-1".into(), Duration::from_secs(30), watching);
        assert!(handoff.claim().is_none(), "broker away: rows stay pending");
        publishing.send_replace(true);
        let claim = handoff.claim().expect("publishing");
        assert_eq!((claim.owner, claim.ttl_ms), ("publisher-1", 30_000));
    }

    #[tokio::test]
    async fn a_row_goes_to_the_publisher_when_dropped_and_a_full_hand_off_claims_nothing() {
        let (_publishing, watching) = watch::channel(true);
        let (handoff, receiving) = Handoff::channel("p".into(), Duration::from_secs(1), watching);
        let mut receiver = receiving.receiver;
        drop(handoff.row(message(7), Instant::now()));
        assert_eq!(receiver.recv().await.map(|handed| handed.message.id), Some(7));
        for id in 0..CAPACITY as i64 {
            drop(handoff.row(message(id), Instant::now()));
        }
        assert!(handoff.claim().is_none(), "full: rows are written pending");
        // One more (claimed just before it filled) waits for room.
        drop(handoff.row(message(-1), Instant::now()));
        let mut ids = Vec::new();
        while ids.len() < CAPACITY + 1 {
            ids.push(receiver.recv().await.expect("row").message.id);
        }
        assert_eq!(ids.last(), Some(&-1), "the late row arrives once there is room");
        assert!(handoff.claim().is_some(), "room again");
    }

    #[tokio::test]
    async fn rows_the_publisher_holds_count_against_the_capacity() {
        let (_publishing, watching) = watch::channel(true);
        let (handoff, receiving) = Handoff::channel("p".into(), Duration::from_secs(1), watching);
        drop(handoff.row(message(1), Instant::now()));
        assert_eq!(handoff.held(), 1, "in the channel");
        receiving.held.store(CAPACITY - 1, Ordering::Relaxed);
        assert!(handoff.claim().is_none(), "the channel has room, but the publisher holds the rest");
        receiving.held.store(0, Ordering::Relaxed);
        assert!(handoff.claim().is_some());
    }
}
