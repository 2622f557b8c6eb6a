//! The outbox publisher: claims outbox rows in short transactions
//! (`FOR UPDATE SKIP LOCKED`, so any number run in parallel), turns the
//! event rows of a batch into messages of their pending deliveries, packed
//! per tenant up to 32 a message (`repo::outbox_fanout`), publishes them as
//! persistent messages with publisher confirms — all of a batch sent before
//! any confirm is awaited — and deletes a row only after
//! the confirms of all the messages carrying its deliveries. Rows
//! the broker refused are released for another try; rows of a publisher that
//! died are reclaimed when their claim expires. Beside the long-lived loop,
//! a task of its own publishes the rows ingest in the same process wrote
//! claimed by it and handed over (`relayops_shared::handoff`), with no claim
//! of its own, on a channel of its own ([`session::Lane`]): a lone event's
//! row never waits for a drain's batch in flight.
//!
//! Invariant: the publisher knows nothing of HTTP, endpoints or tenants'
//! payloads; it moves opaque envelopes from Postgres to RabbitMQ.
pub mod figures;
mod handed;
pub mod lambda;
mod session;
mod sightings;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use relayops_shared::config::{BrokerConfig, PublisherConfig};
use relayops_shared::db::DbError;
use relayops_shared::db::Pool;
use relayops_shared::handoff::{Handoff, HandoffReceiver};
use relayops_shared::history;
use relayops_shared::repo::outbox::OutboxMessage;
use relayops_shared::repo::{circuits, deferred_deliveries, outbox, outbox_fanout, parked_expiry, recovery};
use relayops_shared::task::{stop_requested, AbortOnDrop};
use relayops_shared::telemetry::error_chain;
use serde::Serialize;
use tokio::sync::{watch, Mutex, Notify};

use handed::HandedRows;
pub use session::PublishError;
use session::{Lane, Session};
use sightings::EmptySightings;

/// What one batch or one drain did.
#[derive(Debug, Default, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct PublishReport {
    pub batches: u64,
    /// Deliveries confirmed on the broker (an event's several travel in one
    /// `deliveries.v1` message; a message of another kind counts one).
    pub published: u64,
    /// Outbox rows deleted after all their messages were confirmed.
    pub deleted: u64,
    /// Refused by the broker (nack, unroutable) and released for another try.
    pub released: u64,
    /// Expired claims of other publishers made claimable again.
    pub reclaimed: u64,
    /// Stranded deliveries (expired worker lease, overdue retry, pending
    /// whose message was lost) re-enqueued.
    pub requeued: u64,
    /// Parked deliveries released: probes of half-open endpoint circuits, and
    /// the deliveries of circuits that closed (`repo::circuits`).
    pub unparked: u64,
    /// Parked deliveries whose retry policy's time ran out, made `dead`
    /// (`repo::parked_expiry`).
    pub gave_up: u64,
    /// Deliveries written for events whose ingest left them to a publisher
    /// (`repo::deferred_deliveries`).
    pub deliveries_written: u64,
}

impl PublishReport {
    fn add(&mut self, other: PublishReport) {
        self.batches += other.batches;
        self.published += other.published;
        self.deleted += other.deleted;
        self.released += other.released;
        self.reclaimed += other.reclaimed;
        self.requeued += other.requeued;
        self.unparked += other.unparked;
        self.gave_up += other.gave_up;
        self.deliveries_written += other.deliveries_written;
    }
}

