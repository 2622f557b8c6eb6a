#!/usr/bin/env bash
# Installs (when missing) Debian's headless Chromium and its WebDriver
# (`chromium`, `chromium-driver`), which the console's browser tests drive
# (tests/tests/integration/console_browser.rs). Idempotent; `make test` runs it.
# Prints the chromedriver path.
#
# Environment knobs: RELAYOPS_SKIP_INSTALL=1 to never call apt-get.
set -euo pipefail

LOG_TAG=browser
# shellcheck source=scripts/service-helpers.sh
. "$(dirname "$0")/service-helpers.sh"

if ! command -v chromedriver >/dev/null 2>&1 || ! command -v chromium >/dev/null 2>&1; then
  apt_install_missing chromium chromium-driver fonts-dejavu-core
fi
command -v chromedriver
