#!/usr/bin/env python3
"""Reads the hop trace (`RELAYOPS_LOG=warn,relayops::hops=trace`, in the default
JSON log format: lines of `RELAYOPS_LOG_FORMAT=text` are skipped; see
`relayops_shared::telemetry::HOPS_TARGET`) of one or more RelayOps
processes and prints, per step of an event's way from its commit to the
receiver's answer, the time between consecutive hops: p50, p95 and p99 in
milliseconds over every event that logged both. `at_us` is the wall clock,
comparable across processes on one host, so logs of an API and a worker on the
same machine can be given together. The first line is the ingest handler's own
time (request parsed -> rows committed, `handler_us`). Percentiles are nearest
rank, as `relayops-bench` computes its own. An event is timed by the first
time it reached each hop: for an event with several deliveries, its first
delivery's way. A message carrying several events logs the publisher's hops
under its first event only, so the others count in the worker's steps alone.
With `--by-tenant`, the same per tenant (the worker's hops name it), the
quietest tenant first: how one tenant's events fare beside another's flood.
Exits 1 when the logs hold no hop line (the trace off, or a text-format log).

Usage: scripts/hops-summary.py [--by-tenant] relayops.log [worker.log ...]
"""
import collections
import json
import math
import sys

HOPS = [
    "ingest.committed",
    "publish.claimed",
    "publish.confirmed",
    "worker.consumed",
    "worker.received",
    "worker.claimed",
    "worker.admitted",
    "worker.answered",
]


def percentile(ordered, fraction):
    """Nearest rank of sorted `ordered`, as the bench's `stats::percentiles`."""
    rank = min(max(math.ceil(len(ordered) * fraction), 1), len(ordered))
    return ordered[rank - 1]


def line(label, values):
    if not values:
        return f"{label:<42} no events logged both hops"
    ordered = sorted(values)
    p50, p95, p99 = (percentile(ordered, f) for f in (0.5, 0.95, 0.99))
    return f"{label:<42} p50 {p50:7.2f}  p95 {p95:7.2f}  p99 {p99:7.2f} ms  ({len(values)} events)"


def read_hops(paths):
    """Each event's first time at each hop, and the handler's times (ms)."""
    seen = collections.defaultdict(dict)
    tenants = {}
    handler_ms = []
    for path in paths:
        try:
            log = open(path, encoding="utf-8")
        except OSError as error:
            sys.exit(f"hops-summary: cannot read {path}: {error.strerror}")
        with log:
            for text in log:
                if '"relayops::hops"' not in text:
                    continue
                try:
                    record = json.loads(text)
                except json.JSONDecodeError:
                    continue
                fields = record.get("fields", record)
                hop, event, at = fields.get("hop"), fields.get("event_id"), fields.get("at_us")
                if hop is None or event is None or at is None:
                    continue
                seen[event].setdefault(hop, at)
                if "tenant_id" in fields:
                    tenants.setdefault(event, fields["tenant_id"])
                if hop == "ingest.committed" and "handler_us" in fields:
                    handler_ms.append(fields["handler_us"] / 1000)
    return seen, tenants, handler_ms


def summary(events):
    def gaps(earlier, later):
        return [(hops[later] - hops[earlier]) / 1000 for hops in events if earlier in hops and later in hops]

    for earlier, later in zip(HOPS, HOPS[1:]):
        print(line(f"{earlier} -> {later}", gaps(earlier, later)))
    print(line("committed -> answered", gaps(HOPS[0], HOPS[-1])))


def main(args):
    by_tenant = "--by-tenant" in args
    paths = [arg for arg in args if arg != "--by-tenant"]
    if not paths:
        sys.exit(__doc__)
    seen, tenants, handler_ms = read_hops(paths)
    if not seen:
        sys.exit("hops-summary: no hop line in " + ", ".join(paths) + " (is RELAYOPS_LOG=...,relayops::hops=trace on, in JSON?)")
    print(line("handler (parsed -> committed)", handler_ms))
    if not by_tenant:
        summary(seen.values())
        return
    groups = collections.defaultdict(list)
    for event, hops in seen.items():
        groups[tenants.get(event, "(no worker hop)")].append(hops)
    for tenant, events in sorted(groups.items(), key=lambda group: len(group[1])):
        print(f"\ntenant {tenant} ({len(events)} events)")
        summary(events)


if __name__ == "__main__":
    main(sys.argv[1:])
