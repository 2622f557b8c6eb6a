# RelayOps developer commands. The two that matter: `make demo` and `make test`.
SHELL := /bin/bash
export RELAYOPS_DATABASE_URL ?= postgres://relayops:relayops@127.0.0.1:5432/relayops
export RELAYOPS_AMQP_URL ?= amqp://guest:guest@127.0.0.1:5672/%2f
export RELAYOPS_REDIS_URL ?= redis://127.0.0.1:6379
export RELAYOPS_LOG ?= warn

.PHONY: demo test services lint run bench bench-backlog bench-smoke clean-test-databases

## Installs/starts Postgres, RabbitMQ and Redis, then runs `relayops demo`:
## every role in one process, endpoints at the simulator, events, delivery table.
demo: services
	cargo run -q -p relayops -- demo

## The full check CI runs: services, formatting, clippy, then every test.
## Tests named `exclusive_*` restart the shared broker or load the machine, so
## they run after the others, one at a time.
test: services lint
	cargo build -q -p relayops -p relayops-bench --bins
	@if cargo nextest --version >/dev/null 2>&1; then \
	  cargo nextest run --workspace --no-fail-fast -E 'not test(/exclusive_/)' && \
	  cargo nextest run -p relayops-tests --no-fail-fast --test-threads 1 -E 'test(/exclusive_/)'; \
	else \
	  cargo test --workspace --no-fail-fast -- --skip exclusive_ && \
	  cargo test -p relayops-tests --test integration --no-fail-fast -- exclusive_ --test-threads 1; \
	fi
	bash scripts/bench-smoke.sh
	bash scripts/schemathesis.sh

## The load generator against a release build of `relayops all` (see BENCHMARKS.md).
bench: services
	cargo build --release -q -p relayops -p relayops-bench
	RELAYOPS_LOG=warn $${CARGO_TARGET_DIR:-target}/release/relayops all & pid=$$!; \
	  $${CARGO_TARGET_DIR:-target}/release/relayops-bench $(BENCH_ARGS); status=$$?; kill $$pid; exit $$status

## The backlog-drain scenario: `relayops api` (no worker) + the bench, which
## queues BACKLOG events (default 100k) and then starts a worker to drain them.
bench-backlog: services
	cargo build --release -q -p relayops -p relayops-bench
	RELAYOPS_LOG=warn $${CARGO_TARGET_DIR:-target}/release/relayops api & pid=$$!; \
	  $${CARGO_TARGET_DIR:-target}/release/relayops-bench --scenarios backlog --backlog-events $${BACKLOG:-100000} \
	  --relayops-bin $${CARGO_TARGET_DIR:-target}/release/relayops $(BENCH_ARGS); status=$$?; kill $$pid; exit $$status

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
