//! The rows ingest in this process handed over (`relayops_shared::handoff`),
//! taken fairly between tenants: what has come is moved into a queue per
//! tenant, and a batch takes one row of each tenant in turn. A tenant
//! posting thousands of events a second fills the hand-off; another
//! tenant's lone event still goes out in the next batches, not behind the
//! whole hand-off.
//!
//! Bounded end to end: everything in the channel is taken out at once (so
//! tenants take turns over all of it), and the rows held here are counted in
//! the hand-off ([`handoff::Handoff::held`]): with the channel's, they stay
//! under its capacity, past which ingest writes its rows pending for any
//! publisher instead of handing them over.
//!
//! Every row here is claimed by this publisher already (ingest wrote it so),
//! so what is taken out is published like a claimed batch, and what cannot be
//! published is given back ([`HandedRows::take_all`]). A row whose claim is
//! older than `stale_after` (half the claim's length) is never published from
//! here: its claim may expire before the publish is confirmed, and recovery
//! would then make it pending for another publisher — two publishes of one
//! row. It is left to that expiry instead ([`HandedRows::take_stale`] counts it).
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use relayops_shared::handoff::{Handed, HandoffReceiver};
use relayops_shared::repo::outbox::OutboxMessage;
use tokio::sync::mpsc;

pub(crate) struct HandedRows {
    /// `None` once ingest's end is gone (or there never was one).
    receiver: Option<mpsc::Receiver<Handed>>,
    /// Rows already taken from the channel, per tenant.
    waiting: HashMap<String, VecDeque<Handed>>,
    /// Tenants with rows waiting, in the order their turns come.
    turns: VecDeque<String>,
    /// Rows in `waiting`, shared with ingest's end.
    held: Arc<AtomicUsize>,
    stale_after: Duration,
    /// Rows left to their claims' expiry because they waited too long.
    stale: u64,
}

/// The tenant an outbox row is for (every envelope names it).
fn tenant_of(message: &OutboxMessage) -> String {
    message.envelope.get("tenant_id").and_then(serde_json::Value::as_str).unwrap_or_default().to_owned()
}

impl HandedRows {
    /// `claim_ttl`: how long the claims ingest writes last.
    pub(crate) fn new(receiving: Option<HandoffReceiver>, claim_ttl: Duration) -> Self {
        let (receiver, held) = match receiving {
            Some(HandoffReceiver { receiver, held }) => (Some(receiver), held),
            None => (None, Arc::default()),
        };
        Self { receiver, waiting: HashMap::new(), turns: VecDeque::new(), held, stale_after: claim_ttl / 2, stale: 0 }
    }

    /// Whether ingest's end is still there or rows still wait.
    pub(crate) fn is_open(&self) -> bool {
        self.receiver.is_some() || !self.turns.is_empty()
    }

    /// Rows left to their claims' expiry since the last call (see the
    /// module's doc).
    pub(crate) fn take_stale(&mut self) -> u64 {
        std::mem::take(&mut self.stale)
    }

    fn add(&mut self, handed: Handed) {
        let tenant = tenant_of(&handed.message);
        let queue = self.waiting.entry(tenant.clone()).or_default();
        if queue.is_empty() {
            self.turns.push_back(tenant);
        }
        queue.push_back(handed);
        self.held.fetch_add(1, Ordering::Relaxed);
    }

    /// Moves what the channel holds now into the per-tenant queues.
    fn pull(&mut self) {
        loop {
            let Some(receiver) = self.receiver.as_mut() else { return };
            match receiver.try_recv() {
                Ok(handed) => self.add(handed),
                Err(mpsc::error::TryRecvError::Empty) => return,
                Err(mpsc::error::TryRecvError::Disconnected) => self.receiver = None,
            }
        }
    }

    /// Up to `limit` rows waiting now, one of each tenant in turn; `None`
    /// when none waits. Rows whose claims are too old to publish are
    /// dropped here (counted: [`take_stale`](Self::take_stale)).
    pub(crate) fn take_now(&mut self, limit: usize) -> Option<Vec<OutboxMessage>> {
        self.pull();
        let mut batch = Vec::new();
        while batch.len() < limit.max(1) {
            let Some(tenant) = self.turns.pop_front() else { break };
            let Some(queue) = self.waiting.get_mut(&tenant) else { continue };
            if let Some(handed) = queue.pop_front() {
                self.held.fetch_sub(1, Ordering::Relaxed);
                if handed.claimed.elapsed() < self.stale_after {
                    batch.push(handed.message);
                } else {
                    self.stale += 1;
                }
            }
            if queue.is_empty() {
                self.waiting.remove(&tenant);
            } else {
                self.turns.push_back(tenant);
            }
        }
        (!batch.is_empty()).then_some(batch)
    }

