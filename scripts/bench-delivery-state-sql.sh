#!/bin/bash
# What a delivery's own row writes cost in Postgres, today and in two shapes
# that would write less (the BENCHMARKS.md of commit `85cb3bd`, "What the last CPU target would take"),
# measured in SQL on plain tables shaped like one history partition
# (scripts/sql/delivery-state-setup.sql: today's copied from the schema of a
# scratch database, relayops_test_delivery_state_sql, that the relayops binary
# migrates, dropped at the end; the steps are scripts/sql/delivery-state-*.sql).
# Each flow is a
# delivery's life without the event, the outbox or the broker: ingest writes
# the row, the worker's claim, then its record with the attempt row, each in
# a transaction of its own, `n` deliveries a statement (16: the batchers under
# load; 1: an event that arrives alone):
#   a   today: the claim rewrites the row (in_progress + lease), the record again
#   ac  today's row, no claim write: the record's transaction locks the rows
#       first (FOR UPDATE; in the worker it would stay open over the request)
#   b   the changing state in a narrow table of its own (claim and record
#       rewrite only it)
#   bc  b, no claim write
# The figure is the CPU time (utime + stime, reaped children included) of every
# postgres process (backends, WAL writer, checkpointer) over the run, plus that
# of a VACUUM of the run's dead rows right after it, divided by the deliveries
# recorded: µs a delivery. Autovacuum is off on these tables, so no run pays for
# another's garbage, and each run starts after a CHECKPOINT, so none pays for
# another's full-page images. `pgbench -M prepared -c 4 -j 2`. Both shapes are
# filled for 15 s first. The variants' order is reversed every other round.
# Usage: scripts/bench-delivery-state-sql.sh [seconds per run] [rounds]  (default 10, 3)
# (RELAYOPS_BIN: the relayops binary; default the debug build.)
set -euo pipefail
secs=${1:-10} rounds=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
sql=$here/sql
bin=${RELAYOPS_BIN:-${CARGO_TARGET_DIR:-$here/../target}/debug/relayops}
url=${RELAYOPS_DATABASE_URL:-postgres://relayops:relayops@127.0.0.1:5432/relayops}
db=relayops_test_delivery_state_sql
U=${url%/*}/$db
tables="deliveries_a, deliveries_b, delivery_state, attempts"
psql "$url" -qAtX -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
trap 'psql "$url" -qAtX -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null' EXIT
RELAYOPS_DATABASE_URL=$U "$bin" migrate >/dev/null
psql "$U" -qAtX -v ON_ERROR_STOP=1 -f "$sql/delivery-state-setup.sql" >/dev/null
work=$(mktemp -d)
# A flow: ingest, then the claim (or, for ac and bc, the lock that replaces
# it) and the record, with the table holding the state and what the record
# requires of a row filled in.
compose() {
  local variant=$1 ingest=$2 step=$3 state=$4 held=$5
  cat "$sql/delivery-state-ingest-$ingest.sql" "$sql/delivery-state-$step.sql" "$sql/delivery-state-record.sql" |
    sed -e "s/@STATE@/$state/g" -e "s/@HELD@/$held/g" > "$work/$variant.sql"
}
claimed="status = 'in_progress' AND lease_owner = 'worker-1'"
compose a a claim deliveries_a "$claimed"
compose ac a lock deliveries_a "status = 'pending'"
compose b b claim delivery_state "$claimed"
compose bc b lock delivery_state "status = 'pending'"
checkpoints=true
if ! psql "$U" -qAtX -c "CHECKPOINT" >/dev/null 2>&1; then
  checkpoints=false
  echo "CHECKPOINT refused (GRANT pg_checkpoint TO this role): a run may pay for another's full-page images" >&2
fi

# CPU ticks of every postgres process so far (its own and its reaped children's).
postgres_ticks() {
  local total=0 pid fields
  for pid in $(pgrep -x postgres); do
    fields=$(cut -d')' -f2 "/proc/$pid/stat" 2>/dev/null) || continue
    # shellcheck disable=SC2086
    set -- $fields
    total=$((total + ${12} + ${13} + ${14} + ${15}))
  done
  echo "$total"
}

# One run: prints µs of Postgres CPU per delivery.
run() {
  local variant=$1 n=$2 seconds=$3 before after flows
  if $checkpoints; then psql "$U" -qAtX -c "CHECKPOINT" >/dev/null; fi
  before=$(postgres_ticks)
  pgbench -n -M prepared -c 4 -j 2 -T "$seconds" -D n="$n" -f "$work/$variant.sql" "$U" \
    > "$work/out" 2>&1 || { cat "$work/out" >&2; return 1; }
  psql "$U" -qAtX -c "VACUUM $tables" >/dev/null
  after=$(postgres_ticks)
  flows=$(awk '/number of transactions actually processed/ {print $NF}' "$work/out")
  python3 -c "print(round(($after - $before) / $(getconf CLK_TCK) / ($flows * $n) * 1e6))"
}

run a 16 15 >/dev/null
run b 16 15 >/dev/null
psql "$U" -qAtX -c "ANALYZE $tables"

variants=(a ac b bc)
declare -A results
for round in $(seq "$rounds"); do
  order=("${variants[@]}")
  if (( round % 2 == 0 )); then order=(bc b ac a); fi
  for n in 16 1; do
    line="round $round, n=$n:"
    for variant in "${order[@]}"; do
      us=$(run "$variant" "$n" "$secs")
      results[$variant,$n]+="$us "
      line+=" $variant $us"
    done
    echo "$line µs of Postgres CPU a delivery"
  done
done
echo "medians (µs a delivery; ratio to a):"
for n in 16 1; do
  python3 - "$n" "${results[a,$n]}" "${results[ac,$n]}" "${results[b,$n]}" "${results[bc,$n]}" <<'EOF'
import statistics, sys
n, *runs = sys.argv[1:]
medians = [statistics.median(float(v) for v in run.split()) for run in runs]
print(f"  n={n}: " + "  ".join(f"{name} {m:.0f} ({m / medians[0]:.2f})" for name, m in zip(["a", "ac", "b", "bc"], medians)))
EOF
done
