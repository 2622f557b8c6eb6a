# RelayOps developer commands. The two that matter: `make demo` and `make test`.
SHELL := /bin/bash
export RELAYOPS_DATABASE_URL ?= postgres://relayops:relayops@127.0.0.1:5432/relayops
export RELAYOPS_AMQP_URL ?= amqp://guest:guest@127.0.0.1:5672/%2f
export RELAYOPS_REDIS_URL ?= redis://127.0.0.1:6379
export RELAYOPS_LOG ?= warn

.PHONY: demo test services lint run bench bench-backlog bench-queueing bench-scale-out bench-many-tenants bench-sqs bench-smoke clean-test-databases
.PHONY: aws-lint lambda-smoke watch lambda-build sam-build

## Installs/starts Postgres, RabbitMQ and Redis, then runs `relayops demo`:
## every role in one process, endpoints at the simulator, events, delivery table,
## then the console's address and sign-in; it keeps running until Ctrl-C.
demo: services
	cargo run -q -p relayops -- demo --keep-running

## The full check CI runs: services, formatting, clippy, then every test.
## Tests named `exclusive_*` restart the shared broker or Redis or load the
## machine, so they run after the others, one at a time, with a CPU hog
## (stress-ng, scripts/with-cpu-hog.sh) so they prove themselves on a busy machine.
## Both runs name the whole workspace, so the second builds nothing again
## (`-p relayops-tests` alone unified features differently and rebuilt three crates).
test: services lint
	bash scripts/aws-tools.sh >/dev/null  # cargo-lambda, sam, cfn-lint, moto (the SQS tests use moto_server)
	bash scripts/browser.sh >/dev/null    # chromium + chromedriver (the console's browser tests)
	bash scripts/cluster-services.sh      # RabbitMQ cluster :5681-5683, Redis cluster :7001-7006, Postgres standby :5434 (the cluster tests)
	cargo build -q -p relayops -p relayops-bench --bins
	@if cargo nextest --version >/dev/null 2>&1; then \
	  cargo nextest run --workspace --no-fail-fast -E 'not test(/exclusive_/)' && \
	  bash scripts/with-cpu-hog.sh cargo nextest run --workspace --no-fail-fast --test-threads 1 -E 'test(/exclusive_/)'; \
	else \
	  cargo test --workspace --no-fail-fast -- --skip exclusive_ && \
	  bash scripts/with-cpu-hog.sh cargo test -p relayops-tests --test integration --no-fail-fast -- exclusive_ --test-threads 1; \
	fi
	bash scripts/bench-smoke.sh
	bash scripts/schemathesis.sh
	bash scripts/aws-lint.sh
	bash scripts/lambda-smoke.sh
	python3 scripts/readme-tour.py  # README's commands, run as written (make demo included)

## The load generator against a release build of `relayops all` (see BENCHMARKS.md).
bench: services
	cargo build --release -q -p relayops -p relayops-bench
	# The bench's receiver listens on a random loopback port, beside the simulator;
	# the console scenario signs in (login tokens need a key).
	RELAYOPS_LOG=warn RELAYOPS_OUTBOUND_ALLOW_CIDRS=127.0.0.1/32 \
	  RELAYOPS_JWT_SECRET=$${RELAYOPS_JWT_SECRET:-bench-only-jwt-secret-0123456789abcdef} \
	  $${CARGO_TARGET_DIR:-target}/release/relayops all & pid=$$!; \
	  $${CARGO_TARGET_DIR:-target}/release/relayops-bench $(BENCH_ARGS); status=$$?; kill $$pid; exit $$status

## The backlog-drain scenario: `relayops api` (no worker) + the bench, which
## queues BACKLOG events (default 100k) and then starts a worker to drain them.
## The API refuses endpoint URLs on loopback unless the allow-list opens it.
bench-backlog: services
	cargo build --release -q -p relayops -p relayops-bench
	RELAYOPS_LOG=warn RELAYOPS_OUTBOUND_ALLOW_CIDRS=127.0.0.1/32 $${CARGO_TARGET_DIR:-target}/release/relayops api & pid=$$!; \
	  $${CARGO_TARGET_DIR:-target}/release/relayops-bench --scenarios backlog --backlog-events $${BACKLOG:-100000} \
	  --relayops-bin $${CARGO_TARGET_DIR:-target}/release/relayops $(BENCH_ARGS); status=$$?; kill $$pid; exit $$status

