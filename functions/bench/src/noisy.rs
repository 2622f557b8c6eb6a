//! The noisy-neighbour scenario: does one tenant's load slow another's
//! deliveries? A quiet tenant (B) posts `--noisy-quiet-rate` events/s, one at
//! a time, to one fast endpoint of its own while a noisy tenant (A, a fresh
//! one each phase) bursts, floods a slow or a failing endpoint, or fans out
//! to 50; B's end-to-end latency (first send → first arrival at its hook) is
//! set beside B's alone. `burst-alone` is A's burst with no B beside it: the
//! throughput A's burst should keep (0.9× or more) when B runs. B's
//! deliveries have their own receiver, A's the bench's. The tenants, the
//! noisy side's endpoints and the settling between phases are in
//! `noisy_tenant`.
use std::time::{Duration, Instant};

use serde::Serialize;

use relayops_shared::db::Pool;

use crate::broker_messages::{self, BrokerMessages};
use crate::cost::{Cost, Meter};
use crate::idle::Idle;
use crate::noisy_tenant::{NoisySide, Settled};
use crate::paced::Offered;
use crate::pg_writes::{self, PgWrites};
use crate::receiver::Receiver;
use crate::scenarios::Target;
use crate::stats::{percentiles, Percentiles};

/// Every phase, in the order they run.
pub const PHASES: &[&str] = &[
    "alone",
    "burst-alone",
    "burst",
    "burst-default-alone",
    "burst-rated",
    "slow",
    "slow-default",
    "slow-backlog-alone",
    "failing",
    "fanout",
    "same-tenant-failing",
    "same-tenant-slow",
    "circuit-close",
    "circuit-close-steady",
    "steady-fast",
    "steady-slow",
];
/// How long the platform is watched idle before the phases (`crate::idle`).
const IDLE_WINDOW: Duration = Duration::from_secs(10);
/// How long A has been posting when B starts.
const NOISE_LEAD: Duration = Duration::from_millis(100);
/// How long B's deliveries may take to arrive once B stops posting.
const QUIET_ARRIVALS_WAIT: Duration = Duration::from_secs(120);
/// Events per batch (the API's most) and batch clients of A's posting.
const NOISE_BATCH: usize = 500;
const NOISE_CLIENTS: usize = 4;

/// What the noisy side does in a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Noise {
    /// Nothing: B alone, the baseline.
    Quiet,
    /// A's burst to one fast endpoint, with this `max_in_flight` (`None`: the default).
    Burst(Option<u32>),
    /// A's burst to one fast endpoint with a rate limit
    /// ([`RATED`](crate::noisy_tenant::RATED)).
    BurstRated,
    /// A's flood to a 2,000 ms endpoint, with this `max_in_flight` (`None`: the default).
    Slow(Option<u32>),
    /// A's flood to a 2,000 ms endpoint at `max_in_flight`
    /// [`SLOW_BACKLOG_MAX_IN_FLIGHT`](crate::noisy_tenant::SLOW_BACKLOG_MAX_IN_FLIGHT),
    /// waited for until it drains: most of it waits for a slot.
    SlowBacklog,
    /// A's flood to an endpoint answering 503.
    Failing,
    /// A's events to 50 fast endpoints.
    Fanout,
    /// B's own flood to a second endpoint of B's, answering 503.
    SameTenantFailing,
    /// B's own flood to a second endpoint of B's, a 2,000 ms one at
    /// `max_in_flight` [`MAX_IN_FLIGHT_LIMIT`](crate::noisy_tenant::MAX_IN_FLIGHT_LIMIT).
    SameTenantSlow,
    /// A's flood to an endpoint answering 500 for its first
    /// [`DOWN_FOR`](crate::noisy_tenant::DOWN_FOR), then 200: its circuit
    /// opens on the backlog and closes on it.
    CircuitClose,
    /// The same endpoint under A's steady rate
    /// ([`STEADY`](crate::noisy_tenant::STEADY)) rather than a flood at
    /// once: deliveries keep arriving while the circuit is open and after it closed.
    CircuitCloseSteady,
    /// A's steady rate ([`STEADY_PAIR`](crate::noisy_tenant::STEADY_PAIR))
    /// to a fast endpoint, or (`true`) to a 2,000 ms one with room for all
    /// of it in flight: the same deliveries at the same pace, differing only
    /// in how long the receiver takes (the cost of a slow receiver itself).
    Steady { slow: bool },
}

