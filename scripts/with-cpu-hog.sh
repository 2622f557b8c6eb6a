#!/usr/bin/env bash
# Runs a command while stress-ng keeps the CPUs busy, so the tests that run
# under it (`make test` runs the exclusive ones this way) prove they pass on a
# loaded machine: timeouts, retries and clients that follow the protocol are
# exercised, not just the happy path of an idle CI box. The hog is bounded
# (RELAYOPS_CPU_HOG_SECS, default 3600) and stopped as soon as the command ends,
# whatever its outcome; the command's exit status is returned.
#
# Environment knobs: RELAYOPS_CPU_HOG_WORKERS (default 2: one per core of the
# smallest CI machine), RELAYOPS_CPU_HOG=0 to run without the hog.
set -euo pipefail

if [ "${RELAYOPS_CPU_HOG:-1}" = "0" ]; then exec "$@"; fi
command -v stress-ng >/dev/null 2>&1 || { echo "with-cpu-hog: stress-ng is missing (scripts/services.sh installs it)" >&2; exit 1; }

workers="${RELAYOPS_CPU_HOG_WORKERS:-2}"
stress-ng --cpu "$workers" --timeout "${RELAYOPS_CPU_HOG_SECS:-3600}s" --quiet &
hog=$!
trap 'kill "$hog" 2>/dev/null || true; wait "$hog" 2>/dev/null || true' EXIT
echo "with-cpu-hog: stress-ng --cpu $workers running (pid $hog) while: $*" >&2
"$@"
