//! The rows ingest in this process handed over (`relayops_shared::handoff`),
//! taken fairly between tenants: what has come is moved into a queue per
//! tenant, and a batch takes one row of each tenant in turn. A tenant
//! posting thousands of events a second fills the hand-off; another
//! tenant's lone event still goes out in the next batch, not behind the
//! whole hand-off (up to its capacity, 1,024 rows: several batches).
//!
//! Every row here is claimed by this publisher already (ingest wrote it so),
//! so what is taken out is published like a claimed batch, and what cannot be
//! published is given back ([`HandedRows::take_all`]).
use std::collections::{HashMap, VecDeque};

use relayops_shared::repo::outbox::OutboxMessage;
use tokio::sync::mpsc;

pub(crate) struct HandedRows {
    /// `None` once ingest's end is gone (or there never was one).
    receiver: Option<mpsc::Receiver<OutboxMessage>>,
    /// Rows already taken from the channel, per tenant.
    waiting: HashMap<String, VecDeque<OutboxMessage>>,
    /// Tenants with rows waiting, in the order their turns come.
    turns: VecDeque<String>,
}

/// The tenant an outbox row is for (every envelope names it).
fn tenant_of(message: &OutboxMessage) -> String {
    message.envelope.get("tenant_id").and_then(serde_json::Value::as_str).unwrap_or_default().to_owned()
}

impl HandedRows {
    pub(crate) fn new(receiver: Option<mpsc::Receiver<OutboxMessage>>) -> Self {
        Self { receiver, waiting: HashMap::new(), turns: VecDeque::new() }
    }

    /// Whether ingest's end is still there or rows still wait.
    pub(crate) fn is_open(&self) -> bool {
        self.receiver.is_some() || !self.turns.is_empty()
    }

    /// Whether rows wait now (taken from the channel or still in it).
    pub(crate) fn any_waiting(&self) -> bool {
        !self.turns.is_empty() || self.receiver.as_ref().is_some_and(|receiver| !receiver.is_empty())
    }

    fn add(&mut self, message: OutboxMessage) {
        let tenant = tenant_of(&message);
        let queue = self.waiting.entry(tenant.clone()).or_default();
        if queue.is_empty() {
            self.turns.push_back(tenant);
        }
        queue.push_back(message);
    }

    /// Moves what the channel holds now into the per-tenant queues.
    fn pull(&mut self) {
        let Some(receiver) = self.receiver.as_mut() else { return };
        let mut arrived = Vec::new();
        loop {
            match receiver.try_recv() {
                Ok(message) => arrived.push(message),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    self.receiver = None;
                    break;
                }
            }
        }
        for message in arrived {
            self.add(message);
        }
    }

    /// Up to `limit` rows waiting now, one of each tenant in turn; `None`
    /// when none waits.
    pub(crate) fn take_now(&mut self, limit: usize) -> Option<Vec<OutboxMessage>> {
        self.pull();
        let mut batch = Vec::new();
        while batch.len() < limit.max(1) {
            let Some(tenant) = self.turns.pop_front() else { break };
            let Some(queue) = self.waiting.get_mut(&tenant) else { continue };
            if let Some(message) = queue.pop_front() {
                batch.push(message);
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
        if self.turns.is_empty() {
            let receiver = self.receiver.as_mut()?;
            match receiver.recv().await {
                Some(message) => self.add(message),
                None => {
                    self.receiver = None;
                    return None;
                }
            }
        }
        self.take_now(limit)
    }

    /// Every row waiting now (to give back after a failure).
    pub(crate) fn take_all(&mut self) -> Vec<OutboxMessage> {
        self.pull();
        self.turns.clear();
        self.waiting.drain().flat_map(|(_, queue)| queue).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, tenant: &str) -> OutboxMessage {
        OutboxMessage { id, envelope: serde_json::json!({ "tenant_id": tenant }), pending: Vec::new() }
    }

    #[tokio::test]
    async fn a_lone_tenants_row_goes_in_the_next_batch_behind_a_full_hand_off() {
        let (sender, receiver) = mpsc::channel(2048);
        for id in 0..1000 {
            sender.send(row(id, "busy")).await.unwrap();
        }
        sender.send(row(5000, "quiet")).await.unwrap();
        let mut handed = HandedRows::new(Some(receiver));
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
}
