//! Scenarios at a fixed offered rate rather than flat out: end-to-end latency
//! at a steady rate (`--paced-rates`, 200 and 2,000 events/s by default: how
//! fast an event that arrives alone, or nearly, reaches its one subscriber),
//! and a slow endpoint beside a fast one (the fast one's latency must not
//! suffer; the slow one is held to its `max_in_flight`). End-to-end is from
//! the moment the client first sent the event (a refusal it retried
//! included) to the receiver's arrival, as a user of the API sees it.
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cost::{Cost, Meter};
use crate::scenarios::Target;
use crate::stats::{percentiles, Percentiles};

#[derive(Debug, Serialize)]
pub struct PacedFigures {
    pub offered_events_per_sec: u32,
    pub seconds: u64,
    pub accepted: usize,
    pub refused: usize,
    /// Refusals (503, 429) retried after `Retry-After` before an answer.
    pub retried: usize,
    pub ingest_latency: Percentiles,
    pub delivered: usize,
    pub end_to_end: Percentiles,
    pub complete: bool,
    /// From the first post until every delivery is recorded (the idle time
    /// between events included: this is the cost at this rate).
    pub cost: Option<Cost>,
}

#[derive(Debug, Serialize)]
pub struct SlowEndpointFigures {
    pub offered_events_per_sec: u32,
    pub seconds: u64,
    pub slow_response_ms: u64,
    pub slow_max_in_flight: u32,
    /// The fast endpoint, receiving every event too.
    pub fast_delivered: usize,
    pub fast_end_to_end: Percentiles,
    /// Deliveries the slow endpoint received while events were offered, per
    /// second, and the most its limit allows (max_in_flight / response time).
    pub slow_arrivals_per_sec: f64,
    pub slow_limit_per_sec: f64,
}

/// What a paced run accepted: event id -> when the client first sent it.
#[derive(Default)]
pub(crate) struct Offered {
    pub sent: HashMap<String, Instant>,
    /// The accepted posts' own latencies.
    pub latencies: Vec<f64>,
    pub refused: usize,
    /// The refusals' final answers: a status, or `transport`.
    pub refused_by_status: BTreeMap<String, usize>,
    pub retried: usize,
}

