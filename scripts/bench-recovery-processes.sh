#!/usr/bin/env bash
# relayops-bench's recovery scenario (RabbitMQ stopped 15 s at 100 events/s)
# against the roles as production runs them: `relayops api`, `relayops
# publisher` and two `relayops worker` processes on a database of their own.
# Prefix with scripts/with-cpu-hog.sh to run it on a loaded machine; add
# --recovery-retries (after the two binaries) for fan-out 2 with retries
# pending when the broker stops.
# usage: scripts/bench-recovery-processes.sh [relayops binary] [relayops-bench binary] [bench arguments…]
set -euo pipefail
target="${CARGO_TARGET_DIR:-target}/release"
bin="${1:-$target/relayops}" bench="${2:-$target/relayops-bench}"
base="${RELAYOPS_DATABASE_URL:-postgres://relayops:relayops@127.0.0.1:5432/relayops}"
run="recovery_processes_$$"
psql "$base" -qc "CREATE DATABASE \"$run\"" >/dev/null
export RELAYOPS_DATABASE_URL="${base%/*}/$run"
export RELAYOPS_AMQP_URL="${RELAYOPS_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}"
export RELAYOPS_REDIS_URL="${RELAYOPS_REDIS_URL:-redis://127.0.0.1:6379}"
export RELAYOPS_QUEUE_NAMESPACE="$run" RELAYOPS_REDIS_PREFIX="$run" RELAYOPS_LOG=warn
export RELAYOPS_OUTBOUND_ALLOW_CIDRS=127.0.0.1/32 RELAYOPS_JWT_SECRET=bench-only-jwt-secret-0123456789abcdef
export RELAYOPS_API_LISTEN=127.0.0.1:18280
"$bin" migrate >/dev/null
pids=()
cleanup() {
  set +e
  [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null && wait "${pids[@]}" 2>/dev/null
  psql "$base" -qc "DROP DATABASE IF EXISTS \"$run\" WITH (FORCE)" >/dev/null
  for queue in $(timeout 60 rabbitmqctl list_queues name --silent 2>/dev/null | grep "^$run\."); do
    timeout 20 rabbitmqctl delete_queue "$queue" >/dev/null 2>&1
  done
}
trap cleanup EXIT
# Each role but the API serves /metrics on an operations port of its own:
# the bench sums the broker counters over all of them.
ops_port=18281 metrics_also=()
for role in api publisher worker worker; do
  ops="off"
  if [ "$role" != api ]; then
    ops="127.0.0.1:$ops_port" && metrics_also+=("http://$ops/metrics") && ops_port=$((ops_port + 1))
  fi
  RELAYOPS_WORKER_HEALTH_LISTEN="$ops" "$bin" "$role" > "/tmp/$run-$role-${#pids[@]}.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 1 120); do curl -sf http://127.0.0.1:18280/health/ready >/dev/null && break; sleep 0.5; done
"$bench" --api http://127.0.0.1:18280 --scenarios recovery \
  --metrics-also "$(IFS=,; echo "${metrics_also[*]}")" "${@:3}"
