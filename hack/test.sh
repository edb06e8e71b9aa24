#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs everything, builds what is slow into caches
# outside the repo, then lint, type check and every test (real frameworks, real control plane).
source "$(dirname "$0")/lib.sh"

stage "python environment" ensure_venv "all,dev"
if [ -f operator/mlmodelscope/devcluster/build.py ]; then
  stage "kubernetes control plane (cached)" "$PY" -m mlmodelscope.devcluster build
fi
stage "example models (cached)" "$PY" -m mlmodelscope.agent.digits
read -r -a LINTED <<< "$(ls -d operator tests examples benchmarks 2>/dev/null | tr '\n' ' ')"
stage "ruff check" "$VENV/bin/ruff" check "${LINTED[@]}"
stage "ruff format --check" "$VENV/bin/ruff" format --check "${LINTED[@]}"
stage "mypy" "$VENV/bin/mypy"
stage "crd up to date" "$VENV/bin/mlms" crd --check
stage "pytest" "$PY" -m pytest -q "$@"
