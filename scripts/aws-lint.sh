#!/usr/bin/env bash
# Static checks of the deployment files: template.yaml with `sam validate
# --lint` and cfn-lint (offline), docker-compose.yml with `docker-compose
# config` (Debian's docker-compose parses without a Docker daemon; installed
# here when missing, skipped with a message only if it cannot be installed).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$(bash scripts/aws-tools.sh):$PATH"
export SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}"

sam validate --lint --template template.yaml
cfn-lint template.yaml
echo "aws lint: template.yaml passes sam validate --lint and cfn-lint"

if ! command -v docker-compose >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends docker-compose; } >/dev/null 2>&1 || true
fi
if command -v docker-compose >/dev/null 2>&1; then
  docker-compose -f docker-compose.yml config -q
  echo "aws lint: docker-compose.yml parses (docker-compose config)"
else
  echo "aws lint: SKIPPED docker-compose config (docker-compose could not be installed)"
fi