impl Target {
    /// Posts `rate` events/s of `event_type` for `seconds`, each on its own task
    /// so a slow answer does not lower the offered rate.
    pub(crate) async fn offer(&self, event_type: &str, rate: u32, seconds: u64) -> Offered {
        let offered = Arc::new(Mutex::new(Offered::default()));
        self.offer_into(event_type, rate, seconds, &offered).await;
        let mut offered = offered.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *offered)
    }

    /// [`offer`](Self::offer), recording into `offered` as each answer comes
    /// (for a scenario that looks at what was accepted while it posts).
    pub(crate) async fn offer_into(&self, event_type: &str, rate: u32, seconds: u64, offered: &Arc<Mutex<Offered>>) {
        let total = rate as u64 * seconds;
        let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate.max(1))));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut posts = tokio::task::JoinSet::new();
        for seq in 0..total as usize {
            ticks.tick().await;
            let (target, offered, event_type) = (self.clone(), offered.clone(), event_type.to_owned());
            posts.spawn(async move {
                let (result, refused) = target.post_one(&event_type, seq).await;
                let mut offered = offered.lock().unwrap_or_else(|p| p.into_inner());
                offered.retried += refused.len();
                match result {
                    Ok(posted) => {
                        offered.sent.insert(posted.id, posted.first_sent);
                        offered.latencies.push(posted.latency_ms);
                    }
                    Err(status) => {
                        offered.refused += 1;
                        *offered.refused_by_status.entry(status).or_insert(0) += 1;
                    }
                }
            });
        }
        while posts.join_next().await.is_some() {}
    }

    /// Waits until `expected` deliveries reached hooks named `prefix…`.
    pub(crate) async fn await_arrivals(&self, prefix: &str, expected: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.receiver.delivered_to(prefix) < expected {
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    /// End-to-end latencies (first send → arrival) of the deliveries that
    /// reached hooks named `prefix…`.
    pub(crate) fn end_to_end(&self, prefix: &str, sent: &HashMap<String, Instant>) -> (usize, Percentiles) {
        let arrivals = self.receiver.arrivals.lock().unwrap_or_else(|p| p.into_inner());
        let latencies: Vec<f64> = arrivals
            .by_delivery
            .values()
            .filter(|(_, _, hook)| hook.starts_with(prefix))
            .filter_map(|(event, at, _)| {
                sent.get(event).map(|sent| at.saturating_duration_since(*sent).as_secs_f64() * 1e3)
            })
            .collect();
        (latencies.len(), percentiles(latencies))
    }

    /// End-to-end latency at a steady `rate` to one fast endpoint (an
    /// endpoint and event type of its own per rate).
    pub async fn paced(&self, rate: u32, seconds: u64, timeout: Duration) -> anyhow::Result<PacedFigures> {
        let (hook, event_type) = (format!("paced-{rate}"), format!("bench.paced-{rate}"));
        self.endpoint(&format!("hook/{hook}"), &event_type, 256).await?;
        self.receiver.reset();
        eprintln!("[paced] {rate} events/s for {seconds} s");
        let meter = Meter::start();
        let offered = self.offer(&event_type, rate, seconds).await;
        let complete = self.await_arrivals(&hook, offered.sent.len(), timeout).await;
        self.await_recorded().await?;
        let cost = meter.finish("deliveries", self.receiver.delivered_to(&hook));
        let (delivered, end_to_end) = self.end_to_end(&hook, &offered.sent);
        Ok(PacedFigures {
            offered_events_per_sec: rate,
            seconds,
            accepted: offered.sent.len(),
            refused: offered.refused,
            retried: offered.retried,
            ingest_latency: percentiles(offered.latencies),
            delivered,
            end_to_end,
            complete,
            cost,
        })
    }

    /// A fast and a slow endpoint on the same event type, at a steady `rate`.
    /// The slow endpoint is disabled at the end so its backlog settles (as
    /// failed) instead of loading the scenarios after it.
    pub async fn slow_endpoint(
        &self,
        rate: u32,
        seconds: u64,
        timeout: Duration,
    ) -> anyhow::Result<SlowEndpointFigures> {
        let (slow_ms, slow_max_in_flight) = (500, 8);
        self.endpoint("hook/beside-slow", "bench.slow", 256).await?;
        let slow = self.endpoint(&format!("slow/{slow_ms}/endpoint"), "bench.slow", slow_max_in_flight).await?;
        self.receiver.reset();
        eprintln!("[slow] {rate} events/s for {seconds} s to a fast endpoint and a {slow_ms} ms one");
        let started = Instant::now();
        let offered = self.offer("bench.slow", rate, seconds).await;
        let window = started.elapsed().as_secs_f64();
        let slow_arrivals = self.receiver.delivered_to("slow-");
        self.await_arrivals("beside-slow", offered.sent.len(), timeout).await;
        let (fast_delivered, fast_end_to_end) = self.end_to_end("beside-slow", &offered.sent);
        let disable = serde_json::json!({ "enabled": false });
        let url = format!("{}/v1/endpoints/{slow}", self.api);
        self.http.patch(url).bearer_auth(&self.key).json(&disable).send().await?.error_for_status()?;
        Ok(SlowEndpointFigures {
            offered_events_per_sec: rate,
            seconds,
            slow_response_ms: slow_ms,
            slow_max_in_flight,
            fast_delivered,
            fast_end_to_end,
            slow_arrivals_per_sec: slow_arrivals as f64 / window,
            slow_limit_per_sec: f64::from(slow_max_in_flight) * 1000.0 / slow_ms as f64,
        })
    }
}