pub struct Publisher {
    pool: Pool,
    broker: BrokerConfig,
    config: PublisherConfig,
    /// Claim owner; unique per process so a claim can be told apart.
    owner: String,
    /// Shared by the drain and the handed rows' task, each publishing on its
    /// own lane; the lock is held only to open it again.
    session: Mutex<Option<Arc<Session>>>,
    /// The ready queues, and when the sessions' samples last saw each empty
    /// (for the recovery pass: `repo::recovery`).
    ready_queues: recovery::ReadyQueues,
    sightings: Arc<EmptySightings>,
    /// When the recovery pass last ran: it runs at most once per
    /// `RECOVERY_INTERVAL`, not on every wake-up (which, under load, is every
    /// ingest).
    last_recovery: std::sync::Mutex<Option<Instant>>,
    /// When history maintenance (partitions, retention) last ran inline.
    last_history: std::sync::Mutex<Option<Instant>>,
    /// Set by the long-lived loop, which runs the recovery pass and history
    /// maintenance from tasks of their own: then a drain leaves both out, and
    /// a wake-up publishes at once, never behind a recovery pass (a few
    /// statements, once a second: the p99 of a lone event) or a `DETACH …
    /// CONCURRENTLY`. The Lambda tick keeps them inline.
    housekeeping_in_own_tasks: AtomicBool,
    /// Whether the last attempt to reach the broker worked (for readiness).
    broker_connected: tokio::sync::watch::Sender<bool>,
    /// Where the next claim's walk over the tenants starts
    /// (`outbox::claim_batch`).
    turn: std::sync::Mutex<outbox::TenantTurn>,
    /// The publisher's end of the hand-off from ingest in this process, once
    /// [`handoff`](Self::handoff) made one; the long-lived loop takes it.
    handed: std::sync::Mutex<Option<HandoffReceiver>>,
}

/// Rows the hand-off held longer than half their claim, left to the claim's
/// expiry (recovery makes them pending, and a publisher claims them).
fn report_stale(rows: u64) {
    if rows > 0 {
        tracing::warn!(rows, "handed rows waited past half their claim; left to the claim's expiry");
    }
}

/// Test hook (`RELAYOPS_FAILPOINTS`): the handed rows' task leaves the rows
/// ingest hands over in the hand-off until the process stops, so a test can
/// stop a process with rows in it.
const HOLD_HANDED: &str = "publisher.hold_handed";

const RECOVERY_INTERVAL: Duration = Duration::from_secs(1);

/// The most parked deliveries one recovery pass gives up (each a dead letter
/// and perhaps a `delivery.dead`, in the pass's transaction).
const GIVE_UP_PER_PASS: i64 = 500;

/// The most deliveries parked for a slot whose retry policy's clock one
/// recovery pass starts, their endpoint's circuit having opened.
const START_CLOCKS_PER_PASS: i64 = 5_000;

/// How long a half-open circuit's probe may go unanswered before another
/// parked delivery is released as the probe: longer than a worker's lease
/// (the probe's own message, if lost, comes back through recovery).
const PROBE_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a drain writes deferred deliveries before its first batch while
/// the broker is away (otherwise one statement beside each batch).
const DEFERRED_WHILE_BROKER_AWAY: Duration = Duration::from_millis(500);

/// When a drain stops (besides a deadline, a refused message, or a claim that
/// came back empty).
#[derive(Clone, Copy)]
enum DrainStop {
    /// Only on an empty claim: the Lambda tick, which nothing wakes for rows
    /// committed meanwhile, looks again.
    WhenEmpty,
    /// Also after a claim that found fewer rows than it could take: the
    /// long-lived loop is woken (`Notify`, whose permit outlives a wake-up
    /// that came mid-drain) for every row committed from then on, so an
    /// empty claim after it (one per lone event at low rates) is waste.
    WhenShort,
}

/// A batch sends at most this many deliveries per row it may claim
/// (`RELAYOPS_PUBLISHER_BATCH_SIZE`): events with a large fan-out expand into
/// many, and the batch must be confirmed within the confirm timeout.
const DELIVERIES_PER_ROW_CLAIMED: usize = 10;

