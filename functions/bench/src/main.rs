//! `relayops-bench`: drives a running RelayOps (`relayops all`, or separate
//! roles) and prints ingest throughput and latency, delivery throughput and
//! end-to-end latency (to a receiver the bench runs itself on loopback), the
//! machine's own Postgres and RabbitMQ ceilings measured in the same run, the
//! ratios between them, the RelayOps processes' memory, and beside each
//! throughput figure its cost in CPU seconds per 1,000 deliveries (`cost`),
//! and, asked for, a broker outage under steady load (`recovery`).
//! `--json` for machines.
mod backlog;
mod broker_messages;
mod broker_outage;
mod ceilings;
mod console;
mod cost;
mod human;
mod idle;
mod machine;
mod many_tenants;
mod memory;
mod noisy;
mod noisy_tenant;
mod paced;
mod pg_writes;
mod proc_cpu;
mod protocol;
mod queueing;
mod receiver;
mod recovery;
mod scale_out;
mod scenarios;
mod sqs;
mod stats;
mod tenant;
mod worker_process;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use relayops_shared::config::{BrokerConfig, DatabaseConfig};
use relayops_shared::db::partitions;
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
    /// delivery-batched, fanout, fanout-batched, ordered, paced, slow, backlog,
    /// queueing, console, noisy-neighbour, recovery, scale-out, many-tenants,
    /// sqs (not run unless named). `fanout` and `fanout-batched` run once per
    /// `--fanout-endpoints` count, `ordered` once per `--ordered-keys` count,
    /// `queueing` once per `--queueing-subscribers` count.
    /// `backlog`, `queueing`, `scale-out`, `many-tenants` and `sqs` need
    /// `--relayops-bin` and a target running without a worker (`relayops api`).
    #[arg(long, default_value = "ceilings,ingest,batch,delivery,delivery-batched,fanout,fanout-batched,paced,slow")]
    scenarios: String,
    /// Endpoints the fan-out scenarios subscribe, comma-separated: one run of
    /// each fan-out scenario per count, each `--events` deliveries in all.
    #[arg(long, value_delimiter = ',', default_value = "10")]
    fanout_endpoints: Vec<usize>,
    /// Ordering keys of the `ordered` scenario (events with keys, one
    /// endpoint), comma-separated: one run per count.
    #[arg(long, value_delimiter = ',', default_value = "1,100,10000")]
    ordered_keys: Vec<usize>,
    /// Events of each `ordered` run (a single key moves one delivery at a time).
    #[arg(long, default_value_t = 2000)]
    ordered_events: usize,
    /// Offered rates (events/s) of the `paced` scenario, comma-separated: one
    /// run per rate (`paced_200`, `paced_2000` in the JSON).
    #[arg(long, value_delimiter = ',', default_value = "200,2000")]
    paced_rates: Vec<u32>,
    /// Offered rate (events/s) of the `slow` scenario (at most 200).
    #[arg(long, default_value_t = 200)]
    rate: u32,
    /// How long the `paced` and `slow` scenarios offer events.
    #[arg(long, default_value_t = 10)]
    paced_secs: u64,
    /// Events queued before the `backlog` scenario starts its worker.
    #[arg(long, default_value_t = 100_000)]
    backlog_events: usize,
    /// Prefetch (messages in flight) of the worker the `backlog` and `queueing` scenarios start.
    #[arg(long, default_value_t = 1000)]
    backlog_prefetch: u32,
    /// Subscribers of each `queueing` run (API only, then a worker's drain),
    /// comma-separated: one run per count.
    #[arg(long, value_delimiter = ',', default_value = "1,10,100")]
    queueing_subscribers: Vec<usize>,
    /// Events each `queueing` run posts (fewer where they would exceed
    /// `--queueing-max-deliveries`).
    #[arg(long, default_value_t = 3000)]
    queueing_events: usize,
    /// Deliveries a `queueing` run queues at most (events × subscribers): the
    /// target's `RELAYOPS_MAX_READY_DEPTH` must be above it.
    #[arg(long, default_value_t = 100_000)]
    queueing_max_deliveries: usize,
    /// `scale-out`: worker processes of each drain, comma-separated: one run per count.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    scale_workers: Vec<usize>,
    /// `scale-out`: publishers of each pipeline run (the API's own and
    /// `n - 1` `relayops publisher` processes), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    scale_publishers: Vec<usize>,
    /// `scale-out`: events each run posts.
    #[arg(long, default_value_t = 20_000)]
    scale_events: usize,
    /// `many-tenants`: the quiet tenants, each with one endpoint.
    #[arg(long, default_value_t = 10_000)]
    many_tenants: usize,
    /// `many-tenants`: the quiet tenants' events per second in all, round robin.
    #[arg(long, default_value_t = 500)]
    many_rate: u32,
    /// `many-tenants`: how long the quiet tenants post in each phase, seconds.
    #[arg(long, default_value_t = 40)]
    many_secs: u64,
    /// `many-tenants`: the loud tenant's burst to a fast endpoint, events.
    #[arg(long, default_value_t = 50_000)]
    many_burst_events: usize,
    /// `many-tenants`: clients posting the burst's batches of 500 at once.
    #[arg(long, default_value_t = 4)]
    many_burst_clients: usize,
    /// `many-tenants`: the other loud tenant's flood to a 2 s endpoint, events.
    #[arg(long, default_value_t = 5_000)]
    many_flood_events: usize,
    /// `many-tenants`: worker processes of each run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    many_workers: Vec<usize>,
    /// `sqs`: events queued for each destination (a webhook, an SQS queue).
    #[arg(long, default_value_t = 1_000)]
    sqs_events: usize,
    /// `sqs`: moto's `moto_server` (default: the tools venv's, else `PATH`'s).
    #[arg(long)]
    moto_server: Option<String>,
    /// The `relayops` binary the `backlog`, `queueing`, `scale-out`,
    /// `many-tenants` and `sqs` scenarios run `worker` from.
    #[arg(long)]
    relayops_bin: Option<String>,
    /// Deliveries the `console` scenario's tenant gets before its pages are timed.
    #[arg(long, default_value_t = 10_000)]
    console_deliveries: usize,
    /// Requests per page in the `console` scenario.
    #[arg(long, default_value_t = 30)]
    console_rounds: usize,
    /// `noisy-neighbour`: the quiet tenant's (B's) offered rate, events/s.
    #[arg(long, default_value_t = 20)]
    noisy_quiet_rate: u32,
    /// `noisy-neighbour`: how long B posts in each phase, seconds.
    #[arg(long, default_value_t = 20)]
    noisy_secs: u64,
    /// `noisy-neighbour`: the noisy tenant's (A's) burst, events (a tenth of it
    /// in the `fanout` phase, to 50 endpoints).
    #[arg(long, default_value_t = 20_000)]
    noisy_burst_events: usize,
    /// `noisy-neighbour`: A's flood to a slow or failing endpoint, events.
    #[arg(long, default_value_t = 5000)]
    noisy_flood_events: usize,
    /// `noisy-neighbour` phases, comma-separated (run in this order): alone,
    /// burst-alone, burst, slow, slow-default, failing, fanout, same-tenant-failing;
    /// also same-tenant-slow (B's own flood to a second, 2 s endpoint of B's
    /// at `max_in_flight` 1,000, beside B's pings to its fast one);
    /// also burst-default-alone (A's burst alone to a fast endpoint at the
    /// default `max_in_flight`, so that most of it waits parked for a slot),
    /// burst-rated (A's burst to a fast endpoint with a 1,000/s rate limit
    /// and `max_in_flight` 100, so that most of it waits for a token),
    /// slow-backlog-alone (A's flood alone to a 2 s endpoint at
    /// `max_in_flight` 100, until drained: its cost per delivery beside a
    /// fast receiver's at the same rate, `--scenarios paced --paced-rates 50`)
    /// circuit-close (A's flood to an endpoint answering 500 for 20 s, then
    /// 200: its circuit opens on the backlog and closes on it) and
    /// circuit-close-steady (the same endpoint under A's steady 100 events/s
    /// for 40 s); steady-fast and steady-slow (A alone, 50 events/s for 60 s
    /// to a fast endpoint, and to a 2 s one with room for all of it in
    /// flight: what a slow receiver itself costs per delivery). The idle
    /// platform is watched for 10 s first: per-delivery rows and CPU are
    /// also given less its background.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "alone,burst-alone,burst,slow,slow-default,failing,fanout,same-tenant-failing"
    )]
    noisy_phases: Vec<String>,
    /// `recovery`: the offered rate, events/s (one post at a time).
    #[arg(long, default_value_t = 100)]
    recovery_rate: u32,
    /// `recovery`: how long events are posted, seconds (the broker stops after 10).
    #[arg(long, default_value_t = 45)]
    recovery_secs: u64,
    /// `recovery`: also send each event to a second endpoint that fails every
    /// other delivery's first attempt (fan-out 2, retries pending when the
    /// broker stops).
    #[arg(long)]
    recovery_retries: bool,
    /// `recovery`: how long RabbitMQ is stopped (`rabbitmqctl stop_app`), seconds.
    #[arg(long, default_value_t = 15)]
    recovery_outage_secs: u64,
    /// `recovery`: the broker's other users, comma-separated: the broker is not
    /// stopped while a process whose executable path contains one of these
    /// runs (waited for up to 30 min); `""` for none.
    #[arg(long, value_delimiter = ',', default_value = "cargo-nextest,/deps/")]
    recovery_yield_to: Vec<String>,
    /// The `/metrics` URLs of the target's other processes (`relayops
    /// publisher`, `relayops worker` on their operations ports), comma-separated:
    /// the broker counters are summed over them and the API's.
    #[arg(long, value_delimiter = ',')]
    metrics_also: Vec<String>,
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
    // The target migrates its database as it starts (`make bench` starts
    // both at once): nothing is written before it answers ready.
    let http = reqwest::Client::builder().pool_max_idle_per_host(args.concurrency).build()?;
    wait_until_ready(&http, &args.api).await?;

    let tenant::BenchTenant { api_key, email, password, .. } = tenant::fresh(&pool, "bench").await?;

    let (receiver, receiver_url) = receiver::start().await?;
    let metrics_also = args.metrics_also.clone();
    let target = scenarios::Target { http, api: args.api.clone(), key: api_key, receiver, receiver_url, metrics_also };
    let timeout = Duration::from_secs(300);
    let mut report = serde_json::Map::new();
    report.insert("machine".into(), serde_json::to_value(machine::Machine::now())?);
    // What the figures were measured against: a fresh database has the
    // partitions kept ahead; a deployment also keeps its retention's worth.
    let client = pool.get().await?;
    let history_partitions = partitions::list(&client, partitions::DELIVERIES).await?.len();
    drop(client);
    report.insert("history".into(), json!({ "deliveries_partitions": history_partitions }));

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
        let meter = cost::Meter::start();
        let (figures, _) = target.ingest("bench.none", args.events, args.concurrency, "ingest", None).await;
        let cost = meter.finish("events", figures.accepted);
        report.insert("ingest".into(), with_cost(figures, cost)?);
    }
    if scenarios.contains(&"batch") {
        let meter = cost::Meter::start();
        let (figures, _) =
            target.ingest_batches("bench.none", args.events * 4, 500, (args.concurrency / 4).max(1)).await;
        let cost = meter.finish("events", figures.accepted);
        report.insert("batch_ingest".into(), with_cost(figures, cost)?);
    }
    let deliveries = delivery_scenarios(&scenarios, &args.fanout_endpoints, &args.ordered_keys)?;
    for d in &deliveries {
        let events = match d.feed {
            Feed::Ordered { .. } => args.ordered_events,
            _ => (args.events / d.endpoints).max(1),
        };
        let figures = target.deliver(&d.event_type, d.endpoints, events, args.concurrency, d.feed, timeout).await?;
        report.insert(d.key.clone(), serde_json::to_value(figures)?);
    }
    if scenarios.contains(&"paced") {
        anyhow::ensure!(args.paced_rates.iter().all(|rate| *rate > 0), "--paced-rates: rates must be at least 1");
        for rate in &args.paced_rates {
            let figures = target.paced(*rate, args.paced_secs, timeout).await?;
            report.insert(format!("paced_{rate}"), serde_json::to_value(figures)?);
        }
    }
    if scenarios.contains(&"slow") {
        let figures = target.slow_endpoint(args.rate.min(200), args.paced_secs, timeout).await?;
        report.insert("slow_endpoint".into(), serde_json::to_value(figures)?);
    }
    if scenarios.contains(&"backlog") {
        let run =
            backlog::BacklogRun { api_only: api_only(&args, &target, &pool, "backlog")?, events: args.backlog_events };
        report.insert("backlog".into(), serde_json::to_value(run.run().await?)?);
    }
    if scenarios.contains(&"queueing") {
        anyhow::ensure!(args.queueing_subscribers.iter().all(|n| *n > 0), "--queueing-subscribers: at least 1");
        let run = queueing::QueueingRun {
            api_only: api_only(&args, &target, &pool, "queueing")?,
            concurrency: args.concurrency,
        };
        for subscribers in &args.queueing_subscribers {
            let events = args.queueing_events.min(args.queueing_max_deliveries / subscribers).max(1);
            let figures = run.run(*subscribers, events).await?;
            report.insert(format!("queueing_{subscribers}"), serde_json::to_value(figures)?);
        }
    }
    if scenarios.contains(&"scale-out") {
        anyhow::ensure!(
            args.scale_workers.iter().chain(&args.scale_publishers).all(|n| *n > 0),
            "--scale-*: at least 1"
        );
        let run = scale_out::ScaleOutRun {
            api_only: api_only(&args, &target, &pool, "scale-out")?,
            events: args.scale_events,
        };
        for workers in &args.scale_workers {
            report.insert(format!("scale_out_workers_{workers}"), serde_json::to_value(run.workers(*workers).await?)?);
        }
        for publishers in &args.scale_publishers {
            let figures = run.publishers(*publishers).await?;
            report.insert(format!("scale_out_publishers_{publishers}"), serde_json::to_value(figures)?);
        }
    }
    if scenarios.contains(&"many-tenants") {
        anyhow::ensure!(args.many_tenants > 0 && args.many_rate > 0, "--many-tenants and --many-rate: at least 1");
        let run = many_tenants::ManyTenantsRun {
            api_only: api_only(&args, &target, &pool, "many-tenants")?,
            tenants: args.many_tenants,
            rate: args.many_rate,
            secs: args.many_secs,
            burst_events: args.many_burst_events,
            burst_clients: args.many_burst_clients.max(1),
            flood_events: args.many_flood_events,
        };
        let quiet = run.quiet_tenants().await?;
        for workers in &args.many_workers {
            report.insert(format!("many_tenants_{workers}"), serde_json::to_value(run.run(&quiet, *workers).await?)?);
        }
    }
    if scenarios.contains(&"sqs") {
        let run = sqs::SqsRun {
            api_only: api_only(&args, &target, &pool, "sqs")?,
            events: args.sqs_events,
            moto_server: args.moto_server.clone().unwrap_or_else(default_moto_server),
        };
        report.insert("sqs".into(), serde_json::to_value(run.run().await?)?);
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
    if scenarios.contains(&"noisy-neighbour") {
        let run = noisy::NoisyRun {
            target: &target,
            pool: &pool,
            quiet_rate: args.noisy_quiet_rate,
            seconds: args.noisy_secs,
            burst_events: args.noisy_burst_events,
            flood_events: args.noisy_flood_events,
            phases: &args.noisy_phases,
            timeout,
        };
        report.insert("noisy_neighbour".into(), run.run().await?);
    }
    if scenarios.contains(&"recovery") {
        let run = recovery::RecoveryRun {
            target: &target,
            pool: &pool,
            rate: args.recovery_rate,
            seconds: args.recovery_secs,
            outage_secs: args.recovery_outage_secs,
            yield_to: &args.recovery_yield_to,
            with_retries: args.recovery_retries,
        };
        report.insert("recovery".into(), serde_json::to_value(run.run().await?)?);
    }
    report.insert("processes".into(), serde_json::to_value(memory::relayops_processes())?);
    add_ratios(&mut report);

    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let rows: Vec<(String, String)> = deliveries.into_iter().map(|d| (d.label, d.key)).collect();
        human::print_human(&report, &rows);
    }
    Ok(())
}

