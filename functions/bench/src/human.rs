//! The human report: one line a scenario, its cost on the line below.
use crate::cost::describe;

/// Prints the report; `deliveries` names the delivery scenarios' rows in order:
/// (label, key in the report).
pub fn print_human(report: &serde_json::Map<String, serde_json::Value>, deliveries: &[(String, String)]) {
    let f = |v: &serde_json::Value| v.as_f64().map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into());
    if let Some(m) = report.get("machine") {
        println!(
            "machine    {} · {} CPUs ({}) · {} GiB · kernel {}",
            m["date"].as_str().unwrap_or("?"),
            m["cpus"],
            m["cpu_model"].as_str().unwrap_or("?"),
            m["memory_gib"],
            m["kernel"].as_str().unwrap_or("?")
        );
    }
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
        println!("           {}", describe(&i["cost"]));
    }
    if let Some(b) = report.get("batch_ingest") {
        println!(
            "batch      {} events/s in batches of {}   batch latency p50 {} ms  p99 {} ms",
            f(&b["events_per_sec"]),
            b["batch_size"],
            f(&b["batch_latency"]["p50_ms"]),
            f(&b["batch_latency"]["p99_ms"])
        );
        println!("           {}", describe(&b["cost"]));
    }
    for (name, key) in deliveries {
        if let Some(d) = report.get(key) {
            println!(
                "{name:<10} {} deliveries/s ({} of them{})   end-to-end p50 {} ms  p95 {} ms  p99 {} ms   attempts/delivery {}   ingest {} events/s ({})",
                f(&d["deliveries_per_sec"]), d["deliveries"], if d["complete"] == true { "" } else { ", INCOMPLETE" },
                f(&d["end_to_end"]["p50_ms"]), f(&d["end_to_end"]["p95_ms"]), f(&d["end_to_end"]["p99_ms"]),
                f(&d["attempts_per_delivery"]), f(&d["ingest"]["events_per_sec"]), d["feed"].as_str().unwrap_or_default()
            );
            println!("           {}", describe(&d["cost"]));
        }
    }
    for (_, p) in report.iter().filter(|(key, _)| key.starts_with("paced_")) {
        println!(
            "paced      {} events/s offered for {} s: end-to-end (post → receiver) p50 {} ms  p95 {} ms  p99 {} ms   ingest p50 {} ms p99 {} ms{}",
            p["offered_events_per_sec"], p["seconds"],
            f(&p["end_to_end"]["p50_ms"]), f(&p["end_to_end"]["p95_ms"]), f(&p["end_to_end"]["p99_ms"]),
            f(&p["ingest_latency"]["p50_ms"]), f(&p["ingest_latency"]["p99_ms"]),
            if p["complete"] == true { "" } else { "  INCOMPLETE" }
        );
        println!("           {}", describe(&p["cost"]));
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
        println!("           {}", describe(&b["cost"]));
    }
    if let Some(q) = report.get("sqs") {
        let ratio = q["sqs_over_webhook"].as_f64().unwrap_or_default();
        println!(
            "sqs        {} events each, one worker (prefetch {}), {} in flight: a webhook drained at {} deliveries/s, an SQS queue (moto) at {} ({ratio:.3}× the webhook's)",
            q["events"], q["worker_prefetch"], q["max_in_flight"], f(&q["webhook"]["deliveries_per_sec"]), f(&q["sqs"]["deliveries_per_sec"]),
        );
    }
    for (_, q) in report.iter().filter(|(key, _)| key.starts_with("queueing_")) {
        println!(
            "queueing   {} subscribers, API only: {} events answered/s, {} events/s ({} deliveries/s) on the broker   ingest p50 {} ms p99 {} ms   retried {}",
            q["subscribers"], f(&q["ingest"]["events_per_sec"]), f(&q["queued_events_per_sec"]),
            f(&q["queued_deliveries_per_sec"]), f(&q["ingest"]["latency"]["p50_ms"]),
            f(&q["ingest"]["latency"]["p99_ms"]), q["ingest"]["retried_by_status"]
        );
        println!("           {}", describe(&q["queueing_cost"]));
        println!(
            "           then a worker alone drained them at {} deliveries/s{}",
            f(&q["drained_deliveries_per_sec"]),
            if q["drained_complete"] == true { "" } else { " INCOMPLETE" }
        );
        println!("           {}", describe(&q["drain_cost"]));
    }
    for (_, w) in report.iter().filter(|(key, _)| key.starts_with("scale_out_workers_")) {
        println!(
            "scale-out  {} worker process(es) drained {} deliveries at {} deliveries/s{}; Postgres statements {} ms per 1,000",
            w["workers"],
            w["deliveries"],
            f(&w["deliveries_per_sec"]),
            if w["complete"] == true { "" } else { " INCOMPLETE" },
            f(&w["writer_statement_ms_per_1000"])
        );
        println!("           {}", describe(&w["cost"]));
    }
    for (_, p) in report.iter().filter(|(key, _)| key.starts_with("scale_out_publishers_")) {
        println!(
            "scale-out  {} publisher(s), {} workers, batches flat out: {} events/s ingested, {} deliveries/s end to end{}; Postgres statements {} ms per 1,000",
            p["publishers"], p["workers"], f(&p["ingest_events_per_sec"]), f(&p["deliveries_per_sec"]),
            if p["complete"] == true { "" } else { " INCOMPLETE" }, f(&p["writer_statement_ms_per_1000"])
        );
        println!("           {}", describe(&p["cost"]));
    }
    for (_, m) in report.iter().filter(|(key, _)| key.starts_with("many_tenants_")) {
        let quiet = |q: &serde_json::Value| {
            format!(
                "p50 {} p95 {} p99 {} max {} ms ({} of {} delivered; ingest p50 {} p99 {} ms, {} refusals retried; after the answer p50 {} p99 {} ms)",
                f(&q["end_to_end"]["p50_ms"]),
                f(&q["end_to_end"]["p95_ms"]),
                f(&q["end_to_end"]["p99_ms"]),
                f(&q["end_to_end"]["max_ms"]),
                q["delivered"],
                q["events"],
                f(&q["ingest"]["p50_ms"]),
                f(&q["ingest"]["p99_ms"]),
                q["refused"],
                f(&q["after_answer"]["p50_ms"]),
                f(&q["after_answer"]["p99_ms"])
            )
        };
        let loud = |l: &serde_json::Value| {
            format!(
                "burst {} deliveries/s, slow flood {} deliveries/s{}",
                f(&l["burst_deliveries_per_sec"]),
                f(&l["flood_deliveries_per_sec"]),
                if l["complete"] == true { "" } else { " INCOMPLETE" }
            )
        };
        println!(
            "many       {} quiet tenants at {} events/s, {} worker(s): quiet alone {}; beside the loud {} ({}× p99)",
            m["tenants"],
            m["offered_events_per_sec"],
            m["workers"],
            quiet(&m["quiet_alone"]),
            quiet(&m["quiet_beside_loud"]),
            f(&m["quiet_p99_ratio"])
        );
        let split = &m["quiet_beside_loud"]["cornered"];
        if !split.is_null() {
            println!(
                "           beside the loud, the {} quiet tenants both of whose shards are a loud tenant's ({} events): p50 {} p99 {} max {} ms; the others p50 {} p99 {} max {} ms",
                split["cornered_tenants"], split["cornered_events"],
                f(&split["cornered_end_to_end"]["p50_ms"]), f(&split["cornered_end_to_end"]["p99_ms"]),
                f(&split["cornered_end_to_end"]["max_ms"]), f(&split["others_end_to_end"]["p50_ms"]),
                f(&split["others_end_to_end"]["p99_ms"]), f(&split["others_end_to_end"]["max_ms"])
            );
        }
        println!(
            "           loud alone: {}; beside the quiet: {} ({}× the burst's rate)",
            loud(&m["loud_alone"]),
            loud(&m["loud_beside_quiet"]),
            f(&m["burst_rate_ratio"])
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
    if let Some(n) = report.get("noisy_neighbour") {
        print_noisy_neighbour(n);
    }
    if let Some(r) = report.get("recovery") {
        print_recovery(r);
    }
    if let Some(r) = report.get("ratios") {
        println!("ratios     {r}");
    }
    if let Some(history) = report.get("history") {
        println!(
            "history    {} partitions of deliveries (a deployment holds its retention's days plus the ones kept \
             ahead: 34 by default; a fresh database only those ahead)",
            history["deliveries_partitions"]
        );
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

/// The noisy-neighbour table: B's end-to-end latency per phase beside B's
/// alone, and A's throughput; a line per phase below on A's side.
fn print_noisy_neighbour(phases: &serde_json::Value) {
    let ms = |v: &serde_json::Value| v.as_f64().map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into());
    let ran = || crate::noisy::PHASES.iter().filter_map(|name| Some((*name, phases.get(*name)?)));
    if let Some(idle) = phases["idle"].as_object() {
        let f = |key: &str| idle.get(key).and_then(|v| v.as_f64()).unwrap_or(0.0);
        println!(
            "noisy      idle platform ({:.0} s): {:.1} rows/s, {:.1} commits/s, {:.3} cores",
            f("secs"),
            f("rows_per_sec"),
            f("commits_per_sec"),
            f("server_cpu_secs_per_sec")
        );
    }
    let Some(b) = ran().find_map(|(_, p)| p["b"].as_object()) else {
        println!("noisy      A alone only (no phase measured B)");
        return print_noisy_sides(ran());
    };
    println!(
        "noisy      B {} events/s for {} s per phase, end-to-end ms (first send → first arrival); A a fresh tenant per phase",
        b["offered_events_per_sec"], b["seconds"]
    );
    println!(
        "           {:<20} {:>8} {:>8} {:>8} {:>8} {:>13} {:>14} {:>13}",
        "phase", "B p50", "B p95", "B p99", "B max", "B deliv/post", "A deliveries/s", "B p99/alone"
    );
    for (name, p) in ran() {
        let e = &p["b"]["end_to_end"];
        let b_count = match (&p["b"]["delivered"], &p["b"]["posted"]) {
            (delivered, posted) if posted.is_u64() => format!("{delivered}/{posted}"),
            _ => "-".into(),
        };
        println!(
            "           {name:<20} {:>8} {:>8} {:>8} {:>8} {b_count:>13} {:>14} {:>13}",
            ms(&e["p50_ms"]),
            ms(&e["p95_ms"]),
            ms(&e["p99_ms"]),
            ms(&e["max_ms"]),
            ms(&p["a"]["deliveries_per_sec"]),
            p["b_p99_vs_alone"].as_f64().map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into())
        );
    }
    print_noisy_sides(ran());
}

/// A line per phase with a noisy side: what A did, how its rate was measured, how it settled.
fn print_noisy_sides<'r>(phases: impl Iterator<Item = (&'static str, &'r serde_json::Value)>) {
    for (name, p) in phases {
        let a = &p["a"];
        if a.is_null() {
            continue;
        }
        let drain = match (a["drain_secs"].as_f64(), a["complete"].as_bool()) {
            (Some(secs), Some(complete)) => {
                format!("drained in {secs:.1} s{}", if complete { "" } else { " INCOMPLETE" })
            }
            _ => format!("{} arrivals while B posted", a["arrivals_while_b_posted"]),
        };
        let vs = a["vs_burst_alone"].as_f64().map(|x| format!(", {x:.2}x burst-alone's rate")).unwrap_or_default();
        let settle = p["settle"]["secs"].as_f64().unwrap_or(0.0);
        let settle = match p["settle"]["drained"] == true {
            true => format!("settled in {settle:.1} s"),
            false => format!("NOT settled within {settle:.0} s"),
        };
        let load = a["load"].as_str().unwrap_or_default();
        println!("           {name}: A {load} ({} accepted); {drain}{vs}; {settle}", a["accepted"]);
        let b = &p["broker_messages"];
        if b.is_object() {
            let count = |key: &str| {
                let of = |group: &str| b[group].as_object().into_iter().flatten();
                of("summed")
                    .chain(of("shown"))
                    .filter(|(name, _)| name.contains(key))
                    .map(|(_, n)| n.as_f64().unwrap_or(0.0))
                    .sum::<f64>()
            };
            println!(
                "             broker {:.2} publishes per delivery arrived, {:.2} per attempt, {:.2} per delivery entered ({} over {} deliveries, {} attempts): outbox {} (recovery re-enqueues {}), postponed {}, deferred {}, retries {}",
                b["per_delivery"].as_f64().unwrap_or(0.0),
                b["per_attempt"].as_f64().unwrap_or(0.0),
                b["per_entered_delivery"].as_f64().unwrap_or(0.0),
                b["published_to_broker"],
                b["deliveries"],
                b["attempts"],
                count("outbox_published"),
                count("requeued"),
                count("postponed"),
                count("deferred"),
                count("outcome=\"retry\""),
            );
        }
        let w = &p["postgres_writes"];
        if w.is_object() {
            let less_idle = w["rows_per_delivery_less_idle"]
                .as_f64()
                .map(|x| format!(", {x:.2} less the idle platform's"))
                .unwrap_or_default();
            println!(
                "             postgres {:.2} rows written{less_idle}, {:.2} commits per delivery ({} rows over {} deliveries in {:.0} s)",
                w["rows_per_delivery"].as_f64().unwrap_or(0.0),
                w["commits_per_delivery"].as_f64().unwrap_or(0.0),
                w["rows_written"],
                w["deliveries"],
                w["window_secs"].as_f64().unwrap_or(0.0),
            );
        }
        if p["cost"].is_object() {
            let less_idle = p["cost"]["server_cpu_secs_per_1000_less_idle"]
                .as_f64()
                .map(|x| format!(" ({x:.2} less the idle platform's)"))
                .unwrap_or_default();
            println!("             {}{less_idle}", crate::cost::describe(&p["cost"]));
        }
    }
}