impl Publisher {
    pub fn new(pool: Pool, broker: BrokerConfig, config: PublisherConfig) -> Self {
        let owner = format!("publisher-{}", uuid_suffix());
        let ready_queues = recovery::ReadyQueues::of(&relayops_shared::broker::Topology::new(&broker).ready_shards);
        Self {
            pool,
            sightings: Arc::new(EmptySightings::new(ready_queues.all().len())),
            ready_queues,
            broker,
            config,
            owner,
            session: Mutex::new(None),
            last_recovery: std::sync::Mutex::new(None),
            last_history: std::sync::Mutex::new(None),
            housekeeping_in_own_tasks: AtomicBool::new(false),
            broker_connected: tokio::sync::watch::channel(false).0,
            handed: std::sync::Mutex::new(None),
            turn: std::sync::Mutex::default(),
        }
    }

    /// A hand-off from ingest in this process to this publisher's long-lived
    /// loop ([`run`](Self::run)): ingest writes rows claimed by this
    /// publisher while it reaches the broker, and hands them over after the
    /// commit (`relayops_shared::handoff`). Make it before `run` starts.
    pub fn handoff(&self) -> Handoff {
        let (handoff, receiver) =
            Handoff::channel(self.owner.clone(), self.config.claim_ttl, self.broker_connected.subscribe());
        *self.handed.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(receiver);
        handoff
    }

    /// The name its claims carry (`claimed_by`).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Whether the publisher reaches the broker now (it tries again, with
    /// backoff, whenever its session broke).
    pub fn broker_connected(&self) -> tokio::sync::watch::Receiver<bool> {
        self.broker_connected.subscribe()
    }

    /// Opens the broker session now rather than in the first batch (the Lambda
    /// does it during init, so the first invocation's batches are timed alone;
    /// the long-lived loop to notice a broker outage while idle).
    pub async fn connect(&self) -> Result<(), PublishError> {
        self.open_session().await.map(|_| ())
    }

    /// Claims one batch, publishes it and settles it. Returns what it did.
    pub async fn publish_batch(&self) -> Result<PublishReport, PublishError> {
        Ok(self.publish_one_batch().await?.0)
    }

    /// [`publish_batch`](Self::publish_batch), and whether the outbox may
    /// hold more rows to claim now: the claim filled the batch, or rows were
    /// left over for the next one. (Rows committed after the claim wake the
    /// long-lived loop again.)
    async fn publish_one_batch(&self) -> Result<(PublishReport, bool), PublishError> {
        let mut client = self.pool.get().await.map_err(DbError::from)?;
        let started = Instant::now();
        // The session first: while the broker is away, rows stay unclaimed
        // rather than claimed by a publisher that cannot publish them.
        let session = self.open_session().await?;
        let mut turn = *self.turn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (owner, limit, ttl) = (&self.owner, self.config.batch_size, self.config.claim_ttl);
        let claimed = outbox::claim_batch(&mut client, owner, limit, ttl, &mut turn).await?;
        *self.turn.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = turn;
        if claimed.messages.is_empty() {
            return Ok((PublishReport::default(), false));
        }
        let (report, left_over) =
            self.publish_claimed(&mut client, &session, Lane::Drain, &claimed.messages, started).await?;
        Ok((report, claimed.more || left_over))
    }

    /// Publishes rows ingest in this process wrote claimed by this publisher
    /// and handed over (no claim: they are ours already), and whether some
    /// were left for the next batch (released: pending again). While the
    /// broker cannot be reached they are released at once, for whichever
    /// publisher gets there first, rather than left to their claim's expiry.
    async fn publish_handed(&self, messages: Vec<OutboxMessage>) -> Result<(PublishReport, bool), PublishError> {
        let started = Instant::now();
        let mut client = self.pool.get().await.map_err(DbError::from)?;
        let session = match self.open_session().await {
            Ok(session) => session,
            Err(error) => {
                drop(client);
                self.give_back(messages.iter().map(|message| message.id).collect()).await;
                return Err(error);
            }
        };
        self.publish_claimed(&mut client, &session, Lane::Handed, &messages, started).await
    }

    /// The broker session, opened again if it broke.
    async fn open_session(&self) -> Result<Arc<Session>, PublishError> {
        let mut guard = self.session.lock().await;
        if let Some(session) = guard.as_ref().filter(|session| session.is_usable()) {
            return Ok(Arc::clone(session));
        }
        *guard = None;
        let opened = Session::open(&self.broker, Arc::clone(&self.sightings)).await;
        self.broker_connected.send_replace(opened.is_ok());
        Ok(Arc::clone(guard.insert(Arc::new(opened?))))
    }

