//! The recovery scenario (`--scenarios recovery`, not run unless named): a
//! broker outage under steady load. A fresh tenant with one fast endpoint
//! (at a receiver of its own) posts `--recovery-rate` events/s, one at a time,
//! for `--recovery-secs`; after 10 s the bench stops the local RabbitMQ
//! (`broker_outage`) for `--recovery-outage-secs`, then starts it again.
//! Ingest must go on answering 201 (the outbox holds what the broker cannot
//! take). Reported: posted, accepted, refused (final answers other than 201
//! or 200, the idempotent repeat, after retrying 503 and 429) and delivered
//! events; the normal throughput (deliveries/s over the first 10 s); the
//! backlog when the broker was back (`start_app` returned: events accepted
//! by then and not yet arrived) and its drain time (until all of them had
//! arrived) beside the target `1.5 × backlog / normal throughput + 10 s`;
//! end-to-end latency (first send → first arrival) of every event and of
//! those first sent during the outage; what went to the broker per delivery
//! from the stop to the end (`broker_messages`); the receiver's requests per
//! delivery (duplicates).
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use relayops_shared::config::BrokerConfig;
use relayops_shared::db::Pool;

use crate::broker_messages::{self, BrokerMessages};
use crate::broker_outage::{self, StoppedBroker};
use crate::paced::Offered;
use crate::scenarios::Target;
use crate::stats::{percentiles, Percentiles};

/// Steady load before the outage: the normal throughput's window.
const STEADY: Duration = Duration::from_secs(10);
/// The longest wait for arrivals: the backlog's, then every event's.
const ARRIVALS_WAIT: Duration = Duration::from_secs(300);
/// The drain target: `DRAIN_TARGET_FACTOR × backlog / normal throughput + DRAIN_TARGET_SLACK_SECS`.
const DRAIN_TARGET_FACTOR: f64 = 1.5;
const DRAIN_TARGET_SLACK_SECS: f64 = 10.0;
const HOOK: &str = "recovery";
/// Where the second endpoint's deliveries arrive (`--recovery-retries`).
const RETRIED_HOOK: &str = "retried-recovery";
const EVENT_TYPE: &str = "bench.recovery";

pub struct RecoveryRun<'a> {
    /// The bench's target: its API and client (the tenant and receiver are the scenario's own).
    pub target: &'a Target,
    pub pool: &'a Pool,
    pub rate: u32,
    pub seconds: u64,
    pub outage_secs: u64,
    /// `--recovery-yield-to`: the broker's other users, waited for (see `broker_outage`).
    pub yield_to: &'a [String],
    /// `--recovery-retries`: each event also goes to a second endpoint that
    /// fails every other delivery's first attempt, so retries are pending
    /// in the retry queues when the broker stops (fan-out 2).
    pub with_retries: bool,
}

#[derive(Debug, Serialize)]
pub struct RecoveryFigures {
    pub offered_events_per_sec: u32,
    pub seconds: u64,
    pub outage_secs_asked: u64,
    /// From `stop_app` called to `start_app` returned.
    pub outage_secs: f64,
    pub stop_app_secs: f64,
    pub start_app_secs: f64,
    pub posted: usize,
    pub accepted: usize,
    /// Final answers other than 201/200 (after retrying 503 and 429), by status.
    pub refused: usize,
    pub refused_by_status: std::collections::BTreeMap<String, usize>,
    /// Refusals (503, 429) retried after `Retry-After`.
    pub retried: usize,
    pub delivered: usize,
    /// Accepted − delivered.
    pub lost: usize,
    pub complete: bool,
    /// Deliveries/s over the first 10 s of steady load.
    pub normal_deliveries_per_sec: f64,
    /// Events accepted and not yet arrived when `start_app` returned.
    pub backlog_at_broker_back: usize,
    /// From `start_app` returned until the backlog had arrived (`None`: not within 300 s).
    pub drain_secs: Option<f64>,
    /// 1.5 × backlog / normal throughput + 10 s.
    pub drain_target_secs: f64,
    pub drain_within_target: bool,
    pub end_to_end: Percentiles,
    /// Events first sent from `stop_app` called to `start_app` returned.
    pub posted_during_outage: usize,
    pub end_to_end_posted_during_outage: Percentiles,
    pub ingest_latency: Percentiles,
    /// From before `stop_app` to after every event arrived.
    pub broker_messages: Option<BrokerMessages>,
    pub receiver_requests: u64,
    pub requests_per_delivery: f64,
    /// With `--recovery-retries`: deliveries that arrived at the second
    /// endpoint (after a retry for half of them), and the broker's
    /// publishes per attempt (a retry the policy asks for is not waste).
    pub retried_endpoint_delivered: Option<usize>,
    pub broker_publishes_per_attempt: Option<f64>,
}

