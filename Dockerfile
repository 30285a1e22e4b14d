# syntax=docker/dockerfile:1
# gatehouse container image.
#   docker build -t gatehouse .
# A complete deployment (PostgreSQL, migrations, two replicas behind Caddy) is docker-compose.yml.

FROM rust:1-bookworm AS builder
WORKDIR /src
COPY . .
# Cache mounts keep downloaded crates and compiled dependencies between builds. They are not part
# of the image, so the binary is copied out of the cached target dir in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked --bin gatehouse \
 && install -D -m 0755 target/release/gatehouse /out/gatehouse

FROM debian:bookworm-slim
# ca-certificates: the system trust store for outgoing TLS (OAuth providers, HTTP tools).
# No curl, so no HEALTHCHECK: the reverse proxy checks /readyz (GET /healthz = process up).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 gatehouse \
 && useradd --system --uid 10001 --gid gatehouse --home-dir /var/lib/gatehouse --create-home \
      --shell /usr/sbin/nologin gatehouse
COPY --from=builder /out/gatehouse /usr/local/bin/gatehouse
USER 10001:10001
# Working directory for the embedded SQLite default (sqlite://gatehouse.db) and the dev key file;
# mount a volume here when using SQLite.
WORKDIR /var/lib/gatehouse
# Listen on all interfaces inside the container. Off loopback, gatehouse requires
# GATEHOUSE_SERVER__PUBLIC_URL and refuses identity mode `local`: configure `header` mode behind a
# reverse proxy (see docker-compose.yml), or check a configuration with `check-config`.
ENV GATEHOUSE_SERVER__BIND=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["gatehouse"]
CMD ["serve"]
