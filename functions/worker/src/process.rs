//! One queue message, from envelope to settled delivery row. The order is the
//! at-least-once contract: claim the row, send, record the attempt and the next
//! state in one transaction, and only then ack. If recording fails after the
//! receiver answered, the message is requeued and the lease left to expire: the
//! delivery is sent again later with the same delivery id (an uncertain side
//! effect the receiver can deduplicate).
//!
//! Claims, ordinary attempt records and deferrals go through group-commit
//! batchers ([`Batcher`]): messages in flight at the same time share one
//! statement and one commit, and each still waits for its own row's commit
//! before it is acked. Rare paths (a death, a 410) run on their own.
//!
//! A claim commits without waiting for the WAL flush (it is a lease, not a
//! promise to anyone; the attempt record's synchronous commit flushes it). So
//! whenever the worker finds its lease gone when settling, it requeues the
//! message instead of acking it: the next claim decides (drop it if another
//! worker has the delivery, send it if a database crash undid the claim).
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{Fuse, FusedFuture, FutureExt};
use tokio::time::Instant;

use chrono::Utc;
use relayops_shared::api::{PublisherWakeup, Wakeups};
use relayops_shared::broker::{DeliveryTask, QueueMessage};
use relayops_shared::config::WorkerConfig;
use relayops_shared::db::batcher::{BatchError, BatchFn, BatchLimits, Batcher};
use relayops_shared::db::listen::PgNotifier;
use relayops_shared::db::partition_routes::PartitionRoutes;
use relayops_shared::db::{DbError, Pool};
use relayops_shared::domain::operational::{DeadDelivery, DisabledBy, Subject};
use relayops_shared::domain::{AttemptOutcome, DeliveryStatus};
use relayops_shared::flow::Slot;
use relayops_shared::ids::{DeliveryId, EndpointId, TenantId};
use relayops_shared::repo::deliveries::{self, AttemptRecord, ClaimOutcome, DeliveryJob, Settled};
use relayops_shared::repo::delivery_batches::{self, DeferUntil, Deferral, DeliveryKey, Settlement};
use relayops_shared::repo::{endpoints, operational, waiting};
use relayops_shared::telemetry::error_chain;

use crate::admission::Waiters;
use crate::circuit;
use crate::delay::{DelayPublisher, ReturnTo, FIRST_RECHECK};
use crate::gate::{Admission, Gate};
use crate::health;
use crate::hold::Backoff;
use crate::lane;
use crate::policy::RetryPolicy;
use crate::report::{self, AttemptReport};
use crate::saturation::{Busy, Recall, Saturation};
use crate::sender::{Exchange, Sender};
use crate::verdict::{classify, SendResult, Verdict};

/// How long a delivery for a full endpoint waits for this process to free
/// one of its slots before it is parked (see `still_saturated`).
const WAIT_FOR_SLOT: Duration = Duration::from_millis(250);

/// What to tell the broker about a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Done with it (settled, or nothing to do).
    Ack,
    /// Publish the message again to come back after `wait` (zero: at once),
    /// then ack: a retry was scheduled, or the message came back before its
    /// retry was due. (A delivery flow control turns away does not go round:
    /// it is parked, [`crate::admission`].)
    Delay { wait: Duration },
    /// Publish the message again to come back after `wait`, still marked to
    /// recheck (with twice the wait), then ack: it came ahead of the record
    /// of the attempt it follows, whose worker still holds the lease
    /// ([`crate::delay::RECHECK_HEADER`]).
    Recheck { wait: Duration },
    /// A transient failure on our side: deliver the message again.
    Requeue,
    /// Our database failed before anything was sent: keep the message and
    /// process it again after a pause (see [`crate::hold`]).
    Hold,
    /// Not a message we can ever process.
    Reject,
}

