#!/usr/bin/env bash
# The functions under `cargo lambda watch`, end to end: a scratch database and
# queue namespace; moto server as SQS with the wake-up queue made by
# localstack/create-wakeup-queue.py; `relayops worker` and `relayops simulator`
# running; an endpoint created through the manage function's URL; an event
# posted to the ingest function's URL, whose SQS wake-up must reach the queue;
# the publisher invoked with `cargo lambda invoke` and a scheduled-event
# payload; the delivery seen, signed, by the receiver and through the query
# function's URL. Needs the services (scripts/services.sh); installs
# cargo-lambda and moto into the tools venv (scripts/aws-tools.sh) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="$(bash scripts/aws-tools.sh):$PATH"
target="${CARGO_TARGET_DIR:-$PWD/target}"
export CARGO_TARGET_DIR="$target"
port="${LAMBDA_SMOKE_PORT:-9000}"
sim_port="${LAMBDA_SMOKE_SIMULATOR_PORT:-18091}"
moto_port="${LAMBDA_SMOKE_MOTO_PORT:-18092}"
lambda="http://127.0.0.1:$port/lambda-url"
suffix="$(date +%s)_$$"
work="$(mktemp -d /tmp/relayops-lambda-smoke.XXXXXX)"
admin_url="${RELAYOPS_DATABASE_URL:-postgres://relayops:relayops@127.0.0.1:5432/relayops}"
database="relayops_smoke_$suffix"
pids=()