    /// Drops `broken` so that the next batch opens a new session (unless a
    /// new one replaced it already).
    async fn forget_session(&self, broken: &Arc<Session>) {
        let mut guard = self.session.lock().await;
        if guard.as_ref().is_some_and(|current| Arc::ptr_eq(current, broken)) {
            *guard = None;
        }
    }

    /// `lane`'s next batch goes out on a new channel (see
    /// [`Session::renew_channel`]); if none can be opened, on a new session.
    async fn renew_channel_after_refusals(&self, session: &Arc<Session>, lane: Lane) {
        if let Err(error) = session.renew_channel(lane).await {
            tracing::warn!(error = %relayops_shared::telemetry::error_chain(&error), "renewing the channel after refusals failed; reconnecting next time");
            self.forget_session(session).await;
        }
    }

    /// Publishes `messages` (rows this publisher holds claimed, with their
    /// pending deliveries) on `session`'s `lane`, and settles them;
    /// returns what it did and whether rows were left over (past the batch's
    /// message limit: released for the next batch).
    async fn publish_claimed(
        &self,
        client: &mut relayops_shared::db::Object,
        session: &Arc<Session>,
        lane: Lane,
        messages: &[OutboxMessage],
        started: Instant,
    ) -> Result<(PublishReport, bool), PublishError> {
        // Rows past the batch's delivery limit go back unpublished; the event
        // rows kept become the messages of their pending deliveries.
        let limit = (self.config.batch_size as usize).saturating_mul(DELIVERIES_PER_ROW_CLAIMED);
        let (kept, left_over) = messages.split_at(outbox_fanout::fit(messages, limit));
        let left_over: Vec<i64> = left_over.iter().map(|message| message.id).collect();
        outbox::release(&*client, &self.owner, &left_over, "left for the next batch").await?;
        let outgoing = outbox_fanout::expand(kept);
        let rows: Vec<i64> = kept.iter().map(|message| message.id).collect();
        // Dying here leaves the rows claimed, to be reclaimed and expanded again.
        relayops_shared::failpoint::crash_if_armed("publisher.after_claim");
        let traced = if relayops_shared::telemetry::hops_enabled() { kept } else { &[] };
        for message in traced {
            relayops_shared::hop!("publish.claimed", event_id = envelope_event(message), batch = messages.len());
        }
        let results = session.publish_confirmed(lane, &outgoing, self.config.confirm_timeout).await;
        if results.broken {
            // Leave the rest claimed (reclaimed after the TTL) and reconnect next time.
            self.forget_session(session).await;
            self.broker_connected.send_replace(false);
        } else if !results.refused.is_empty() {
            self.renew_channel_after_refusals(session, lane).await;
        }
        let settled = outbox_fanout::settle(&rows, &outgoing, &results.confirmed, &results.refused);
        for message in traced.iter().filter(|message| settled.confirmed.contains(&message.id)) {
            relayops_shared::hop!("publish.confirmed", event_id = envelope_event(message));
        }
        if !results.confirmed.is_empty() {
            // The broker has the messages; dying here leaves them claimed, to be published again.
            relayops_shared::failpoint::crash_if_armed("publisher.after_confirm");
        }
        let deleted = outbox::delete_published(client, &self.owner, &settled.confirmed).await?;
        let released = outbox::release(&*client, &self.owner, &settled.refused, "refused by broker").await?;
        let (published, deleted) = (settled.deliveries_of(&deleted), deleted.len() as u64);
        let report = PublishReport { batches: 1, published, deleted, released, ..Default::default() };
        figures::batch(&report, started.elapsed());
        Ok((report, !left_over.is_empty()))
    }