impl Noise {
    /// The noise of `phase`, and whether B is measured beside it.
    fn of(phase: &str) -> (Self, bool) {
        match phase {
            "alone" => (Self::Quiet, true),
            "burst-alone" => (Self::Burst(Some(crate::noisy_tenant::FAST_MAX_IN_FLIGHT)), false),
            "burst" => (Self::Burst(Some(crate::noisy_tenant::FAST_MAX_IN_FLIGHT)), true),
            "burst-default-alone" => (Self::Burst(None), false),
            "burst-rated" => (Self::BurstRated, true),
            "slow" => (Self::Slow(Some(crate::noisy_tenant::MAX_IN_FLIGHT_LIMIT)), true),
            "slow-default" => (Self::Slow(None), true),
            "slow-backlog-alone" => (Self::SlowBacklog, false),
            "failing" => (Self::Failing, true),
            "fanout" => (Self::Fanout, true),
            "circuit-close" => (Self::CircuitClose, true),
            "circuit-close-steady" => (Self::CircuitCloseSteady, true),
            "steady-fast" => (Self::Steady { slow: false }, false),
            "steady-slow" => (Self::Steady { slow: true }, false),
            "same-tenant-slow" => (Self::SameTenantSlow, true),
            _ => (Self::SameTenantFailing, true),
        }
    }

    /// Whether A's events can all be delivered (its rate is then its drain's);
    /// otherwise A's rate is its arrivals while B posts.
    pub fn drains(self) -> bool {
        matches!(
            self,
            Self::Burst(_)
                | Self::BurstRated
                | Self::SlowBacklog
                | Self::Fanout
                | Self::CircuitClose
                | Self::CircuitCloseSteady
                | Self::Steady { .. }
        )
    }
}

/// B's side of a phase.
#[derive(Debug, Serialize)]
pub struct QuietFigures {
    pub offered_events_per_sec: u32,
    pub seconds: u64,
    pub posted: usize,
    pub accepted: usize,
    /// Posts the API refused in the end (after retrying 503 and 429).
    pub refused: usize,
    pub retried: usize,
    /// Deliveries that reached B's hook within the wait after posting.
    pub delivered: usize,
    /// Posted but not delivered (refused ones included).
    pub lost: usize,
    pub end_to_end: Percentiles,
    pub ingest_latency: Percentiles,
}

/// A's side of a phase.
#[derive(Debug, Serialize)]
pub struct NoisyFigures {
    /// What A did, in words.
    pub load: String,
    pub endpoints: usize,
    pub events: usize,
    pub accepted: usize,
    /// First arrivals at A's hooks (answered 503 ones included) until A was
    /// counted: its drain's end, or B's arrivals' end.
    pub arrivals: usize,
    pub arrivals_while_b_posted: usize,
    pub deliveries_per_sec: f64,
    /// `drain`: arrivals / (first post → last arrival); `b_window`: arrivals
    /// while B posted / B's posting time.
    pub rate_measured_over: &'static str,
    /// From A's first post to its last arrival, where A's events can all arrive.
    pub drain_secs: Option<f64>,
    pub complete: Option<bool>,
    /// `deliveries_per_sec` / `burst-alone`'s (the `burst` phase only).
    pub vs_burst_alone: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct PhaseFigures {
    pub b: Option<QuietFigures>,
    pub a: Option<NoisyFigures>,
    /// B's p99 / B's p99 in `alone`.
    pub b_p99_vs_alone: Option<f64>,
    /// After A's endpoints were disabled: how long until A had nothing
    /// pending and the ready queue had emptied (at most 60 s).
    pub settle: Option<Settled>,
    /// What went to the broker from A's first post until A was counted,
    /// per delivery that arrived meanwhile (A's and B's; at a failing
    /// receiver, per attempt: answered 503s count as arrivals), from the
    /// target's own counters; `None` where `/metrics` could not be read.
    pub broker_messages: Option<BrokerMessages>,
    /// What was written to Postgres over the same window, per delivery.
    pub postgres_writes: Option<PgWrites>,
    /// The server's CPU over the same window, per 1,000 deliveries.
    pub cost: Option<Cost>,
}

/// The noisy-neighbour report: the idle platform's background, then the
/// phases' figures by name.
#[derive(Debug, Serialize)]
struct Report {
    idle: Option<Idle>,
    #[serde(flatten)]
    phases: serde_json::Map<String, serde_json::Value>,
}

pub struct NoisyRun<'a> {
    /// The bench's target: its receiver takes A's deliveries.
    pub target: &'a Target,
    pub pool: &'a Pool,
    pub quiet_rate: u32,
    pub seconds: u64,
    pub burst_events: usize,
    pub flood_events: usize,
    pub phases: &'a [String],
    /// The longest A's drain is waited for.
    pub timeout: Duration,
}