/// What `scenario` (`backlog`, `queueing`: a target without a worker, and a
/// worker the bench starts) needs; it needs `--relayops-bin`.
/// The tools venv's `moto_server` (`scripts/aws-tools.sh`), else `PATH`'s.
fn default_moto_server() -> String {
    const TOOLS_VENV: &str = "/var/tmp/relayops-aws-tools/bin/moto_server";
    if std::path::Path::new(TOOLS_VENV).exists() {
        TOOLS_VENV.into()
    } else {
        "moto_server".into()
    }
}

fn api_only<'a>(
    args: &'a Args,
    target: &'a scenarios::Target,
    pool: &'a relayops_shared::db::Pool,
    scenario: &str,
) -> anyhow::Result<worker_process::ApiOnly<'a>> {
    let Some(relayops_bin) = args.relayops_bin.as_deref() else {
        anyhow::bail!("the {scenario} scenario needs --relayops-bin (and a target without a worker)");
    };
    Ok(worker_process::ApiOnly {
        target,
        pool,
        relayops_bin,
        worker_prefetch: args.backlog_prefetch,
        timeout: Duration::from_secs(600),
    })
}

/// A delivery scenario to run: its key in the report, its label in the human
/// report, and what it posts.
struct DeliveryScenario {
    key: String,
    label: String,
    event_type: String,
    endpoints: usize,
    feed: Feed,
}

