#!/usr/bin/env bash
# Installs (when missing) and starts (when not running) PostgreSQL, RabbitMQ and
# Redis from Debian packages, then waits until each answers; also installs
# stress-ng, the CPU hog the exclusive tests run under, and iproute2 for the
# network-namespace test. Idempotent: a
# service that already answers is left alone. Also creates the `relayops`
# Postgres role the docs, tests and demo use. Then scripts/tls-services.sh
# starts the TLS-only Postgres/RabbitMQ/Redis and pgbouncer beside them.
#
# Environment knobs: RELAYOPS_SKIP_INSTALL=1 to never call apt-get.
set -euo pipefail

LOG_TAG=services
# shellcheck source=scripts/service-helpers.sh
. "$(dirname "$0")/service-helpers.sh"
as_postgres() { as_user postgres "$@"; }

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
rabbit_up() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; }
redis_up() { [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = "PONG" ]; }

missing=()
command -v pg_ctlcluster >/dev/null 2>&1 && ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql postgresql-contrib)
command -v rabbitmq-server >/dev/null 2>&1 || missing+=(rabbitmq-server)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
# Not a service: the CPU hog `make test` runs the exclusive tests under.
command -v stress-ng >/dev/null 2>&1 || missing+=(stress-ng)
# Not services: `ip` and `unshare` for the exclusive test that proves the
# outbound guard in a network namespace with a private /etc/hosts.
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)

# Debian's maintainer scripts try to start services through policy-rc.d/systemd,
# which a container may not have; we start them ourselves below.
apt_install_missing ${missing[@]+"${missing[@]}"}

# PostgreSQL
if ! pg_up; then
  ver=$(ls /usr/lib/postgresql | sort -n | tail -1)
  if ! pg_lsclusters -h 2>/dev/null | awk '{print $1" "$2}' | grep -q "^$ver main$"; then
    $SUDO pg_createcluster "$ver" main >/dev/null
  fi
  log "starting postgresql $ver"
  $SUDO pg_ctlcluster "$ver" main start || true
fi
wait_for postgresql pg_up 60

# After a crash (the failover tests stop Postgres with `-m immediate`) startup
# first fsyncs every file of the data directory, one by one; with a database
# per test and history partitions in each that took over a minute here, longer
# than pg_ctl waits. syncfs(2) does the same work once per file system.
if [ "$(as_postgres psql -h /var/run/postgresql -tAc 'SHOW recovery_init_sync_method')" != "syncfs" ]; then
  as_postgres psql -q -v ON_ERROR_STOP=1 -h /var/run/postgresql \
    -c "ALTER SYSTEM SET recovery_init_sync_method = 'syncfs'" -c "SELECT pg_reload_conf()" >/dev/null
fi

# The relayops role: owns the demo database and creates one database per test.
as_postgres psql -q -v ON_ERROR_STOP=1 -h /var/run/postgresql <<'SQL' >/dev/null
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'relayops') THEN
    CREATE ROLE relayops LOGIN CREATEDB PASSWORD 'relayops';
  END IF;
END $$;
SQL
if ! as_postgres psql -h /var/run/postgresql -tAc "SELECT 1 FROM pg_database WHERE datname='relayops'" | grep -q 1; then
  as_postgres createdb -h /var/run/postgresql -O relayops relayops
fi

# RabbitMQ
if ! rabbit_up; then
  log "starting rabbitmq"
  $SUDO rabbitmq-server -detached >/dev/null 2>&1 || true
fi
wait_for rabbitmq rabbit_up 90
# The port opens before the broker accepts work; wait for the application itself.
if command -v rabbitmqctl >/dev/null 2>&1; then
  $SUDO rabbitmqctl await_startup --timeout 90 >/dev/null 2>&1 || $SUDO rabbitmqctl wait --timeout 90 >/dev/null 2>&1 || true
fi

# Redis
if ! redis_up; then
  log "starting redis"
  $SUDO redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no >/dev/null
fi
wait_for redis redis_up 30

# The TLS-only stand-ins for the managed services, and pgbouncer.
bash "$(dirname "$0")/tls-services.sh"

log "all services are up"
