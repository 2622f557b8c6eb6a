#!/usr/bin/env bash
# A small run of relayops-bench against a fresh `relayops all` (debug build), to
# prove the load generator and every scenario work. Not a timed assertion.
set -euo pipefail
target="${CARGO_TARGET_DIR:-target}/debug"
export RELAYOPS_API_LISTEN=127.0.0.1:18080 RELAYOPS_SIMULATOR_LISTEN=127.0.0.1:18090 RELAYOPS_LOG=warn
"$target/relayops" all > /tmp/relayops-bench-smoke.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
"$target/relayops-bench" --api http://127.0.0.1:18080 --events 300 --concurrency 8 --ceiling-secs 1 --json > /tmp/relayops-bench-smoke.json
grep -q '"deliveries_per_sec"' /tmp/relayops-bench-smoke.json
echo "bench smoke: ok ($(grep -c complete\":\ true /tmp/relayops-bench-smoke.json) delivery scenarios complete)"