/// A [`BatchFn`] running one batch statement on a pooled connection as this
/// worker, with the process's map of history partitions:
/// `|client, items, worker_id, partitions| statement(&client, partitions, &items, worker_id)`.
macro_rules! on_pool {
    ($pool:expr, $routes:expr, $config:expr, |$client:ident, $items:ident, $worker:ident, $partitions:ident| $statement:expr) => {{
        let pool: Pool = $pool.clone();
        let routes: Arc<PartitionRoutes> = Arc::clone(&$routes);
        let worker_id: Arc<str> = $config.worker_id.as_str().into();
        let run: BatchFn<_, _> = Arc::new(move |$items: Vec<_>| {
            let (pool, routes, worker_id) = (pool.clone(), Arc::clone(&routes), Arc::clone(&worker_id));
            Box::pin(async move {
                let $client = pool.get().await?;
                let $worker: &str = &worker_id;
                let $partitions: &PartitionRoutes = &routes;
                $statement.await
            })
        });
        run
    }};
}

/// Why a message could not be processed now (it is requeued).
#[derive(Debug, thiserror::Error)]
enum ProcessError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Batch(#[from] BatchError),
}

impl ProcessError {
    /// The database could not be reached (as opposed to a statement failing).
    fn is_unavailable(&self) -> bool {
        match self {
            Self::Db(error) => error.is_unavailable(),
            Self::Batch(error) => error.is_unavailable(),
        }
    }
}

#[derive(Clone)]
pub struct Processor {
    pool: Pool,
    sender: Sender,
    gate: Gate,
    config: WorkerConfig,
    claims: Batcher<DeliveryKey, ClaimOutcome>,
    records: Batcher<Settlement, Settled>,
    deferrals: Batcher<Deferral, Settled>,
    /// Parks deliveries for a full endpoint without claiming them.
    parks: Batcher<DeliveryKey, bool>,
    saturation: Arc<Saturation>,
    /// Endpoints with deliveries this process parked for a slot, and the
    /// slots it frees ([`crate::admission`]).
    waiters: Arc<Waiters>,
    health: Arc<health::HealthMemo>,
    /// The endpoints this process counted a circuit failure of lately.
    circuit_failures: Arc<circuit::RecentFailures>,
    /// Wakes the publisher after committing outbox rows (a lane's next
    /// delivery, an operational event): `NOTIFY relayops_outbox`, so a
    /// listening publisher sends them at once (in AWS the schedule picks them
    /// up), and the publisher of this process directly when there is one
    /// ([`wake_also`](Self::wake_also)).
    wakeup: Arc<dyn PublisherWakeup>,
}

impl Processor {
    /// Starts the claim and record batchers: call inside a Tokio runtime.
    pub fn new(pool: Pool, sender: Sender, gate: Gate, config: WorkerConfig) -> Self {
        let limits = BatchLimits { max_items: config.batch_size, lanes: config.batch_lanes };
        let lease = config.lease;
        // One map of history partitions for the three batchers.
        let routes = PartitionRoutes::new();
        let claims = Batcher::spawn(
            limits,
            on_pool!(pool, routes, config, |client, keys, worker, partitions| delivery_batches::claim_many(
                &client, partitions, &keys, worker, lease
            )),
        );
        let records = Batcher::spawn(
            limits,
            on_pool!(pool, routes, config, |client, settlements, worker, partitions| delivery_batches::record_many(
                &client,
                partitions,
                &settlements,
                worker
            )),
        );
        let deferrals = Batcher::spawn(
            limits,
            on_pool!(pool, routes, config, |client, deferrals, worker, partitions| delivery_batches::defer_many(
                &client, partitions, &deferrals, worker
            )),
        );
        let parks = Batcher::spawn(
            limits,
            on_pool!(pool, routes, config, |client, keys, _worker, partitions| delivery_batches::park_many(
                &client, partitions, &keys
            )),
        );
        let (saturation, health, waiters) = (Arc::default(), Arc::default(), Arc::default());
        let wakeup = Arc::new(PgNotifier::new(pool.clone()));
        let circuit_failures = Arc::default();
        Self {
            pool,
            sender,
            gate,
            config,
            claims,
            records,
            deferrals,
            parks,
            saturation,
            health,
            circuit_failures,
            waiters,
            wakeup,
        }
    }

    /// The database pool the worker's statements run on.
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The endpoints with parked deliveries this process admits.
    pub(crate) fn waiters(&self) -> &Arc<Waiters> {
        &self.waiters
    }

    /// Wakes `publisher` too (the publisher loop of this process, `relayops
    /// all`): without a round trip through Postgres.
    pub fn wake_also(&mut self, publisher: Arc<dyn PublisherWakeup>) {
        self.wakeup = Arc::new(Wakeups(vec![publisher, Arc::clone(&self.wakeup)]));
    }