## `relayops api` (no worker; the ready queue may hold every queued delivery,
## no backpressure) + the bench running the scenario $(1), which starts the
## workers (and publishers) it needs itself.
define api_only_bench
	cargo build --release -q -p relayops -p relayops-bench
	RELAYOPS_LOG=warn RELAYOPS_OUTBOUND_ALLOW_CIDRS=127.0.0.1/32 RELAYOPS_MAX_READY_DEPTH=1000000 \
	  $${CARGO_TARGET_DIR:-target}/release/relayops api & pid=$$!; \
	  $${CARGO_TARGET_DIR:-target}/release/relayops-bench --scenarios $(1) \
	  --relayops-bin $${CARGO_TARGET_DIR:-target}/release/relayops $(BENCH_ARGS); status=$$?; kill $$pid; exit $$status
endef

## The API-only scenario: `relayops api` (no worker) + the bench, which queues
## events to 1, 10 and 100 subscribers and, after each, starts a worker to drain
## them. The ready queue may hold every queued delivery (no backpressure).
bench-queueing: services
	$(call api_only_bench,queueing)

## The scale-out scenario: `relayops api` (no worker) + the bench, which drains
## a queue with 1, 2 and 4 worker processes, then runs the whole pipeline with
## 1 and 2 publishers (the API's and `relayops publisher`) and two workers.
bench-scale-out: services
	$(call api_only_bench,scale-out)

## The many-tenants scenario: `relayops api` (no worker) + the bench, which
## makes 10,000 quiet tenants and runs them beside two loud ones with 1 and
## 2 worker processes of its own.
bench-many-tenants: services
	$(call api_only_bench,many-tenants)

## The SQS destination scenario: `relayops api` (no worker) + the bench, which
## starts moto's SQS server and times a worker of its own draining the same
## number of events to a webhook and to a queue.
bench-sqs: services
	bash scripts/aws-tools.sh >/dev/null
	$(call api_only_bench,sqs)

## Generated requests against the running API (OpenAPI-driven): no 5xx allowed.
.PHONY: schemathesis openapi
schemathesis: services
	cargo build -q -p relayops
	bash scripts/schemathesis.sh

## Regenerates docs/openapi.json from the code (a test fails when it is stale).
openapi:
	cargo run -q -p relayops -- openapi > docs/openapi.json

services:
	bash scripts/services.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

## `relayops all` in the foreground (API on :8080, simulator on :8090).
run: services
	cargo run -q -p relayops -- all

## Removes test databases left behind by interrupted test runs.
clean-test-databases:
	psql "$(RELAYOPS_DATABASE_URL)" -Atc "SELECT datname FROM pg_database WHERE datname LIKE 'relayops_test_%'" \
	  | while read -r db; do psql "$(RELAYOPS_DATABASE_URL)" -qc "DROP DATABASE \"$$db\" WITH (FORCE)"; done

## template.yaml (sam validate --lint, cfn-lint) and docker-compose.yml (config).
aws-lint:
	bash scripts/aws-lint.sh

## The functions under `cargo lambda watch`, end to end (part of `make test`).
lambda-smoke: services
	bash scripts/lambda-smoke.sh

## Every function under `cargo lambda watch` on :9000 (HTTP functions at
## http://127.0.0.1:9000/lambda-url/<ingest|query|replay|manage>/v1/...,
## admin at /lambda-url/admin/admin/v1/...), with
## the environment above; invoke the publisher from another shell with
## `cargo lambda invoke -A 127.0.0.1 publisher --data-file events/schedule.json`.
watch: services
	PATH="$$(bash scripts/aws-tools.sh):$$PATH" cargo lambda watch --invoke-address 127.0.0.1

## The six bootstraps for arm64 Lambda, with the size-tuned `lambda-release` profile,
## into $(CARGO_TARGET_DIR)/lambda/<function>/bootstrap (LAMBDA_ARCH=--x86-64 for x86_64).
LAMBDA_ARCH ?= --arm64
lambda-build:
	PATH="$$(bash scripts/aws-tools.sh):$$PATH" cargo lambda build --profile lambda-release $(LAMBDA_ARCH) \
	  --bin ingest --bin query --bin replay --bin manage --bin admin --bin publisher

## `sam build` of template.yaml (cargo-lambda, no Docker). SAM runs a release
## build; the `lambda-release` profile's LTO, codegen-units and strip are applied to it
## through the environment (its opt-level "s" is not: per-package overrides
## cannot be set that way, and password hashing needs full optimisation).
sam-build:
	PATH="$$(bash scripts/aws-tools.sh):$$PATH" SAM_CLI_BETA_RUST_CARGO_LAMBDA=1 \
	  CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 CARGO_PROFILE_RELEASE_STRIP=true \
	  sam build --beta-features