impl RecoveryRun<'_> {
    pub async fn run(&self) -> anyhow::Result<RecoveryFigures> {
        anyhow::ensure!(self.rate > 0, "--recovery-rate: at least 1");
        anyhow::ensure!(
            self.seconds > STEADY.as_secs() + self.outage_secs,
            "--recovery-secs must be more than {} s of steady load plus --recovery-outage-secs",
            STEADY.as_secs()
        );
        broker_outage::check_local(&BrokerConfig::from_env()?.url)?;
        broker_outage::wait_for_other_users(self.yield_to).await?;
        let key = crate::tenant::fresh(self.pool, "recovery").await?.api_key;
        let (receiver, receiver_url) = crate::receiver::start().await?;
        let target = Target { key, receiver, receiver_url, ..self.target.clone() };
        target.endpoint(&format!("hook/{HOOK}"), EVENT_TYPE, 256).await?;
        if self.with_retries {
            let body = serde_json::json!({
                "url": format!("{}/fails-once/{HOOK}", target.receiver_url),
                "event_types": [EVENT_TYPE],
                "retry_schedule_secs": [2, 4, 8],
            });
            target.create_endpoint(&body).await?;
        }
        eprintln!(
            "[recovery] {} events/s for {} s; RabbitMQ stopped after {} s for {} s",
            self.rate,
            self.seconds,
            STEADY.as_secs(),
            self.outage_secs
        );

        let offered = Arc::new(Mutex::new(Offered::default()));
        let started = Instant::now();
        let posting = {
            let (target, offered, (rate, seconds)) = (target.clone(), offered.clone(), (self.rate, self.seconds));
            tokio::spawn(async move { target.offer_into(EVENT_TYPE, rate, seconds, &offered).await })
        };
        let progress = progress(target.clone(), offered.clone());
        tokio::time::sleep_until((started + STEADY).into()).await;
        let normal = target.receiver.delivered_between(started, started + STEADY) as f64 / STEADY.as_secs_f64();
        let before = broker_messages::scrape(&target).await;
        if let Some(user) = broker_outage::other_broker_user(self.yield_to) {
            posting.abort();
            progress.abort();
            anyhow::bail!("the broker came into use by {user} during the steady load; it was not stopped: run again");
        }

        eprintln!("[recovery] rabbitmqctl stop_app");
        let outage_started = Instant::now();
        let (stopped, stop_took) = StoppedBroker::stop().await?;
        tokio::time::sleep_until((outage_started + Duration::from_secs(self.outage_secs)).into()).await;
        eprintln!("[recovery] rabbitmqctl start_app");
        let start_took = stopped.start().await?;
        let broker_back = Instant::now();
        let backlog = not_arrived(&target, &offered);
        eprintln!("[recovery] broker back; {} events accepted and not yet delivered", backlog.len());
        let drained = await_events(&target, &backlog, ARRIVALS_WAIT).await;
        let drain_secs = drained.map(|last| last.saturating_duration_since(broker_back).as_secs_f64());
        eprintln!("[recovery] backlog drained: {drain_secs:?} s");

        posting.await?;
        progress.abort();
        let offered = std::mem::take(&mut *offered.lock().unwrap_or_else(|p| p.into_inner()));
        let mut complete = target.await_arrivals(HOOK, offered.sent.len(), ARRIVALS_WAIT).await;
        if self.with_retries {
            complete &= target.await_arrivals(RETRIED_HOOK, offered.sent.len(), ARRIVALS_WAIT).await;
        }
        let after = broker_messages::scrape(&target).await;
        let broker_messages = match (before, after) {
            (Ok(before), Ok(after)) => {
                let deliveries = target.receiver.delivered_between(before.at, after.at);
                Some(broker_messages::between(&before, &after, deliveries))
            }
            (Err(error), _) | (_, Err(error)) => {
                eprintln!("[recovery] {}/metrics not read: {error}", target.api);
                None
            }
        };

        let (delivered, end_to_end) = target.end_to_end(HOOK, &offered.sent);
        let during_outage: HashMap<String, Instant> = offered
            .sent
            .iter()
            .filter(|(_, sent)| (outage_started..=broker_back).contains(*sent))
            .map(|(id, sent)| (id.clone(), *sent))
            .collect();
        let (_, end_to_end_outage) = target.end_to_end(HOOK, &during_outage);
        let requests = target.receiver.arrivals.lock().map(|a| a.requests).unwrap_or(0);
        let retried_endpoint_delivered = self.with_retries.then(|| target.receiver.delivered_to(RETRIED_HOOK));
        let broker_publishes_per_attempt = broker_messages
            .as_ref()
            .filter(|_| self.with_retries)
            .map(|messages| messages.published_to_broker / requests.max(1) as f64);
        let drain_target_secs =
            DRAIN_TARGET_FACTOR * backlog.len() as f64 / normal.max(0.001) + DRAIN_TARGET_SLACK_SECS;
        let accepted = offered.sent.len();
        Ok(RecoveryFigures {
            offered_events_per_sec: self.rate,
            seconds: self.seconds,
            outage_secs_asked: self.outage_secs,
            outage_secs: (broker_back - outage_started).as_secs_f64(),
            stop_app_secs: stop_took.as_secs_f64(),
            start_app_secs: start_took.as_secs_f64(),
            posted: accepted + offered.refused,
            accepted,
            refused: offered.refused,
            refused_by_status: offered.refused_by_status,
            retried: offered.retried,
            delivered,
            lost: accepted.saturating_sub(delivered),
            complete,
            normal_deliveries_per_sec: normal,
            backlog_at_broker_back: backlog.len(),
            drain_secs,
            drain_target_secs,
            drain_within_target: drain_secs.is_some_and(|secs| secs <= drain_target_secs),
            end_to_end,
            posted_during_outage: during_outage.len(),
            end_to_end_posted_during_outage: end_to_end_outage,
            ingest_latency: percentiles(offered.latencies),
            broker_messages,
            receiver_requests: requests,
            requests_per_delivery: requests as f64
                / (delivered + retried_endpoint_delivered.unwrap_or(0)).max(1) as f64,
            retried_endpoint_delivered,
            broker_publishes_per_attempt,
        })
    }
}

