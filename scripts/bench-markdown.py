#!/usr/bin/env python3
"""Turns one `relayops-bench --json` report (the default scenarios) into the
headline table of BENCHMARKS.md, so the table is never typed by hand.

Prints Markdown: the machine, date and commit, then one row per figure —
deliveries first (one subscriber, single posts and batches; fan-out; paced
end-to-end latency; a slow endpoint beside a fast one), then ingest alone —
each with its latency percentiles, the server's CPU seconds per 1,000
(deliveries, or events for ingest alone: Postgres, RabbitMQ, Redis and
RelayOps summed) and, for throughput, its share of the machine's own
Postgres ceiling measured in the same run; then the ceilings and the
processes' peak memory.

Usage: scripts/bench-markdown.py report.json [--commit abc1234]
(the commit defaults to `git rev-parse --short HEAD`).
"""
import json
import subprocess
import sys


def num(value, digits=0):
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def millis(percentiles, *keys):
    if not percentiles:
        return "–"
    return " / ".join(num(percentiles.get(f"{key}_ms"), 1) for key in keys)


def cpu(figures):
    cost = (figures or {}).get("cost") or {}
    return num(cost.get("server_cpu_secs_per_1000"), 2)


def share(rate, ceiling):
    if not rate or not ceiling:
        return "–"
    return f"{rate / ceiling:.2f}×"


def rows(report):
    ceiling = (report.get("ceilings") or {}).get("postgres_ingest_tx_per_sec")
    delivery_rows = [
        ("delivery", "1 subscriber, single posts"),
        ("delivery_batched", "1 subscriber, posted in batches"),
    ]
    for key in sorted(k for k in report if k.startswith("fanout_")):
        n = key.split("_")[1]
        fed = "in batches" if key.endswith("_batched") else "single posts"
        delivery_rows.append((key, f"fan-out to {n} endpoints, {fed}"))
    for key, label in delivery_rows:
        figures = report.get(key)
        if not figures:
            continue
        rate = figures.get("deliveries_per_sec")
        yield (label, f"{num(rate)} deliveries/s", millis(figures.get("end_to_end"), "p50", "p95", "p99"),
               cpu(figures), share(rate, ceiling))
    for key in sorted((k for k in report if k.startswith("paced_")), key=lambda k: int(k.split("_")[1])):
        figures = report[key]
        label = f"paced {figures.get('offered_events_per_sec')} events/s, 1 subscriber"
        yield (label, f"{num(figures.get('delivered'))} delivered of {num(figures.get('accepted'))}",
               millis(figures.get("end_to_end"), "p50", "p95", "p99"), cpu(figures), "–")
    slow = report.get("slow_endpoint")
    if slow:
        label = (f"a fast endpoint beside a {slow.get('slow_response_ms')} ms one "
                 f"(`max_in_flight` {slow.get('slow_max_in_flight')}), {slow.get('offered_events_per_sec')} events/s")
        yield (label, f"slow: {num(slow.get('slow_arrivals_per_sec'), 1)}/s of its {num(slow.get('slow_limit_per_sec'), 1)}/s limit",
               "fast: " + millis(slow.get("fast_end_to_end"), "p50", "p95", "p99"), "–", "–")
    ingest = report.get("ingest")
    if ingest:
        rate = ingest.get("events_per_sec")
        yield ("ingest alone (no subscriber), single posts", f"{num(rate)} events/s",
               "answer " + millis(ingest.get("latency"), "p50", "p95", "p99"), cpu(ingest), share(rate, ceiling))
    batch = report.get("batch_ingest")
    if batch:
        rate = batch.get("events_per_sec")
        yield (f"ingest alone, batches of {batch.get('batch_size')}", f"{num(rate)} events/s",
               "batch " + millis(batch.get("batch_latency"), "p50", "p95", "p99"), cpu(batch), share(rate, ceiling))


def main(args):
    if not args or args[0].startswith("-"):
        sys.exit(__doc__)
    report = json.load(open(args[0], encoding="utf-8"))
    commit = args[args.index("--commit") + 1] if "--commit" in args else subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip() or "?"
    machine = report.get("machine") or {}
    print(f"Run {machine.get('date', '?')} on commit `{commit}`: {machine.get('cpus', '?')} CPUs "
          f"({machine.get('cpu_model', '?')}), {machine.get('memory_gib', '?')} GiB, Linux {machine.get('kernel', '?')}; "
          f"Postgres, RabbitMQ, Redis, `relayops all` and the bench on the same machine; "
          f"{(report.get('history') or {}).get('deliveries_partitions', '?')} history partitions.")
    print()
    print("| figure | throughput | end to end p50 / p95 / p99, ms (a burst's queue included) | CPU s per 1,000 | of the Postgres ceiling |")
    print("|---|---|---|---|---|")
    for row in rows(report):
        print("| " + " | ".join(row) + " |")
    ceilings = report.get("ceilings") or {}
    print()
    print(f"Ceilings measured in the same run: Postgres {num(ceilings.get('postgres_ingest_tx_per_sec'))} "
          f"ingest-shaped transactions/s, RabbitMQ {num(ceilings.get('rabbitmq_confirmed_publishes_per_sec'))} "
          f"confirmed publishes/s. CPU per 1,000 is summed over Postgres, RabbitMQ, Redis and RelayOps.")
    processes = report.get("processes") or []
    if processes:
        peaks = ", ".join(f"{num(p.get('peak_rss_mib'), 0)} MiB" for p in processes)
        print(f"Peak memory (RSS) of the RelayOps process: {peaks}.")


if __name__ == "__main__":
    main(sys.argv[1:])
