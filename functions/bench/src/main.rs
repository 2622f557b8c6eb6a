//! `relayops-bench`: drives a running RelayOps (`relayops all`, or separate
//! roles) and prints ingest throughput and latency, delivery throughput and
//! end-to-end latency (to a receiver the bench runs itself on loopback), the
//! machine's own Postgres and RabbitMQ ceilings measured in the same run, the
//! ratios between them, and the RelayOps processes' memory. `--json` for
//! machines.
mod backlog;
mod ceilings;
mod console;
mod memory;
mod paced;
mod protocol;
mod receiver;
mod scenarios;
mod stats;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use relayops_shared::bootstrap::{bootstrap_tenant, BootstrapRequest};
use relayops_shared::config::{BrokerConfig, DatabaseConfig};
use relayops_shared::repo::tenants;
use scenarios::Feed;
use serde_json::json;

/// Events per request in the batch-fed delivery scenarios.
const FEED_BATCH: usize = 100;

#[derive(Parser)]
#[command(name = "relayops-bench", about = "Load generator for a running RelayOps")]
struct Args {
    /// The RelayOps API.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    api: String,
    /// Events per scenario.
    #[arg(long, default_value_t = 5000)]
    events: usize,
    /// Concurrent ingest clients (and Postgres connections for the ceiling).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Seconds each ceiling is measured for.
    #[arg(long, default_value_t = 5)]
    ceiling_secs: u64,
    /// Scenarios to run, comma-separated: ceilings, ingest, batch, delivery,
    /// delivery-batched, fanout, fanout-batched, paced, slow, backlog, console.
    /// `backlog` needs `--relayops-bin` and a target running without a worker
    /// (`relayops api`).
    #[arg(long, default_value = "ceilings,ingest,batch,delivery,delivery-batched,fanout,fanout-batched,paced,slow")]
    scenarios: String,
    /// Offered rate (events/s) of the `paced` and `slow` scenarios.
    #[arg(long, default_value_t = 500)]
    rate: u32,
    /// How long the `paced` and `slow` scenarios offer events.
    #[arg(long, default_value_t = 10)]
    paced_secs: u64,
    /// Events queued before the `backlog` scenario starts its worker.
    #[arg(long, default_value_t = 100_000)]
    backlog_events: usize,
    /// Prefetch (messages in flight) of the worker the `backlog` scenario starts.
    #[arg(long, default_value_t = 1000)]
    backlog_prefetch: u32,
    /// The `relayops` binary the `backlog` scenario runs `worker` from.
    #[arg(long)]
    relayops_bin: Option<String>,
    /// Deliveries the `console` scenario's tenant gets before its pages are timed.
    #[arg(long, default_value_t = 10_000)]
    console_deliveries: usize,
    /// Requests per page in the `console` scenario.
    #[arg(long, default_value_t = 30)]
    console_rounds: usize,
    /// Print one JSON document instead of the human report.
    #[arg(long)]
    json: bool,
}

