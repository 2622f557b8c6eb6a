#!/bin/bash
# Postgres CPU per event of ingest with 1, 10 and 100 subscribers, before and
# after issue 18 item 2 (one outbox row per event instead of one per
# delivery), measured in SQL (the BENCHMARKS.md of commit `7bb008e`, "One outbox row per event"):
# `pgbench -M prepared -c 1` runs each statement for a few seconds on a scratch
# database (relayops_test_fanout_sql, migrated by the relayops binary, dropped
# at the end); the figure is the pgbench backend's CPU time (utime + stime
# from /proc, polled until it exits) divided by the events written, which
# other load on a shared machine disturbs far less than throughput.
# Variants, alternated before/after in each round:
#   ingest  one event per statement (INGEST)
#   many    16 events per statement (INGEST_MANY, group commit)
#   cycle   INGEST, then the publisher's claim, (after: expansion,) delete
# Usage: scripts/bench-fanout-sql.sh [seconds per run] [rounds]  (default 8, 3)
set -euo pipefail
secs=${1:-8} rounds=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
sql=$here/sql
bin=${RELAYOPS_BIN:-$here/../target/debug/relayops}
url=${RELAYOPS_DATABASE_URL:-postgres://relayops:relayops@127.0.0.1:5432/relayops}
db=relayops_test_fanout_sql
U=${url%/*}/$db
psql "$url" -qAtX -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
trap 'psql "$url" -qAtX -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null' EXIT
RELAYOPS_DATABASE_URL=$U "$bin" migrate >/dev/null
psql "$U" -qAtX -v ON_ERROR_STOP=1 -f "$sql/fanout-setup.sql" >/dev/null
work=$(mktemp -d)
cat "$sql/fanout-ingest-before.sql" "$sql/fanout-claim.sql" "$sql/fanout-delete.sql" > "$work/cycle-before.sql"
cat "$sql/fanout-ingest-after.sql" "$sql/fanout-claim.sql" "$sql/fanout-expand.sql" "$sql/fanout-delete.sql" \
  > "$work/cycle-after.sql"
for variant in ingest many; do
  for when in before after; do cp "$sql/fanout-$variant-$when.sql" "$work/$variant-$when.sql"; done
done

# One run: prints µs of backend CPU per event.
run() {
  local script=$1 tenant=$2 events_per_tx=$3 pid= last=0 tx
  psql "$U" -qAtX -c "TRUNCATE relayops.outbox_messages" >/dev/null
  # Only this run's backend (the last run's may still be exiting).
  local since
  since=$(psql "$U" -qAtX -c "SELECT now()")
  pgbench -n -M prepared -c 1 -T "$secs" -D tenant="$tenant" -f "$script" "$U" > "$work/out" 2>&1 &
  local bench=$!
  for _ in $(seq 200); do
    pid=$(psql "$U" -qAtX -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench'
                               AND datname = current_database() AND backend_start >= '$since'
                             ORDER BY backend_start DESC LIMIT 1")
    # pgbench opens a short-lived connection first: keep the one that stays.
    sleep 0.2
    [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] && break
  done
  while [ -r "/proc/$pid/stat" ]; do
    v=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || true)
    [ -n "$v" ] && last=$v
    sleep 0.05
  done
  wait $bench || { cat "$work/out" >&2; return 1; }
  tx=$(awk '/number of transactions actually processed/ {print $NF}' "$work/out")
  if [ "$last" = 0 ]; then echo "n/a"; return; fi
  python3 -c "print(round($last / $(getconf CLK_TCK) / ($tx * $events_per_tx) * 1e6))"
}

echo "variant|subscribers|round|before µs/event|after µs/event|load"
for variant in ingest many cycle; do
  per_tx=1
  [ $variant = many ] && per_tx=16
  for n in 1 10 100; do
    tenant=$(printf '00000000-0000-0000-0000-%012d' "$n")
    for round in $(seq "$rounds"); do
      before=$(run "$work/$variant-before.sql" "$tenant" $per_tx)
      after=$(run "$work/$variant-after.sql" "$tenant" $per_tx)
      echo "$variant|$n|$round|$before|$after|$(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done
rm -rf "$work"
