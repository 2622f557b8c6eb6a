//! The noisy-neighbour scenario's tenants and endpoints: B (the quiet
//! tenant, one for the run, with a receiver of its own), a fresh A per phase
//! (so one phase's leftovers do not load the next), each with an ingest limit
//! that measures capacity, not policy; the noisy side's endpoints per phase;
//! and, after a phase, disabling them and waiting until the noisy tenant has
//! nothing pending, parked or being sent and the ready queue has emptied.
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use crate::noisy::{Noise, NoisyRun};
use crate::scenarios::Target;

/// The most `max_in_flight` the API accepts (functions/manage, endpoint validation).
pub const MAX_IN_FLIGHT_LIMIT: u32 = 1000;
/// How long the slow endpoint takes to answer.
const SLOW_MS: u64 = 2000;
/// A's endpoints in the `fanout` phase.
const FANOUT_ENDPOINTS: usize = 50;
/// How long the `circuit-close` phase's endpoint answers 500.
pub const DOWN_FOR: std::time::Duration = std::time::Duration::from_secs(20);
/// The `circuit-close-steady` phase's pace: events per second, for so many
/// seconds (the endpoint is down for the first [`DOWN_FOR`]).
pub const STEADY: (u32, u64) = (100, 40);
/// The `steady-fast` and `steady-slow` phases' pace: events per second, for
/// so many seconds (the slow endpoint's `max_in_flight` holds all of it).
pub const STEADY_PAIR: (u32, u64) = (50, 60);
/// The `burst-rated` phase's endpoint: `max_in_flight`, rate limit per
/// second, and its burst.
pub const RATED: (u32, u32, u32) = (100, 1000, 100);
/// The `slow-backlog-alone` phase's endpoint's `max_in_flight`: its 2 s
/// receiver takes 50 deliveries/s.
pub const SLOW_BACKLOG_MAX_IN_FLIGHT: u32 = 100;
/// The `max_in_flight` of the fast endpoints, as the other scenarios give theirs.
pub(crate) const FAST_MAX_IN_FLIGHT: u32 = 256;
/// The longest wait for the noisy side to settle after a phase.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);
/// Ready-queue depth counted as empty (the depth is sampled, and other
/// tenants may have a few messages in it).
const SETTLED_READY_DEPTH: u64 = 10;

/// The noisy side of a phase: who posts what, to which endpoints.
pub struct NoisySide {
    pub noise: Noise,
    /// A's (or, in `same-tenant-failing`, B's) key, at the bench's receiver.
    pub target: Target,
    /// The endpoints' ids, disabled after the phase.
    pub endpoints: Vec<String>,
    pub event_type: String,
    pub events: usize,
    pub load: String,
}

/// How the noisy side settled after its endpoints were disabled.
#[derive(Debug, Serialize)]
pub struct Settled {
    pub secs: f64,
    /// Nothing pending or being sent, and the ready queue empty, within the limit.
    pub drained: bool,
}