/// A progress line on stderr, once a second, until aborted.
pub(crate) fn progress(
    label: &str,
    sent: Arc<AtomicUsize>,
    total: usize,
    receiver: receiver::Receiver,
) -> tokio::task::JoinHandle<()> {
    let label = label.to_owned();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let sent = sent.load(Ordering::Relaxed).min(total);
            eprintln!("[{label}] posted {sent}/{total}, delivered {}", receiver.delivered());
        }
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let scenarios: Vec<&str> = args.scenarios.split(',').map(str::trim).collect();
    let database = DatabaseConfig { pool_size: args.concurrency.max(4) + 2, ..DatabaseConfig::from_env()? };
    let pool = relayops_shared::db::connect_pool(&database)?;

    // A tenant of its own, with an ingest limit that measures capacity, not policy.
    let email = format!("bench-{}@example.com", uuid::Uuid::new_v4().simple());
    let password = uuid::Uuid::new_v4().to_string();
    let request = BootstrapRequest { tenant_name: "bench", admin_email: &email, admin_password: &password };
    let tenant = bootstrap_tenant(&pool, &request).await?;
    tenants::set_ingest_limit(&pool.get().await?, tenant.tenant_id, Some(1_000_000), Some(1_000_000)).await?;

    let (receiver, receiver_url) = receiver::start().await?;
    let http = reqwest::Client::builder().pool_max_idle_per_host(args.concurrency).build()?;
    wait_until_ready(&http, &args.api).await?;
    let target = scenarios::Target {
        http,
        api: args.api.clone(),
        key: tenant.api_key.expose().to_owned(),
        receiver,
        receiver_url,
    };
    let timeout = Duration::from_secs(300);
    let mut report = serde_json::Map::new();

    if scenarios.contains(&"ceilings") {
        eprintln!("[ceilings] postgres and rabbitmq, {} s each", args.ceiling_secs);
        let pg = ceilings::postgres(&pool, args.concurrency, Duration::from_secs(args.ceiling_secs)).await?;
        let mq = ceilings::rabbitmq(&BrokerConfig::from_env()?, Duration::from_secs(args.ceiling_secs)).await?;
        report.insert(
            "ceilings".into(),
            json!({ "postgres_ingest_tx_per_sec": pg, "rabbitmq_confirmed_publishes_per_sec": mq }),
        );
    }
    if scenarios.contains(&"ingest") {
        let (figures, _) = target.ingest("bench.none", args.events, args.concurrency, "ingest").await;
        report.insert("ingest".into(), serde_json::to_value(figures)?);
    }
    if scenarios.contains(&"batch") {
        let (figures, _) =
            target.ingest_batches("bench.none", args.events * 4, 500, (args.concurrency / 4).max(1)).await;
        report.insert("batch_ingest".into(), serde_json::to_value(figures)?);
    }
    let deliveries = [
        ("delivery", "delivery", "bench.one", 1, Feed::Single),
        ("delivery-batched", "delivery_batched", "bench.one-batched", 1, Feed::Batches(FEED_BATCH)),
        ("fanout", "fanout_10", "bench.fanout", 10, Feed::Single),
        ("fanout-batched", "fanout_10_batched", "bench.fanout-batched", 10, Feed::Batches(FEED_BATCH)),
    ];
    for (scenario, key, event_type, endpoints, feed) in deliveries {
        if scenarios.contains(&scenario) {
            let events = (args.events / endpoints).max(1);
            let figures = target.deliver(event_type, endpoints, events, args.concurrency, feed, timeout).await?;
            report.insert(key.into(), serde_json::to_value(figures)?);
        }
    }
    if scenarios.contains(&"paced") {
        let figures = target.paced(args.rate, args.paced_secs, timeout).await?;
        report.insert("paced".into(), serde_json::to_value(figures)?);
    }
    if scenarios.contains(&"slow") {
        let figures = target.slow_endpoint(args.rate.min(200), args.paced_secs, timeout).await?;
        report.insert("slow_endpoint".into(), serde_json::to_value(figures)?);
    }
    if scenarios.contains(&"backlog") {
        let Some(relayops_bin) = args.relayops_bin.as_deref() else {
            anyhow::bail!("the backlog scenario needs --relayops-bin (and a target without a worker)");
        };
        let run = backlog::BacklogRun {
            target: &target,
            pool: &pool,
            relayops_bin,
            events: args.backlog_events,
            worker_prefetch: args.backlog_prefetch,
            timeout: Duration::from_secs(600),
        };
        report.insert("backlog".into(), serde_json::to_value(run.run().await?)?);
    }
    if scenarios.contains(&"console") {
        let run = console::ConsoleRun {
            target: &target,
            pool: &pool,
            email: &email,
            password: &password,
            deliveries: args.console_deliveries,
            rounds: args.console_rounds,
            timeout,
        };
        report.insert("console".into(), serde_json::to_value(run.run().await?)?);
    }
    report.insert("processes".into(), serde_json::to_value(memory::relayops_processes())?);
    add_ratios(&mut report);

    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_human(&report);
    }
    Ok(())
}