    /// Runs the recovery pass when due (at most once a second; not in the
    /// long-lived loop, which runs it in a task of its own), then publishes
    /// batches until a claim comes back empty or the next batch might not
    /// finish before `deadline` (the Lambda tick: nothing wakes it for what is
    /// committed meanwhile).
    pub async fn drain(&self, deadline: Option<Instant>) -> Result<PublishReport, PublishError> {
        self.drain_until(deadline, DrainStop::WhenEmpty).await
    }

    /// [`drain`](Self::drain) as `stop` says.
    async fn drain_until(&self, deadline: Option<Instant>, stop: DrainStop) -> Result<PublishReport, PublishError> {
        let inline_recovery = !self.housekeeping_in_own_tasks.load(Ordering::Relaxed);
        let mut report = if inline_recovery && take_if_due(&self.last_recovery, RECOVERY_INTERVAL) {
            self.recover().await?
        } else {
            PublishReport::default()
        };
        // Deferred deliveries are written beside each batch (below), so a
        // drain's first batch never waits for them. While RabbitMQ is away
        // they are written first, for a while (and appear in queries); the
        // batches then fail, and the loop tries again.
        let mut more_deferred = true;
        if !*self.broker_connected.borrow() {
            let (written, more) = self.write_deferred_deliveries(deadline, DEFERRED_WHILE_BROKER_AWAY).await;
            report.add(written);
            more_deferred = more;
        }
        let mut slowest_batch = Duration::ZERO;
        loop {
            if let Some(deadline) = deadline {
                // Never start a batch we cannot expect to finish.
                let needed = slowest_batch.max(Duration::from_millis(200)) * 2;
                if deadline.saturating_duration_since(Instant::now()) < needed {
                    break;
                }
            }
            let started = Instant::now();
            // More deferred deliveries written while this batch is published
            // (another connection): the next batch claims their rows.
            let writing = async {
                match more_deferred {
                    true => Some(self.write_deferred_deliveries(deadline, Duration::ZERO).await),
                    false => None,
                }
            };
            let (written, published) = tokio::join!(writing, self.publish_one_batch());
            let (batch, more_may_wait) = published?;
            slowest_batch = slowest_batch.max(started.elapsed());
            report.add(batch);
            let mut wrote_some = false;
            if let Some((written, more)) = written {
                wrote_some = written.deliveries_written > 0;
                report.add(written);
                more_deferred = more;
            }
            if batch.released > 0 {
                break;
            }
            if more_deferred || wrote_some {
                continue;
            }
            if batch.deleted == 0 {
                break;
            }
            if !more_may_wait && matches!(stop, DrainStop::WhenShort) {
                break;
            }
        }
        Ok(report)
    }

    /// Writes the deliveries of events whose ingest left them to a publisher
    /// (`repo::deferred_deliveries`): one statement, then more while each
    /// took all it could and `budget` (or the deadline) allows. Returns what
    /// it wrote and whether more may wait. A failure is logged and ends the
    /// writing, never the drain: publishing goes on (an unreachable database
    /// fails the batch anyway).
    async fn write_deferred_deliveries(&self, deadline: Option<Instant>, budget: Duration) -> (PublishReport, bool) {
        let mut report = PublishReport::default();
        let client = match self.pool.get().await {
            Ok(client) => client,
            Err(error) => return (report, deferred_write_failed(&DbError::from(error))),
        };
        let started = Instant::now();
        loop {
            let written = match deferred_deliveries::write(&client).await {
                Ok(written) => written,
                Err(error) => return (report, deferred_write_failed(&error)),
            };
            report.deliveries_written += written.deliveries;
            figures::deferred_written(written.deliveries);
            if written.events > 0 {
                // Dying here leaves the deliveries written and their rows pending, for any publisher.
                relayops_shared::failpoint::crash_if_armed("publisher.after_deferred_write");
            }
            let out_of_time = started.elapsed() >= budget || deadline.is_some_and(|at| Instant::now() >= at);
            if !written.took_all_it_could() || out_of_time {
                return (report, written.took_all_it_could());
            }
        }
    }

