# The image stage of `make test` (issue 14), sourced by hack/test.sh once the venv exists:
# Debian's Docker engine and mmdebstrap, an engine started by hand when none answers (no
# systemd here: dockerd --iptables=false --bridge=none under the cache dir, left running for
# the tests), then every CPU image of images/docker-bake.json built, or found up to date, and
# sized (python -m mlmodelscope.devtools.images build; images/README.md). The base image is
# bootstrapped from Debian packages when no registry serves python:3.11-slim-bookworm, the
# wheels come from a wheelhouse filled once, and MLMS_BUILD_CA_BUNDLE (default: $PIP_CERT) is a
# CA bundle the builds trust through a BuildKit secret (a TLS-intercepting proxy's CA).
# shellcheck shell=bash

images_engine() {
  DOCKER_HOST="$("$PY" -m mlmodelscope.devtools.images engine)"
  export DOCKER_HOST
  echo "DOCKER_HOST=$DOCKER_HOST"
}

images_build() {
  local ca=${MLMS_BUILD_CA_BUNDLE:-${PIP_CERT:-}} args=()
  [ -n "$ca" ] && [ -f "$ca" ] && args+=(--ca-bundle "$ca")
  "$PY" -m mlmodelscope.devtools.images build "${args[@]}"
}

stage "debian packages (docker.io, mmdebstrap)" ensure_debs 'docker.io:/usr/sbin/dockerd' mmdebstrap
stage "docker engine" images_engine
stage "images (cpu, cached)" images_build

# The images pushed by digest into the dev registry's data (a registry started for the push:
# no cluster yet), so the real node pulls them without a push inside the tests; an image id
# pushed before is not pushed again (python -m mlmodelscope.devtools.publish --images-only).
images_push() {
  local ca=${MLMS_BUILD_CA_BUNDLE:-${PIP_CERT:-}} args=()
  [ -n "$ca" ] && [ -f "$ca" ] && args+=(--ca-bundle "$ca")
  "$PY" -m mlmodelscope.devtools.publish --images-only "${args[@]}"
}
