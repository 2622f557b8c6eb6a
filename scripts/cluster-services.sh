#!/usr/bin/env bash
# The clustered stand-ins the cluster tests use, beside (never instead of) the
# single nodes of scripts/services.sh; `make test` runs it (and the cluster tests
# run it again to bring a killed or stopped node back):
#
#   RabbitMQ  127.0.0.1:5681-5683   a three-node cluster, relayops-c1..c3@localhost
#                                   (one Erlang cookie: the rabbitmq user's), the
#                                   local stand-in for Amazon MQ's cluster
#                                   deployment. Quorum queues declared on it
#                                   replicate to all three.
#   Redis     127.0.0.1:7001-7006   a Redis Cluster (cluster mode enabled): three
#                                   masters and a replica of each (created as
#                                   :7001-7003 + :7004-7006; after a failover the
#                                   roles move), no persistence, state in
#                                   /var/tmp/relayops-redis-cluster/<port>/nodes.conf;
#                                   the local stand-in for ElastiCache with cluster
#                                   mode enabled. cluster-node-timeout is 2 s: a
#                                   master killed with SIGKILL is replaced by its
#                                   replica within a few seconds.
#   Postgres  127.0.0.1:5434        cluster `standby`: a hot standby streaming from
#                                   the plain Postgres (5432), the local stand-in for
#                                   an RDS/Aurora reader endpoint: read-only, the
#                                   same roles (relayops) and databases. It streams
#                                   as relayops_replicator without a replication
#                                   slot, so a stopped standby holds no WAL on the
#                                   primary; the primary keeps wal_keep_size = 256MB
#                                   instead, and a standby that fell further behind
#                                   is rebuilt from a fresh base backup.
#
# Idempotent: a node that already answers is left alone; a node that is down
# is started and rejoins the cluster it was in (a Redis node from its nodes.conf,
# as a replica when its replica took over meanwhile). A Redis cluster that cannot
# form again from its nodes.conf files is wiped and created afresh. Each part
# waits until its cluster is whole (Redis: cluster_state:ok, 6 nodes connected;
# the standby: replayed up to the primary's WAL position) and fails otherwise.
# Runs one at a time (flock on /var/tmp/relayops-cluster-services.lock).
# Needs root (or sudo).
# `RELAYOPS_SKIP_CLUSTERS=1` skips it (a machine short of memory: the cluster
# tests then fail with a message saying so).
set -euo pipefail

# One run at a time (`make test` and a test bringing a node back, or two tests,
# must not start, stop or wipe the same node together). The lock is held by
# flock(1) itself (-o): the daemons started below must not inherit it.
if [ "${RELAYOPS_CLUSTER_SERVICES_LOCKED:-0}" != "1" ]; then
  exec env RELAYOPS_CLUSTER_SERVICES_LOCKED=1 \
    flock -o -w 600 /var/tmp/relayops-cluster-services.lock bash "$0" "$@"
fi

LOG_TAG=cluster-services
# shellcheck source=scripts/service-helpers.sh
. "$(dirname "$0")/service-helpers.sh"

if [ "${RELAYOPS_SKIP_CLUSTERS:-0}" = "1" ]; then
  log "RELAYOPS_SKIP_CLUSTERS=1: not starting the clusters"
  exit 0
fi

RABBIT_CLUSTER_HOME=/var/tmp/relayops-rabbitmq-cluster
RABBIT_CLUSTER_FIRST_PORT=5681

# --- RabbitMQ, three nodes ----------------------------------------------------
rabbit_port() { echo $((RABBIT_CLUSTER_FIRST_PORT + $1 - 1)); }
rabbit_node() { echo "relayops-c$1@localhost"; }
rabbit_node_up() { (exec 3<>/dev/tcp/127.0.0.1/"$(rabbit_port "$1")") 2>/dev/null; }

