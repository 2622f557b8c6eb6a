#!/usr/bin/env bash
# The clustered stand-ins the cluster tests use, beside (never instead of) the
# single nodes of scripts/services.sh; `make test` runs it (and the cluster test
# runs it again to bring a killed node back):
#
#   RabbitMQ  127.0.0.1:5681-5683   a three-node cluster, relayops-c1..c3@localhost
#                                   (one Erlang cookie: the rabbitmq user's), the
#                                   local stand-in for Amazon MQ's cluster
#                                   deployment. Quorum queues declared on it
#                                   replicate to all three.
#
# Idempotent: a node that already answers is left alone; a node that is down
# is started and rejoins the cluster it was in. Needs root (or sudo).
# `RELAYOPS_SKIP_CLUSTERS=1` skips it (a machine short of memory: the cluster
# tests then fail with a message saying so).
set -euo pipefail

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
