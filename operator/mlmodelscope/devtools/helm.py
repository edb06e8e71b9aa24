"""Build the pinned Helm CLI from its Go module into the tool cache, once.

`ensure_helm()` returns ``<cache>/tools/helm-<version>/bin/helm``, compiling it with
``go install helm.sh/helm/v3/cmd/helm@<version>`` (``GOTOOLCHAIN=local CGO_ENABLED=0``, under
``nice``) when it is missing or was built from other pins. The link flags are the ones Helm's own
Makefile sets, so ``helm version`` reports the pin and the default Kubernetes version of
``helm template``/``helm lint`` follows Helm's client-go (not Helm's 1.20 fallback).

Run ``python -m mlmodelscope.devtools.helm`` to build it and print the path.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from mlmodelscope.devcluster.build import go_env
from mlmodelscope.devcluster.versions import cache_base

HELM_VERSION: Final = "v3.22.0"
"""helm.sh/helm/v3; the newest v3 on the Go module proxy when pinned."""

HELM_K8S_VERSION: Final = (1, 37)
"""Kubernetes version of Helm's client-go (k8s.io/client-go v0.37.0 in Helm v3.22.0's go.mod):
what Helm's Makefile passes as the default capabilities and the lint target."""

GO_MIN_VERSION: Final = (1, 26)
"""Helm v3.22.0's go.mod says `go 1.26.0`; GOTOOLCHAIN=local forbids downloading one."""

Log = Callable[[str], None]


class HelmBuildError(RuntimeError):
    """Helm could not be built; the message names the command and the tail of its output."""


def _stderr(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def tool_dir() -> Path:
    """``<cache>/tools/helm-<version>`` (the cache honours ``MLMS_CACHE_DIR``)."""
    return cache_base() / "tools" / f"helm-{HELM_VERSION}"


def helm_path() -> Path:
    """Where the built binary lives, built or not."""
    return tool_dir() / "bin" / "helm"


def ldflags() -> str:
    """Helm's Makefile link flags: version, and Kubernetes capabilities from its client-go."""
    major, minor = HELM_K8S_VERSION
    flags = ["-s", "-w", f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}"]
    flags.append("-X helm.sh/helm/v3/internal/version.gitTreeState=clean")
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags.append(f"-X {pkg}.k8sVersionMajor={major}")
        flags.append(f"-X {pkg}.k8sVersionMinor={minor}")
    return " ".join(flags)


def fingerprint() -> str:
    """Everything that should trigger a rebuild when it changes."""
    data = {"helm": HELM_VERSION, "ldflags": ldflags(), "cgo": "0", "trimpath": "1"}
    return json.dumps(data, sort_keys=True)


def _stamp() -> Path:
    return tool_dir() / ".stamp"


def is_built() -> bool:
    """True when the binary exists and its stamp matches the current pins."""
    if not helm_path().is_file() or not _stamp().is_file():
        return False
    try:
        return bool(json.loads(_stamp().read_text())["fingerprint"] == fingerprint())
    except (ValueError, KeyError):
        return False


def _check_go(go: str, env: dict[str, str]) -> str:
    out = subprocess.run([go, "env", "GOVERSION"], env=env, capture_output=True, text=True)
    version = out.stdout.strip()
    parts = version.removeprefix("go").split(".")
    try:
        have = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return version  # a devel toolchain: let the build decide
    if have < GO_MIN_VERSION:
        want = ".".join(map(str, GO_MIN_VERSION))
        raise HelmBuildError(f"{version} is too old: Helm {HELM_VERSION} needs go >= {want}")
    return version


def build(*, force: bool = False, log: Log = _stderr) -> float:
    """Compile Helm into the tool cache; return the seconds it took (0.0 when cached)."""
    if is_built() and not force:
        return 0.0
    go = shutil.which("go")
    if go is None:
        raise HelmBuildError(f"`go` is not on PATH; Go >= 1.26 builds Helm {HELM_VERSION}")
    bin_dir = helm_path().parent
    bin_dir.mkdir(parents=True, exist_ok=True)
    env = go_env(GOBIN=str(bin_dir), GOFLAGS="-buildvcs=false")
    go_version = _check_go(go, env)
    pkg = f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"
    cmd = [go, "install", "-trimpath", "-ldflags", ldflags(), pkg]
    if shutil.which("nice"):
        cmd = ["nice", "-n", "10", *cmd]
    log(f"building helm {HELM_VERSION} with {go_version} into {bin_dir} (cold: a few minutes)")
    _stamp().unlink(missing_ok=True)
    started = time.monotonic()
    # Outside any module: `go install pkg@version` then builds exactly what Helm's go.mod pins.
    proc = subprocess.run(cmd, cwd=tool_dir(), env=env, capture_output=True, text=True)
    took = time.monotonic() - started
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise HelmBuildError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{tail}")
    stamp = {"fingerprint": fingerprint(), "go": go_version, "seconds": round(took, 1)}
    _stamp().write_text(json.dumps(stamp))
    log(f"built helm {HELM_VERSION} in {took:.0f}s")
    return took


def ensure_helm(log: Log = _stderr) -> Path:
    """The pinned helm binary, built first if missing or stale."""
    build(log=log)
    return helm_path()


def main(argv: list[str] | None = None) -> int:
    """``python -m mlmodelscope.devtools.helm [--force]``: build if needed, print the path."""
    args = sys.argv[1:] if argv is None else argv
    try:
        build(force="--force" in args)
    except HelmBuildError as exc:
        _stderr(str(exc))
        return 1
    sys.stdout.write(f"{helm_path()}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
