# The long-lived `relayops` binary (worker, api, publisher, all-in-one) as a
# small non-root image. The Lambda functions are not built here: `sam build`
# (cargo-lambda) builds them. Used by docker-compose.yml and the ECS worker
# service in template.yaml (build for arm64 there: `docker buildx build --platform linux/arm64`).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p relayops --bin relayops \
    && cp target/release/relayops /usr/local/bin/relayops

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home relayops
COPY --from=build /usr/local/bin/relayops /usr/local/bin/relayops
USER 10001
ENV RELAYOPS_API_LISTEN=0.0.0.0:8080 RELAYOPS_SIMULATOR_LISTEN=0.0.0.0:8090
EXPOSE 8080 8090
ENTRYPOINT ["relayops"]
CMD ["all"]