/// The recovery table: events, normal throughput, backlog and drain beside
/// its target, latency of all events and of the outage's, the broker's
/// publishes per delivery (each counter) and the receiver's requests per delivery.
fn print_recovery(r: &serde_json::Value) {
    let f = |v: &serde_json::Value| v.as_f64().map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into());
    println!(
        "recovery   {} events/s for {} s; RabbitMQ stopped after 10 s for {} s (stop_app {} s, start_app {} s)",
        r["offered_events_per_sec"],
        r["seconds"],
        f(&r["outage_secs"]),
        f(&r["stop_app_secs"]),
        f(&r["start_app_secs"])
    );
    println!(
        "           events    posted {}  accepted {}  refused {} {}  (503/429 retried {})  delivered {}  lost {}{}",
        r["posted"],
        r["accepted"],
        r["refused"],
        r["refused_by_status"],
        r["retried"],
        r["delivered"],
        r["lost"],
        if r["complete"] == true { "" } else { "  INCOMPLETE (300 s)" }
    );
    println!("           normal    {} deliveries/s (first 10 s)", f(&r["normal_deliveries_per_sec"]));
    let drain = match r["drain_secs"].as_f64() {
        Some(secs) => format!("drained in {secs:.1} s"),
        None => "NOT drained within 300 s".into(),
    };
    println!(
        "           backlog   {} events when start_app returned; {drain}   target 1.5 × backlog / normal + 10 s = {} s: {}",
        r["backlog_at_broker_back"],
        f(&r["drain_target_secs"]),
        if r["drain_within_target"] == true { "within" } else { "OVER" }
    );
    println!("           end-to-end ms          {:>8} {:>8} {:>8} {:>8}", "p50", "p95", "p99", "max");
    for (label, key) in [
        (format!("all {}", r["delivered"]), "end_to_end"),
        (format!("outage {}", r["posted_during_outage"]), "end_to_end_posted_during_outage"),
    ] {
        let p = &r[key];
        println!(
            "           {label:<22} {:>8} {:>8} {:>8} {:>8}",
            f(&p["p50_ms"]),
            f(&p["p95_ms"]),
            f(&p["p99_ms"]),
            f(&p["max_ms"])
        );
    }
    println!(
        "           ingest    p50 {} ms  p99 {} ms  max {} ms",
        f(&r["ingest_latency"]["p50_ms"]),
        f(&r["ingest_latency"]["p99_ms"]),
        f(&r["ingest_latency"]["max_ms"])
    );
    let b = &r["broker_messages"];
    if b.is_object() {
        let list = |v: &serde_json::Value| {
            let counters = v.as_object().into_iter().flatten();
            counters.map(|(name, n)| format!("{name} {}", f(n))).collect::<Vec<_>>().join(" + ")
        };
        println!(
            "           broker    {} publishes per delivery ({} over {} deliveries in {} s, stop_app to the end)",
            b["per_delivery"].as_f64().map(|x| format!("{x:.3}")).unwrap_or_else(|| "-".into()),
            f(&b["published_to_broker"]),
            b["deliveries"],
            f(&b["window_secs"])
        );
        println!("                     summed: {}", list(&b["summed"]));
        println!("                     minus:  {}", list(&b["subtracted"]));
        println!("                     shown:  {}", list(&b["shown"]).replace(" + ", ", "));
        println!("                     NOTE: {}", b["note"].as_str().unwrap_or_default());
        if b["absent"].as_array().is_some_and(|a| !a.is_empty()) {
            println!(
                "                     absent from /metrics (never counted, or not in this build; 0): {}",
                b["absent"]
            );
        }
    } else {
        println!("           broker    - (/metrics not read)");
    }
    println!(
        "           receiver  {} requests per delivery ({} requests)",
        r["requests_per_delivery"].as_f64().map(|x| format!("{x:.3}")).unwrap_or_else(|| "-".into()),
        r["receiver_requests"]
    );
}
