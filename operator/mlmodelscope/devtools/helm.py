"""Build the pinned Helm CLI from its Go module into the tool cache, once.

`ensure_helm()` returns ``<cache>/tools/helm-<version>/bin/helm``, compiling it with
``go install helm.sh/helm/v3/cmd/helm@<version>`` (`devtools.gotool`: ``GOTOOLCHAIN=local
CGO_ENABLED=0``, under ``nice``) when it is missing or was built from other pins. The link flags
are the ones Helm's own Makefile sets, so ``helm version`` reports the pin and the default
Kubernetes version of ``helm template``/``helm lint`` follows Helm's client-go (not Helm's 1.20
fallback).

Run ``python -m mlmodelscope.devtools.helm`` to build it and print the path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from mlmodelscope.devtools import gotool
from mlmodelscope.devtools.gotool import Log

HELM_VERSION: Final = "v3.22.0"
"""helm.sh/helm/v3; the newest v3 on the Go module proxy when pinned."""

HELM_K8S_VERSION: Final = (1, 37)
"""Kubernetes version of Helm's client-go (k8s.io/client-go v0.37.0 in Helm v3.22.0's go.mod):
what Helm's Makefile passes as the default capabilities and the lint target."""

GO_MIN_VERSION: Final = (1, 26)
"""Helm v3.22.0's go.mod says `go 1.26.0`; GOTOOLCHAIN=local forbids downloading one."""

HelmBuildError = gotool.GoToolError
"""Helm could not be built; the message names the command and the tail of its output."""


def ldflags() -> str:
    """Helm's Makefile link flags: version, and Kubernetes capabilities from its client-go."""
    major, minor = HELM_K8S_VERSION
    flags = ["-s", "-w", f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}"]
    flags.append("-X helm.sh/helm/v3/internal/version.gitTreeState=clean")
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags.append(f"-X {pkg}.k8sVersionMajor={major}")
        flags.append(f"-X {pkg}.k8sVersionMinor={minor}")
    return " ".join(flags)


HELM: Final = gotool.GoTool(
    name="helm",
    label="Helm",
    package="helm.sh/helm/v3/cmd/helm",
    version=HELM_VERSION,
    go_min=GO_MIN_VERSION,
    ldflags=ldflags(),
    inline=False,
)


def tool_dir() -> Path:
    """``<cache>/tools/helm-<version>`` (the cache honours ``MLMS_CACHE_DIR``)."""
    return HELM.tool_dir()


def helm_path() -> Path:
    """Where the built binary lives, built or not."""
    return HELM.binary()


def fingerprint() -> str:
    """Everything that should trigger a rebuild when it changes."""
    return HELM.fingerprint()


def is_built() -> bool:
    """True when the binary exists and its stamp matches the current pins."""
    return gotool.is_built(HELM)


def build(*, force: bool = False, log: Log = gotool.stderr_log) -> float:
    """Compile Helm into the tool cache; return the seconds it took (0.0 when cached)."""
    return gotool.build(HELM, force=force, log=log)


def ensure_helm(log: Log = gotool.stderr_log) -> Path:
    """The pinned helm binary, built first if missing or stale."""
    build(log=log)
    return helm_path()


def main(argv: list[str] | None = None) -> int:
    """``python -m mlmodelscope.devtools.helm [--force]``: build if needed, print the path."""
    return gotool.main(HELM, argv)


if __name__ == "__main__":
    raise SystemExit(main())
