//! One message from the ready queue settled: a `delivery.v1` processed and
//! acked, delayed, requeued or rejected; a bundle (`deliveries.v1`, one
//! event's deliveries, or `deliveries.v2`, several events' of one tenant) split into
//! its deliveries, each processed on a task of its own as if it had come
//! alone, each that needs another try sent round as a `delivery.v1` of its
//! own, and the bundle acked once all are settled or sent round (requeued
//! whole if one that nothing else would redo could not be sent round). The
//! worker's fair slots ([`FairSlots`]) keep the deliveries under way within
//! its concurrency, shared between tenants and a tenant's endpoints:
//! prefetch counts messages (per ready shard), and a bundle carries several.
//! A slow endpoint's delivery whose tenant holds its share of the slots is
//! parked ([`Grant::Park`]).
use std::sync::Arc;
use std::time::Duration;

use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicNackOptions, BasicRejectOptions};
use relayops_shared::broker::{DeliveryTask, QueueMessage};
use relayops_shared::task::stop_requested;
use relayops_shared::telemetry::error_chain;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::delay::{next_recheck, recheck_of, DelayPublisher, ReturnTo};
use crate::hold::{delivery_count, near_delivery_limit, Backoff};
use crate::process::{Disposition, Processor};
use crate::report;
use crate::slots::{FairSlots, Grant};

/// Pause before requeueing after a failure on our side, so a database outage
/// does not become a hot redelivery loop.
const REQUEUE_PAUSE: Duration = Duration::from_millis(500);

/// What a message from the ready queue asks for.
enum Message {
    One(DeliveryTask),
    /// A bundle's deliveries, each as it would have come alone.
    Bundle(Vec<DeliveryTask>),
    Unusable,
}

fn read(body: &[u8]) -> Message {
    match serde_json::from_slice::<QueueMessage>(body) {
        Ok(QueueMessage::DeliveryV1(task)) => Message::One(task),
        Ok(bundle @ (QueueMessage::DeliveriesV1(_) | QueueMessage::DeliveriesV2(_))) => Message::Bundle(bundle.tasks()),
        Ok(other) => {
            tracing::error!(message = ?other.destination(), "message for another queue rejected");
            Message::Unusable
        }
        Err(error) => {
            tracing::error!(error = %error, "unreadable queue message rejected");
            Message::Unusable
        }
    }
}

/// How a delivery goes round again as a message of its own (after `wait`),
/// from its disposition: the one table for a `delivery.v1`, a bundle's
/// deliveries and a delivery admitted from the parked ones alike.
pub(crate) struct RoundAgain {
    pub(crate) wait: Duration,
    /// Its row does not say it is due (it may be `pending` or leased): the
    /// message that brought it must not be acknowledged unless this one is out.
    lost_unless_published: bool,
    /// The recheck wait it carries ([`crate::delay::RECHECK_HEADER`]).
    recheck: Option<Duration>,
}

impl RoundAgain {
    pub(crate) fn after(disposition: Disposition) -> Option<Self> {
        let again = |wait, lost_unless_published| Some(Self { wait, lost_unless_published, recheck: None });
        match disposition {
            Disposition::Ack | Disposition::Reject => None,
            // The row is scheduled in Postgres: recovery re-enqueues it if this is lost.
            Disposition::Delay { wait } => again(wait, false),
            // The row is leased: if its worker dies, recovery finds the
            // expired lease.
            Disposition::Recheck { wait } => {
                Some(Self { wait, lost_unless_published: false, recheck: Some(next_recheck(wait)) })
            }
            // Its row may be `pending` or leased.
            Disposition::Requeue | Disposition::Hold => again(REQUEUE_PAUSE, true),
        }
    }
}

/// Settles the messages of one subscription: what each needs, the broker
/// side of it, and the worker's concurrency across them.
#[derive(Clone)]
pub(crate) struct Settler {
    processor: Processor,
    delays: Arc<DelayPublisher>,
    /// Also tells held messages whether they still belong to the broker.
    channel: lapin::Channel,
    /// The worker's slots, shared by every shard's settler.
    slots: Arc<FairSlots>,
    /// Turns true when the process is told to stop: deliveries not started
    /// by then are given back untouched.
    stopping: watch::Receiver<bool>,
}

