//! The many-tenants scenario (`many-tenants`): fairness at the scale users
//! run. `--many-tenants` quiet tenants (10,000), each with one endpoint at the
//! bench's receiver, together post `--many-rate` events/s (500: each tenant
//! one event every 20 s), one at a time, round robin. Beside them, two loud
//! tenants: one bursts `--many-burst-events` (50,000) to a fast endpoint in
//! batches, the other floods `--many-flood-events` (5,000) to a 2 s endpoint.
//!
//! For each `--many-workers` count (1, 2) the bench starts that many workers
//! and runs three phases: the quiet tenants alone, the loud ones alone, then
//! all together. It prints the quiet tenants' end-to-end p50/p95/p99/max
//! (first send → arrival) beside the same figures alone, and the loud
//! tenants' deliveries/s beside theirs alone.
//!
//! With the loud tenants, the quiet figures are also split by whether both of
//! a quiet tenant's ready shards (`broker::ReadyShards::candidates`) are a
//! loud tenant's: shuffle sharding leaves such a tenant nowhere to go but
//! behind a backlog.
//!
//! The target must run WITHOUT a worker (`relayops api`); the quiet tenants
//! are made straight in its database (a tenant row and an API key each, no
//! user: a password hash each would take minutes), their endpoints through
//! the API.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::stream::{self, StreamExt};
use relayops_shared::auth::{ApiKeySecret, Scope};
use relayops_shared::broker::ReadyShards;
use relayops_shared::config::BrokerConfig;
use relayops_shared::ids::TenantId;
use relayops_shared::repo::api_keys::{insert_api_key, NewApiKey};
use relayops_shared::repo::tenants::insert_tenant;
use serde::Serialize;

use crate::scenarios::Target;
use crate::stats::{percentiles, Percentiles};
use crate::worker_process::ApiOnly;

/// The slow flood's receiver: this long per request, this many at once.
const SLOW_MS: u64 = 2000;
const SLOW_MAX_IN_FLIGHT: u32 = 1000;
/// How long a phase waits for its last deliveries.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);

#[derive(Debug, Serialize)]
pub struct QuietFigures {
    pub events: usize,
    pub delivered: usize,
    pub end_to_end: Percentiles,
    /// Of that, first send → the answer that stored the event (refusals
    /// retried included), and the answer → arrival.
    pub ingest: Percentiles,
    pub after_answer: Percentiles,
    /// 503/429 answers the clients retried (the protocol's Retry-After).
    pub refused: usize,
    /// With the loud tenants: the quiet tenants both of whose ready shards
    /// are a loud tenant's, their events and end to end; and everyone else's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cornered: Option<Split>,
}

#[derive(Debug, Serialize)]
pub struct Split {
    pub cornered_tenants: usize,
    pub cornered_events: usize,
    pub cornered_end_to_end: Percentiles,
    pub others_end_to_end: Percentiles,
}

#[derive(Debug, Serialize)]
pub struct LoudFigures {
    /// The burst's deliveries/s, from its first post to its last arrival.
    pub burst_deliveries_per_sec: f64,
    /// The slow flood's deliveries/s (its limit: `max_in_flight` ÷ 2 s).
    pub flood_deliveries_per_sec: f64,
    pub complete: bool,
}

#[derive(Debug, Serialize)]
pub struct ManyTenantsFigures {
    pub tenants: usize,
    pub workers: usize,
    pub offered_events_per_sec: u32,
    pub quiet_alone: QuietFigures,
    pub loud_alone: LoudFigures,
    pub quiet_beside_loud: QuietFigures,
    pub loud_beside_quiet: LoudFigures,
    /// Quiet p99 beside the loud tenants ÷ quiet p99 alone (target ≤ 2).
    pub quiet_p99_ratio: f64,
    /// The burst's rate beside the quiet tenants ÷ alone.
    pub burst_rate_ratio: f64,
}

pub struct ManyTenantsRun<'a> {
    pub api_only: ApiOnly<'a>,
    pub tenants: usize,
    pub rate: u32,
    pub secs: u64,
    pub burst_events: usize,
    pub burst_clients: usize,
    pub flood_events: usize,
}

/// The quiet tenants, each with its id and key (its hook is `q-<n>`).
pub struct QuietTenants {
    targets: Vec<Target>,
    ids: Vec<TenantId>,
}

/// The loud tenants of one phase: the burst's and the flood's.
struct Loud {
    burst: Target,
    flood: Target,
    ids: [TenantId; 2],
}