    /// History maintenance (`relayops_shared::history`): partitions created
    /// ahead, expired ones dropped, retention applied. A failure is logged
    /// and tried again at the next interval; it never stops publishing.
    async fn maintain_history(&self) {
        match history::maintain(&self.pool, &self.config.history).await {
            Ok(report) => {
                let partitions = &report.partitions;
                if !partitions.created.is_empty() || !partitions.dropped.is_empty() || !partitions.kept.is_empty() {
                    tracing::info!(
                        created = ?partitions.created,
                        dropped = ?partitions.dropped,
                        kept_unfinished = ?partitions.kept,
                        tenant_rows_deleted = report.tenant_rows_deleted,
                        keys_pruned = report.keys_pruned,
                        "history maintained"
                    );
                }
            }
            Err(error) => tracing::warn!(error = %error_chain(&error), "history maintenance failed"),
        }
    }

    /// The recovery pass: reclaims expired outbox claims, re-enqueues stranded
    /// deliveries (see `repo::recovery`).
    pub async fn recover(&self) -> Result<PublishReport, PublishError> {
        let mut client = self.pool.get().await.map_err(DbError::from)?;
        let reclaimed = outbox::reclaim_expired(&client).await?;
        let seen = self.sightings.take();
        let grace = self.config.recovery_grace;
        if let Err(error) = recovery::record_empty_sightings(&client, self.ready_queues.all(), &seen, grace).await {
            self.sightings.restore(&seen);
            return Err(error.into());
        }
        let tx = client.transaction().await.map_err(DbError::from)?;
        let stranded = recovery::requeue_stranded(&tx, grace, self.config.batch_size, &self.ready_queues).await?;
        tx.commit().await.map_err(DbError::from)?;
        parked_expiry::start_clocks(&client, START_CLOCKS_PER_PASS).await?;
        let tx = client.transaction().await.map_err(DbError::from)?;
        let gave_up = parked_expiry::give_up_due(&tx, GIVE_UP_PER_PASS).await?;
        tx.commit().await.map_err(DbError::from)?;
        let parked = circuits::release(&mut client, PROBE_TIMEOUT).await?;
        if parked != circuits::Released::default() || gave_up > 0 {
            tracing::info!(
                probes = parked.probes,
                released = parked.released,
                gave_up,
                "parked deliveries released or given up"
            );
        }
        let requeued = stranded.total();
        if requeued > 0 {
            tracing::info!(
                expired_or_overdue = stranded.expired_or_overdue,
                lost_pending = stranded.lost_pending,
                "stranded deliveries re-enqueued"
            );
        }
        drop(client);
        if !self.housekeeping_in_own_tasks.load(Ordering::Relaxed)
            && take_if_due(&self.last_history, self.config.history.maintenance_interval)
        {
            self.maintain_history().await;
        }
        let unparked = parked.probes + parked.released;
        let report = PublishReport { reclaimed, requeued, unparked, gave_up, ..Default::default() };
        figures::recovery(&report);
        Ok(report)
    }

