# Shared by hack/test.sh and hack/demo.sh: stage timing and the project's own environment.
# shellcheck shell=bash
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${MLMS_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
STAGES=()
BACKGROUND_PIDS=()  # stopped on exit while still running (a stage failed before their wait)

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
  local rc=$? pid
  for pid in "${BACKGROUND_PIDS[@]}"; do
    pkill -TERM -P "$pid" 2>/dev/null || true  # its children first: pytest under nice
    kill "$pid" 2>/dev/null && echo "stopped background pid $pid"
  done
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

# ensure_debs PKG...: install Debian packages that are missing (root or sudo). A package is
# there when a command of its name is on PATH or, written PKG:/FILE-GLOB, when the glob
# matches a file (postgresql has no `postgresql` binary: 'postgresql:/usr/lib/postgresql/*/bin/postgres').
ensure_debs() {
  local missing=() names=() entry pkg proof
  for entry in "$@"; do
    pkg=${entry%%:/*}
    names+=("$pkg")
    if [ "$pkg" != "$entry" ]; then
      proof="/${entry#*:/}"
      compgen -G "$proof" >/dev/null || missing+=("$pkg")
    else
      command -v "$pkg" >/dev/null || missing+=("$pkg")
    fi
  done
  if [ ${#missing[@]} = 0 ]; then
    echo "installed: ${names[*]}"
    return 0
  fi
  local sudo=()
  [ "$(id -u)" = 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
  echo "installed: ${missing[*]}"
}

# The Go-built tools, each `GROUP:NAME:python -m MODULE ARGS` with its own log under the cache.
# `cluster`: what the session cluster starts from (and the small ones), built first at the
# builds' own nice 10; `late`: Kueue and Jaeger, which few tests need (they run last:
# tests/cluster_split.py), launched 7 steps lower so the control plane gets most of the CPU the
# installs leave and the cluster's tests can start sooner.
GO_BUILDS=(
  "cluster:control-plane:mlmodelscope.devcluster.build control-plane node"
  "cluster:helm:mlmodelscope.devtools.helm"
  "cluster:actionlint:mlmodelscope.devtools.actionlint"
  "cluster:registry:mlmodelscope.devcluster.registry"
  "cluster:dns:mlmodelscope.devcluster.dns"
  "late:kueue:mlmodelscope.devcluster.build kueue"
  "late:jaeger:mlmodelscope.devtools.jaeger build"
)
LATE_BUILD_NICE=7
GO_LOGS="${MLMS_CACHE_DIR:-$HOME/.cache/mlmodelscope}/logs"
GO_PIDS=()

start_go_builds() {
  mkdir -p "$GO_LOGS"
  local entry group name rest args nice=()
  for entry in "${GO_BUILDS[@]}"; do
    group=${entry%%:*}
    rest=${entry#*:}
    name=${rest%%:*}
    read -r -a args <<< "${rest#*:}"
    nice=()
    [ "$group" = late ] && nice=(nice -n "$LATE_BUILD_NICE")
    PYTHONPATH="$ROOT/operator" "${nice[@]}" "${PYTHON:-python3}" -m "${args[@]}" \
      > "$GO_LOGS/$name.log" 2>&1 &
    GO_PIDS+=("$group:$name:$!")
    echo "$name ($group): pid $! (log $GO_LOGS/$name.log)"
  done
}

# wait_go_builds GROUP: wait for that group's builds; fails naming each that failed, with the
# end of its log.
wait_go_builds() {
  local want=$1 rc=0 entry group rest name pid
  for entry in "${GO_PIDS[@]}"; do
    group=${entry%%:*}
    rest=${entry#*:}
    name=${rest%%:*}
    pid=${rest#*:}
    [ "$group" = "$want" ] || continue
    if wait "$pid"; then
      echo "--- $name: $(tail -n 1 "$GO_LOGS/$name.log")"
    else
      rc=1
      echo "--- $name FAILED; the end of $GO_LOGS/$name.log:"
      tail -n 40 "$GO_LOGS/$name.log"
    fi
  done
  return $rc
}