cleanup() {
  local status=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  psql "$admin_url" -qc "DROP DATABASE IF EXISTS $database WITH (FORCE)" >/dev/null 2>&1 || true
  if [[ $status -ne 0 ]]; then
    echo "lambda smoke: FAILED; logs in $work:" >&2
    tail -n 40 "$work"/*.log >&2 || true
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

fail() { echo "lambda smoke: $*" >&2; exit 1; }

# Waits (up to $1 seconds) until the command in the rest of the arguments succeeds.
wait_for() {
  local limit=$1; shift
  for _ in $(seq $((limit * 4))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  return 1
}

psql "$admin_url" -qc "CREATE DATABASE $database" >/dev/null
export RELAYOPS_DATABASE_URL="${admin_url%/*}/$database"
export RELAYOPS_AMQP_URL="${RELAYOPS_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}"
export RELAYOPS_REDIS_URL="${RELAYOPS_REDIS_URL:-redis://127.0.0.1:6379}"
export RELAYOPS_QUEUE_NAMESPACE="smoke.$suffix" RELAYOPS_QUEUE_EXPIRES_MS=120000
export RELAYOPS_SIMULATOR_LISTEN="127.0.0.1:$sim_port"
export RELAYOPS_OUTBOUND_ALLOW_CIDRS=127.0.0.1/32
export RELAYOPS_DB_POOL_SIZE=2 RELAYOPS_LOG="${RELAYOPS_LOG:-warn}"
export RELAYOPS_REDIS_PREFIX="smoke:$suffix"
export RELAYOPS_JWT_SECRET="smoke-jwt-secret-$suffix-0123456789abcdef"
export RELAYOPS_PUBLISHER_BUDGET_MS=10000

# SQS for the wake-up: moto server, and the queue the LocalStack init script makes.
moto_server -H 127.0.0.1 -p "$moto_port" >"$work/moto.log" 2>&1 & pids+=($!)
export AWS_ENDPOINT_URL="http://127.0.0.1:$moto_port" AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
wait_for 30 curl -s -o /dev/null "$AWS_ENDPOINT_URL/moto-api/" || fail "moto server did not start"
RELAYOPS_WAKEUP_QUEUE_URL=$(python3 localstack/create-wakeup-queue.py)
export RELAYOPS_WAKEUP_QUEUE_URL

# Build first, so `watch` starts the functions at once (same profile, same target dir).
cargo build -q -p relayops --bin relayops
cargo build -q -p relayops-ingest -p relayops-query -p relayops-manage -p relayops-publisher --bins
"$target/debug/relayops" migrate >/dev/null
key=$(RELAYOPS_BOOTSTRAP_PASSWORD="smoke-password-$suffix" "$target/debug/relayops" bootstrap \
  --tenant "Lambda smoke" --email "smoke-$suffix@example.com" | python3 -c 'import json,sys; print(json.load(sys.stdin)["api_key"])')

"$target/debug/relayops" simulator >"$work/simulator.log" 2>&1 & pids+=($!)
"$target/debug/relayops" worker >"$work/worker.log" 2>&1 & pids+=($!)
cargo lambda watch --quiet --ignore-changes --invoke-address 127.0.0.1 --invoke-port "$port" \
  >"$work/watch.log" 2>&1 & pids+=($!)

wait_for 120 curl -sf "http://127.0.0.1:$sim_port/_sim/received" || fail "simulator did not start"
# Any HTTP answer from the emulator means it listens (401: no credential).
wait_for 300 curl -s -o /dev/null "$lambda/manage/v1/endpoints" || fail "cargo lambda watch did not answer"

auth=(-H "Authorization: Bearer $key" -H 'content-type: application/json')
endpoint=$(curl -sf "${auth[@]}" "$lambda/manage/v1/endpoints" \
  -d "{\"url\":\"http://127.0.0.1:$sim_port/sim/ok\",\"event_types\":[\"order.*\"]}") \
  || fail "manage: endpoint creation failed"
secret=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["secret"])' "$endpoint")
curl -sf -H 'content-type: application/json' "http://127.0.0.1:$sim_port/_sim/secrets" -d "{\"secret\":\"$secret\"}"

status=$(curl -s -o "$work/ingest.json" -w '%{http_code}' "${auth[@]}" "$lambda/ingest/v1/events" \
  -d '{"event_type":"order.created","payload":{"order_id":1001}}')
[[ $status == 201 ]] || fail "ingest answered $status: $(cat "$work/ingest.json")"
event_id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$work/ingest.json")

python3 - <<'PY' || fail "no wake-up message on the SQS queue"
import os, boto3
sqs = boto3.client("sqs", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
got = sqs.receive_message(QueueUrl=os.environ["RELAYOPS_WAKEUP_QUEUE_URL"], MaxNumberOfMessages=10, WaitTimeSeconds=2)
bodies = [message["Body"] for message in got.get("Messages", [])]
assert bodies and all("outbox.wakeup" in body for body in bodies), bodies
PY

cargo lambda invoke publisher --invoke-address 127.0.0.1 --invoke-port "$port" \
  --data-file events/schedule.json >"$work/publisher.json" || fail "publisher invocation failed"
python3 - "$work/publisher.json" <<'PY' || fail "publisher did not publish: $(cat "$work/publisher.json")"
import json, sys
report = json.load(open(sys.argv[1]))
assert report["trigger"] == "schedule" and report["published"] >= 1, report
PY

delivered() {
  curl -sf -H "Authorization: Bearer $key" "$lambda/query/v1/events/$event_id/deliveries" >"$work/deliveries.json" \
    && python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["data"]; sys.exit(0 if d and d[0]["status"]=="delivered" else 1)' "$work/deliveries.json"
}
wait_for 60 delivered || fail "event $event_id not delivered: $(cat "$work/deliveries.json" 2>/dev/null)"
curl -sf "http://127.0.0.1:$sim_port/_sim/received" >"$work/received.json"
python3 - "$work/deliveries.json" "$work/received.json" <<'PY' || fail "the simulator did not receive a signed delivery"
import json, sys
delivery = json.load(open(sys.argv[1]))["data"][0]["id"]
received = [r for r in json.load(open(sys.argv[2])) if r["delivery_id"] == delivery]
assert received and received[0]["signature_valid"] is True, received
PY
echo "lambda smoke: ok (manage, ingest and query over function URLs, SQS wake-up on moto, publisher by cargo lambda invoke, delivered by the worker)"
