# Sourced by scripts/services.sh, scripts/tls-services.sh and scripts/browser.sh
# (not run on its own): the helpers they use. Set LOG_TAG before sourcing.

log() { printf '[%s] %s\n' "${LOG_TAG:-services}" "$*" >&2; }

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

as_user() { # user, command...
  local user=$1; shift
  if [ "$(id -u)" = "0" ]; then runuser -u "$user" -- "$@"; else sudo -u "$user" "$@"; fi
}

# apt_install_missing PACKAGE...: installs the Debian packages given (none: does
# nothing), or fails when RELAYOPS_SKIP_INSTALL=1. The package lists are
# refreshed at most once an hour (a stamp under /var/tmp), so the scripts `make
# test` runs one after another do not each run `apt-get update`.
APT_UPDATED_STAMP=/var/tmp/relayops-apt-updated
apt_install_missing() {
  [ $# -gt 0 ] || return 0
  if [ "${RELAYOPS_SKIP_INSTALL:-0}" = "1" ]; then
    log "missing packages: $* (RELAYOPS_SKIP_INSTALL=1, not installing)"; exit 1
  fi
  log "installing $*"
  export DEBIAN_FRONTEND=noninteractive
  # Fresh lists: the stamp is under an hour old and the lists are still there
  # (an image build may have emptied /var/lib/apt/lists since).
  if [ -z "$(find "$APT_UPDATED_STAMP" -mmin -60 2>/dev/null)" ] \
    || ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    $SUDO apt-get update -qq
    $SUDO touch "$APT_UPDATED_STAMP"
  fi
  $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
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