/// The delivery scenarios asked for, in order; the fan-out ones once per
/// endpoint count (`fanout_10`, `fanout_10_batched`, ...).
fn delivery_scenarios(
    asked: &[&str],
    fanout_endpoints: &[usize],
    ordered_keys: &[usize],
) -> anyhow::Result<Vec<DeliveryScenario>> {
    anyhow::ensure!(fanout_endpoints.iter().all(|n| *n > 0), "--fanout-endpoints: counts must be at least 1");
    anyhow::ensure!(ordered_keys.iter().all(|n| *n > 0), "--ordered-keys: counts must be at least 1");
    let scenario = |key: String, label: String, event_type: String, endpoints, feed| DeliveryScenario {
        key,
        label,
        event_type,
        endpoints,
        feed,
    };
    let mut found = Vec::new();
    if asked.contains(&"delivery") {
        found.push(scenario("delivery".into(), "delivery".into(), "bench.one".into(), 1, Feed::Single));
    }
    if asked.contains(&"delivery-batched") {
        let feed = Feed::Batches(FEED_BATCH);
        found.push(scenario("delivery_batched".into(), "delivery*".into(), "bench.one-batched".into(), 1, feed));
    }
    for (name, suffix, feed) in
        [("fanout", "", Feed::Single), ("fanout-batched", "_batched", Feed::Batches(FEED_BATCH))]
    {
        if !asked.contains(&name) {
            continue;
        }
        for n in fanout_endpoints {
            let (key, star) = (format!("fanout_{n}{suffix}"), if suffix.is_empty() { "" } else { "*" });
            found.push(scenario(key, format!("fan-out {n}{star}"), format!("bench.{name}-{n}"), *n, feed));
        }
    }
    if asked.contains(&"ordered") {
        for keys in ordered_keys {
            let feed = Feed::Ordered { keys: *keys };
            found.push(scenario(
                format!("ordered_{keys}"),
                format!("ordered {keys}"),
                format!("bench.ordered-{keys}"),
                1,
                feed,
            ));
        }
    }
    Ok(found)
}

/// The figures as JSON with their `cost` (null where /proc is not readable).
fn with_cost(figures: impl serde::Serialize, cost: Option<cost::Cost>) -> anyhow::Result<serde_json::Value> {
    let mut value = serde_json::to_value(figures)?;
    value["cost"] = serde_json::to_value(cost)?;
    Ok(value)
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
