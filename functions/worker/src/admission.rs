//! Admitting parked deliveries (SPEC §12; `repo::waiting`): a delivery whose
//! endpoint had no free slot waits as a `parked` row, acked, with no broker
//! message, and is taken from Postgres into a slot when one frees — so a
//! backlog behind a slow receiver waits in one place and is published once.
//!
//! - [`Waiters`] (one per process, in the [`Processor`]): the endpoints this
//!   process parked deliveries of, and a signal per slot of theirs it frees.
//! - [`Admitter`] (one per broker subscription): an admitting task per such
//!   endpoint, and a pass once a second over the endpoints with parked
//!   deliveries they may admit (`repo::waiting::admitting_endpoints`: parked
//!   by another worker, or by a circuit that closed since), so nothing waits
//!   on one process's memory.
//!
//! An endpoint's task, while the endpoint has a free slot: takes one of the
//! worker's fair slots for the tenant, leases the endpoint's oldest parked
//! delivery, takes the endpoint's flow-control slot and sends it on a task
//! of its own; the next waits for a slot this process frees (or a second,
//! for another process's). A delivery leased and then turned away (another
//! worker took the slot first) is parked again. What an admitted delivery
//! needs afterwards goes to the broker as for any message: a retry to its
//! retry queue, a failure on our side to the ready queue after a pause; if
//! that publish fails, its row (`scheduled`, or leased until the lease
//! expires) is recovery's.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use relayops_shared::broker::{DeliveryTask, QueueMessage};
use relayops_shared::ids::{EndpointId, TenantId};
use relayops_shared::repo::deliveries::DeliveryJob;
use relayops_shared::repo::waiting;
use relayops_shared::task::stop_requested;
use relayops_shared::telemetry::error_chain;
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::delay::DelayPublisher;
use crate::process::Processor;
use crate::report;
use crate::saturation::Busy;
use crate::settle::RoundAgain;
use crate::slots::{FairSlots, SlotPermit};

/// How often each worker looks for endpoints with parked deliveries it may admit.
pub const PASS_EVERY: Duration = Duration::from_secs(1);
/// How long an endpoint's task waits for a slot this process frees before
/// asking flow control again (another process's freed slots are not seen).
const RECHECK_EVERY: Duration = Duration::from_secs(1);
/// An endpoint's task that found its endpoint full this many checks in a row
/// ends (another process is sending to it); the pass starts it again.
const FULL_CHECKS_BEFORE_ENDING: u32 = 5;
/// Pause after the database failed an admission before trying again.
const PAUSE_AFTER_FAILURE: Duration = Duration::from_millis(500);

/// The endpoints this process admits parked deliveries of.
#[derive(Default)]
pub struct Waiters {
    endpoints: Mutex<HashMap<EndpointId, Waiting>>,
    /// Wakes the [`Admitter`] to start a task for a newly noted endpoint.
    noted: Notify,
}

struct Waiting {
    tenant: TenantId,
    /// Notified once per slot of the endpoint this process frees.
    freed: Arc<Notify>,
    /// A task admits this endpoint's deliveries now.
    admitting: bool,
    /// Noted again while its task was admitting: it must look once more
    /// before it ends.
    noted_again: bool,
}

impl Waiters {
    fn lock(&self) -> MutexGuard<'_, HashMap<EndpointId, Waiting>> {
        self.endpoints.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A delivery of `endpoint` was parked for a slot (or found parked):
    /// admit its parked deliveries as slots free.
    pub fn note(&self, tenant: TenantId, endpoint: EndpointId) {
        let mut endpoints = self.lock();
        let waiting = endpoints.entry(endpoint).or_insert_with(|| Waiting {
            tenant,
            freed: Arc::default(),
            admitting: false,
            noted_again: false,
        });
        if waiting.admitting {
            waiting.noted_again = true;
            return;
        }
        drop(endpoints);
        self.noted.notify_one();
    }

    /// This process freed one of `endpoint`'s slots.
    pub fn slot_freed(&self, endpoint: EndpointId) {
        if let Some(waiting) = self.lock().get(&endpoint) {
            waiting.freed.notify_one();
        }
    }