impl Settler {
    pub(crate) fn new(
        processor: Processor,
        delays: Arc<DelayPublisher>,
        channel: lapin::Channel,
        slots: Arc<FairSlots>,
        stopping: watch::Receiver<bool>,
    ) -> Self {
        Self { processor, delays, channel, slots, stopping }
    }

    /// Processes a delivery until it has a disposition other than [`Disposition::Hold`]:
    /// through a database outage its message is kept (see [`crate::hold`]) while
    /// its channel lives; a channel that closed has given it back already. Holds
    /// one of the worker's `slots` (its concurrency, shared fairly between
    /// tenants) meanwhile; one not
    /// started when the process is told to stop (a bundle's later deliveries)
    /// is not started: [`Disposition::Requeue`], its row untouched.
    async fn process_holding(&self, task: DeliveryTask, recheck: Option<Duration>) -> Disposition {
        relayops_shared::hop!("worker.consumed", event_id = %task.event_id, tenant_id = %task.tenant_id);
        let mut stopping = self.stopping.clone();
        let (tenant, endpoint) = (task.tenant_id, task.endpoint_id);
        // Behind its endpoint's parked deliveries being admitted here: parked
        // without a slot, which it would take only to be parked (and whose
        // short hold would count the endpoint fast).
        if self.processor.waiters().admitting(endpoint) && self.processor.park_unslotted(task, true).await {
            return Disposition::Ack;
        }
        // (A stop already requested resolves at once: checked first.)
        let grant = tokio::select! {
            biased;
            () = stop_requested(&mut stopping) => return Disposition::Requeue,
            grant = self.slots.acquire_or_park(tenant, endpoint) => grant,
        };
        let _permit = match grant {
            Grant::Slot(permit) => permit,
            // Its tenant holds its share and its endpoint is slow: parked, to
            // be admitted in the endpoint's turn, rather than queued in the
            // tenant's shards and this worker's windows in front of the
            // tenant's other endpoints. If it cannot be parked (its row is
            // not due, or the write failed), it waits for a slot as any other.
            Grant::Park if self.processor.park_unslotted(task, false).await => return Disposition::Ack,
            Grant::Park => tokio::select! {
                biased;
                () = stop_requested(&mut stopping) => return Disposition::Requeue,
                permit = self.slots.acquire(tenant, endpoint) => permit,
            },
        };
        let mut backoff = Backoff::default();
        loop {
            match self.processor.process(task, recheck).await {
                Disposition::Hold => match backoff.next_pause() {
                    Some(pause) if self.channel.status().connected() => {
                        report::held();
                        tokio::time::sleep(pause).await;
                    }
                    _ => return Disposition::Requeue,
                },
                other => return other,
            }
        }
    }

    /// A `delivery.v1` message's disposition, with whatever goes round again
    /// already sent round ([`Disposition::Ack`], or [`Disposition::Requeue`]
    /// if that failed and the delivery would be lost). A requeue is left to
    /// [`settle`](Self::settle), as a bundle's is.
    async fn process_one(&self, delivery: &Delivery, task: DeliveryTask) -> Disposition {
        let disposition = self.process_holding(task, recheck_of(delivery)).await;
        if matches!(disposition, Disposition::Requeue) {
            return disposition;
        }
        let Some(again) = RoundAgain::after(disposition) else { return disposition };
        let to = ReturnTo::arrived(Some(task.tenant_id), delivery);
        if self.send_round(&delivery.data, &again, task, to).await || !again.lost_unless_published {
            Disposition::Ack
        } else {
            Disposition::Requeue
        }
    }

    /// Publishes `body` (one delivery's message) to come back as `again`
    /// says; whether it is out. A failure is logged with what follows from it.
    async fn send_round(&self, body: &[u8], again: &RoundAgain, task: DeliveryTask, to: ReturnTo<'_>) -> bool {
        let Err(error) = self.delays.publish_rechecking(body, again.wait, again.recheck, to).await else {
            return true;
        };
        report::not_sent_round();
        let outcome = match (again.lost_unless_published, again.recheck) {
            (true, _) => "its message is requeued",
            (false, None) => "left to recovery (the row is scheduled)",
            (false, Some(_)) => "left to recovery (the row is leased)",
        };
        tracing::warn!(delivery_id = %task.delivery_id, error = %error_chain(&error), outcome, "delivery not sent round");
        false
    }