    /// One delivery (a `delivery.v1` message, or one of a `deliveries.v1`
    /// bundle's); `recheck` is the message's recheck wait, if it is marked
    /// ([`crate::delay::RECHECK_HEADER`]).
    pub async fn process(&self, task: DeliveryTask, recheck: Option<Duration>) -> Disposition {
        relayops_shared::hop!("worker.received", event_id = %task.event_id, tenant_id = %task.tenant_id);
        // Behind deliveries of its endpoint already parked and being
        // admitted here, a delivery waits its turn: parked, not racing the
        // oldest for the next free slot.
        let saturated = match self.waiters.admitting(task.endpoint_id) {
            true => Saturated::Busy(ParkedFor::Turn),
            false => self.still_saturated(task.endpoint_id).await,
        };
        let result = match saturated {
            Saturated::No => self.deliver(task.tenant_id, task.delivery_id, recheck).await,
            Saturated::Busy(busy) => self.park_or_deliver(task, busy, recheck).await,
        };
        match result {
            Ok(disposition) => disposition,
            Err(error) if error.is_unavailable() => {
                tracing::warn!(
                    tenant_id = %task.tenant_id, delivery_id = %task.delivery_id,
                    error = %error_chain(&error), "database unavailable before sending; message held"
                );
                Disposition::Hold
            }
            Err(error) => {
                tracing::warn!(
                    tenant_id = %task.tenant_id, delivery_id = %task.delivery_id,
                    error = %error_chain(&error), "database failure; message requeued"
                );
                Disposition::Requeue
            }
        }
    }

    /// Whether flow control turned this message's endpoint away recently and
    /// would still (see [`crate::saturation`]). A full endpoint is given
    /// [`WAIT_FOR_SLOT`] for this process to free one of its slots first: a
    /// fast receiver's slots free within milliseconds, and a delivery that
    /// waits here costs nothing, where parking costs a write and, later, an
    /// admission's lease.
    async fn still_saturated(&self, endpoint: EndpointId) -> Saturated {
        match self.saturation.recall(endpoint) {
            Recall::Claim => Saturated::No,
            Recall::RateLimited => Saturated::Busy(ParkedFor::RateLimit),
            Recall::WasFull { max_in_flight } => {
                if !self.gate.is_full(endpoint, max_in_flight).await {
                    return Saturated::No;
                }
                if !self.saturation.wait_for_freed_slot(endpoint, WAIT_FOR_SLOT).await {
                    return Saturated::Busy(ParkedFor::Slot);
                }
                report::waited_for_slot();
                if self.gate.is_full(endpoint, max_in_flight).await {
                    Saturated::Busy(ParkedFor::Slot)
                } else {
                    Saturated::No
                }
            }
        }
    }

    /// A delivery for an endpoint that is still saturated: parked without a
    /// claim (one write; a worker admits it when the endpoint can take it,
    /// [`crate::admission`]), or, if its row is not due (leased, settled, a
    /// retry not yet due), handled by the claim as any other.
    async fn park_or_deliver(
        &self,
        task: DeliveryTask,
        parked_for: ParkedFor,
        recheck: Option<Duration>,
    ) -> Result<Disposition, ProcessError> {
        if self.park(task, parked_for).await? {
            return Ok(Disposition::Ack);
        }
        self.deliver(task.tenant_id, task.delivery_id, recheck).await
    }

    /// Parks a delivery without a claim (one write), counted under
    /// `parked_for`, and has its endpoint admitted here; whether it was
    /// parked (not if its row is not due).
    async fn park(&self, task: DeliveryTask, parked_for: ParkedFor) -> Result<bool, BatchError> {
        let parked = self.parks.call((task.tenant_id, task.delivery_id)).await?;
        if parked {
            report::parked(parked_for.reason());
            self.waiters.note(task.tenant_id, task.endpoint_id);
        }
        Ok(parked)
    }