    /// The noted endpoints no task admits yet, each now marked as admitted.
    fn to_start(&self) -> Vec<(TenantId, EndpointId, Arc<Notify>)> {
        let mut endpoints = self.lock();
        let waiting = endpoints.iter_mut().filter(|(_, waiting)| !waiting.admitting);
        waiting
            .map(|(endpoint, waiting)| {
                waiting.admitting = true;
                waiting.noted_again = false;
                (waiting.tenant, *endpoint, Arc::clone(&waiting.freed))
            })
            .collect()
    }

    /// `endpoint`'s task stops; `drained`: it found nothing left to admit.
    /// `false` when it must look again instead (a delivery was parked
    /// meanwhile). Otherwise the endpoint is forgotten until noted again.
    fn end(&self, endpoint: EndpointId, drained: bool) -> bool {
        let mut endpoints = self.lock();
        if let Some(waiting) = endpoints.get_mut(&endpoint) {
            if drained && waiting.noted_again {
                waiting.noted_again = false;
                return false;
            }
        }
        endpoints.remove(&endpoint);
        true
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// Admits parked deliveries through one broker subscription (its retry
/// publisher and the worker's slots); ends with the subscription.
pub(crate) struct Admitter {
    processor: Processor,
    delays: Arc<DelayPublisher>,
    slots: Arc<FairSlots>,
    /// The subscription's channel: once closed, admitting stops.
    channel: lapin::Channel,
    stopping: watch::Receiver<bool>,
}

/// Why an endpoint's admitting stopped.
enum Stopped {
    /// Nothing left to admit.
    Drained,
    /// The process is stopping, the subscription ended, or the endpoint
    /// stayed full (another process sends to it).
    Other,
}

impl Admitter {
    pub(crate) fn new(
        processor: Processor,
        delays: Arc<DelayPublisher>,
        slots: Arc<FairSlots>,
        channel: lapin::Channel,
        stopping: watch::Receiver<bool>,
    ) -> Arc<Self> {
        Arc::new(Self { processor, delays, slots, channel, stopping })
    }

    fn over(&self) -> bool {
        *self.stopping.borrow() || !self.channel.status().connected()
    }

    /// Starts a task per noted endpoint as it is noted, and runs the pass,
    /// until the process stops or the subscription ends; then waits for the
    /// deliveries under way.
    pub(crate) async fn run(self: Arc<Self>) {
        let waiters = Arc::clone(self.processor.waiters());
        let mut tasks = JoinSet::new();
        let mut pass = tokio::time::interval(PASS_EVERY);
        pass.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stopping = self.stopping.clone();
        loop {
            tokio::select! {
                () = waiters.noted.notified() => {}
                _ = pass.tick() => self.pass(&waiters).await,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
                () = stop_requested(&mut stopping) => break,
            }
            if self.over() {
                break;
            }
            for (tenant, endpoint, freed) in waiters.to_start() {
                let admitter = Arc::clone(&self);
                tasks.spawn(async move { admitter.admit_endpoint(tenant, endpoint, freed).await });
            }
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Notes every endpoint with parked deliveries it may admit now.
    async fn pass(&self, waiters: &Waiters) {
        let found = match self.processor.pool().get().await {
            Ok(client) => waiting::admitting_endpoints(&client).await,
            Err(error) => Err(error.into()),
        };
        match found {
            Ok(endpoints) => {
                for (tenant, endpoint) in endpoints {
                    waiters.note(tenant, endpoint);
                }
            }
            Err(error) => tracing::warn!(error = %error_chain(&error), "looking for parked deliveries failed"),
        }
    }

    /// Admits `endpoint`'s parked deliveries while it has slots, until none
    /// is left (or the process stops, or the endpoint stays full).
    async fn admit_endpoint(self: Arc<Self>, tenant: TenantId, endpoint: EndpointId, freed: Arc<Notify>) {
        loop {
            let stopped = self.admit_while_free(tenant, endpoint, &freed).await;
            let waiters = self.processor.waiters();
            if waiters.end(endpoint, matches!(stopped, Stopped::Drained)) {
                return;
            }
        }
    }

    async fn admit_while_free(&self, tenant: TenantId, endpoint: EndpointId, freed: &Notify) -> Stopped {
        let mut sends = JoinSet::new();
        let mut max_in_flight = None;
        let mut full_checks = 0;
        let mut stopping = self.stopping.clone();
        let stopped = loop {
            while sends.try_join_next().is_some() {}
            if self.over() {
                break Stopped::Other;
            }
            let full = match max_in_flight {
                Some(max_in_flight) => self.processor.is_full(endpoint, max_in_flight).await,
                None => false,
            };
            if full {
                full_checks = if slot_freed(freed).await { 0 } else { full_checks + 1 };
                if full_checks >= FULL_CHECKS_BEFORE_ENDING {
                    break Stopped::Other;
                }
                continue;
            }
            let permit = tokio::select! {
                biased;
                () = stop_requested(&mut stopping) => break Stopped::Other,
                permit = self.slots.acquire(tenant) => permit,
            };
            let claim_asked = Instant::now();
            let job = match self.processor.admit_oldest(tenant, endpoint).await {
                Ok(Some(job)) => job,
                Ok(None) => break Stopped::Drained,
                Err(error) => {
                    tracing::warn!(endpoint_id = %endpoint, error = %error_chain(&error),
                        "admitting a parked delivery failed; trying again");
                    tokio::time::sleep(PAUSE_AFTER_FAILURE).await;
                    continue;
                }
            };
            max_in_flight = Some(self.processor.max_in_flight(&job));
            match self.processor.admit(&job).await {
                Ok(slot) => {
                    report::admitted();
                    let (processor, delays) = (self.processor.clone(), Arc::clone(&self.delays));
                    sends.spawn(send_admitted(processor, delays, job, slot, permit, claim_asked));
                }
                Err(Busy::Full { .. }) => {
                    drop(permit);
                    slot_freed(freed).await;
                }
                Err(Busy::Rate { wait }) => {
                    drop(permit);
                    tokio::time::sleep(wait).await;
                }
            }
        };
        while sends.join_next().await.is_some() {}
        stopped
    }
}

/// Waits up to [`RECHECK_EVERY`] for this process to free one of the
/// endpoint's slots; whether it did.
async fn slot_freed(freed: &Notify) -> bool {
    tokio::time::timeout(RECHECK_EVERY, freed.notified()).await.is_ok()
}

/// Sends an admitted delivery (holding one of the worker's slots) and does
/// what its disposition asks of the broker, as for a message's delivery
/// ([`RoundAgain`]); a publish that fails leaves the row to recovery
/// (`scheduled`, or leased until its lease expires).
async fn send_admitted(
    processor: Processor,
    delays: Arc<DelayPublisher>,
    job: DeliveryJob,
    slot: Option<relayops_shared::flow::Slot>,
    _permit: SlotPermit,
    claim_asked: Instant,
) {
    let disposition = processor.send_and_record(&job, slot, claim_asked).await;
    let Some(again) = RoundAgain::after(disposition, 0) else { return };
    let task = DeliveryTask {
        tenant_id: job.tenant_id,
        delivery_id: job.delivery_id,
        event_id: job.event_id,
        endpoint_id: job.endpoint_id,
    };
    let body = serde_json::to_vec(&QueueMessage::DeliveryV1(task)).unwrap_or_default();
    if let Err(error) = delays.publish(&body, again.wait, again.throttles).await {
        report::not_sent_round();
        tracing::warn!(delivery_id = %job.delivery_id, error = %error_chain(&error),
            "admitted delivery not sent round; left to recovery");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_noted_while_admitting_is_looked_at_again_before_its_task_ends() {
        let waiters = Waiters::default();
        let (tenant, endpoint) = (TenantId::new(), EndpointId::new());
        waiters.note(tenant, endpoint);
        let started = waiters.to_start();
        assert_eq!(started.len(), 1);
        assert!(waiters.to_start().is_empty(), "one task per endpoint");
        waiters.note(tenant, endpoint);
        assert!(!waiters.end(endpoint, true), "parked meanwhile: look again");
        assert!(waiters.end(endpoint, true), "nothing noted since: the task ends");
        assert!(waiters.is_empty());
        waiters.note(tenant, endpoint);
        assert_eq!(waiters.to_start().len(), 1, "noted again later: a new task");
    }
}