    /// [`take_now`](Self::take_now), waiting for a row first if none waits;
    /// `None` once ingest's end is gone and nothing waits.
    pub(crate) async fn next(&mut self, limit: usize) -> Option<Vec<OutboxMessage>> {
        loop {
            if self.turns.is_empty() {
                let receiver = self.receiver.as_mut()?;
                match receiver.recv().await {
                    Some(handed) => self.add(handed),
                    None => {
                        self.receiver = None;
                        return None;
                    }
                }
            }
            if let Some(batch) = self.take_now(limit) {
                return Some(batch);
            }
        }
    }

    /// Every row waiting now that may still be published (to give back
    /// after a failure).
    pub(crate) fn take_all(&mut self) -> Vec<OutboxMessage> {
        let mut all = Vec::new();
        while let Some(batch) = self.take_now(usize::MAX) {
            all.extend(batch);
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, tenant: &str) -> Handed {
        let message = OutboxMessage { id, envelope: serde_json::json!({ "tenant_id": tenant }), pending: Vec::new() };
        Handed { message, claimed: std::time::Instant::now() }
    }

    #[tokio::test]
    async fn a_lone_tenants_row_goes_in_the_next_batch_behind_a_full_hand_off() {
        let (sender, receiver) = mpsc::channel(2048);
        for id in 0..1000 {
            sender.send(row(id, "busy")).await.unwrap();
        }
        sender.send(row(5000, "quiet")).await.unwrap();
        let receiving = HandoffReceiver { receiver, held: Arc::default() };
        let mut handed = HandedRows::new(Some(receiving), Duration::from_secs(30));
        let first = handed.next(200).await.unwrap();
        assert_eq!(first.len(), 200);
        assert!(first.iter().any(|message| message.id == 5000), "the quiet tenant's row is in the first batch");
        let busy: Vec<i64> = first.iter().filter(|message| message.id != 5000).map(|message| message.id).collect();
        assert_eq!(busy, (0..199).collect::<Vec<_>>(), "each tenant's rows keep their order");
        assert_eq!(handed.take_all().len(), 801);
        drop(sender);
        assert!(handed.next(200).await.is_none(), "ingest's end gone, nothing waiting");
        assert!(!handed.is_open());
    }

    #[tokio::test]
    async fn rows_held_are_counted_in_the_hand_off() {
        let (sender, receiver) = mpsc::channel(64);
        for id in 0..25 {
            sender.send(row(id, "busy")).await.unwrap();
        }
        let held = Arc::new(AtomicUsize::new(0));
        let receiving = HandoffReceiver { receiver, held: Arc::clone(&held) };
        let mut handed = HandedRows::new(Some(receiving), Duration::from_secs(30));
        let first = handed.take_now(1).unwrap();
        assert_eq!(first[0].id, 0);
        assert_eq!(held.load(Ordering::Relaxed), 24, "all taken out of the channel, less the batch");
        let rest: Vec<i64> = handed.take_all().iter().map(|message| message.id).collect();
        assert_eq!(rest, (1..25).collect::<Vec<_>>(), "all of them, in order");
        assert_eq!(held.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_row_whose_claim_is_too_old_is_left_to_its_expiry_not_published() {
        let (sender, receiver) = mpsc::channel(8);
        let mut old = row(1, "a");
        old.claimed -= Duration::from_secs(20);
        sender.send(old).await.unwrap();
        sender.send(row(2, "a")).await.unwrap();
        let receiving = HandoffReceiver { receiver, held: Arc::default() };
        let mut handed = HandedRows::new(Some(receiving), Duration::from_secs(30));
        let batch: Vec<i64> = handed.take_now(10).unwrap().iter().map(|message| message.id).collect();
        assert_eq!(batch, [2], "past half the claim's 30 s, the row is not published from the hand-off");
        assert_eq!(handed.take_stale(), 1);
    }
}
