# The Helm chart's bundled trial database (postgresql.enabled): Debian bookworm's PostgreSQL 15
# from Debian's packages, on debian:bookworm-slim (where no registry serves it, `python -m
# mlmodelscope.devtools.images build` passes the Debian base it bootstraps for every image). It
# runs as postgres, UID/GID 999 (the chart's postgresql.podSecurityContext), with a read-only
# root filesystem: only PGDATA and the socket folder /var/run/postgresql are written. The
# entrypoint (images/postgresql-entrypoint.sh) reads the official postgres image's
# POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB and PGDATA (images/README.md).
#
#   docker build -f images/postgresql.Dockerfile --target runtime \
#     -t ghcr.io/mlmodelscope/postgresql:0.1.0 .
#   docker run --read-only -e POSTGRES_PASSWORD=... ghcr.io/mlmodelscope/postgresql:0.1.0

ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS runtime
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
ARG BASE_IMAGE
ARG DEBIAN_FRONTEND=noninteractive
LABEL org.opencontainers.image.title="mlmodelscope-postgresql" \
      org.opencontainers.image.description="PostgreSQL 15 (Debian bookworm's packages) for the mlmodelscope chart's trial results store" \
      org.opencontainers.image.source="https://github.com/mlmodelscope/mlmodelscope" \
      org.opencontainers.image.documentation="https://github.com/mlmodelscope/mlmodelscope/tree/main/docs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="mlmodelscope" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# - The postgres user and group first, with the fixed ID 999, so the package's postinst takes
#   them as they are (it would pick a free system ID).
# - No cluster at install (create_main_cluster): the entrypoint runs initdb into PGDATA.
# - Then what the server never runs is purged, with --force-depends (the packages that name
#   them stay installed): LLVM and Z3, only loaded for JIT compilation (jit = off below, and
#   the server skips JIT when its provider is missing); Perl, which only Debian's cluster
#   wrappers (pg_ctlcluster, /usr/bin/psql -> pg_wrapper) run: PATH puts the real binaries
#   first; the locales package (initdb uses glibc's built-in C.UTF-8). And ssl-cert's
#   snakeoil key, generated at build, the same in every copy of the image (ssl is off).
# hadolint ignore=DL3008
RUN groupadd --system --gid 999 postgres \
    && useradd --system --uid 999 --gid 999 --home-dir /var/lib/postgresql --no-create-home \
         --shell /bin/bash postgres \
    && mkdir -p /etc/postgresql-common \
    && echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf \
    && apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 \
    && dpkg --purge --force-depends libllvm14 libz3-4 perl perl-modules-5.36 libperl5.36 \
         libjson-perl locales libc-l10n \
    && rm -rf /usr/lib/postgresql/15/lib/bitcode /usr/lib/postgresql/15/lib/llvmjit* \
         /etc/ssl/private/ssl-cert-snakeoil.key /etc/ssl/certs/ssl-cert-snakeoil.pem \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log /var/cache/debconf/*-old \
    && printf '%s\n' "" "# mlmodelscope/postgresql image" "listen_addresses = '*'" "jit = off" \
         >> /usr/share/postgresql/15/postgresql.conf.sample \
    && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
    && chown -R 999:999 /var/lib/postgresql /var/run/postgresql \
    && chmod 0700 /var/lib/postgresql/data \
    && /usr/lib/postgresql/15/bin/postgres --version
COPY images/postgresql-entrypoint.sh /usr/local/bin/postgresql-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    LANG=C.UTF-8 \
    PGDATA=/var/lib/postgresql/data
VOLUME /var/lib/postgresql/data /var/run/postgresql
WORKDIR /var/lib/postgresql
USER 999:999
EXPOSE 5432
# SIGINT is PostgreSQL's fast shutdown: it ends the sessions instead of waiting for them.
STOPSIGNAL SIGINT
ENTRYPOINT ["postgresql-entrypoint"]
CMD ["postgres"]
