# Shared by hack/test.sh and hack/demo.sh: stage timing and the project's own environment.
# shellcheck shell=bash
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${MLMS_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
STAGES=()

# stage NAME CMD...: run CMD, print how long it took, remember it for the summary.
stage() {
  local name=$1; shift
  local start=$SECONDS
  printf '\n==> %s\n' "$name"
  local rc=0
  "$@" || rc=$?
  STAGES+=("$(printf '%-34s %5ss  %s' "$name" $((SECONDS - start)) "$([ $rc = 0 ] && echo ok || echo "FAILED ($rc)")")")
  return $rc
}

summary() {
  local rc=$?
  printf '\n==> stage times\n'
  for line in "${STAGES[@]}"; do echo "  $line"; done
  printf '  %-34s %5ss\n' total "$SECONDS"
  return $rc
}
trap summary EXIT

# ensure_venv EXTRAS: a venv with the project installed editable; a stamp skips pip when
# pyproject.toml and constraints.txt are unchanged (pip's own cache keeps the wheels).
ensure_venv() {
  local extras=$1
  local want
  want="$extras $(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)"
  if [ ! -x "$PY" ]; then
    "${PYTHON:-python3}" -m venv "$VENV"
  fi
  if [ "$(cat "$VENV/.mlms-stamp" 2>/dev/null)" != "$want" ]; then
    "$PY" -m pip install -q --upgrade pip
    "$PY" -m pip install -q -c constraints.txt -e ".[$extras]"
    echo "$want" > "$VENV/.mlms-stamp"
  else
    echo "environment up to date ($VENV)"
  fi
}
