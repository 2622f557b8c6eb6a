#!/usr/bin/env python3
"""Reads the hop trace (`RELAYOPS_LOG=warn,relayops::hops=trace`, in the default
JSON log format: lines of `RELAYOPS_LOG_FORMAT=text` are skipped; see
`relayops_shared::telemetry::HOPS_TARGET`) of one or more RelayOps
processes and prints, per step of an event's way from its commit to the
receiver's answer, the time between consecutive hops: p50, p90 and p99 in
milliseconds over every event that logged both. `at_us` is the wall clock,
comparable across processes on one host, so logs of an API and a worker on the
same machine can be given together. The first line is the ingest handler's own
time (request parsed -> rows committed, `handler_us`).

Usage: scripts/hops-summary.py relayops.log [worker.log ...]
"""
import collections
import json
import sys

HOPS = [
    "ingest.committed",
    "publish.claimed",
    "publish.confirmed",
    "worker.received",
    "worker.claimed",
    "worker.admitted",
    "worker.answered",
]


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def line(label, values):
    if not values:
        return f"{label:<42} no events logged both hops"
    p50, p90, p99 = (percentile(values, f) for f in (0.5, 0.9, 0.99))
    return f"{label:<42} p50 {p50:7.2f}  p90 {p90:7.2f}  p99 {p99:7.2f} ms  ({len(values)} events)"


def main(paths):
    if not paths:
        sys.exit(__doc__)
    # The first time each event reached each hop (a redelivered event keeps
    # its first pass).
    seen = collections.defaultdict(dict)
    handler_ms = []
    for path in paths:
        with open(path, encoding="utf-8") as log:
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
                if hop == "ingest.committed" and "handler_us" in fields:
                    handler_ms.append(fields["handler_us"] / 1000)
    print(line("handler (parsed -> committed)", handler_ms))
    for earlier, later in zip(HOPS, HOPS[1:]):
        gaps = [(hops[later] - hops[earlier]) / 1000 for hops in seen.values() if earlier in hops and later in hops]
        print(line(f"{earlier} -> {later}", gaps))
    whole = [(h[HOPS[-1]] - h[HOPS[0]]) / 1000 for h in seen.values() if HOPS[0] in h and HOPS[-1] in h]
    print(line("committed -> answered", whole))


if __name__ == "__main__":
    main(sys.argv[1:])