    /// Parks a delivery before it takes a worker slot (`crate::settle`), for
    /// admission to send in its endpoint's turn: one behind its endpoint's
    /// parked deliveries being admitted here (`behind_admission`), or a slow
    /// endpoint's at its or its tenant's share. Whether it is parked (not if
    /// its row is not due, or the write failed: then it waits for a slot as
    /// any other).
    pub(crate) async fn park_unslotted(&self, task: DeliveryTask, behind_admission: bool) -> bool {
        let parked_for = if behind_admission { ParkedFor::Turn } else { ParkedFor::Share };
        match self.park(task, parked_for).await {
            Ok(parked) => parked,
            Err(error) => {
                tracing::warn!(
                    tenant_id = %task.tenant_id, delivery_id = %task.delivery_id,
                    error = %error_chain(&error), "parking a delivery before its slot failed; it waits for a slot"
                );
                false
            }
        }
    }

    async fn deliver(
        &self,
        tenant: TenantId,
        delivery: DeliveryId,
        recheck: Option<Duration>,
    ) -> Result<Disposition, ProcessError> {
        let claim_asked = Instant::now();
        let job = match self.claims.call((tenant, delivery)).await? {
            ClaimOutcome::Claimed(job) => {
                relayops_shared::hop!("worker.claimed", event_id = %job.event_id);
                job
            }
            ClaimOutcome::Parked { endpoint_id } => {
                report::parked("circuit_open");
                tracing::debug!(tenant_id = %tenant, delivery_id = %delivery, endpoint_id = %endpoint_id,
                    "endpoint circuit open; delivery parked");
                return Ok(Disposition::Ack);
            }
            ClaimOutcome::NotClaimable { status: Some(DeliveryStatus::Scheduled), next_attempt_at: Some(due) } => {
                // Early (a shorter bucket, or a duplicate): wait out the rest.
                let remaining = (due - Utc::now()).to_std().unwrap_or_default().max(Duration::from_millis(1));
                return Ok(Disposition::Delay { wait: remaining });
            }
            // Ahead of the record of the attempt it follows: come back.
            ClaimOutcome::NotClaimable { status: Some(DeliveryStatus::InProgress), .. } if recheck.is_some() => {
                return Ok(Disposition::Recheck { wait: recheck.unwrap_or_default() });
            }
            ClaimOutcome::NotClaimable { status, .. } => {
                tracing::debug!(tenant_id = %tenant, delivery_id = %delivery, status = status.map(|s| s.as_str()),
                    "terminal, leased by a live worker, or gone; message dropped");
                return Ok(Disposition::Ack);
            }
        };
        if !job.endpoint_enabled {
            let settled = self.fail_for_disabled_endpoint(&job).await?;
            if settled == Settled::LeaseLost {
                return Ok(Disposition::Requeue);
            }
            report::endpoint_disabled(&job);
            return Ok(Disposition::Ack);
        }

        let slot = match self.gate.admit(&job).await {
            Admission::Go(slot) => slot,
            Admission::Defer { busy } => return self.turned_away(&job, busy).await,
        };
        Ok(self.send_and_record(&job, slot, claim_asked, None).await)
    }

    /// Flow control turned a claimed delivery away (its endpoint is full,
    /// or out of rate-limit tokens): it is parked to wait (acked: a worker
    /// admits it, [`crate::admission`]).
    async fn turned_away(&self, job: &DeliveryJob, busy: Busy) -> Result<Disposition, ProcessError> {
        self.saturation.remember(job.endpoint_id, busy);
        let key = (job.tenant_id, job.delivery_id);
        if self.deferrals.call(Deferral { key, until: DeferUntil::SlotFree }).await? == Settled::Recorded {
            report::parked(ParkedFor::from(busy).reason());
            self.waiters.note(job.tenant_id, job.endpoint_id);
        }
        Ok(Disposition::Ack)
    }

    /// The gate this worker's flow control goes through.
    pub(crate) fn gate(&self) -> &Gate {
        &self.gate
    }

    /// Leases the oldest parked delivery of `endpoint`, if it may admit one
    /// now ([`waiting::admit_oldest`]).
    pub(crate) async fn admit_oldest(
        &self,
        tenant: TenantId,
        endpoint: EndpointId,
    ) -> Result<Option<DeliveryJob>, DbError> {
        let client = self.pool.get().await?;
        waiting::admit_oldest(&client, tenant, endpoint, &self.config.worker_id, self.config.lease).await
    }