impl NoisyRun<'_> {
    /// A fresh tenant named `name` (`crate::tenant`); returns its API key.
    async fn tenant(&self, name: &str) -> anyhow::Result<String> {
        Ok(crate::tenant::fresh(self.pool, name).await?.api_key)
    }

    /// Tenant B, with a receiver of its own.
    pub(crate) async fn quiet_tenant(&self) -> anyhow::Result<Target> {
        let key = self.tenant("noisy-b").await?;
        let (receiver, receiver_url) = crate::receiver::start().await?;
        Ok(Target { key, receiver, receiver_url, ..self.target.clone() })
    }

    /// The noisy side of `phase`, its endpoints created (at the bench's
    /// receiver); `None` in `alone`.
    pub(crate) async fn noisy_side(
        &self,
        phase: &str,
        noise: Noise,
        quiet: &Target,
    ) -> anyhow::Result<Option<NoisySide>> {
        let target = match noise {
            Noise::Quiet => return Ok(None),
            Noise::SameTenantFailing | Noise::SameTenantSlow => {
                Target { key: quiet.key.clone(), ..self.target.clone() }
            }
            _ => Target { key: self.tenant(&format!("noisy-a-{phase}")).await?, ..self.target.clone() },
        };
        let event_type = match noise {
            Noise::SameTenantFailing => "noisy.failing".to_owned(),
            Noise::SameTenantSlow => "noisy.slow".to_owned(),
            _ => "noisy.loud".to_owned(),
        };
        let url = |path: &str| format!("{}/{path}", target.receiver_url);
        let subscribed = |path: &str| json!({ "url": url(path), "event_types": [event_type] });
        let (bodies, events, load) = match noise {
            Noise::Quiet => unreachable!("no noisy side"),
            Noise::Burst(max_in_flight) => {
                let mut body = subscribed(&format!("hook/a-{phase}"));
                if let Some(max_in_flight) = max_in_flight {
                    body["max_in_flight"] = json!(max_in_flight);
                }
                let limit = max_in_flight.map_or("the default".to_owned(), |n| n.to_string());
                let load = format!("{} events to a fast endpoint, max_in_flight {limit}", self.burst_events);
                (vec![body], self.burst_events, load)
            }
            Noise::BurstRated => {
                let (max_in_flight, per_sec, burst) = RATED;
                let mut body = subscribed(&format!("hook/a-{phase}"));
                body["max_in_flight"] = json!(max_in_flight);
                body["rate_limit_per_sec"] = json!(per_sec);
                body["rate_limit_burst"] = json!(burst);
                let load = format!(
                    "{} events to a fast endpoint, max_in_flight {max_in_flight}, rate limit {per_sec}/s (burst {burst})",
                    self.burst_events
                );
                (vec![body], self.burst_events, load)
            }
            Noise::Slow(max_in_flight) => {
                let mut body = subscribed(&format!("slow/{SLOW_MS}/a-{phase}"));
                if let Some(max_in_flight) = max_in_flight {
                    body["max_in_flight"] = json!(max_in_flight);
                }
                let limit = max_in_flight.map_or("the default".to_owned(), |n| n.to_string());
                let load = format!("{} events to a {SLOW_MS} ms endpoint, max_in_flight {limit}", self.flood_events);
                (vec![body], self.flood_events, load)
            }
            Noise::SameTenantSlow => {
                let mut body = subscribed(&format!("slow/{SLOW_MS}/b-{phase}"));
                body["max_in_flight"] = json!(MAX_IN_FLIGHT_LIMIT);
                let load = format!(
                    "{} events to a {SLOW_MS} ms endpoint, max_in_flight {MAX_IN_FLIGHT_LIMIT} (B's own, a second endpoint)",
                    self.flood_events
                );
                (vec![body], self.flood_events, load)
            }
            Noise::SlowBacklog => {
                let mut body = subscribed(&format!("slow/{SLOW_MS}/a-{phase}"));
                body["max_in_flight"] = json!(SLOW_BACKLOG_MAX_IN_FLIGHT);
                let load = format!(
                    "{} events to a {SLOW_MS} ms endpoint, max_in_flight {SLOW_BACKLOG_MAX_IN_FLIGHT}, until drained",
                    self.flood_events
                );
                (vec![body], self.flood_events, load)
            }
            Noise::Failing | Noise::SameTenantFailing => {
                let (who, whose) =
                    if noise == Noise::Failing { ("a", "") } else { ("b", " (B's own, a second endpoint)") };
                let body = subscribed(&format!("status/503/{who}-{phase}"));
                let load = format!("{} events to an endpoint answering 503{whose}", self.flood_events);
                (vec![body], self.flood_events, load)
            }
            Noise::CircuitClose => {
                let up_at = std::time::SystemTime::now() + DOWN_FOR;
                let unix_ms = up_at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
                let body = subscribed(&format!("until/{unix_ms}/a-{phase}"));
                let load = format!(
                    "{} events to an endpoint answering 500 for {} s, then 200",
                    self.flood_events,
                    DOWN_FOR.as_secs()
                );
                (vec![body], self.flood_events, load)
            }
            Noise::CircuitCloseSteady => {
                let up_at = std::time::SystemTime::now() + DOWN_FOR;
                let unix_ms = up_at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
                let body = subscribed(&format!("until/{unix_ms}/a-{phase}"));
                let (rate, secs) = STEADY;
                let load = format!(
                    "{rate} events/s for {secs} s to an endpoint answering 500 for its first {} s, then 200",
                    DOWN_FOR.as_secs()
                );
                (vec![body], rate as usize * secs as usize, load)
            }
            Noise::Steady { slow } => {
                let (rate, secs) = STEADY_PAIR;
                let (path, what) = match slow {
                    true => (format!("slow/{SLOW_MS}/a-{phase}"), format!("a {SLOW_MS} ms endpoint")),
                    false => (format!("hook/a-{phase}"), "a fast endpoint".to_owned()),
                };
                let mut body = subscribed(&path);
                body["max_in_flight"] = json!(FAST_MAX_IN_FLIGHT);
                let load = format!("{rate} events/s for {secs} s to {what}, max_in_flight {FAST_MAX_IN_FLIGHT}");
                (vec![body], rate as usize * secs as usize, load)
            }
            Noise::Fanout => {
                let events = (self.burst_events / 10).max(1);
                let bodies = (0..FANOUT_ENDPOINTS)
                    .map(|n| {
                        let mut body = subscribed(&format!("hook/a-{phase}-{n}"));
                        body["max_in_flight"] = json!(FAST_MAX_IN_FLIGHT);
                        body
                    })
                    .collect();
                (bodies, events, format!("{events} events to {FANOUT_ENDPOINTS} fast endpoints"))
            }
        };
        let mut endpoints = Vec::with_capacity(bodies.len());
        for body in &bodies {
            endpoints.push(target.create_endpoint(body).await?);
        }
        Ok(Some(NoisySide { noise, target, endpoints, event_type, events, load }))
    }

    /// Disables the noisy side's endpoints (their backlog then fails without
    /// an attempt), then waits until it has settled.
    pub(crate) async fn quieten(&self, side: &NoisySide) -> anyhow::Result<Settled> {
        let target = &side.target;
        for id in &side.endpoints {
            let url = format!("{}/v1/endpoints/{id}", target.api);
            let disable = json!({ "enabled": false });
            target.http.patch(url).bearer_auth(&target.key).json(&disable).send().await?.error_for_status()?;
        }
        let started = Instant::now();
        loop {
            if self.settled(target).await? {
                return Ok(Settled { secs: started.elapsed().as_secs_f64(), drained: true });
            }
            if started.elapsed() > SETTLE_LIMIT {
                eprintln!("[noisy-neighbour] the noisy side did not settle within {} s", SETTLE_LIMIT.as_secs());
                return Ok(Settled { secs: started.elapsed().as_secs_f64(), drained: false });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Whether `target`'s tenant has no delivery pending, parked or being sent, and
    /// the ready queue (as `/health/ready` last sampled it) is empty.
    async fn settled(&self, target: &Target) -> anyhow::Result<bool> {
        for status in ["pending", "in_progress", "parked"] {
            let url = format!("{}/v1/deliveries?status={status}&limit=1", target.api);
            let answer = target.http.get(&url).bearer_auth(&target.key).send().await?;
            // A build without endpoint circuits has no `parked` status (400).
            if status == "parked" && answer.status() == reqwest::StatusCode::BAD_REQUEST {
                continue;
            }
            let page: serde_json::Value = answer.error_for_status()?.json().await?;
            if page["data"].as_array().is_some_and(|data| !data.is_empty()) {
                return Ok(false);
            }
        }
        let ready: serde_json::Value =
            target.http.get(format!("{}/health/ready", target.api)).send().await?.json().await?;
        Ok(ready["backpressure"]["ready_depth"].as_u64().is_none_or(|depth| depth <= SETTLED_READY_DEPTH))
    }
}
