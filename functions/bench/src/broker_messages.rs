//! What went to RabbitMQ per delivery, from the target's own counters
//! (`GET {api}/metrics`, Prometheus text; `relayops all` serves it on the API
//! port; with roles as processes of their own, summed with the others'
//! `--metrics-also`) read twice, the increase between the reads divided by the
//! deliveries that arrived in between. Summed (`published_to_broker`):
//!
//! - `relayops_outbox_published_total`: the publisher's confirmed publishes.
//!   It counts DELIVERIES, not messages (one event's deliveries travel in one
//!   `deliveries.v1`, several events' in a `deliveries.v2`; a dead letter
//!   counts one), so the sum is an upper bound on the messages. Recovery's
//!   re-enqueues go through the outbox and are counted here;
//! - `relayops_delivery_attempts_total{outcome="retry"}`: each retry is sent
//!   round as a message of its own (to a retry queue);
//! - `relayops_deliveries_deferred_total`: put back by flow control, sent
//!   round after its wait;
//! - `relayops_deliveries_postponed_total`: sent round unclaimed, its
//!   endpoint just found saturated;
//! - `relayops_deliveries_republished_total`: a fresh copy near the ready
//!   queue's delivery limit;
//! - minus `relayops_deliveries_not_sent_round_total`: those of the three
//!   before whose publish failed or was refused.
//!
//! Shown, not summed: `relayops_recovery_actions_total{action="requeued"}`
//! (already in the outbox's count), `relayops_deliveries_held_total` (pauses,
//! no publish), `relayops_outbox_publish_failures_total` (refused rows are
//! published again later; failed ticks publish nothing), and
//! `relayops_delivery_attempts_total{outcome="delivered"}` (the target's own
//! count of deliveries, beside the receiver's) and every attempt
//! (`per_attempt`: at a failing receiver the policy's retries are not
//! waste, so the publishes are set against the attempts). Counted by nothing: the
//! worker's early-arrival delays (a message come before its row is due),
//! a bundle's deliveries sent round to be requeued, and the broker's
//! redeliveries of messages requeued or unacknowledged when a channel closed
//! (no publish; the receiver's requests per delivery show their effect).
use std::collections::BTreeMap;
use std::time::Instant;

use relayops_shared::observe::{names, series_sum};

use crate::scenarios::Target;
use serde::Serialize;

/// How a counter enters the sum.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Added,
    Subtracted,
    Shown,
}

/// A counter read: its name, its one series' label (`key`, `value`) if not
/// all of them, and how it enters the sum.
struct Counter {
    name: &'static str,
    label: Option<(&'static str, &'static str)>,
    role: Role,
}

const fn counter(name: &'static str, label: Option<(&'static str, &'static str)>, role: Role) -> Counter {
    Counter { name, label, role }
}

const COUNTERS: &[Counter] = &[
    counter(names::OUTBOX_PUBLISHED, None, Role::Added),
    counter(names::DELIVERY_ATTEMPTS, Some(("outcome", "retry")), Role::Added),
    counter(names::DELIVERIES_DEFERRED, None, Role::Added),
    counter(names::DELIVERIES_POSTPONED, None, Role::Added),
    counter(names::DELIVERIES_REPUBLISHED, None, Role::Added),
    counter(names::DELIVERIES_NOT_SENT_ROUND, None, Role::Subtracted),
    counter(names::RECOVERY_ACTIONS, Some(("action", "requeued")), Role::Shown),
    counter(names::DELIVERIES_HELD, None, Role::Shown),
    counter(names::OUTBOX_PUBLISH_FAILURES, None, Role::Shown),
    counter(names::DELIVERY_ATTEMPTS, Some(("outcome", "delivered")), Role::Shown),
    counter(names::DELIVERY_ATTEMPTS, None, Role::Shown),
];

/// One read of `/metrics` (Prometheus text) and when it was taken.
pub struct Scrape {
    pub at: Instant,
    text: String,
}

