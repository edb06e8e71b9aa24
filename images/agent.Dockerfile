# The evaluation agent (`mlms agent ...`), one image per framework and device. Everything that
# differs between the six images is a build argument; docker-bake.json holds the matrix:
#
#   docker buildx bake -f images/docker-bake.json agent-onnxruntime-cpu
#
# or by hand, from the repository root:
#
#   docker build -f images/agent.Dockerfile \
#     --build-arg EXTRAS=onnxruntime,datasets,tasks,opencv,parquet,kube,telemetry,s3,loadgen \
#     --build-arg MLMS_IMAGE=ghcr.io/mlmodelscope/agent-onnxruntime:0.1.0-cpu \
#     -t ghcr.io/mlmodelscope/agent-onnxruntime:0.1.0-cpu .
#
# BASE_IMAGE is python:3.11-slim-bookworm for CPU images and an nvidia/cuda Ubuntu 24.04 image
# for GPU images (Python 3.12 from the distribution). Pin a digest by passing
# BASE_IMAGE=name:tag@sha256:... (docker-bake.json does, once CI has resolved one).
#
# No `# syntax=` line: the Dockerfile frontend built into BuildKit (Docker >= 20.10) has every
# feature used here (RUN --mount=type=secret), and a machine without a registry cannot pull one.
# Where there is no registry, `python -m mlmodelscope.devtools.images build` builds these images
# from a Debian base it bootstraps, a local wheelhouse and an optional CA bundle (images/README.md).

ARG BASE_IMAGE=python:3.11-slim-bookworm