/// Events that reached the hook: event id -> first arrival.
fn arrived(target: &Target) -> HashMap<String, Instant> {
    let arrivals = target.receiver.arrivals.lock().unwrap_or_else(|p| p.into_inner());
    let mut events = HashMap::with_capacity(arrivals.by_delivery.len());
    for (event, at, _) in arrivals.by_delivery.values().filter(|(_, _, hook)| hook.starts_with(HOOK)) {
        events.entry(event.clone()).and_modify(|first: &mut Instant| *first = (*first).min(*at)).or_insert(*at);
    }
    events
}

/// The events accepted so far that have not arrived.
fn not_arrived(target: &Target, offered: &Mutex<Offered>) -> Vec<String> {
    let arrived = arrived(target);
    let offered = offered.lock().unwrap_or_else(|p| p.into_inner());
    offered.sent.keys().filter(|event| !arrived.contains_key(*event)).cloned().collect()
}

/// Waits until every one of `events` arrived; the last one's arrival, or
/// `None` if some had not within `timeout` (now when there were none).
async fn await_events(target: &Target, events: &[String], timeout: Duration) -> Option<Instant> {
    let deadline = Instant::now() + timeout;
    loop {
        let arrived = arrived(target);
        let times: Option<Vec<Instant>> = events.iter().map(|event| arrived.get(event).copied()).collect();
        if let Some(times) = times {
            return Some(times.into_iter().max().unwrap_or_else(Instant::now));
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A progress line on stderr every 5 s, until aborted.
fn progress(target: Target, offered: Arc<Mutex<Offered>>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let started = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let accepted = offered.lock().map(|o| o.sent.len()).unwrap_or(0);
            let delivered = target.receiver.delivered_to(HOOK);
            eprintln!(
                "[recovery] {:>4.0} s: accepted {accepted}, delivered {delivered}",
                started.elapsed().as_secs_f64()
            );
        }
    })
}