    /// Parks a delivery leased from the parked ones again: flow control
    /// turned it away after all. If that fails, its lease expires and
    /// recovery sends it.
    pub(crate) async fn park_again(&self, job: &DeliveryJob) {
        let key = (job.tenant_id, job.delivery_id);
        if let Err(error) = self.deferrals.call(Deferral { key, until: DeferUntil::SlotFree }).await {
            tracing::warn!(delivery_id = %job.delivery_id, error = %error_chain(&error),
                "admitted delivery not parked again; its lease expires and recovery sends it");
        }
    }

    /// Sends a leased delivery in the `slot` flow control gave it, records
    /// the attempt and frees the slot; what to do with its message.
    ///
    /// With `retry_ahead` (a delivery no message brought: admitted from the
    /// parked ones), a retry's message is published there before the attempt
    /// is recorded, marked to recheck a row it finds still leased: a worker
    /// that dies between the two then leaves a message behind, as the message
    /// path's unacknowledged one is. (Published after the record, a death in
    /// between left the row `scheduled` with no message, for recovery to find
    /// a grace later.) [`Disposition::Ack`] then, if the record scheduled
    /// the retry; if the publish failed, the retry's [`Disposition::Delay`]
    /// as usual.
    pub(crate) async fn send_and_record(
        &self,
        job: &DeliveryJob,
        slot: Option<Slot>,
        claim_asked: Instant,
        retry_ahead: Option<&DelayPublisher>,
    ) -> Disposition {
        relayops_shared::hop!("worker.admitted", event_id = %job.event_id);
        let started_at = Utc::now();
        let exchange = self.send_holding_lease(job, claim_asked).await;
        relayops_shared::hop!("worker.answered", event_id = %job.event_id);
        self.gate.release(slot).await;
        self.saturation.slot_freed(job.endpoint_id);
        self.waiters.slot_freed(job.endpoint_id);
        let verdict = classify(&exchange.result);
        let policy = RetryPolicy::for_endpoint(job.max_attempts, job.retry_schedule_secs.as_deref());
        let (outcome, wait) = decide(&verdict, &policy, job.attempt_number as u32);
        report::attempt(&AttemptReport { job, exchange: &exchange, outcome });
        // Taken before a message ahead is published: it comes back no earlier.
        let due = wait.and_then(|wait| chrono::Duration::from_std(wait).ok()).map(|wait| Utc::now() + wait);
        let sent_ahead = match (retry_ahead, wait) {
            (Some(delays), Some(wait)) => publish_retry_ahead(delays, job, wait).await,
            _ => false,
        };
        // The receiver has been asked: from here on, the attempt must be
        // recorded. Through a database outage (unreachable, not a failing
        // statement) the record is retried with the same hold as a claim (the lease still names this worker, and settling
        // only checks the owner); only a hold that runs out gives the message
        // back, and the next claim decides after the lease expired.
        let mut backoff = Backoff::default();
        loop {
            match self.record(job, &exchange, &verdict, outcome, (wait, due), started_at).await {
                Ok(disposition @ Disposition::Delay { .. }) if retry_ahead.is_some() => {
                    relayops_shared::failpoint::crash_if_armed("worker.after_admitted_retry_recorded");
                    return if sent_ahead { Disposition::Ack } else { disposition };
                }
                Ok(disposition) => return disposition,
                Err(error) => {
                    // A statement that failed on a reachable database would fail
                    // again: requeue at once (an uncertain side effect; the next
                    // attempt carries the same delivery id).
                    let pause = if error.is_unavailable() { backoff.next_pause() } else { None };
                    let Some(pause) = pause else {
                        tracing::error!(tenant_id = %job.tenant_id, delivery_id = %job.delivery_id,
                            attempt = job.attempt_number, error = %error_chain(&error),
                            "attempt not recorded; message requeued");
                        return Disposition::Requeue;
                    };
                    tracing::warn!(tenant_id = %job.tenant_id, delivery_id = %job.delivery_id,
                        attempt = job.attempt_number, failures = backoff.failures(), error = %error_chain(&error),
                        "recording the attempt failed; trying again");
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    /// Settles a claimed delivery whose endpoint was disabled after fan-out as
    /// `failed` without an attempt; a lane's head moves its lane on in the
    /// same transaction (an unordered one is one statement, as always).
    async fn fail_for_disabled_endpoint(&self, job: &DeliveryJob) -> Result<Settled, ProcessError> {
        let (worker, reason) = (&self.config.worker_id, "endpoint disabled");
        let mut client = self.pool.get().await.map_err(DbError::from)?;
        let Some(lane) = lane::of(job) else {
            return Ok(deliveries::settle_without_attempt(&client, job, worker, DeliveryStatus::Failed, reason).await?);
        };
        let tx = client.transaction().await.map_err(DbError::from)?;
        lane::lock(&tx, lane, job).await?;
        let settled = deliveries::settle_without_attempt(&tx, job, worker, DeliveryStatus::Failed, reason).await?;
        let released = settled == Settled::Recorded && lane::move_on(&tx, lane, job).await?;
        tx.commit().await.map_err(DbError::from)?;
        if released {
            self.wakeup.wake();
        }
        Ok(settled)
    }

    /// Sends, extending the delivery's lease every third of its length while
    /// the request is still open, so a slow send (or one that started late,
    /// under load) does not lose its lease to recovery and get sent twice.
    /// Nothing happens on the fast path: the first extension is a third of a
    /// lease away. A lane's head is never sent past its lease
    /// ([`lane::deadline`]): the request is dropped instead. An extension runs
    /// beside the send, not in its way: a database that stopped answering
    /// (a partition) must not hold off the lease's end, nor the answer.
    async fn send_holding_lease(&self, job: &DeliveryJob, claim_asked: Instant) -> Exchange {
        let every = self.config.lease / 3;
        let mut deadline = lane::deadline(job, claim_asked, self.config.lease);
        let send = self.sender.send(job);
        tokio::pin!(send);
        let extension = Fuse::terminated();
        tokio::pin!(extension);
        let mut next_extension = Instant::now() + every;
        loop {
            let lease_ends = async {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                exchange = &mut send => return exchange,
                () = lease_ends => return abandoned(job, claim_asked),
                () = tokio::time::sleep_until(next_extension), if extension.is_terminated() => {
                    extension.set(async {
                        let asked = Instant::now();
                        (asked, self.extend_lease(job).await)
                    }.fuse());
                }
                (asked, extended) = &mut extension => {
                    if extended && deadline.is_some() {
                        deadline = Some(lane::extended(asked, self.config.lease));
                    }
                    next_extension = asked + every;
                }
            }
        }
    }

    /// `true` when the lease was extended.
    async fn extend_lease(&self, job: &DeliveryJob) -> bool {
        let extended = match self.pool.get().await {
            Ok(mut client) => deliveries::extend_lease(&mut client, job, &self.config.worker_id, self.config.lease)
                .await
                .map_err(|error| error_chain(&error)),
            Err(error) => Err(error_chain(&error)),
        };
        match extended {
            Ok(true) => tracing::debug!(delivery_id = %job.delivery_id, "lease extended during a long send"),
            Ok(false) => tracing::warn!(delivery_id = %job.delivery_id, "lease already lost during the send"),
            Err(ref error) => tracing::warn!(delivery_id = %job.delivery_id, %error, "lease not extended"),
        }
        extended == Ok(true)
    }

    /// The rare records, each in a transaction of its own: a death (with its
    /// dead letter and `delivery.dead`), a 410 (with the endpoint's
    /// disabling), and the end of a lane's head (with the lane moving on).
    async fn record_in_transaction(
        &self,
        job: &DeliveryJob,
        record: &AttemptRecord,
        exchange: &Exchange,
        disables_endpoint: bool,
    ) -> Result<Settled, ProcessError> {
        let outcome = record.outcome;
        let lane = lane::of(job).filter(|_| outcome != AttemptOutcome::Retry);
        let mut client = self.pool.get().await.map_err(DbError::from)?;
        let tx = client.transaction().await.map_err(DbError::from)?;
        if let Some(lane) = lane {
            lane::lock(&tx, lane, job).await?;
        }
        let settled = deliveries::record_attempt(&tx, job, &self.config.worker_id, record).await?;
        let mut emitted = false;
        if settled == Settled::Recorded {
            match lane {
                Some(lane) if outcome == AttemptOutcome::Dead => emitted |= lane::after_death(&tx, lane, job).await?,
                Some(lane) => emitted |= lane::move_on(&tx, lane, job).await?,
                None => {}
            }
            if outcome == AttemptOutcome::Dead {
                let dead = DeadDelivery {
                    delivery_id: job.delivery_id,
                    event_id: job.event_id,
                    event_type: &job.event_type,
                    attempts: job.attempt_number,
                    last_http_status: record.http_status,
                    last_error: record.error.as_deref(),
                };
                let reason = exchange.error.clone().unwrap_or_else(|| "retries exhausted".to_owned());
                emitted |= operational::emit_death(&tx, job.tenant_id, &subject(job), &dead, reason).await?;
            }
            if disables_endpoint {
                let reason = "receiver answered 410 Gone";
                if let Some(disabled) = endpoints::disable_endpoint(&tx, job.tenant_id, job.endpoint_id, reason).await?
                {
                    let (subject, since) = (&disabled.subject, disabled.failing_since);
                    let by = DisabledBy::ReceiverGone;
                    emitted |= operational::emit_disabled(&tx, job.tenant_id, subject, by, reason, since).await?;
                }
            }
            tx.commit().await.map_err(DbError::from)?;
            if emitted {
                self.wakeup.wake();
            }
        }
        Ok(settled)
    }

    /// The attempt and the delivery's next state (one statement); when the
    /// delivery dies or the endpoint answered 410, the dead letter and the
    /// endpoint's disabling commit in the same transaction.
    async fn record(
        &self,
        job: &DeliveryJob,
        exchange: &Exchange,
        verdict: &Verdict,
        outcome: AttemptOutcome,
        (wait, due): (Option<Duration>, Option<chrono::DateTime<Utc>>),
        started_at: chrono::DateTime<Utc>,
    ) -> Result<Disposition, ProcessError> {
        let record = AttemptRecord {
            outcome,
            http_status: http_status(&exchange.result),
            error: exchange.error.clone(),
            request_headers: exchange.request_headers.clone(),
            response_body: exchange.response_body.clone(),
            latency_ms: exchange.latency.as_millis().min(i32::MAX as u128) as i32,
            started_at,
            next_attempt_at: due,
        };
        let disables_endpoint = *verdict == (Verdict::Permanent { disable_endpoint: true });
        // A lane's head that ends moves its lane on in the same transaction.
        let lane = lane::of(job).filter(|_| outcome != AttemptOutcome::Retry);
        let settled = if outcome == AttemptOutcome::Dead || disables_endpoint || lane.is_some() {
            self.record_in_transaction(job, &record, exchange, disables_endpoint).await?
        } else {
            let settlement = Settlement {
                tenant_id: job.tenant_id,
                delivery_id: job.delivery_id,
                attempt_number: job.attempt_number,
                attempt: record,
            };
            self.records.call(settlement).await?
        };
        if settled == Settled::LeaseLost {
            tracing::warn!(tenant_id = %job.tenant_id, delivery_id = %job.delivery_id, event_id = %job.event_id,
                endpoint_id = %job.endpoint_id, attempt = job.attempt_number, outcome = outcome.as_str(),
                "lease lost before recording; the message goes back for the claim to decide");
            // Usually another worker (or recovery) has the delivery and the
            // requeued message is dropped by the next claim. But a claim is
            // committed without waiting for the WAL flush: after a database
            // crash it may be gone, the row pending again with no other
            // message — acking here would strand it.
            return Ok(Disposition::Requeue);
        }
        let delivered = outcome == AttemptOutcome::Delivered;
        let window = self.config.endpoint_disable_after;
        health::after_attempt(&self.health, &self.pool, &*self.wakeup, job, delivered, window).await;
        let recent = &self.circuit_failures;
        circuit::after_attempt(&self.config.circuit, recent, &self.pool, job, &exchange.result).await;
        Ok(match wait {
            Some(wait) => Disposition::Delay { wait },
            None => Disposition::Ack,
        })
    }
}

/// The `delivery.v1` message of a leased delivery that no message brought
/// (admitted from the parked ones): what it is sent round as.
pub(crate) fn message_of(job: &DeliveryJob) -> Vec<u8> {
    let task = DeliveryTask {
        tenant_id: job.tenant_id,
        delivery_id: job.delivery_id,
        event_id: job.event_id,
        endpoint_id: job.endpoint_id,
    };
    serde_json::to_vec(&QueueMessage::DeliveryV1(task)).unwrap_or_default()
}

/// Publishes an admitted delivery's retry, due after `wait`, before its
/// attempt is recorded ([`Processor::send_and_record`]); whether it is out.
async fn publish_retry_ahead(delays: &DelayPublisher, job: &DeliveryJob, wait: Duration) -> bool {
    let body = message_of(job);
    match delays.publish_rechecking(&body, wait, Some(FIRST_RECHECK), ReturnTo::tenants_own(job.tenant_id)).await {
        Ok(()) => true,
        Err(error) => {
            tracing::debug!(delivery_id = %job.delivery_id, error = %error_chain(&error),
                "retry not published ahead of its record; published after it");
            false
        }
    }
}

/// What the saturation memory says about a message's endpoint.
enum Saturated {
    /// Claim as usual.
    No,
    /// It cannot take the delivery now: park it.
    Busy(ParkedFor),
}

/// Why a delivery waits parked for its endpoint.
#[derive(Debug, Clone, Copy)]
enum ParkedFor {
    /// A free slot (`max_in_flight` requests in flight).
    Slot,
    /// A rate-limit token.
    RateLimit,
    /// Its turn: the endpoint's parked deliveries are being admitted.
    Turn,
    /// A worker slot: its tenant holds its share of them.
    Share,
}

impl From<Busy> for ParkedFor {
    fn from(busy: Busy) -> Self {
        match busy {
            Busy::Full { .. } => Self::Slot,
            Busy::Rate { .. } => Self::RateLimit,
        }
    }
}

impl ParkedFor {
    /// The `reason` label of `relayops_deliveries_parked_total`.
    fn reason(self) -> &'static str {
        match self {
            Self::Slot => "endpoint_full",
            Self::RateLimit => "rate_limited",
            Self::Turn => "behind_parked",
            Self::Share => "tenant_share",
        }
    }
}

/// The attempt's outcome and, for a retry, the wait before the next one.
fn decide(verdict: &Verdict, policy: &RetryPolicy, attempt_number: u32) -> (AttemptOutcome, Option<Duration>) {
    match verdict {
        Verdict::Delivered => (AttemptOutcome::Delivered, None),
        Verdict::Permanent { .. } => (AttemptOutcome::Failed, None),
        Verdict::Retryable { not_before } => match policy.next_wait(attempt_number, *not_before) {
            Some(wait) => (AttemptOutcome::Retry, Some(wait)),
            None => (AttemptOutcome::Dead, None),
        },
    }
}

/// What a lane's head send dropped at its lease's end records: no answer
/// (a retry, if the lease is still this worker's when it records).
fn abandoned(job: &DeliveryJob, claim_asked: Instant) -> Exchange {
    tracing::warn!(tenant_id = %job.tenant_id, delivery_id = %job.delivery_id,
        "ordered send dropped at the end of its lease, so the lane's next delivery cannot overtake it");
    Exchange {
        result: SendResult::NoAnswer { timed_out: true },
        request_headers: serde_json::Value::Object(serde_json::Map::new()),
        response_body: None,
        error: Some("request dropped at the end of the worker's lease (ordering lane)".to_owned()),
        latency: claim_asked.elapsed(),
    }
}

/// The endpoint a job's operational events are about.
fn subject(job: &DeliveryJob) -> Subject {
    Subject { id: job.endpoint_id, kind: job.endpoint_kind, url: job.url.clone() }
}

fn http_status(result: &SendResult) -> Option<i32> {
    result.status().map(i32::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhausted_retries_become_dead_and_permanent_failures_never_retry() {
        let policy = RetryPolicy::for_endpoint(Some(2), None);
        let retry = Verdict::Retryable { not_before: None };
        assert_eq!(decide(&retry, &policy, 1).0, AttemptOutcome::Retry);
        assert_eq!(decide(&retry, &policy, 2), (AttemptOutcome::Dead, None));
        let permanent = Verdict::Permanent { disable_endpoint: false };
        assert_eq!(decide(&permanent, &policy, 1), (AttemptOutcome::Failed, None));
    }
}
