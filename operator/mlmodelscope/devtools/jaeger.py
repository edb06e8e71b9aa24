"""Build Jaeger from its pinned Go module into the tool cache, for tests and local tracing.

Jaeger v2 (an OpenTelemetry Collector distribution) lives in the module
``github.com/jaegertracing/jaeger``, whose go.mod has no ``/v2`` suffix, so the Go proxy serves
it only under the v1 tag cut from the same commit (v1.76.0 is v2.13.0). Its go.mod carries a
``replace`` directive, which ``go install pkg@version`` refuses, so the pinned module is
downloaded, copied out of the read-only module cache, and ``./cmd/jaeger`` is built there.
``GOTOOLCHAIN=local CGO_ENABLED=0``, under ``nice`` (two busy cores); a stamp makes a second
run a no-op. Run ``python -m mlmodelscope.devtools.jaeger build``.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from mlmodelscope.devcluster.build import build_flags, go_env, niced
from mlmodelscope.devcluster.buildlock import build_lock
from mlmodelscope.devcluster.versions import cache_base

JAEGER_MODULE: Final = "github.com/jaegertracing/jaeger"
JAEGER_MODULE_VERSION: Final = "v1.76.0"
"""The Go module tag; the same commit is tagged v2.13.0 (the Jaeger v2 release)."""
JAEGER_VERSION: Final = "v2.13.0"
"""The Jaeger release the binary reports (``jaeger version``)."""
JAEGER_PACKAGE: Final = "./cmd/jaeger"
_VERSION_PKG: Final = "github.com/jaegertracing/jaeger/internal/version"

Log = Callable[[str], None]


class ToolBuildError(RuntimeError):
    """A tool could not be built; the message names the command and its output tail."""


def jaeger_dir() -> Path:
    """``<cache>/tools/jaeger-<version>``: source copy, ``bin/jaeger`` and the build stamp."""
    return cache_base() / "tools" / f"jaeger-{JAEGER_VERSION}"


def jaeger_binary() -> Path:
    return jaeger_dir() / "bin" / "jaeger"


def _ldflags() -> str:
    return f"-s -w -X {_VERSION_PKG}.latestVersion={JAEGER_VERSION} -X {_VERSION_PKG}.commitSHA="


def _fingerprint() -> str:
    data = {
        "module": JAEGER_MODULE,
        "version": JAEGER_MODULE_VERSION,
        "ldflags": _ldflags(),
        "cgo": "0",
    }
    return json.dumps(data, sort_keys=True)


def is_built() -> bool:
    """True when the binary exists and its stamp matches the current pin."""
    stamp = jaeger_dir() / "stamp.json"
    if not jaeger_binary().is_file() or not stamp.is_file():
        return False
    try:
        return bool(json.loads(stamp.read_text())["fingerprint"] == _fingerprint())
    except (ValueError, KeyError):
        return False


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise ToolBuildError("`go` is not on PATH; Go >= 1.24 is needed to build Jaeger")
    return go


def _run(cmd: Sequence[str], cwd: Path, log: Log) -> str:
    started = time.monotonic()
    proc = subprocess.run(
        niced(cmd), cwd=cwd, env=go_env(), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-40:])
        raise ToolBuildError(f"{' '.join(cmd)} failed (exit {proc.returncode}) in {cwd}:\n{tail}")
    log(f"  {' '.join(cmd[:3])} … {time.monotonic() - started:.0f}s")
    return proc.stdout


def _copy_writable(src: Path, dst: Path) -> None:
    """The module cache is read-only; the build needs a writable tree (go.sum may change)."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    for root, dirs, files in os.walk(dst):
        for name in [*dirs, *files]:
            path = Path(root) / name
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    Path(dst).chmod(Path(dst).stat().st_mode | stat.S_IWUSR)


def build_jaeger(*, force: bool = False, log: Log | None = None) -> Path:
    """The Jaeger binary, building it first when missing or stale (cold: tens of minutes)."""
    say = log or _stderr
    binary = jaeger_binary()
    if not force and is_built():
        return binary
    with build_lock("jaeger", say):
        if not force and is_built():  # another process built it meanwhile
            return binary
        _build(binary, say)
    return binary


def _build(binary: Path, say: Log) -> None:
    go = _go()
    base = jaeger_dir()
    base.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    say(f"building Jaeger {JAEGER_VERSION} ({JAEGER_MODULE}@{JAEGER_MODULE_VERSION}) into {base}")
    out = _run(
        [go, "mod", "download", "-json", f"{JAEGER_MODULE}@{JAEGER_MODULE_VERSION}"], base, say
    )
    src_dir = Path(json.loads(out)["Dir"])
    src = base / "src"
    _copy_writable(src_dir, src)
    binary.parent.mkdir(parents=True, exist_ok=True)
    cmd = [go, "build", *build_flags(_ldflags(), inline=False), "-o", str(binary), JAEGER_PACKAGE]
    _run(cmd, src, say)
    took = time.monotonic() - started
    go_version = subprocess.run(
        [go, "env", "GOVERSION"], env=go_env(), capture_output=True, text=True, check=False
    ).stdout.strip()
    stamp = {"fingerprint": _fingerprint(), "go": go_version, "seconds": round(took, 1)}
    (base / "stamp.json").write_text(json.dumps(stamp))
    shutil.rmtree(src, ignore_errors=True)  # 40 MB of source the binary no longer needs
    say(f"built Jaeger {JAEGER_VERSION} in {took:.0f}s → {binary}")


def _stderr(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """``build [--force]`` builds Jaeger; ``path`` prints where the binary is (or would be)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("build", "path"):
        _stderr("usage: python -m mlmodelscope.devtools.jaeger build [--force] | path")
        return 2
    if args[0] == "path":
        sys.stdout.write(f"{jaeger_binary()}\n")
        return 0 if is_built() else 1
    try:
        build_jaeger(force="--force" in args)
    except ToolBuildError as exc:
        _stderr(str(exc))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
