#!/usr/bin/env bash
# A small run of relayops-bench against a fresh `relayops all` (debug build), to
# prove the load generator and every scenario work; then the backlog,
# queueing, scale-out, many-tenants and sqs scenarios against `relayops api` (no
# worker: the bench starts its own); and the hop trace's summary (scripts/hops-summary.py) of the first run.
# Not a timed assertion.
set -euo pipefail
target="${CARGO_TARGET_DIR:-target}/debug"
export RELAYOPS_API_LISTEN=127.0.0.1:18080 RELAYOPS_SIMULATOR_LISTEN=127.0.0.1:18090 RELAYOPS_LOG=warn
# `relayops all` opens only its simulator's port; the bench receives on a random loopback port.
export RELAYOPS_OUTBOUND_ALLOW_CIDRS=127.0.0.1/32
# The worker the backlog scenario starts picks a free operations port.
export RELAYOPS_WORKER_HEALTH_LISTEN=127.0.0.1:0
# The console scenario signs in (login tokens need a key).
export RELAYOPS_JWT_SECRET="${RELAYOPS_JWT_SECRET:-bench-smoke-jwt-secret-0123456789abcdef}"
out=/tmp/relayops-bench-smoke.json
# A database of its own, made now and dropped after: what
# the machine's `relayops` database holds (the demo's data, a schema another
# checkout migrated) is not this run's business.
base_url="${RELAYOPS_DATABASE_URL:-postgres://relayops:relayops@127.0.0.1:5432/relayops}"
database="relayops_bench_smoke_$$"
export RELAYOPS_DATABASE_URL="${base_url%/*}/${database}"
psql "$base_url" -qc "CREATE DATABASE \"${database}\"" >/dev/null
pid=""
cleanup() {
  local status=$?
  set +e
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  psql "$base_url" -qc "DROP DATABASE IF EXISTS \"${database}\" WITH (FORCE)" >/dev/null
  exit "$status"
}
trap cleanup EXIT

# With the hop trace on: its summary is checked below.
RELAYOPS_LOG=warn,relayops::hops=trace "$target/relayops" all > /tmp/relayops-bench-smoke.log 2>&1 &
pid=$!
"$target/relayops-bench" --api http://127.0.0.1:18080 --events 300 --concurrency 8 --ceiling-secs 1 \
  --paced-rates 50,100 --rate 50 --paced-secs 2 --console-deliveries 300 --console-rounds 3 --fanout-endpoints 1,10 --json \
  --scenarios ceilings,ingest,batch,delivery,delivery-batched,fanout,fanout-batched,paced,slow,console > "$out"
kill $pid; wait $pid 2>/dev/null || true

"$target/relayops" api > /tmp/relayops-bench-smoke-api.log 2>&1 &
pid=$!
"$target/relayops-bench" --api http://127.0.0.1:18080 --scenarios backlog,queueing,scale-out,many-tenants,sqs --backlog-events 500 \
  --backlog-prefetch 100 --queueing-subscribers 1,10 --queueing-events 100 \
  --scale-events 300 --scale-workers 1,2 --scale-publishers 1,2 \
  --many-tenants 50 --many-rate 25 --many-secs 2 --many-burst-events 500 --many-flood-events 50 --many-workers 1 \
  --sqs-events 200 --relayops-bin "$target/relayops" --json > "$out.backlog"

complete=$(cat "$out" "$out.backlog" | grep -c '"complete": true' || true)
for scenario in delivery delivery_batched fanout_1 fanout_10 fanout_1_batched fanout_10_batched paced_50 paced_100 slow_endpoint backlog queueing_1 queueing_10 console \
  scale_out_workers_1 scale_out_workers_2 scale_out_publishers_1 scale_out_publishers_2 many_tenants_1 sqs; do
  grep -q "\"$scenario\"" "$out" "$out.backlog" || { echo "bench smoke: no $scenario figures" >&2; exit 1; }
done
drained=$(grep -c '"drained_complete": true' "$out.backlog" || true)
[ "$drained" -eq 2 ] || { echo "bench smoke: only $drained queueing runs drained" >&2; cat "$out.backlog" >&2; exit 1; }
# A cost (CPU s per 1,000) beside each throughput figure: ingest, batch, six
# delivery scenarios, paced, backlog, and queueing and drain for each count.
costs=$(cat "$out" "$out.backlog" | grep -c '"server_cpu_secs_per_1000"' || true)
[ "$costs" -ge 14 ] || { echo "bench smoke: only $costs scenarios with a cost" >&2; exit 1; }
[ "$complete" -ge 6 ] || { echo "bench smoke: only $complete scenarios completed" >&2; cat "$out" "$out.backlog" >&2; exit 1; }
# The hop trace summary finds every step it names (a hop renamed in the code
# fails here), and refuses a log without the trace (the api's, at warn).
hops_summary="$(dirname "$0")/hops-summary.py"
steps=$(python3 "$hops_summary" /tmp/relayops-bench-smoke.log)
if grep -q "no events logged" <<<"$steps"; then echo "bench smoke: hop trace steps missing" >&2; echo "$steps" >&2; exit 1; fi
if python3 "$hops_summary" /tmp/relayops-bench-smoke-api.log >/dev/null 2>&1; then
  echo "bench smoke: hops-summary.py read hops from a log without the trace" >&2; exit 1
fi
echo "bench smoke: ok ($complete delivery scenarios complete, $(grep -c . <<<"$steps") hop trace lines)"
