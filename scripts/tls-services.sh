#!/usr/bin/env bash
# The managed-service stand-ins the TLS and pooler tests use, beside (never
# instead of) the plain services of scripts/services.sh, which calls this:
#
#   /var/tmp/relayops-tls/        a throwaway CA (ca.pem), a server certificate
#                                 for 127.0.0.1 and localhost signed by it, and a
#                                 second, unrelated CA (other-ca.pem) for the
#                                 "wrong CA" tests. Generated once.
#   Postgres  127.0.0.1:5433      cluster `tls`: ssl=on, hostssl only (like RDS
#                                 with rds.force_ssl), role relayops.
#   RabbitMQ  127.0.0.1:5671      a second node, relayops-tls@localhost: AMQPS
#                                 only (like Amazon MQ).
#   Redis     127.0.0.1:6380      TLS only (like ElastiCache with in-transit
#                                 encryption).
#   pgbouncer 127.0.0.1:6432      transaction mode, in front of the plain
#                                 Postgres (5432): the local stand-in for RDS Proxy.
#
# Idempotent: what already answers is left alone. Needs root (or sudo).
set -euo pipefail

LOG_TAG=tls-services
# shellcheck source=scripts/service-helpers.sh
. "$(dirname "$0")/service-helpers.sh"

TLS_DIR=/var/tmp/relayops-tls
PG_TLS_PORT=5433
RABBIT_TLS_PORT=5671
RABBIT_TLS_NODE=relayops-tls@localhost
RABBIT_TLS_HOME=/var/tmp/relayops-rabbitmq-tls
REDIS_TLS_PORT=6380
PGBOUNCER_PORT=6432
PGBOUNCER_HOME=/var/tmp/relayops-pgbouncer

missing=()
command -v pgbouncer >/dev/null 2>&1 || missing+=(pgbouncer)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
apt_install_missing ${missing[@]+"${missing[@]}"}

# --- certificates -----------------------------------------------------------
new_ca() { # name, common name
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
    -keyout "$TLS_DIR/$1.key" -out "$TLS_DIR/$1.pem" -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}