start_rabbit_node() { # index
  local index=$1 home="$RABBIT_CLUSTER_HOME/c$1"
  $SUDO install -d -o rabbitmq -m 755 "$RABBIT_CLUSTER_HOME" "$home" "$home/mnesia" "$home/log"
  $SUDO tee "$home/rabbitmq.conf" >/dev/null <<CONF
listeners.tcp.default = 127.0.0.1:$(rabbit_port "$index")
loopback_users = none
CONF
  echo '[].' | $SUDO tee "$home/enabled_plugins" >/dev/null
  $SUDO chown rabbitmq "$home/rabbitmq.conf" "$home/enabled_plugins"
  as_user rabbitmq env HOME=/var/lib/rabbitmq \
    RABBITMQ_NODENAME="$(rabbit_node "$index")" \
    RABBITMQ_CONFIG_FILE="$home/rabbitmq.conf" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$home/enabled_plugins" \
    RABBITMQ_MNESIA_BASE="$home/mnesia" \
    RABBITMQ_LOG_BASE="$home/log" \
    RABBITMQ_PID_FILE="$home/rabbit.pid" \
    RABBITMQ_DIST_PORT=$((25680 + index)) \
    RABBITMQ_SERVER_START_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    /usr/lib/rabbitmq/bin/rabbitmq-server -detached >/dev/null 2>&1 || true
}

rabbitmqctl_node() { # index, args...
  local index=$1; shift
  $SUDO rabbitmqctl -q -n "$(rabbit_node "$index")" "$@"
}

for index in 1 2 3; do
  if ! rabbit_node_up "$index"; then
    log "starting RabbitMQ node $(rabbit_node "$index") on :$(rabbit_port "$index")"
    start_rabbit_node "$index"
  fi
done
for index in 1 2 3; do
  wait_for "rabbitmq cluster node $index (:$(rabbit_port "$index"))" "rabbit_node_up $index" 120
  rabbitmqctl_node "$index" await_startup --timeout 120 >/dev/null 2>&1 || true
done
# Nodes 2 and 3 join node 1 once; a node that was in the cluster rejoins by itself.
for index in 2 3; do
  if ! rabbitmqctl_node "$index" cluster_status --formatter json 2>/dev/null | grep -q "$(rabbit_node 1)"; then
    log "joining $(rabbit_node "$index") to $(rabbit_node 1)"
    rabbitmqctl_node "$index" stop_app >/dev/null
    rabbitmqctl_node "$index" join_cluster "$(rabbit_node 1)" >/dev/null
    rabbitmqctl_node "$index" start_app >/dev/null
  fi
done
running=$(rabbitmqctl_node 1 cluster_status --formatter json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["running_nodes"]))')
if [ "$running" != "3" ]; then
  log "the RabbitMQ cluster runs $running nodes, not 3"
  exit 1
fi
log "RabbitMQ cluster of 3 nodes is up (:$(rabbit_port 1)-$(rabbit_port 3))"

# --- Redis Cluster, three masters + three replicas ----------------------------
REDIS_CLUSTER_HOME=/var/tmp/relayops-redis-cluster
REDIS_CLUSTER_PORTS=(7001 7002 7003 7004 7005 7006)

redis_node() { redis-cli -h 127.0.0.1 -p "$@"; } # port, command...
redis_node_up() { [ "$(redis_node "$1" ping 2>/dev/null)" = "PONG" ]; }
redis_nodes_up() {
  local port
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do redis_node_up "$port" || return 1; done
}
redis_cluster_field() { # port, field of CLUSTER INFO
  redis_node "$1" cluster info 2>/dev/null | tr -d '\r' | sed -n "s/^$2://p"
}
# A node that has never been in a cluster (empty nodes.conf): knows only itself.
redis_node_fresh() {
  [ "$(redis_cluster_field "$1" cluster_known_nodes)" = "1" ] \
    && [ "$(redis_cluster_field "$1" cluster_slots_assigned)" = "0" ]
}
# Whole, as every node sees it: state ok, 6 nodes known, 3 masters holding slots
# and 3 replicas, all connected, none flagged failing or still handshaking.
redis_cluster_whole() {
  local port
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    [ "$(redis_cluster_field "$port" cluster_state)" = "ok" ] || return 1
    [ "$(redis_cluster_field "$port" cluster_known_nodes)" = "6" ] || return 1
    redis_node "$port" cluster nodes 2>/dev/null | awk '
      $3 !~ /fail|handshake|noaddr/ && $8 == "connected" {
        if ($3 ~ /master/ && NF >= 9) masters++; else if ($3 ~ /slave/) replicas++
      }
      END { exit !(masters == 3 && replicas == 3) }' || return 1
  done
}

