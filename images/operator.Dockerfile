# The operator (`mlms operator`): Kopf, the Kubernetes client, telemetry and the results store
# (SQLAlchemy, Alembic, psycopg: MLMS_OPERATOR_STORE_URL); no framework. The same image runs the
# results service (`mlms serve`: FastAPI, uvicorn), which the chart deploys when server.enabled.
#
#   docker build -f images/operator.Dockerfile \
#     --build-arg MLMS_IMAGE=ghcr.io/mlmodelscope/operator:0.1.0 \
#     -t ghcr.io/mlmodelscope/operator:0.1.0 .
#
# WHEELHOUSE and the secret "ca" work as in agent.Dockerfile (no registry, a TLS-intercepting
# proxy): `python -m mlmodelscope.devtools.images build` passes them.

ARG BASE_IMAGE=python:3.11-slim-bookworm

# --------------------------------------------------------------------------- base
FROM ${BASE_IMAGE} AS base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# --------------------------------------------------------------------------- venv
FROM base AS venv
RUN python3 -m venv /opt/venv

# ------------------------------------------------------------------- requirements
# pyproject.toml and constraints.txt with an empty package: what pip needs to resolve the
# dependencies. A code change leaves this stage, and so the dependency layer, as it was.
FROM base AS requirements
WORKDIR /requirements
COPY pyproject.toml constraints.txt ./
RUN mkdir -p operator/mlmodelscope \
    && touch README.md operator/mlmodelscope/__init__.py

# ------------------------------------------------------------------------ builder
# The project's wheel, built from only what the operator runs (tests/packaging/test_images.py
# imports exactly these files): not the agent, its telemetry, the dev cluster or the developer
# tools.
FROM venv AS builder
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/mlmodelscope/__init__.py operator/mlmodelscope/__main__.py \
     operator/mlmodelscope/cli.py operator/mlmodelscope/py.typed \
     operator/mlmodelscope/tensorflow_import.py operator/mlmodelscope/
COPY operator/mlmodelscope/spec/ operator/mlmodelscope/spec/
COPY operator/mlmodelscope/contract/ operator/mlmodelscope/contract/
COPY operator/mlmodelscope/controller/ operator/mlmodelscope/controller/
COPY operator/mlmodelscope/store/ operator/mlmodelscope/store/
COPY operator/mlmodelscope/report/ operator/mlmodelscope/report/
COPY operator/mlmodelscope/server/ operator/mlmodelscope/server/
# analysis/: the report's analysis section and the dashboard's /runs/<id>/analysis page.
COPY operator/mlmodelscope/analysis/ operator/mlmodelscope/analysis/
ARG WHEELHOUSE=""
RUN --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && /opt/venv/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /dist \
      ${WHEELHOUSE:+--no-index --find-links "$WHEELHOUSE"} .

# ------------------------------------------------------------------------ runtime
# Two layers over the base, as in agent.Dockerfile: the dependencies, then the project.
FROM base AS runtime
RUN groupadd --system --gid 65532 mlms \
    && useradd --system --uid 65532 --gid 65532 --no-create-home \
         --home-dir /var/cache/mlmodelscope --shell /usr/sbin/nologin mlms \
    && mkdir -p /var/cache/mlmodelscope \
    && chown 65532:65532 /var/cache/mlmodelscope
COPY --from=venv /opt/venv /opt/venv
ARG WHEELHOUSE=""
RUN --mount=type=bind,from=requirements,source=/requirements,target=/tmp/requirements,rw \
    --mount=type=secret,id=ca \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && /opt/venv/bin/pip install --no-cache-dir -c /tmp/requirements/constraints.txt \
      ${WHEELHOUSE:+--no-index --find-links "$WHEELHOUSE"} \
      "/tmp/requirements[operator,telemetry,serve]" \
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
LABEL org.opencontainers.image.title="mlmodelscope-operator" \
      org.opencontainers.image.description="mlmodelscope operator: turns ModelEvaluations into evaluation Jobs" \
      org.opencontainers.image.source="https://github.com/mlmodelscope/mlmodelscope" \
      org.opencontainers.image.documentation="https://github.com/mlmodelscope/mlmodelscope/tree/main/docs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="mlmodelscope" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      io.mlmodelscope.extras="operator,telemetry,serve"
ENV PATH=/opt/venv/bin:$PATH \
    MLMS_CACHE_DIR=/var/cache/mlmodelscope \
    HOME=/var/cache/mlmodelscope \
    MLMS_IMAGE=${MLMS_IMAGE}
VOLUME /var/cache/mlmodelscope
WORKDIR /var/cache/mlmodelscope
USER 65532:65532
# Liveness/readiness (/healthz) and Prometheus metrics.
EXPOSE 8080 9090
ENTRYPOINT ["mlms"]
CMD ["operator"]
