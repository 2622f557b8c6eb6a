//! Admitting parked deliveries (SPEC §12; `repo::waiting`): a delivery whose
//! endpoint could not take it (no free slot, or no rate-limit token) waits as
//! a `parked` row, acked, with no broker message, and is taken from Postgres
//! when the endpoint can take it — so a backlog behind a slow or rate-limited
//! receiver waits in one place and is published once.
//!
//! - [`Waiters`] (one per process, in the [`Processor`]): the endpoints this
//!   process parked deliveries of, and a signal per slot of theirs it frees.
//! - [`Admitter`] (one per broker subscription): an admitting task per such
//!   endpoint, and a pass once a second over the endpoints with parked
//!   deliveries they may admit (`repo::waiting::admitting_endpoints`: parked
//!   by another worker, or by a circuit that closed since), so nothing waits
//!   on one process's memory.
//!
//! An endpoint's task asks flow control first and Postgres second: it
//! reserves one of the endpoint's slots (and a token, when it has a rate
//! limit) under a lease id of its own, takes one of the worker's fair slots
//! for the tenant, and only then leases the endpoint's oldest parked
//! delivery into them and sends it on a task of its own ([`LEASES_AT_ONCE`]
//! leases under way at a time). Waiting for a slot this process frees (or a
//! second, for another process's) or for the bucket's refill writes nothing;
//! a lease that finds nothing left gives the slot and the token back and
//! ends the task. The endpoint's limits come from the deliveries it leases:
//! the first is leased before its slot, and parked again if flow control
//! turns it away. What an admitted delivery needs afterwards goes to the
//! broker as for any message: a retry to its retry queue, a failure on our
//! side to the ready queue after a pause; if that publish fails, its row
//! (`scheduled`, or leased until the lease expires) is recovery's.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use relayops_shared::flow::Slot;
use relayops_shared::ids::{EndpointId, TenantId};
use relayops_shared::repo::deliveries::DeliveryJob;
use relayops_shared::repo::waiting;
use relayops_shared::task::stop_requested;
use relayops_shared::telemetry::error_chain;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::delay::{DelayPublisher, ReturnTo};
use crate::gate::{Admission, EndpointLimits};
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
/// How many leases of an endpoint's parked deliveries one worker has under
/// way at once (each into a slot already reserved): enough to admit past
/// one database round trip's pace, few enough that leases finding nothing
/// left cost little.
const LEASES_AT_ONCE: usize = 4;
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

    /// Whether a task of this process admits `endpoint`'s parked deliveries
    /// now: a new delivery of it waits behind them.
    pub fn admitting(&self, endpoint: EndpointId) -> bool {
        self.lock().get(&endpoint).is_some_and(|waiting| waiting.admitting)
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
        // The endpoint's limits, from the last delivery leased: until the
        // first, a delivery is leased before its slot (and parked again if
        // flow control turns it away); after that, only into a slot (and
        // with a token) already held, so waiting writes nothing.
        let mut limits: Option<EndpointLimits> = None;
        let leasing = Arc::new(Semaphore::new(LEASES_AT_ONCE));
        let mut drained = false;
        let mut full_checks = 0;
        let mut stopping = self.stopping.clone();
        let stopped = loop {
            // A lease under way says whether anything is left before the next.
            let turn = tokio::select! {
                biased;
                () = stop_requested(&mut stopping) => break Stopped::Other,
                turn = Arc::clone(&leasing).acquire_owned() => turn.expect("never closed"),
            };
            while let Some(sent) = sends.try_join_next() {
                match sent {
                    Ok(Leased::Nothing) => drained = true,
                    Ok(Leased::Sent { limits: now }) => limits = Some(now),
                    Ok(Leased::Failed) | Err(_) => {}
                }
            }
            if drained {
                break Stopped::Drained;
            }
            if self.over() {
                break Stopped::Other;
            }
            let Some(known) = limits else {
                match self.lease_then_admit(tenant, endpoint, &mut sends).await {
                    LeasedFirst::Nothing => break Stopped::Drained,
                    LeasedFirst::Stopping => break Stopped::Other,
                    LeasedFirst::Failed => {}
                    LeasedFirst::Sent(now) => limits = Some(now),
                    LeasedFirst::TurnedAway(now, busy) => {
                        limits = Some(now);
                        self.wait_out(busy, freed).await;
                    }
                }
                continue;
            };
            let lease_id = format!("admission:{}", uuid::Uuid::new_v4());
            let slot = match self.processor.gate().reserve(&known, &lease_id).await {
                Admission::Go(slot) => slot,
                Admission::Defer { busy } => {
                    full_checks = if self.wait_out(busy, freed).await { 0 } else { full_checks + 1 };
                    if full_checks >= FULL_CHECKS_BEFORE_ENDING {
                        break Stopped::Other;
                    }
                    continue;
                }
            };
            full_checks = 0;
            let Some(permit) = self.fair_slot(tenant, endpoint).await else {
                self.processor.gate().give_back(&known, slot).await;
                break Stopped::Other;
            };
            let (processor, delays) = (self.processor.clone(), Arc::clone(&self.delays));
            sends.spawn(lease_into_slot(processor, delays, tenant, known, (slot, permit, turn)));
        };
        while sends.join_next().await.is_some() {}
        stopped
    }

    /// Until the endpoint's limits are known: leases the oldest parked
    /// delivery, then asks flow control for its slot; sends it in that slot
    /// (on a task in `sends`) or parks it again.
    async fn lease_then_admit(
        &self,
        tenant: TenantId,
        endpoint: EndpointId,
        sends: &mut JoinSet<Leased>,
    ) -> LeasedFirst {
        let Some(permit) = self.fair_slot(tenant, endpoint).await else { return LeasedFirst::Stopping };
        let claim_asked = Instant::now();
        let job = match self.processor.admit_oldest(tenant, endpoint).await {
            Ok(Some(job)) => job,
            Ok(None) => return LeasedFirst::Nothing,
            Err(error) => {
                failed_to_lease(endpoint, &error).await;
                return LeasedFirst::Failed;
            }
        };
        let limits = self.processor.gate().limits(&job);
        match self.processor.gate().admit(&job).await {
            Admission::Go(slot) => {
                let (processor, delays) = (self.processor.clone(), Arc::clone(&self.delays));
                sends.spawn(send_admitted(processor, delays, job, slot, permit, claim_asked));
                LeasedFirst::Sent(limits)
            }
            Admission::Defer { busy } => {
                self.processor.park_again(&job).await;
                LeasedFirst::TurnedAway(limits, busy)
            }
        }
    }

    /// One of the worker's fair slots for `tenant`'s `endpoint`; `None` if
    /// the process is told to stop first.
    async fn fair_slot(&self, tenant: TenantId, endpoint: EndpointId) -> Option<SlotPermit> {
        let mut stopping = self.stopping.clone();
        tokio::select! {
            biased;
            () = stop_requested(&mut stopping) => None,
            permit = self.slots.acquire(tenant, endpoint) => Some(permit),
        }
    }

    /// Waits out what turned the endpoint away: a slot this process frees
    /// (up to [`RECHECK_EVERY`]; whether one was), or the rate limit's
    /// refill (`true`), or the process stopping.
    async fn wait_out(&self, busy: Busy, freed: &Notify) -> bool {
        let mut stopping = self.stopping.clone();
        tokio::select! {
            biased;
            () = stop_requested(&mut stopping) => false,
            freed = async {
                match busy {
                    Busy::Full { .. } => slot_freed(freed).await,
                    Busy::Rate { wait } => {
                        tokio::time::sleep(wait).await;
                        true
                    }
                }
            } => freed,
        }
    }
}

