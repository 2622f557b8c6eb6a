# Sourced by scripts/services.sh and scripts/tls-services.sh (not run on its
# own): the helpers both use. Set LOG_TAG before sourcing.

log() { printf '[%s] %s\n' "${LOG_TAG:-services}" "$*" >&2; }

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

as_user() { # user, command...
  local user=$1; shift
  if [ "$(id -u)" = "0" ]; then runuser -u "$user" -- "$@"; else sudo -u "$user" "$@"; fi
}

wait_for() { # name, check-fn, seconds
  local name=$1 check=$2 limit=$3 i=0
  until $check; do
    i=$((i + 1))
    if [ "$i" -gt $((limit * 10)) ]; then log "$name did not come up within ${limit}s"; return 1; fi
    sleep 0.1
  done
  log "$name is up"
}