    /// History maintenance every interval (at most once per recovery interval),
    /// the first at once: the long-lived loop's own task.
    async fn maintain_history_forever(self: Arc<Self>) {
        let every = self.config.history.maintenance_interval.max(RECOVERY_INTERVAL);
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            self.maintain_history().await;
        }
    }

    /// The recovery pass once a second, beside the long-lived loop: what it
    /// puts back in the outbox (reclaimed or re-enqueued rows) wakes the loop.
    /// A failure is logged and tried again at the next interval.
    async fn recover_forever(self: Arc<Self>, wakeup: Arc<Notify>) {
        let mut ticks = tokio::time::interval(RECOVERY_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match self.recover().await {
                Ok(report) if report.reclaimed + report.requeued + report.unparked + report.gave_up > 0 => {
                    tracing::debug!(?report, "recovery pass");
                    wakeup.notify_one();
                }
                Ok(_) => {}
                Err(error) => {
                    figures::tick_failed();
                    tracing::warn!(error = %error_chain(&error), "publisher recovery pass failed");
                }
            }
        }
    }

    /// The long-lived loop (local runner): drains the outbox whenever woken,
    /// and at least every idle interval, while a task of its own publishes
    /// the rows ingest in this process hands over ([`handoff`](Self::handoff))
    /// as they come, on a lane of its own; while idle it keeps its broker
    /// session open, so a broker outage shows in readiness and the session
    /// is back before the next batch. The recovery pass and history
    /// maintenance run beside it in tasks of their own (ended with the
    /// loop), so a wake-up never waits for them. Errors are logged and
    /// retried with a growing pause (200 ms doubling to 6.4 s).
    pub async fn run(self: Arc<Self>, wakeup: Arc<Notify>) {
        self.run_until(wakeup, relayops_shared::task::never_stopping()).await;
    }

    /// [`run`](Self::run) until `stopping` turns true (the process is
    /// stopping: Ctrl-C or SIGTERM). Then it leaves the outbox to the next
    /// publisher, publishes the rows ingest still hands over until ingest's
    /// end of the hand-off is gone (the api has answered its last request),
    /// and returns. Without that, those rows were left claimed by a process
    /// that no longer exists until their claims expired (30 s by default).
    pub async fn run_until(self: Arc<Self>, wakeup: Arc<Notify>, mut stopping: watch::Receiver<bool>) {
        self.housekeeping_in_own_tasks.store(true, Ordering::Relaxed);
        let _history = AbortOnDrop(tokio::spawn(Arc::clone(&self).maintain_history_forever()));
        let _recovery = AbortOnDrop(tokio::spawn(Arc::clone(&self).recover_forever(Arc::clone(&wakeup))));
        let receiver = self.handed.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
        let handed = HandedRows::new(receiver, self.config.claim_ttl);
        let mut handing = AbortOnDrop(tokio::spawn(Arc::clone(&self).publish_handed_forever(handed, stopping.clone())));
        let mut failures: u32 = 0;
        loop {
            let tick = match self.drain_until(None, DrainStop::WhenShort).await {
                Ok(report) => self.connect().await.map(|()| report),
                Err(error) => Err(error),
            };
            let wait = match tick {
                Ok(report) => {
                    failures = 0;
                    if report != PublishReport::default() {
                        tracing::debug!(?report, "outbox published");
                    }
                    None
                }
                Err(error) => {
                    let pause = failed(&mut failures, &error, "publisher tick failed");
                    Some(pause)
                }
            };
            let next = tokio::time::sleep(wait.unwrap_or(self.config.idle_interval));
            tokio::select! {
                _ = wakeup.notified(), if wait.is_none() => {}
                _ = next => {}
                _ = stop_requested(&mut stopping) => break,
            }
        }
        // The handed rows' task finishes on its own once ingest's end is gone.
        let _ = (&mut handing.0).await;
    }

    /// The handed rows' task: publishes what ingest hands over as it comes
    /// (a batch of what has come, one row of each tenant in turn), until the
    /// process stops; then [`finish_handed`](Self::finish_handed). A batch
    /// that fails is logged; the rows waiting then are given back (pending)
    /// for whichever publisher gets there first, and the task pauses as the
    /// loop does.
    async fn publish_handed_forever(self: Arc<Self>, mut handed: HandedRows, mut stopping: watch::Receiver<bool>) {
        let limit = self.config.batch_size.max(1) as usize;
        let mut failures: u32 = 0;
        loop {
            if !handed.is_open() {
                // No hand-off (or ingest's end is gone): nothing comes.
                stop_requested(&mut stopping).await;
                break;
            }
            if handed_held() {
                tokio::select! {
                    _ = tokio::time::sleep(self.config.idle_interval) => continue,
                    _ = stop_requested(&mut stopping) => break,
                }
            }
            let rows = tokio::select! {
                rows = handed.next(limit) => rows,
                _ = stop_requested(&mut stopping) => break,
            };
            let Some(rows) = rows else { continue };
            report_stale(handed.take_stale());
            match self.publish_handed(rows).await {
                Ok(_) => failures = 0,
                Err(error) => {
                    let pause = failed(&mut failures, &error, "publishing handed rows failed");
                    self.give_back_handed(&mut handed).await;
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = stop_requested(&mut stopping) => break,
                    }
                }
            }
        }
        self.finish_handed(handed).await;
    }

    /// After a failed batch: rows handed over meanwhile (ingest wrote them
    /// claimed by this publisher before it knew the broker was gone) are made
    /// pending again at once, for whichever publisher gets there first,
    /// instead of waiting for their claims to expire. Best effort: rows it
    /// cannot release (the database is away too) wait for the expiry.
    async fn give_back_handed(&self, handed: &mut HandedRows) {
        self.give_back(handed.take_all().iter().map(|message| message.id).collect()).await;
    }

    /// Makes handed rows this publisher cannot publish now pending again (see
    /// [`give_back_handed`](Self::give_back_handed)); best effort.
    async fn give_back(&self, ids: Vec<i64>) {
        if ids.is_empty() {
            return;
        }
        let released = match self.pool.get().await {
            Ok(client) => outbox::release(&client, &self.owner, &ids, "publisher could not publish").await,
            Err(error) => Err(DbError::from(error)),
        };
        if let Err(error) = released {
            tracing::warn!(rows = ids.len(), error = %error_chain(&error), "handed rows left to their claims' expiry");
        }
    }

    /// After the stop: publishes what ingest hands over until its end of the
    /// hand-off is gone — every request the api took has been answered, each
    /// handing its row over as it goes — then returns. A batch that cannot be
    /// published goes as before the stop: given back (pending) when the broker
    /// cannot be reached ([`publish_handed`](Self::publish_handed)), otherwise
    /// left to its claims. The process waits only so long for this
    /// (`task::STOP_GRACE`); rows still here then wait for their claims to
    /// expire, as after a crash.
    async fn finish_handed(&self, mut handed: HandedRows) {
        let limit = self.config.batch_size.max(1) as usize;
        while let Some(rows) = handed.next(limit).await {
            report_stale(handed.take_stale());
            if let Err(error) = self.publish_handed(rows).await {
                tracing::warn!(error = %error_chain(&error), "publishing handed rows while stopping failed");
            }
        }
    }
}