impl ManyTenantsRun<'_> {
    /// Makes the quiet tenants and their endpoints.
    pub async fn quiet_tenants(&self) -> anyhow::Result<QuietTenants> {
        let target = self.api_only.target;
        eprintln!("[many-tenants] making {} tenants", self.tenants);
        let (mut keys, mut ids) = (Vec::with_capacity(self.tenants), Vec::with_capacity(self.tenants));
        let mut client = self.api_only.pool.get().await?;
        for chunk in (0..self.tenants).collect::<Vec<_>>().chunks(1000) {
            let tx = client.transaction().await?;
            for n in chunk {
                let tenant = insert_tenant(&tx, &format!("quiet-{n}")).await?;
                let secret = ApiKeySecret::generate();
                let key = NewApiKey { name: "bench", secret: &secret, scopes: &[Scope::Admin], created_by: None };
                insert_api_key(&tx, tenant, &key).await?;
                keys.push(secret.expose().to_owned());
                ids.push(tenant);
            }
            tx.commit().await?;
        }
        let quiet: Vec<Target> = keys.into_iter().map(|key| Target { key, ..target.clone() }).collect();
        eprintln!("[many-tenants] creating their endpoints");
        let created = stream::iter(quiet.iter().enumerate())
            .map(|(n, tenant)| async move { tenant.endpoint(&format!("hook/q-{n}"), "many.quiet", 10).await })
            .buffer_unordered(16)
            .collect::<Vec<_>>()
            .await;
        created.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
        Ok(QuietTenants { targets: quiet, ids })
    }

    /// Every phase with `workers` worker processes running.
    pub async fn run(&self, quiet: &QuietTenants, workers: usize) -> anyhow::Result<ManyTenantsFigures> {
        let children = self.api_only.spawn_roles("worker", workers)?;
        let label = format!("many-tenants, {workers} worker(s)");
        eprintln!("[{label}] the quiet tenants alone");
        let quiet_alone = self.quiet_load(quiet, None).await;
        eprintln!("[{label}] the loud tenants alone");
        let loud_alone = self.loud(&self.loud_tenants().await?, &format!("w{workers}-alone")).await?;
        eprintln!("[{label}] all together");
        let (together, loud) = (format!("w{workers}-together"), self.loud_tenants().await?);
        let (quiet_beside_loud, loud_beside_quiet) =
            tokio::join!(self.quiet_load(quiet, Some(&loud.ids)), self.loud(&loud, &together));
        let loud_beside_quiet = loud_beside_quiet?;
        ApiOnly::stop_all(children).await;
        let ratio = |a: f64, b: f64| if b > 0.0 { (a / b * 100.0).round() / 100.0 } else { 0.0 };
        Ok(ManyTenantsFigures {
            tenants: self.tenants,
            workers,
            offered_events_per_sec: self.rate,
            quiet_p99_ratio: ratio(quiet_beside_loud.end_to_end.p99_ms, quiet_alone.end_to_end.p99_ms),
            burst_rate_ratio: ratio(loud_beside_quiet.burst_deliveries_per_sec, loud_alone.burst_deliveries_per_sec),
            quiet_alone,
            loud_alone,
            quiet_beside_loud,
            loud_beside_quiet,
        })
    }

    /// Fresh loud tenants (`crate::tenant`, ingest limits out of the way).
    async fn loud_tenants(&self) -> anyhow::Result<Loud> {
        let (target, pool) = (self.api_only.target, self.api_only.pool);
        let burst = crate::tenant::fresh(pool, "many-burst").await?;
        let flood = crate::tenant::fresh(pool, "many-flood").await?;
        Ok(Loud {
            ids: [burst.tenant_id, flood.tenant_id],
            burst: Target { key: burst.api_key, ..target.clone() },
            flood: Target { key: flood.api_key, ..target.clone() },
        })
    }

    /// The quiet tenants' load for `--many-secs`, round robin at
    /// `--many-rate`; waits for its deliveries. Beside `loud` tenants, also
    /// split by whether a quiet tenant's shards are both theirs.
    async fn quiet_load(&self, quiet: &QuietTenants, loud: Option<&[TenantId; 2]>) -> QuietFigures {
        let receiver = &self.api_only.target.receiver;
        let sent: Arc<Mutex<Vec<QuietSent>>> = Arc::default();
        let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let events = (u64::from(self.rate) * self.secs) as usize;
        let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(self.rate.max(1))));
        let mut posts = tokio::task::JoinSet::new();
        for n in 0..events {
            ticks.tick().await;
            let index = n % quiet.targets.len();
            let (tenant, sent, refused) = (quiet.targets[index].clone(), Arc::clone(&sent), Arc::clone(&refused));
            posts.spawn(async move {
                let (posted, refusals) = tenant.post_one("many.quiet", n).await;
                refused.fetch_add(refusals.len(), std::sync::atomic::Ordering::Relaxed);
                if let Ok(posted) = posted {
                    let quiet = QuietSent {
                        event: posted.id,
                        first_sent: posted.first_sent,
                        answered: posted.answered,
                        tenant: index,
                    };
                    sent.lock().unwrap_or_else(|p| p.into_inner()).push(quiet);
                }
            });
        }
        while posts.join_next().await.is_some() {}
        let sent = std::mem::take(&mut *sent.lock().unwrap_or_else(|p| p.into_inner()));
        let deadline = Instant::now() + DRAIN_LIMIT;
        loop {
            let arrived = arrivals_of(receiver, &sent);
            if arrived.len() >= sent.len() || Instant::now() > deadline {
                let ms = |duration: Duration| duration.as_secs_f64() * 1000.0;
                let latency = |sent: &QuietSent| {
                    arrived.get(&sent.event).map(|at| ms(at.saturating_duration_since(sent.first_sent)))
                };
                let after_answer = |sent: &QuietSent| {
                    arrived.get(&sent.event).map(|at| ms(at.saturating_duration_since(sent.answered)))
                };
                let cornered = loud.map(|loud| {
                    let is_cornered = cornered_by(loud, &quiet.ids);
                    let (inside, outside): (Vec<_>, Vec<_>) = sent.iter().partition(|sent| is_cornered[sent.tenant]);
                    Split {
                        cornered_tenants: is_cornered.iter().filter(|c| **c).count(),
                        cornered_events: inside.len(),
                        cornered_end_to_end: percentiles(inside.into_iter().filter_map(latency).collect()),
                        others_end_to_end: percentiles(outside.into_iter().filter_map(latency).collect()),
                    }
                });
                return QuietFigures {
                    events: sent.len(),
                    delivered: arrived.len(),
                    end_to_end: percentiles(sent.iter().filter_map(latency).collect()),
                    ingest: percentiles(sent.iter().map(|sent| ms(sent.answered - sent.first_sent)).collect()),
                    after_answer: percentiles(sent.iter().filter_map(after_answer).collect()),
                    refused: refused.load(std::sync::atomic::Ordering::Relaxed),
                    cornered,
                };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The loud tenants' load (hooks named after `phase`): the burst and the
    /// slow flood at once, until both have arrived.
    async fn loud(&self, loud: &Loud, phase: &str) -> anyhow::Result<LoudFigures> {
        let (target, burst, flood) = (self.api_only.target, &loud.burst, &loud.flood);
        // The receiver names a slow route's hook `slow-<name>`.
        let (burst_hook, flood_hook) = (format!("burst-{phase}"), format!("slow-flood-{phase}"));
        burst.endpoint(&format!("hook/{burst_hook}"), "many.burst", 256).await?;
        flood.endpoint(&format!("slow/{SLOW_MS}/flood-{phase}"), "many.flood", SLOW_MAX_IN_FLIGHT).await?;
        let started = Instant::now();
        let (burst_posted, flood_posted) = tokio::join!(
            burst.ingest_batches("many.burst", self.burst_events, 500, self.burst_clients),
            flood.ingest_batches("many.flood", self.flood_events, 500, 1),
        );
        let expected = |posted: &crate::scenarios::BatchFigures| posted.accepted;
        let (burst_expected, flood_expected) = (expected(&burst_posted.0), expected(&flood_posted.0));
        let deadline = Instant::now() + DRAIN_LIMIT;
        let receiver = &target.receiver;
        while (receiver.delivered_to(&burst_hook) < burst_expected
            || receiver.delivered_to(&flood_hook) < flood_expected)
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let rate = |hook: &str| {
            let (count, last) = receiver.last_arrival_at(hook);
            last.map_or(0.0, |last| count as f64 / (last - started).as_secs_f64().max(0.001))
        };
        Ok(LoudFigures {
            burst_deliveries_per_sec: (rate(&burst_hook) * 10.0).round() / 10.0,
            flood_deliveries_per_sec: (rate(&flood_hook) * 10.0).round() / 10.0,
            complete: receiver.delivered_to(&burst_hook) >= burst_expected
                && receiver.delivered_to(&flood_hook) >= flood_expected,
        })
    }
}

/// Per quiet tenant: whether both of its ready shards are among the loud
/// tenants' (the shard count as the target runs it, `RELAYOPS_READY_SHARDS`).
fn cornered_by(loud: &[TenantId; 2], quiet: &[TenantId]) -> Vec<bool> {
    let count = BrokerConfig::from_env().map_or(relayops_shared::broker::DEFAULT_READY_SHARDS, |c| c.ready_shards);
    let shards = ReadyShards::new("bench", count);
    let loud_shards: std::collections::HashSet<usize> = loud
        .iter()
        .flat_map(|tenant| {
            let (first, second) = shards.candidates(*tenant);
            [first, second]
        })
        .collect();
    quiet
        .iter()
        .map(|tenant| {
            let (first, second) = shards.candidates(*tenant);
            loud_shards.contains(&first) && loud_shards.contains(&second)
        })
        .collect()
}

/// One quiet event stored: its id, when it was first sent and answered, and
/// its tenant (an index into `QuietTenants`).
struct QuietSent {
    event: String,
    first_sent: Instant,
    answered: Instant,
    tenant: usize,
}

/// When each of the events `sent` first arrived, by event id.
fn arrivals_of(receiver: &crate::receiver::Receiver, sent: &[QuietSent]) -> HashMap<String, Instant> {
    let Ok(arrivals) = receiver.arrivals.lock() else { return HashMap::new() };
    let wanted: std::collections::HashSet<&str> = sent.iter().map(|sent| sent.event.as_str()).collect();
    arrivals
        .by_delivery
        .values()
        .filter(|(event, _, _)| wanted.contains(event.as_str()))
        .map(|(event, at, _)| (event.clone(), *at))
        .collect()
}