async fn wait_until_ready(http: &reqwest::Client, api: &str) -> anyhow::Result<()> {
    for _ in 0..300 {
        if http.get(format!("{api}/health/ready")).send().await.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("{api} did not become ready within 30 s")
}

fn add_ratios(report: &mut serde_json::Map<String, serde_json::Value>) {
    let pg = report.get("ceilings").and_then(|c| c["postgres_ingest_tx_per_sec"].as_f64());
    let ingest = report.get("ingest").and_then(|i| i["events_per_sec"].as_f64());
    let mq = report.get("ceilings").and_then(|c| c["rabbitmq_confirmed_publishes_per_sec"].as_f64());
    let delivery = report.get("delivery").and_then(|d| d["deliveries_per_sec"].as_f64());
    let mut ratios = serde_json::Map::new();
    if let (Some(pg), Some(ingest)) = (pg, ingest) {
        ratios.insert("ingest_vs_postgres_ceiling".into(), json!(ingest / pg));
    }
    if let (Some(mq), Some(delivery)) = (mq, delivery) {
        ratios.insert("delivery_vs_rabbitmq_ceiling".into(), json!(delivery / mq));
    }
    report.insert("ratios".into(), serde_json::Value::Object(ratios));
}

fn print_human(report: &serde_json::Map<String, serde_json::Value>) {
    let f = |v: &serde_json::Value| v.as_f64().map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into());
    if let Some(c) = report.get("ceilings") {
        println!(
            "ceilings   postgres ingest-shaped tx/s {}   rabbitmq confirmed publishes/s {}",
            f(&c["postgres_ingest_tx_per_sec"]),
            f(&c["rabbitmq_confirmed_publishes_per_sec"])
        );
    }
    if let Some(i) = report.get("ingest") {
        println!(
            "ingest     {} events/s   latency p50 {} ms  p95 {} ms  p99 {} ms   errors {}   retried {}",
            f(&i["events_per_sec"]),
            f(&i["latency"]["p50_ms"]),
            f(&i["latency"]["p95_ms"]),
            f(&i["latency"]["p99_ms"]),
            i["errors_by_status"],
            i["retried_by_status"]
        );
    }
    if let Some(b) = report.get("batch_ingest") {
        println!(
            "batch      {} events/s in batches of {}   batch latency p50 {} ms  p99 {} ms",
            f(&b["events_per_sec"]),
            b["batch_size"],
            f(&b["batch_latency"]["p50_ms"]),
            f(&b["batch_latency"]["p99_ms"])
        );
    }
    for (name, key) in [
        ("delivery", "delivery"),
        ("delivery*", "delivery_batched"),
        ("fan-out 10", "fanout_10"),
        ("fan-out*", "fanout_10_batched"),
    ] {
        if let Some(d) = report.get(key) {
            println!(
                "{name:<10} {} deliveries/s ({} of them{})   end-to-end p50 {} ms  p95 {} ms  p99 {} ms   attempts/delivery {}   ingest {} events/s ({})",
                f(&d["deliveries_per_sec"]), d["deliveries"], if d["complete"] == true { "" } else { ", INCOMPLETE" },
                f(&d["end_to_end"]["p50_ms"]), f(&d["end_to_end"]["p95_ms"]), f(&d["end_to_end"]["p99_ms"]),
                f(&d["attempts_per_delivery"]), f(&d["ingest"]["events_per_sec"]), d["feed"].as_str().unwrap_or_default()
            );
        }
    }
    if let Some(p) = report.get("paced") {
        println!(
            "paced      {} events/s offered for {} s: ingest p50 {} ms p99 {} ms   end-to-end p50 {} ms  p95 {} ms  p99 {} ms{}",
            p["offered_events_per_sec"], p["seconds"], f(&p["ingest_latency"]["p50_ms"]), f(&p["ingest_latency"]["p99_ms"]),
            f(&p["end_to_end"]["p50_ms"]), f(&p["end_to_end"]["p95_ms"]), f(&p["end_to_end"]["p99_ms"]),
            if p["complete"] == true { "" } else { "  INCOMPLETE" }
        );
    }
    if let Some(s) = report.get("slow_endpoint") {
        println!(
            "slow       {} events/s to a fast and a {} ms endpoint (max_in_flight {}): fast end-to-end p50 {} ms  p99 {} ms; slow {} arrivals/s (limit {})",
            s["offered_events_per_sec"], s["slow_response_ms"], s["slow_max_in_flight"],
            f(&s["fast_end_to_end"]["p50_ms"]), f(&s["fast_end_to_end"]["p99_ms"]),
            f(&s["slow_arrivals_per_sec"]), f(&s["slow_limit_per_sec"])
        );
    }
    if let Some(b) = report.get("backlog") {
        println!(
            "backlog    {} queued, drained at {} deliveries/s in {} s{}; worker (prefetch {}) peak RSS {} MiB; ingest during drain p50 {} ms p99 {} ms",
            b["accepted"], f(&b["deliveries_per_sec"]), f(&b["drain_secs"]),
            if b["complete"] == true { "" } else { " INCOMPLETE" }, b["worker_prefetch"], f(&b["worker_peak_rss_mib"]),
            f(&b["ingest_during_drain"]["p50_ms"]), f(&b["ingest_during_drain"]["p99_ms"])
        );
    }
    if let Some(c) = report.get("console") {
        println!("console    {} deliveries; {} requests per page:", c["deliveries"], c["rounds"]);
        if let Some(pages) = c["pages"].as_object() {
            for (page, p) in pages {
                println!(
                    "           {page:<38} p50 {} ms  p95 {} ms  max {} ms",
                    f(&p["p50_ms"]),
                    f(&p["p95_ms"]),
                    f(&p["max_ms"])
                );
            }
        }
    }
    if let Some(r) = report.get("ratios") {
        println!("ratios     {r}");
    }
    if let Some(serde_json::Value::Array(processes)) = report.get("processes") {
        for p in processes {
            println!(
                "memory     pid {} `{}`: peak RSS {} MiB, now {} MiB",
                p["pid"],
                p["command"].as_str().unwrap_or(""),
                f(&p["peak_rss_mib"]),
                f(&p["rss_mib"])
            );
        }
    }
}