/// What became of a slot reserved for an endpoint's oldest parked delivery.
enum Leased {
    /// A delivery was leased into it and sent; its endpoint's limits now.
    Sent { limits: EndpointLimits },
    /// No parked delivery was left to admit.
    Nothing,
    /// The database failed the lease (paused before returning).
    Failed,
}

/// What leasing before the endpoint's limits were known came to.
enum LeasedFirst {
    Sent(EndpointLimits),
    TurnedAway(EndpointLimits, Busy),
    Nothing,
    Failed,
    Stopping,
}

/// Leases the endpoint's oldest parked delivery into a slot (and token)
/// already reserved for it and one of the worker's slots, and sends it;
/// without one, gives them back. `turn`: one of the endpoint's
/// [`LEASES_AT_ONCE`], given back once the lease has answered.
async fn lease_into_slot(
    processor: Processor,
    delays: Arc<DelayPublisher>,
    tenant: TenantId,
    limits: EndpointLimits,
    (slot, permit, turn): (Option<Slot>, SlotPermit, OwnedSemaphorePermit),
) -> Leased {
    let claim_asked = Instant::now();
    match processor.admit_oldest(tenant, limits.endpoint).await {
        Ok(Some(job)) => {
            drop(turn);
            send_admitted(processor, delays, job, slot, permit, claim_asked).await
        }
        Ok(None) => {
            processor.gate().give_back(&limits, slot).await;
            Leased::Nothing
        }
        Err(error) => {
            processor.gate().give_back(&limits, slot).await;
            drop(permit);
            failed_to_lease(limits.endpoint, &error).await;
            Leased::Failed
        }
    }
}

