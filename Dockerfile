# syntax=docker/dockerfile:1
# gatehouse's container image: one static (musl) binary on distroless, run as uid 10001, with a
# read-only root filesystem in mind (everything it writes goes to the volume /var/lib/gatehouse).
#   docker build -t gatehouse .             builds from source, for the building machine's platform
#   docker buildx build --target release --platform linux/amd64,linux/arm64 .
#                                           the release workflow's image: the static binaries it
#                                           built, copied in from dist/linux-{amd64,arm64}/, nothing
#                                           compiled (.github/workflows/release.yml)
# A complete deployment (PostgreSQL, migrations, two replicas behind Caddy) is docker-compose.yml.
# deploy/check-container checks this file (hadolint, and what the stages copy, run and expose).

# --- the build from source: Alpine's toolchain targets musl, and Rust links musl statically -------
# Native on each platform (a multi-platform build of this target emulates the other one, slowly;
# the release workflow builds its binaries on native runners instead).
FROM rust:1-alpine AS builder
# A C compiler, make and musl's headers for the C in the tree: bundled SQLite (libsqlite3-sys),
# ring, jemalloc (tikv-jemalloc-sys). Unpinned: Alpine keeps only the current version of a package.
# hadolint ignore=DL3018
RUN apk add --no-cache build-base
WORKDIR /src
COPY . .
# jemalloc, as the release binaries have it: musl's own allocator is slow under many threads.
# Cache mounts keep downloaded crates and compiled dependencies between builds. They are not part
# of the image, so the binary is copied out of the cached target dir in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked --bin gatehouse --features jemalloc \
 && install -D -m 0755 target/release/gatehouse /out/gatehouse
# distroless/static has no C library and no dynamic loader: a binary asking for one would not start.
RUN readelf -l /out/gatehouse > /tmp/program-headers \
 && if grep -q 'program interpreter' /tmp/program-headers; then \
      echo 'gatehouse is dynamically linked; the distroless/static image cannot run it' >&2; exit 1; \
    fi

# --- an empty directory for the data volume, owned by the runtime user --------------------------
# The final stages have no shell to make it. On the build machine's own platform: no emulation.
FROM --platform=$BUILDPLATFORM alpine:3 AS data
RUN mkdir /data

# --- what both images share ---------------------------------------------------------------------
# distroless/static: CA certificates, /etc/passwd, tzdata; no shell, no package manager, no curl,
# so no HEALTHCHECK: the reverse proxy or orchestrator probes GET /readyz (GET /healthz = process
# up). Outgoing TLS trusts webpki-roots, compiled into gatehouse, not the image's certificates.
FROM gcr.io/distroless/static-debian12:nonroot AS runtime
# uid/gid 10001, not the tag's nonroot (65532): what deploy/kubernetes runs as (runAsUser) and what
# earlier images of gatehouse used, so volumes they wrote stay writable.
COPY --from=data --chown=10001:10001 --chmod=0700 /data /var/lib/gatehouse
USER 10001:10001
# Working directory for the embedded SQLite default (sqlite://gatehouse.db) and the dev key file
# (gatehouse.key): the one place gatehouse writes, so the root filesystem can be read-only
# (`docker run --read-only`, readOnlyRootFilesystem). Mount a volume here when using SQLite.
WORKDIR /var/lib/gatehouse
VOLUME ["/var/lib/gatehouse"]
# uid 10001 has no entry in the image's /etc/passwd: HOME (which stdio upstreams inherit, in an
# image built on this one) points at the volume too, not at the read-only /.
ENV HOME=/var/lib/gatehouse
# Listen on all interfaces inside the container. Off loopback, gatehouse requires
# GATEHOUSE_SERVER__PUBLIC_URL and refuses identity mode `local`: configure `header` mode behind a
# reverse proxy (see docker-compose.yml), or check a configuration with `check-config`.
ENV GATEHOUSE_SERVER__BIND=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/gatehouse"]
CMD ["serve"]

# --- the release image: the release workflow's static binary for the platform being built --------
FROM runtime AS release
ARG TARGETARCH
COPY --chmod=0755 dist/linux-${TARGETARCH}/gatehouse /usr/local/bin/gatehouse

# --- the default image (the last stage): the binary built from source above ----------------------
FROM runtime AS source
COPY --from=builder /out/gatehouse /usr/local/bin/gatehouse