/// Reads `{api}/metrics` and every `--metrics-also` URL, as one text (the
/// same series in several add up).
pub async fn scrape(target: &Target) -> anyhow::Result<Scrape> {
    let api = format!("{}/metrics", target.api);
    let mut text = String::new();
    for url in std::iter::once(&api).chain(&target.metrics_also) {
        let response = target.http.get(url).send().await?.error_for_status()?;
        text.push_str(&response.text().await?);
        text.push('\n');
    }
    Ok(Scrape { at: Instant::now(), text })
}

impl Scrape {
    /// The sum of `name`'s series (those with `label` if given); `None` if it has none.
    fn value(&self, name: &str, label: Option<(&str, &str)>) -> Option<f64> {
        series_sum(&self.text, name, label.as_slice())
    }
}

#[derive(Debug, Serialize)]
pub struct BrokerMessages {
    /// Each counter's increase between the reads (`name{label}`).
    pub summed: BTreeMap<String, f64>,
    pub subtracted: BTreeMap<String, f64>,
    pub shown: BTreeMap<String, f64>,
    /// Counters in neither read (never incremented, or not in this build): 0.
    pub absent: Vec<String>,
    /// Summed − subtracted: publishes to the broker, the publisher's counted
    /// per delivery (an upper bound on its messages).
    pub published_to_broker: f64,
    /// Deliveries that first arrived at the receiver between the reads.
    pub deliveries: usize,
    pub per_delivery: f64,
    /// Attempts made between the reads (every outcome), and the publishes per attempt.
    pub attempts: f64,
    pub per_attempt: f64,
    /// Publishes per delivery that entered in the window, whether it has
    /// arrived yet or not (set by the scenario that knows what it posted;
    /// behind a failing endpoint most deliveries wait parked, unattempted).
    pub per_entered_delivery: f64,
    pub window_secs: f64,
    pub note: &'static str,
}

/// The counters' increase from `before` to `after`, per delivery of the `deliveries` between.
pub fn between(before: &Scrape, after: &Scrape, deliveries: usize) -> BrokerMessages {
    let mut figures = BrokerMessages {
        summed: BTreeMap::new(),
        subtracted: BTreeMap::new(),
        shown: BTreeMap::new(),
        absent: Vec::new(),
        published_to_broker: 0.0,
        deliveries,
        per_delivery: 0.0,
        attempts: 0.0,
        per_attempt: 0.0,
        per_entered_delivery: 0.0,
        window_secs: after.at.saturating_duration_since(before.at).as_secs_f64(),
        note: "relayops_outbox_published_total counts deliveries, not messages (a bundle message carries several)",
    };
    for Counter { name, label, role } in COUNTERS {
        let key = match label {
            Some((k, v)) => format!("{name}{{{k}=\"{v}\"}}"),
            None => (*name).to_owned(),
        };
        let (was, is) = (before.value(name, *label), after.value(name, *label));
        if was.is_none() && is.is_none() {
            figures.absent.push(key.clone());
        }
        let increase = (is.unwrap_or(0.0) - was.unwrap_or(0.0)).max(0.0);
        match role {
            Role::Added => {
                figures.published_to_broker += increase;
                figures.summed.insert(key, increase);
            }
            Role::Subtracted => {
                figures.published_to_broker -= increase;
                figures.subtracted.insert(key, increase);
            }
            Role::Shown => {
                figures.shown.insert(key, increase);
            }
        }
    }
    figures.published_to_broker = figures.published_to_broker.max(0.0);
    figures.per_delivery = figures.published_to_broker / deliveries.max(1) as f64;
    figures.attempts = figures.shown.get(names::DELIVERY_ATTEMPTS).copied().unwrap_or(0.0);
    figures.per_attempt = figures.published_to_broker / figures.attempts.max(1.0);
    figures
}