# --------------------------------------------------------------------------- base
# The interpreter, and nothing else. python:* images have one in /usr/local; the nvidia/cuda
# images get the distribution's python3, whose version the base tag pins.
FROM ${BASE_IMAGE} AS base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DEBIAN_FRONTEND=noninteractive
# hadolint ignore=DL3008
RUN if ! command -v python3 >/dev/null; then \
      apt-get update \
      && apt-get install -y --no-install-recommends python3 ca-certificates \
      && rm -rf /var/lib/apt/lists/*; \
    fi

# --------------------------------------------------------------------------- venv
# An empty virtual environment at /opt/venv (pip only): python3-venv, where the base needs it,
# stays in this stage.
FROM base AS venv
# hadolint ignore=DL3008
RUN if ! python3 -c 'import ensurepip' 2>/dev/null; then \
      apt-get update \
      && apt-get install -y --no-install-recommends python3-venv \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/venv

# ------------------------------------------------------------------- requirements
# What pip needs to resolve the dependencies and nothing else: pyproject.toml and the
# constraints (the versions CI tests, plus images/constraints-images.txt for GPU builds) with
# an empty package. A code change leaves this stage, and so the dependency layer, as it was.
FROM base AS requirements
WORKDIR /requirements
COPY pyproject.toml constraints.txt ./
COPY images/constraints-images.txt images/
RUN mkdir -p operator/mlmodelscope \
    && touch README.md operator/mlmodelscope/__init__.py

# ------------------------------------------------------------------------ builder
# The project's wheel, built from only what the agent runs (tests/packaging/test_images.py
# runs exactly these files): not the operator (controller/), the dev cluster or the developer
# tools.
FROM venv AS builder
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/mlmodelscope/__init__.py operator/mlmodelscope/__main__.py \
     operator/mlmodelscope/cli.py operator/mlmodelscope/py.typed \
     operator/mlmodelscope/tensorflow_import.py operator/mlmodelscope/
COPY operator/mlmodelscope/spec/ operator/mlmodelscope/spec/
COPY operator/mlmodelscope/contract/ operator/mlmodelscope/contract/
COPY operator/mlmodelscope/agent/ operator/mlmodelscope/agent/
COPY operator/mlmodelscope/telemetry/ operator/mlmodelscope/telemetry/
# analysis/xsp.py: the leveled correction the agent computes for trace levels above model.
COPY operator/mlmodelscope/analysis/ operator/mlmodelscope/analysis/
# WHEELHOUSE: install only from this --find-links location (no index), e.g. a folder of wheels
# served on the build host and reached with `docker build --network host`. The secret "ca"
# (`--secret id=ca,src=bundle.pem`): a CA bundle pip trusts in this step only, for a proxy that
# intercepts TLS; a secret mount is never written to a layer.
ARG WHEELHOUSE=""
RUN --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && /opt/venv/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /dist \
      ${WHEELHOUSE:+--no-index --find-links "$WHEELHOUSE"} .

# ------------------------------------------------------------------------ runtime
# Two layers over the base: the dependencies (gigabytes; rebuilt only when pyproject.toml, the
# constraints or the build arguments change) and the project (a few MB; rebuilt for a code
# change). A registry and a node's containerd then take only the small layer again.
FROM base AS runtime
# A fixed non-root user (65532, as distroless "nonroot"); the operator's Job runs as this UID.
RUN groupadd --system --gid 65532 mlms \
    && useradd --system --uid 65532 --gid 65532 --no-create-home \
         --home-dir /var/cache/mlmodelscope --shell /usr/sbin/nologin mlms \
    && mkdir -p /var/cache/mlmodelscope \
    && chown 65532:65532 /var/cache/mlmodelscope
COPY --from=venv /opt/venv /opt/venv
ARG EXTRAS=onnxruntime,datasets,tasks,opencv,parquet,kube,telemetry,s3,loadgen
# An extra package index, e.g. https://download.pytorch.org/whl/cpu for CPU-only PyTorch wheels.
ARG EXTRA_INDEX_URL=""
ARG WHEELHOUSE=""
# The dependencies of the project with one framework's extra: pip resolves them from the empty
# package, which is then uninstalled.
RUN --mount=type=bind,from=requirements,source=/requirements,target=/tmp/requirements,rw \
    --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && /opt/venv/bin/pip install --no-cache-dir \
      -c /tmp/requirements/constraints.txt -c /tmp/requirements/images/constraints-images.txt \
      ${EXTRA_INDEX_URL:+--extra-index-url "$EXTRA_INDEX_URL"} \
      ${WHEELHOUSE:+--no-index --find-links "$WHEELHOUSE"} \
      "/tmp/requirements[${EXTRAS}]" \
    && /opt/venv/bin/pip uninstall --yes mlmodelscope
RUN --mount=type=bind,from=builder,source=/dist,target=/tmp/dist \
    /opt/venv/bin/pip install --no-cache-dir --no-index --no-deps /tmp/dist/*.whl \
    && /opt/venv/bin/pip check \
    && /opt/venv/bin/mlms version
ARG MLMS_IMAGE=""
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
ARG BASE_IMAGE
LABEL org.opencontainers.image.title="mlmodelscope-agent" \
      org.opencontainers.image.description="mlmodelscope evaluation agent (extras: ${EXTRAS})" \
      org.opencontainers.image.source="https://github.com/mlmodelscope/mlmodelscope" \
      org.opencontainers.image.documentation="https://github.com/mlmodelscope/mlmodelscope/tree/main/docs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="mlmodelscope" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      io.mlmodelscope.extras="${EXTRAS}"
# The only writable place: model/dataset caches, HOME for libraries that write to ~. The root
# filesystem stays read-only (readOnlyRootFilesystem in the Job and the chart).
ENV PATH=/opt/venv/bin:$PATH \
    MLMS_CACHE_DIR=/var/cache/mlmodelscope \
    HOME=/var/cache/mlmodelscope \
    XDG_CACHE_HOME=/var/cache/mlmodelscope/xdg \
    MLMS_IMAGE=${MLMS_IMAGE} \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
VOLUME /var/cache/mlmodelscope
WORKDIR /var/cache/mlmodelscope
USER 65532:65532
ENTRYPOINT ["mlms"]
CMD ["--help"]
