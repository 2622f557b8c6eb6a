#!/bin/bash
# Outbox settle, measured in SQL (BENCHMARKS.md "Outbox: delete on publish vs
# mark then purge"): A marks each published batch and purges 5,000 at a time,
# B deletes each batch on publish. Alternates A/B/A/B on a scratch database
# (relayops_test_outbox_settle, dropped at the end): wall time per run, then
# WAL bytes per row per statement from EXPLAIN (ANALYZE, WAL), which other
# databases' writes on a shared server do not disturb.
# Usage: scripts/bench-outbox-settle.sh [rows]  (default 100000)
set -euo pipefail
rows=${1:-100000}
here=$(cd "$(dirname "$0")" && pwd)
url=${RELAYOPS_DATABASE_URL:-postgres://relayops:relayops@127.0.0.1:5432/relayops}
db=relayops_test_outbox_settle
psql "$url" -qAtX -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
trap 'psql "$url" -qAtX -c "DROP DATABASE IF EXISTS $db WITH (FORCE)"' EXIT
P=(psql "${url%/*}/$db" -qAtX -v ON_ERROR_STOP=1)
fresh() {
  "${P[@]}" -v rows="$rows" -f "$here/sql/outbox-settle-setup.sql" 2>/dev/null
  if [ "$1" = B ]; then "${P[@]}" -c "DROP INDEX ob_published_idx"; fi
}
for variant in A B A B; do
  fresh $variant
  started=$(date +%s.%N)
  if [ $variant = A ]; then
    "${P[@]}" -c "CALL publish_all(false)" -c "CALL purge_all()"
  else
    "${P[@]}" -c "CALL publish_all(true)"
  fi
  printf '%s: %s rows settled in %.2f s\n' $variant "$rows" "$(echo "$(date +%s.%N) - $started" | bc)"
done
"${P[@]}" -f "$here/sql/outbox-settle-wal.sql" 2>/dev/null
for variant in A B A B; do
  fresh $variant
  "${P[@]}" -f "$here/sql/outbox-settle-wal.sql" 2>/dev/null
  if [ $variant = A ]; then "${P[@]}" -c "CALL wal_run(false, 25)"; else "${P[@]}" -c "CALL wal_run(true, 25)"; fi
done
echo "variant|statement|WAL bytes per row|statements"
"${P[@]}" -c "SELECT variant, step, round(avg(bytes::numeric / rows)), count(*) FROM wal_result GROUP BY 1, 2 ORDER BY 1, 2"