if [ ! -s "$TLS_DIR/server.pem" ]; then
  log "generating a throwaway CA and server certificate in $TLS_DIR"
  $SUDO mkdir -p "$TLS_DIR"
  $SUDO chmod 755 "$TLS_DIR"
  new_ca ca "RelayOps test CA"
  new_ca other-ca "RelayOps unrelated CA"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$TLS_DIR/server.key" -out "$TLS_DIR/server.csr" -subj "/CN=127.0.0.1" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' \
    >"$TLS_DIR/server.ext"
  openssl x509 -req -in "$TLS_DIR/server.csr" -CA "$TLS_DIR/ca.pem" -CAkey "$TLS_DIR/ca.key" -CAcreateserial \
    -days 3650 -extfile "$TLS_DIR/server.ext" -out "$TLS_DIR/server.pem" 2>/dev/null
  chmod 644 "$TLS_DIR"/*.pem
fi

# Each server gets its own copy of the key, owned by the user it runs as.
install_key() { # owner, directory
  $SUDO install -d -o "$1" -m 700 "$2"
  $SUDO install -o "$1" -m 600 "$TLS_DIR/server.key" "$2/server.key"
  $SUDO install -o "$1" -m 644 "$TLS_DIR/server.pem" "$2/server.pem"
  $SUDO install -o "$1" -m 644 "$TLS_DIR/ca.pem" "$2/ca.pem"
}

# --- Postgres with TLS only -------------------------------------------------
pg_tls_up() { pg_isready -h 127.0.0.1 -p $PG_TLS_PORT -q 2>/dev/null; }
if ! pg_tls_up; then
  ver=$(ls /usr/lib/postgresql | sort -n | tail -1)
  conf=/etc/postgresql/$ver/tls
  if ! pg_lsclusters -h 2>/dev/null | awk '{print $1" "$2}' | grep -q "^$ver tls$"; then
    log "creating the TLS-only Postgres cluster on $PG_TLS_PORT"
    $SUDO pg_createcluster "$ver" tls --port $PG_TLS_PORT >/dev/null
  fi
  install_key postgres "$conf/certs"
  $SUDO tee "$conf/conf.d/relayops-tls.conf" >/dev/null <<CONF
listen_addresses = '127.0.0.1'
ssl = on
ssl_cert_file = '$conf/certs/server.pem'
ssl_key_file = '$conf/certs/server.key'
shared_buffers = 32MB
max_connections = 200
CONF
  $SUDO tee "$conf/pg_hba.conf" >/dev/null <<HBA
local     all  all                 peer
hostssl   all  all  127.0.0.1/32   scram-sha-256
hostnossl all  all  0.0.0.0/0      reject
HBA
  log "starting the TLS-only Postgres cluster"
  $SUDO pg_ctlcluster "$ver" tls start || true
fi
wait_for "postgresql (TLS, :$PG_TLS_PORT)" pg_tls_up 60
as_user postgres psql -q -v ON_ERROR_STOP=1 -h /var/run/postgresql -p $PG_TLS_PORT <<'SQL' >/dev/null
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'relayops') THEN
    CREATE ROLE relayops LOGIN CREATEDB PASSWORD 'relayops';
  END IF;
END $$;
SQL

# --- RabbitMQ: a second node, AMQPS only ------------------------------------
rabbit_tls_up() { (exec 3<>/dev/tcp/127.0.0.1/$RABBIT_TLS_PORT) 2>/dev/null; }
if ! rabbit_tls_up; then
  log "starting the AMQPS-only RabbitMQ node $RABBIT_TLS_NODE"
  install_key rabbitmq "$RABBIT_TLS_HOME/certs"
  $SUDO install -d -o rabbitmq -m 755 "$RABBIT_TLS_HOME" "$RABBIT_TLS_HOME/mnesia" "$RABBIT_TLS_HOME/log"
  $SUDO tee "$RABBIT_TLS_HOME/rabbitmq.conf" >/dev/null <<CONF
listeners.tcp = none
listeners.ssl.default = 127.0.0.1:$RABBIT_TLS_PORT
ssl_options.cacertfile = $RABBIT_TLS_HOME/certs/ca.pem
ssl_options.certfile = $RABBIT_TLS_HOME/certs/server.pem
ssl_options.keyfile = $RABBIT_TLS_HOME/certs/server.key
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false
CONF
  echo '[].' | $SUDO tee "$RABBIT_TLS_HOME/enabled_plugins" >/dev/null
  $SUDO chown rabbitmq "$RABBIT_TLS_HOME/rabbitmq.conf" "$RABBIT_TLS_HOME/enabled_plugins"
  as_user rabbitmq env HOME=/var/lib/rabbitmq \
    RABBITMQ_NODENAME=$RABBIT_TLS_NODE \
    RABBITMQ_CONFIG_FILE="$RABBIT_TLS_HOME/rabbitmq.conf" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$RABBIT_TLS_HOME/enabled_plugins" \
    RABBITMQ_MNESIA_BASE="$RABBIT_TLS_HOME/mnesia" \
    RABBITMQ_LOG_BASE="$RABBIT_TLS_HOME/log" \
    RABBITMQ_PID_FILE="$RABBIT_TLS_HOME/rabbit.pid" \
    RABBITMQ_DIST_PORT=25671 \
    RABBITMQ_SERVER_START_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    /usr/lib/rabbitmq/bin/rabbitmq-server -detached >/dev/null 2>&1 || true
fi
wait_for "rabbitmq (AMQPS, :$RABBIT_TLS_PORT)" rabbit_tls_up 90
$SUDO rabbitmqctl -n $RABBIT_TLS_NODE await_startup --timeout 90 >/dev/null 2>&1 || true

# --- Redis, TLS only --------------------------------------------------------
redis_tls_up() {
  [ "$(redis-cli -h 127.0.0.1 -p $REDIS_TLS_PORT --tls --cacert "$TLS_DIR/ca.pem" ping 2>/dev/null)" = "PONG" ]
}
if ! redis_tls_up; then
  log "starting the TLS-only Redis on $REDIS_TLS_PORT"
  $SUDO redis-server --daemonize yes --bind 127.0.0.1 --port 0 --tls-port $REDIS_TLS_PORT \
    --tls-cert-file "$TLS_DIR/server.pem" --tls-key-file "$TLS_DIR/server.key" \
    --tls-ca-cert-file "$TLS_DIR/ca.pem" --tls-auth-clients no \
    --save '' --appendonly no --pidfile /var/tmp/relayops-redis-tls.pid >/dev/null
fi
wait_for "redis (TLS, :$REDIS_TLS_PORT)" redis_tls_up 30

# --- pgbouncer, transaction mode --------------------------------------------
pgbouncer_up() { pg_isready -h 127.0.0.1 -p $PGBOUNCER_PORT -q 2>/dev/null; }
if ! pgbouncer_up; then
  log "starting pgbouncer (transaction mode) on $PGBOUNCER_PORT"
  $SUDO install -d -o postgres -m 700 "$PGBOUNCER_HOME"
  # Every database (each test has its own) goes to the plain Postgres.
  $SUDO tee "$PGBOUNCER_HOME/pgbouncer.ini" >/dev/null <<INI
[databases]
* = host=127.0.0.1 port=5432

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGBOUNCER_PORT
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $PGBOUNCER_HOME/userlist.txt
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 8
max_db_connections = 8
server_tls_sslmode = disable
ignore_startup_parameters = extra_float_digits
stats_users = relayops
logfile = $PGBOUNCER_HOME/pgbouncer.log
pidfile = $PGBOUNCER_HOME/pgbouncer.pid
INI
  echo '"relayops" "relayops"' | $SUDO tee "$PGBOUNCER_HOME/userlist.txt" >/dev/null
  $SUDO chown postgres "$PGBOUNCER_HOME/pgbouncer.ini" "$PGBOUNCER_HOME/userlist.txt"
  as_user postgres pgbouncer -d -q "$PGBOUNCER_HOME/pgbouncer.ini"
fi
wait_for "pgbouncer (:$PGBOUNCER_PORT)" pgbouncer_up 30