impl NoisyRun<'_> {
    /// Runs the phases asked for (in [`PHASES`] order); returns the report's
    /// `noisy_neighbour` object: the phases' figures by name.
    pub async fn run(&self) -> anyhow::Result<serde_json::Value> {
        for phase in self.phases {
            anyhow::ensure!(PHASES.contains(&phase.as_str()), "--noisy-phases: no phase {phase:?} (one of {PHASES:?})");
        }
        anyhow::ensure!(self.quiet_rate > 0 && self.seconds > 0, "--noisy-quiet-rate and --noisy-secs: at least 1");
        let quiet = self.quiet_tenant().await?;
        eprintln!("[noisy-neighbour] the idle platform for {} s", IDLE_WINDOW.as_secs());
        let idle = crate::idle::measure(self.pool, IDLE_WINDOW).await;
        let mut figures: Vec<(&str, PhaseFigures)> = Vec::new();
        for phase in PHASES.iter().copied().filter(|p| self.phases.iter().any(|asked| asked == p)) {
            let mut f = self.phase(phase, &quiet).await?;
            if let Some(idle) = &idle {
                idle.subtract(f.postgres_writes.as_mut(), f.cost.as_mut());
            }
            figures.push((phase, f));
        }
        let find = |name: &str| figures.iter().find(|(phase, _)| *phase == name).map(|(_, f)| f);
        let baseline = find("alone").and_then(|f| f.b.as_ref()).map(|b| b.end_to_end.p99_ms);
        let alone_rate = find("burst-alone").and_then(|f| f.a.as_ref()).map(|a| a.deliveries_per_sec);
        let mut report = serde_json::Map::new();
        for (phase, mut f) in figures {
            f.b_p99_vs_alone = f.b.as_ref().zip(baseline).map(|(b, base)| b.end_to_end.p99_ms / base.max(0.001));
            if let (Some(a), Some(alone), "burst") = (f.a.as_mut(), alone_rate, phase) {
                a.vs_burst_alone = Some(a.deliveries_per_sec / alone.max(0.001));
            }
            report.insert(phase.to_owned(), serde_json::to_value(f)?);
        }
        Ok(serde_json::to_value(Report { idle, phases: report })?)
    }

    async fn phase(&self, phase: &str, quiet: &Target) -> anyhow::Result<PhaseFigures> {
        let (noise, measures_quiet) = Noise::of(phase);
        let quiet_type = format!("noisy.quiet-{phase}");
        if measures_quiet {
            quiet.endpoint(&format!("hook/quiet-{phase}"), &quiet_type, 256).await?;
        }
        let side = self.noisy_side(phase, noise, quiet).await?;
        self.target.receiver.reset();
        quiet.receiver.reset();
        eprintln!(
            "[noisy-neighbour] {phase}: {}{}",
            if measures_quiet { format!("B {} events/s for {} s", self.quiet_rate, self.seconds) } else { "".into() },
            side.as_ref()
                .map(|s| format!("{}A: {}", if measures_quiet { "; " } else { "" }, s.load))
                .unwrap_or_default()
        );

        let before = broker_messages::scrape(self.target).await.ok();
        let pg_before = pg_writes::read(self.pool).await.ok();
        let meter = Meter::start();
        let started = Instant::now();
        let feed = side.as_ref().map(|side| {
            let (target, event_type, events) = (side.target.clone(), side.event_type.clone(), side.events);
            match side.noise {
                Noise::CircuitCloseSteady => tokio::spawn(async move {
                    let (rate, secs) = crate::noisy_tenant::STEADY;
                    target.offer(&event_type, rate, secs).await.sent.len()
                }),
                Noise::Steady { .. } => tokio::spawn(async move {
                    let (rate, secs) = crate::noisy_tenant::STEADY_PAIR;
                    target.offer(&event_type, rate, secs).await.sent.len()
                }),
                _ => tokio::spawn(async move {
                    target.ingest_batches(&event_type, events, NOISE_BATCH, NOISE_CLIENTS).await.0.accepted
                }),
            }
        });
        if feed.is_some() && measures_quiet {
            tokio::time::sleep(NOISE_LEAD).await;
        }
        let window_start = Instant::now();
        let offered = match measures_quiet {
            true => Some(quiet.offer(&quiet_type, self.quiet_rate, self.seconds).await),
            false => None,
        };
        let window = (window_start, Instant::now());
        let fed = match feed {
            Some(feed) => Some(feed.await?),
            None => None,
        };
        let b = match offered {
            Some(offered) => Some(self.quiet_figures(quiet, phase, offered).await),
            None => None,
        };
        let (a, settle, broker_messages, postgres_writes, cost) = match (side, fed) {
            (Some(side), Some(fed)) => {
                let a = self.noisy_figures(&side, fed, started, window).await;
                let after = broker_messages::scrape(self.target).await.ok();
                let pg_after = pg_writes::read(self.pool).await.ok();
                let arrived = a.arrivals + b.as_ref().map_or(0, |b| b.delivered);
                let cost = meter.finish("deliveries", arrived);
                // Every delivery that entered in the window, attempted or not
                // (behind a failing endpoint's open circuit most wait parked).
                let entered = a.accepted * a.endpoints + b.as_ref().map_or(0, |b| b.accepted);
                let messages = before.zip(after).map(|(before, after)| {
                    let mut messages = broker_messages::between(&before, &after, arrived);
                    messages.per_entered_delivery = messages.published_to_broker / entered.max(1) as f64;
                    messages
                });
                let writes = pg_before.zip(pg_after).map(|(before, after)| pg_writes::between(before, after, arrived));
                (Some(a), Some(self.quieten(&side).await?), messages, writes, cost)
            }
            _ => (None, None, None, None, None),
        };
        Ok(PhaseFigures { b, a, b_p99_vs_alone: None, settle, broker_messages, postgres_writes, cost })
    }

    /// Waits for B's deliveries, then B's figures.
    async fn quiet_figures(&self, quiet: &Target, phase: &str, offered: Offered) -> QuietFigures {
        let hook = format!("quiet-{phase}");
        quiet.await_arrivals(&hook, offered.sent.len(), QUIET_ARRIVALS_WAIT).await;
        let (delivered, end_to_end) = quiet.end_to_end(&hook, &offered.sent);
        let posted = offered.sent.len() + offered.refused;
        QuietFigures {
            offered_events_per_sec: self.quiet_rate,
            seconds: self.seconds,
            posted,
            accepted: offered.sent.len(),
            refused: offered.refused,
            retried: offered.retried,
            delivered,
            lost: posted.saturating_sub(delivered),
            end_to_end,
            ingest_latency: percentiles(offered.latencies),
        }
    }

    /// A's figures: where its events can all arrive, after waiting (up to the
    /// timeout) for them; otherwise as counted now.
    async fn noisy_figures(
        &self,
        side: &NoisySide,
        accepted: usize,
        started: Instant,
        window: (Instant, Instant),
    ) -> NoisyFigures {
        let receiver = &self.target.receiver;
        let expected = accepted * side.endpoints.len();
        if side.noise.drains() {
            let deadline = Instant::now() + self.timeout;
            while receiver.delivered() < expected && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let arrivals = receiver.delivered();
        let while_b_posted = arrivals_between(receiver, window);
        let drain_secs = receiver.last_arrival().map(|last| last.saturating_duration_since(started).as_secs_f64());
        let (deliveries_per_sec, rate_measured_over, drain_secs, complete) = if side.noise.drains() {
            (arrivals as f64 / drain_secs.unwrap_or(0.0).max(0.001), "drain", drain_secs, Some(arrivals >= expected))
        } else {
            let secs = (window.1 - window.0).as_secs_f64().max(0.001);
            (while_b_posted as f64 / secs, "b_window", None, None)
        };
        NoisyFigures {
            load: side.load.clone(),
            endpoints: side.endpoints.len(),
            events: side.events,
            accepted,
            arrivals,
            arrivals_while_b_posted: while_b_posted,
            deliveries_per_sec,
            rate_measured_over,
            drain_secs,
            complete,
            vs_burst_alone: None,
        }
    }
}

/// Deliveries that first arrived within `window`.
fn arrivals_between(receiver: &Receiver, (from, to): (Instant, Instant)) -> usize {
    let arrivals = receiver.arrivals.lock().unwrap_or_else(|p| p.into_inner());
    arrivals.by_delivery.values().filter(|(_, at, _)| (from..=to).contains(at)).count()
}