/// Logs a lease the database failed and pauses before the next.
async fn failed_to_lease(endpoint: EndpointId, error: &relayops_shared::db::DbError) {
    tracing::warn!(endpoint_id = %endpoint, error = %error_chain(error),
        "admitting a parked delivery failed; trying again");
    tokio::time::sleep(PAUSE_AFTER_FAILURE).await;
}

/// Waits up to [`RECHECK_EVERY`] for this process to free one of the
/// endpoint's slots; whether it did.
async fn slot_freed(freed: &Notify) -> bool {
    tokio::time::timeout(RECHECK_EVERY, freed.notified()).await.is_ok()
}

/// Sends an admitted delivery (holding one of the worker's slots) and does
/// what its disposition asks of the broker, as for a message's delivery
/// ([`RoundAgain`]); a publish that fails leaves the row to recovery
/// (`scheduled`, or leased until its lease expires). Counts the admission;
/// gives the endpoint's limits as the delivery's row has them.
async fn send_admitted(
    processor: Processor,
    delays: Arc<DelayPublisher>,
    job: DeliveryJob,
    slot: Option<Slot>,
    _permit: SlotPermit,
    claim_asked: Instant,
) -> Leased {
    report::admitted();
    let sent = Leased::Sent { limits: processor.gate().limits(&job) };
    let disposition = processor.send_and_record(&job, slot, claim_asked, Some(&delays)).await;
    let Some(again) = RoundAgain::after(disposition) else { return sent };
    let to = ReturnTo::tenants_own(job.tenant_id);
    if let Err(error) = delays.publish(&crate::process::message_of(&job), again.wait, to).await {
        report::not_sent_round();
        tracing::warn!(delivery_id = %job.delivery_id, error = %error_chain(&error),
            "admitted delivery not sent round; left to recovery");
    }
    sent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_noted_while_admitting_is_looked_at_again_before_its_task_ends() {
        let waiters = Waiters::default();
        let (tenant, endpoint) = (TenantId::new(), EndpointId::new());
        waiters.note(tenant, endpoint);
        assert!(!waiters.admitting(endpoint), "noted, not yet admitting");
        let started = waiters.to_start();
        assert_eq!(started.len(), 1);
        assert!(waiters.admitting(endpoint));
        assert!(waiters.to_start().is_empty(), "one task per endpoint");
        waiters.note(tenant, endpoint);
        assert!(!waiters.end(endpoint, true), "parked meanwhile: look again");
        assert!(waiters.end(endpoint, true), "nothing noted since: the task ends");
        assert!(waiters.is_empty());
        waiters.note(tenant, endpoint);
        assert_eq!(waiters.to_start().len(), 1, "noted again later: a new task");
    }
}
