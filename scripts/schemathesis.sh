#!/usr/bin/env bash
# Property-based API testing: schemathesis (PyPI) generates requests from the
# OpenAPI document the running API serves, valid and invalid, and fails on any
# 5xx (`not_a_server_error`). Runs `relayops api` on a free loopback port, with
# its own database, queue namespace and Redis prefix, and an API key from
# `relayops bootstrap`. A worker runs only until the queues exist (ingest
# refuses work while it cannot measure the ready queue) and is stopped before
# any endpoint exists, so nothing generated is ever delivered anywhere.
#
# Bounded: SCHEMATHESIS_MAX_EXAMPLES per operation (default 25) and
# SCHEMATHESIS_MAX_TIME seconds in all (default 90). Installs schemathesis into
# a venv under /var/tmp on first use (SCHEMATHESIS_VENV to move it).
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-target}/debug"
venv="${SCHEMATHESIS_VENV:-/var/tmp/relayops-schemathesis-venv}"
max_examples="${SCHEMATHESIS_MAX_EXAMPLES:-25}"
max_time="${SCHEMATHESIS_MAX_TIME:-90}"
base_url="${RELAYOPS_DATABASE_URL:-postgres://relayops:relayops@127.0.0.1:5432/relayops}"

if ! "$venv/bin/st" --version >/dev/null 2>&1; then
  echo "schemathesis: installing into $venv"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    # Debian ships venv separately.
    rm -rf "$venv"
    (apt-get install -y -qq python3-venv || (apt-get update -qq && apt-get install -y -qq python3-venv)) >/dev/null
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install -q --disable-pip-version-check 'schemathesis>=4.32,<5'
fi

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

run_id="st$$_$(date +%s)"
database="relayops_schemathesis_${run_id}"
api_port="$(free_port)"
log="/tmp/relayops-schemathesis-${run_id}.log"
export RELAYOPS_DATABASE_URL="${base_url%/*}/${database}"
export RELAYOPS_AMQP_URL="${RELAYOPS_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}"
export RELAYOPS_REDIS_URL="${RELAYOPS_REDIS_URL:-redis://127.0.0.1:6379}"
export RELAYOPS_QUEUE_NAMESPACE="schemathesis.${run_id}" RELAYOPS_QUEUE_EXPIRES_MS=600000
export RELAYOPS_REDIS_PREFIX="schemathesis:${run_id}"
export RELAYOPS_API_LISTEN="127.0.0.1:${api_port}" RELAYOPS_LOG="${RELAYOPS_LOG:-warn}"
export RELAYOPS_JWT_SECRET="schemathesis-jwt-secret-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
export RELAYOPS_BOOTSTRAP_TOKEN="schemathesis-bootstrap-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
admin_token="schemathesis-admin-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
export RELAYOPS_ADMIN_TOKEN="$admin_token"

psql "$base_url" -qc "CREATE DATABASE \"${database}\"" >/dev/null
pid="" worker_pid=""
cleanup() {
  local status=$?
  set +e
  for process in $worker_pid $pid; do
    kill "$process" 2>/dev/null
    wait "$process" 2>/dev/null
  done
  psql "$base_url" -qc "DROP DATABASE IF EXISTS \"${database}\" WITH (FORCE)" >/dev/null
  exit "$status"
}
trap cleanup EXIT

api_key="$(RELAYOPS_BOOTSTRAP_PASSWORD="schemathesis-password-1" "$target/relayops" bootstrap \
  --tenant "Schemathesis" --email "schemathesis@example.com" \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["api_key"])')"

"$target/relayops" api >"$log" 2>&1 &
pid=$!
api="http://127.0.0.1:${api_port}"
# A tiny HTTP client (no curl on a bare machine): METHOD PATH [JSON BODY].
call() {
  python3 - "$@" <<'PY'
import sys, urllib.request
method, url = sys.argv[1], sys.argv[2]
body = sys.argv[3].encode() if len(sys.argv) > 3 else None
headers = {"Content-Type": "application/json"}
if len(sys.argv) > 4:
    headers["Authorization"] = "Bearer " + sys.argv[4]
urllib.request.urlopen(urllib.request.Request(url, data=body, method=method, headers=headers), timeout=5).read()
PY
}
for _ in $(seq 1 100); do
  call GET "$api/openapi.json" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { echo "schemathesis: relayops api exited; log:"; cat "$log"; exit 1; }
  sleep 0.1
done

# The worker declares the queues; once the API is ready (it can measure them),
# the worker goes.
"$target/relayops" worker >>"$log" 2>&1 &
worker_pid=$!
for _ in $(seq 1 200); do
  call GET "$api/health/ready" 2>/dev/null && break
  sleep 0.1
done
call GET "$api/health/ready" || { echo "schemathesis: the API never became ready; log:"; cat "$log"; exit 1; }
kill "$worker_pid"
wait "$worker_pid" 2>/dev/null || true
worker_pid=""

# Something to find: an endpoint (at a documentation address, never sent to)
# and an event fanned out to it.
call POST "$api/v1/endpoints" '{"url": "https://example.com/hook", "event_types": ["*"]}' "$api_key"
call POST "$api/v1/events" '{"event_type": "order.created", "payload": {"n": 1}}' "$api_key"

# schemathesis keeps a cache in its working directory: not in the repository.
workdir="$(mktemp -d)"
# st_run TOKEN MAX_TIME PATH-FILTER...: one schemathesis run, authorised by TOKEN.
st_run() {
  local token=$1 time_limit=$2
  shift 2
  (cd "$workdir" && "$venv/bin/st" run "$api/openapi.json" \
    --checks not_a_server_error \
    --header "Authorization: Bearer $token" \
    "$@" \
    --max-examples "$max_examples" --max-time "$time_limit" \
    --phases examples,coverage,fuzzing \
    --workers 1 --seed "${SCHEMATHESIS_SEED:-1}" \
    --request-timeout 10 --no-color)
}
status=0
st_run "$api_key" "$max_time" --exclude-path-regex '^/admin/' || status=$?
# The platform admin API with the platform token (a tenant key only meets 401
# there); after the tenant routes, since it may suspend the tenant.
[[ $status -ne 0 ]] || st_run "$admin_token" "${SCHEMATHESIS_ADMIN_MAX_TIME:-30}" --include-path-regex '^/admin/' \
  || status=$?
rm -rf "$workdir"
if [[ $status -ne 0 ]]; then
  echo "schemathesis: failures above; server log: $log"
  grep -i '"level":"ERROR"' "$log" | head -20 || true
  exit "$status"
fi
rm -f "$log"
echo "schemathesis: no 5xx"