    /// A bundle (`deliveries.v1` or `v2`): each delivery attempted as if it had come
    /// alone (each on a task of its own, within the worker's concurrency);
    /// as each ends, if it must go round again — a retry, a failure on our
    /// side — it is published as a `delivery.v1` of its own.
    /// [`Disposition::Ack`] once every delivery is settled or sent round;
    /// [`Disposition::Requeue`] (the whole bundle: the next claims drop the
    /// deliveries already settled) when one that would otherwise be lost
    /// could not be sent round.
    async fn process_bundle(&self, delivery: &Delivery, tasks: Vec<DeliveryTask>) -> Disposition {
        // Dropped with this future (a worker task aborted), the set aborts
        // its tasks: none goes on alone.
        let mut attempts = JoinSet::new();
        for task in tasks {
            let settler = self.clone();
            attempts.spawn(async move { (task, settler.process_holding(task, None).await) });
        }
        let mut whole = Disposition::Ack;
        // Each as it ends: a retry goes round without waiting for its siblings.
        while let Some(attempt) = attempts.join_next().await {
            let Ok((task, disposition)) = attempt else {
                tracing::error!("a bundled delivery's task failed; the bundle is requeued");
                whole = Disposition::Requeue;
                continue;
            };
            let Some(again) = RoundAgain::after(disposition) else { continue };
            let body = serde_json::to_vec(&QueueMessage::DeliveryV1(task)).unwrap_or_default();
            let to = ReturnTo::arrived(Some(task.tenant_id), delivery);
            if !self.send_round(&body, &again, task, to).await && again.lost_unless_published {
                whole = Disposition::Requeue;
            }
        }
        whole
    }

    /// A message requeued once more could reach the ready queue's delivery
    /// limit, where the broker drops it (a `delivery.v1`'s row may be
    /// `pending`; a bundle's deliveries may be): after the same pause a fresh
    /// copy goes straight to the ready queue instead — not through a retry
    /// queue, which may be what kept failing. [`Disposition::Ack`] once it is
    /// out; [`Disposition::Requeue`] if not.
    async fn republish_near_limit(&self, delivery: &Delivery) -> Disposition {
        tokio::time::sleep(REQUEUE_PAUSE).await;
        let redeliveries = delivery_count(delivery);
        match self.delays.publish(&delivery.data, Duration::ZERO, ReturnTo::arrived(None, delivery)).await {
            Ok(()) => {
                report::republished();
                tracing::warn!(redeliveries, "message near the delivery limit re-published");
                Disposition::Ack
            }
            Err(error) => {
                tracing::warn!(redeliveries, error = %error_chain(&error), "message near the delivery limit not re-published; requeued");
                Disposition::Requeue
            }
        }
    }

    pub(crate) async fn settle(&self, delivery: Delivery) {
        let disposition = match read(&delivery.data) {
            Message::One(task) => self.process_one(&delivery, task).await,
            Message::Bundle(tasks) => self.process_bundle(&delivery, tasks).await,
            Message::Unusable => Disposition::Reject,
        };
        let disposition = match disposition {
            Disposition::Requeue if near_delivery_limit(delivery_count(&delivery)) => {
                self.republish_near_limit(&delivery).await
            }
            other => other,
        };
        let result = match disposition {
            Disposition::Ack => delivery.acker.ack(BasicAckOptions::default()).await,
            Disposition::Reject => delivery.acker.reject(BasicRejectOptions { requeue: false }).await,
            // (Whatever went round again was resolved into `Ack` or `Requeue`
            // above, a hold into another disposition or `Requeue`.)
            Disposition::Requeue | Disposition::Hold | Disposition::Delay { .. } | Disposition::Recheck { .. } => {
                tokio::time::sleep(REQUEUE_PAUSE).await;
                delivery.acker.nack(BasicNackOptions { requeue: true, ..Default::default() }).await
            }
        };
        if let Err(error) = result {
            // The channel is gone; the broker will redeliver the message.
            tracing::warn!(error = %error, ?disposition, "could not settle message with the broker");
        }
    }
}
