#!/usr/bin/env bash
# Installs, once, the Python tools the serverless checks use — cargo-lambda
# (with Zig), aws-sam-cli, cfn-lint and moto's SQS server — into a venv under
# /var/tmp that later runs reuse. Prints the venv's bin directory.
# Override the location with RELAYOPS_TOOLS_VENV.
set -euo pipefail
venv="${RELAYOPS_TOOLS_VENV:-/var/tmp/relayops-aws-tools}"
wanted=(cargo-lambda==1.9.2 aws-sam-cli cfn-lint 'moto[server]')
stamp="$venv/.installed-$(printf '%s ' "${wanted[@]}" | sha256sum | cut -c1-12)"
if [[ ! -f "$stamp" ]]; then
  python3 -m venv "$venv" >&2 || {
    # Debian's python3 needs the venv package for ensurepip.
    apt-get update -qq >&2 && apt-get install -y -qq python3-venv >&2 && python3 -m venv "$venv" >&2
  }
  "$venv/bin/pip" install -q --disable-pip-version-check "${wanted[@]}" >&2
  touch "$stamp"
fi
echo "$venv/bin"