start_redis_node() { # port
  local dir="$REDIS_CLUSTER_HOME/$1"
  $SUDO install -d -m 755 "$REDIS_CLUSTER_HOME" "$dir"
  # cluster-replica-validity-factor 0: a replica always stands for election,
  # however long it has been cut off from its master. With the default (10) a
  # replica whose link has been down for over 10 node timeouts + 10 s refuses to
  # take over ("Disconnected from master for longer than allowed"), and so does
  # one restarted while its master was down (it counts as cut off since ever):
  # the slots stay uncovered and cluster_state stays fail.
  # cluster-require-full-coverage no: while one master fails over, the others
  # go on answering for their own slots (with yes, every node refuses every
  # key with CLUSTERDOWN until the failover is over). RelayOps' docs ask the
  # same of ElastiCache (a parameter group with it off).
  $SUDO redis-server --port "$1" --bind 127.0.0.1 --protected-mode no --daemonize yes \
    --cluster-enabled yes --cluster-config-file "$dir/nodes.conf" \
    --cluster-node-timeout 2000 --cluster-replica-validity-factor 0 \
    --cluster-require-full-coverage no \
    --dir "$dir" --appendonly no --save '' \
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null || true
}

# Stops every node (each was started by this script: its pid is in its dir) and
# deletes the cluster's state.
wipe_redis_cluster() {
  local port pid
  log "wiping the Redis cluster's state in $REDIS_CLUSTER_HOME"
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    redis_node "$port" shutdown nosave now >/dev/null 2>&1 || true
  done
  for _ in $(seq 50); do
    redis_nodes_down && break
    sleep 0.1
  done
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    pid=$(cat "$REDIS_CLUSTER_HOME/$port/redis.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "redis-server" ]; then
      $SUDO kill -9 "$pid" || true
    fi
  done
  $SUDO rm -rf "$REDIS_CLUSTER_HOME"
}
redis_nodes_down() {
  local port
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do ! redis_node_up "$port" || return 1; done
}

start_redis_nodes() {
  local port
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    if ! redis_node_up "$port"; then
      log "starting Redis cluster node :$port"
      start_redis_node "$port"
    fi
  done
}

create_redis_cluster() {
  local port addrs=()
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do addrs+=("127.0.0.1:$port"); done
  log "creating the Redis cluster (3 masters + 3 replicas)"
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >/dev/null
}

start_redis_nodes
# Without persistence a node answers within milliseconds; one whose nodes.conf
# is unreadable exits right after daemonizing (its log says why).
if ! wait_for "redis cluster nodes (:7001-7006)" redis_nodes_up 10; then
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    if ! redis_node_up "$port"; then
      log "node :$port is down: $(tail -n 1 "$REDIS_CLUSTER_HOME/$port/redis.log" 2>/dev/null)"
    fi
  done
  wipe_redis_cluster
  start_redis_nodes
  wait_for "redis cluster nodes (:7001-7006)" redis_nodes_up 10
fi
if ! redis_cluster_whole; then
  fresh=0
  for port in "${REDIS_CLUSTER_PORTS[@]}"; do
    if redis_node_fresh "$port"; then fresh=$((fresh + 1)); fi
  done
  if [ "$fresh" = "${#REDIS_CLUSTER_PORTS[@]}" ]; then
    create_redis_cluster
  elif [ "$fresh" != "0" ]; then
    # Some nodes lost their nodes.conf: they cannot rejoin by themselves.
    log "$fresh Redis node(s) lost their cluster state"
    wipe_redis_cluster
    start_redis_nodes
    wait_for "redis cluster nodes (:7001-7006)" redis_nodes_up 10
    create_redis_cluster
  elif ! wait_for "redis cluster (re-forming from nodes.conf)" redis_cluster_whole 30; then
    wipe_redis_cluster
    start_redis_nodes
    wait_for "redis cluster nodes (:7001-7006)" redis_nodes_up 10
    create_redis_cluster
  fi
fi
if ! wait_for "redis cluster (cluster_state:ok, 6 nodes connected)" redis_cluster_whole 60; then
  redis_node 7001 cluster nodes >&2 || true
  exit 1
fi
# Nodes started by an older version of this script run with full coverage on.
for port in "${REDIS_CLUSTER_PORTS[@]}"; do
  redis-cli -h 127.0.0.1 -p "$port" config set cluster-require-full-coverage no >/dev/null
done
log "Redis cluster of 3 masters + 3 replicas is up (:7001-7006)"

# --- Postgres, a hot standby of the plain cluster (5432) ----------------------
PG_VER=$(ls /usr/lib/postgresql | sort -n | tail -1)
PG_PRIMARY_PORT=5432
PG_STANDBY_PORT=5434
PG_STANDBY_DATA=/var/lib/postgresql/$PG_VER/standby
PG_STANDBY_CONF=/etc/postgresql/$PG_VER/standby
PG_STANDBY_LOG=/var/log/postgresql/postgresql-$PG_VER-standby.log
PG_REPLICATOR=relayops_replicator
PG_REPLICATOR_PASSWORD=relayops_replicator

pg_psql() { # port, psql args... (as postgres, over the socket)
  local port=$1; shift
  as_user postgres psql -X -q -tA -v ON_ERROR_STOP=1 -h /var/run/postgresql -p "$port" "$@"
}

# The primary: a replication role, a pg_hba line for it, and WAL kept for a
# standby that was stopped a while (no slot: see the header).
pg_psql $PG_PRIMARY_PORT <<SQL >/dev/null
DO \$\$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$PG_REPLICATOR') THEN
    CREATE ROLE $PG_REPLICATOR LOGIN REPLICATION PASSWORD '$PG_REPLICATOR_PASSWORD';
  END IF;
END \$\$;
SQL
primary_reload=0
hba_line="host    replication     $PG_REPLICATOR     127.0.0.1/32            scram-sha-256"
primary_hba=/etc/postgresql/$PG_VER/main/pg_hba.conf
if ! $SUDO grep -qxF "$hba_line" "$primary_hba"; then
  log "allowing replication for $PG_REPLICATOR from 127.0.0.1 in $primary_hba"
  printf '# The hot standby on :%s (scripts/cluster-services.sh).\n%s\n' "$PG_STANDBY_PORT" "$hba_line" \
    | $SUDO tee -a "$primary_hba" >/dev/null
  primary_reload=1
fi
if [ "$(pg_psql $PG_PRIMARY_PORT -c 'SHOW wal_keep_size')" != "256MB" ]; then
  pg_psql $PG_PRIMARY_PORT -c "ALTER SYSTEM SET wal_keep_size = '256MB'" >/dev/null
  primary_reload=1
fi
if [ "$primary_reload" = "1" ]; then pg_psql $PG_PRIMARY_PORT -c 'SELECT pg_reload_conf()' >/dev/null; fi

standby_answers() { pg_isready -h 127.0.0.1 -p $PG_STANDBY_PORT -q 2>/dev/null; }
standby_in_recovery() { [ "$(pg_psql $PG_STANDBY_PORT -c 'SELECT pg_is_in_recovery()' 2>/dev/null)" = "t" ]; }
standby_registered() { pg_lsclusters -h 2>/dev/null | awk '{print $1" "$2}' | grep -qx "$PG_VER standby"; }

# A hot standby needs these at least as high as on its primary.
write_standby_conf() {
  local settings
  settings=$(pg_psql $PG_PRIMARY_PORT -c "SELECT name || ' = ' || setting FROM pg_settings
    WHERE name IN ('max_connections', 'max_worker_processes', 'max_wal_senders',
                   'max_prepared_transactions', 'max_locks_per_transaction') ORDER BY name")
  $SUDO tee "$PG_STANDBY_CONF/conf.d/relayops-standby.conf" >/dev/null <<CONF
listen_addresses = '127.0.0.1'
hot_standby = on
shared_buffers = 32MB
# As on the primary (:$PG_PRIMARY_PORT), read when this file was written.
$settings
CONF
}

# A fresh base backup, taken beside the old data directory and swapped in.
rebuild_standby() {
  if ! standby_registered; then
    log "creating the Postgres cluster \`standby\` on $PG_STANDBY_PORT"
    $SUDO pg_createcluster "$PG_VER" standby --port $PG_STANDBY_PORT >/dev/null
  fi
  $SUDO pg_ctlcluster "$PG_VER" standby stop -m fast >/dev/null 2>&1 || true
  log "taking a base backup of :$PG_PRIMARY_PORT for the standby"
  $SUDO rm -rf "$PG_STANDBY_DATA.new"
  as_user postgres env PGPASSWORD=$PG_REPLICATOR_PASSWORD "/usr/lib/postgresql/$PG_VER/bin/pg_basebackup" \
    -h 127.0.0.1 -p $PG_PRIMARY_PORT -U $PG_REPLICATOR -D "$PG_STANDBY_DATA.new" \
    -R -X stream --checkpoint=fast
  $SUDO rm -rf "$PG_STANDBY_DATA"
  $SUDO mv "$PG_STANDBY_DATA.new" "$PG_STANDBY_DATA"
  write_standby_conf
  start_standby
}

# Where the standby's log ends before it is started: what it logs from there on
# tells whether it found the WAL it needs (a running standby retries every 5 s).
mark_standby_log() { standby_log_from=$(($($SUDO stat -c %s "$PG_STANDBY_LOG" 2>/dev/null || echo 0) + 1)); }
start_standby() {
  mark_standby_log
  log "starting the Postgres standby"
  $SUDO pg_ctlcluster "$PG_VER" standby start
}

# 0: the standby has replayed the primary's WAL up to where it was flushed when
# this was called; 1: not within the seconds given; 2: the WAL it needs is gone
# from the primary (it was stopped too long: rebuild it).
wait_standby_caught_up() { # seconds
  local target i=0
  target=$(pg_psql $PG_PRIMARY_PORT -c 'SELECT pg_current_wal_flush_lsn()')
  until [ "$(PGPASSWORD=relayops psql -X -tA -h 127.0.0.1 -p $PG_STANDBY_PORT -U relayops -d relayops \
    -c "SELECT pg_last_wal_replay_lsn() >= '$target'" 2>/dev/null)" = "t" ]; do
    if $SUDO tail -c +"$standby_log_from" "$PG_STANDBY_LOG" 2>/dev/null \
      | grep -q 'requested WAL segment .* has already been removed'; then
      log "the Postgres standby is too far behind: the primary no longer has the WAL it needs"
      return 2
    fi
    i=$((i + 1))
    if [ "$i" -gt $(($1 * 10)) ]; then log "the Postgres standby did not catch up within $1s"; return 1; fi
    sleep 0.1
  done
}

mark_standby_log
rebuilt=0
if standby_answers; then
  if ! standby_in_recovery; then
    log "the Postgres on :$PG_STANDBY_PORT answers but is not a standby (promoted?)"
    rebuild_standby; rebuilt=1
  elif [ "$(pg_psql $PG_STANDBY_PORT -c 'SELECT pg_is_wal_replay_paused()')" = "t" ]; then
    # Left paused (a test pauses it to make the reader lag): replay again.
    log "resuming WAL replay on the Postgres standby"
    pg_psql $PG_STANDBY_PORT -c 'SELECT pg_wal_replay_resume()' >/dev/null
  fi
elif standby_registered && $SUDO test -f "$PG_STANDBY_DATA/standby.signal"; then
  write_standby_conf
  if ! start_standby; then
    log "the Postgres standby did not start"
    rebuild_standby; rebuilt=1
  fi
else
  rebuild_standby; rebuilt=1
fi
wait_for "postgresql (standby, :$PG_STANDBY_PORT)" standby_answers 60
if ! wait_standby_caught_up 30; then
  [ "$rebuilt" = "0" ] || exit 1
  rebuild_standby
  wait_for "postgresql (standby, :$PG_STANDBY_PORT)" standby_answers 60
  wait_standby_caught_up 60 || exit 1
fi
if ! standby_in_recovery; then log "the Postgres on :$PG_STANDBY_PORT is not in recovery"; exit 1; fi
log "Postgres standby of :$PG_PRIMARY_PORT is up (:$PG_STANDBY_PORT)"