/// Counts and logs a failure of the loop or the handed rows' task; the
/// pause before the next try (200 ms doubling to 6.4 s with `failures`).
fn failed(failures: &mut u32, error: &PublishError, what: &'static str) -> Duration {
    *failures = failures.saturating_add(1);
    figures::tick_failed();
    let pause = Duration::from_millis(200 * 2u64.pow((*failures).min(5)));
    tracing::warn!(error = %error_chain(error), pause_ms = pause.as_millis() as u64, "{what}");
    pause
}

/// The test hook [`HOLD_HANDED`] is armed: handed rows stay where they are.
fn handed_held() -> bool {
    relayops_shared::failpoint::is_armed(HOLD_HANDED)
}

/// Logs a failed write of deferred deliveries (counted as a failed tick);
/// nothing more to write this time.
fn deferred_write_failed(error: &DbError) -> bool {
    figures::tick_failed();
    tracing::warn!(error = %error_chain(error), "writing deferred deliveries failed");
    false
}

/// The event a message is about, for the hop trace.
fn envelope_event(message: &outbox::OutboxMessage) -> &str {
    message.envelope.get("event_id").and_then(serde_json::Value::as_str).unwrap_or_default()
}

/// Whether `every` has passed since the time in `slot` (or it holds none); if
/// so, `slot` takes the time now.
fn take_if_due(slot: &std::sync::Mutex<Option<Instant>>, every: Duration) -> bool {
    let mut last = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let due = last.is_none_or(|at| at.elapsed() >= every);
    if due {
        *last = Some(Instant::now());
    }
    due
}

fn uuid_suffix() -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!("{}-{nanos:08x}", std::process::id())
}
