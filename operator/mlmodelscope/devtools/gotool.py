"""Go commands built once from their pinned modules into the tool cache.

A `GoTool` names a ``main`` package and its module version; `build` runs ``go install
<package>@<version>`` into ``<cache>/tools/<name>-<version>/bin`` (``GOTOOLCHAIN=local
CGO_ENABLED=0 -trimpath``, under ``nice``) when the binary is missing or its stamp was written
for other pins, and writes the stamp after a successful build. Outside any module, ``go install
pkg@version`` builds exactly what the tool's own go.mod pins. Helm (`devtools.helm`) and
actionlint (`devtools.actionlint`) are built this way.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mlmodelscope.devcluster.build import build_flags, go_env, niced
from mlmodelscope.devcluster.buildlock import build_lock
from mlmodelscope.devcluster.versions import cache_base

Log = Callable[[str], None]


class GoToolError(RuntimeError):
    """A tool could not be built; the message names the command and the tail of its output."""


def stderr_log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


@dataclass(frozen=True)
class GoTool:
    """One Go command, pinned: what to install, how to link it, which Go it needs."""

    name: str
    """The binary's name, and the cache folder's and the fingerprint's key."""
    label: str
    """How messages name it ("Helm")."""
    package: str
    """The ``main`` package, e.g. ``helm.sh/helm/v3/cmd/helm``."""
    version: str
    go_min: tuple[int, int]
    """The ``go`` line of the tool's go.mod; GOTOOLCHAIN=local forbids downloading one."""
    ldflags: str = "-s -w"
    inline: bool = True
    """False for a test tool, compiled without inlining (``build.NO_INLINE``)."""

    def tool_dir(self) -> Path:
        """``<cache>/tools/<name>-<version>`` (the cache honours ``MLMS_CACHE_DIR``)."""
        return cache_base() / "tools" / f"{self.name}-{self.version}"

    def binary(self) -> Path:
        """Where the built binary lives, built or not."""
        return self.tool_dir() / "bin" / self.name

    def fingerprint(self) -> str:
        """Everything that should trigger a rebuild when it changes."""
        data = {self.name: self.version, "ldflags": self.ldflags, "cgo": "0", "trimpath": "1"}
        return json.dumps(data, sort_keys=True)

    def stamp(self) -> Path:
        return self.tool_dir() / ".stamp"


def is_built(tool: GoTool) -> bool:
    """True when the binary exists and its stamp matches the current pins."""
    if not tool.binary().is_file() or not tool.stamp().is_file():
        return False
    try:
        return bool(json.loads(tool.stamp().read_text())["fingerprint"] == tool.fingerprint())
    except (ValueError, KeyError, OSError):
        return False


def check_go(tool: GoTool, go: str, env: dict[str, str]) -> str:
    """``go env GOVERSION``, refused when older than the tool's go.mod asks for."""
    out = subprocess.run([go, "env", "GOVERSION"], env=env, capture_output=True, text=True)
    version = out.stdout.strip()
    parts = version.removeprefix("go").split(".")
    try:
        have = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return version  # a devel toolchain: let the build decide
    if have < tool.go_min:
        want = ".".join(map(str, tool.go_min))
        raise GoToolError(f"{version} is too old: {tool.label} {tool.version} needs go >= {want}")
    return version


def build(tool: GoTool, *, force: bool = False, log: Log = stderr_log) -> float:
    """Compile ``tool`` into the tool cache; return the seconds it took (0.0 when cached)."""
    if is_built(tool) and not force:
        return 0.0
    with build_lock(tool.name, log):
        if is_built(tool) and not force:  # another process built it meanwhile
            return 0.0
        return _build(tool, log)


def _build(tool: GoTool, log: Log) -> float:
    go = shutil.which("go")
    if go is None:
        want = ".".join(map(str, tool.go_min))
        raise GoToolError(f"`go` is not on PATH; Go >= {want} builds {tool.label} {tool.version}")
    bin_dir = tool.binary().parent
    bin_dir.mkdir(parents=True, exist_ok=True)
    env = go_env(GOBIN=str(bin_dir), GOFLAGS="-buildvcs=false")
    go_version = check_go(tool, go, env)
    cmd = [go, "install", *build_flags(tool.ldflags, inline=tool.inline)]
    cmd.append(f"{tool.package}@{tool.version}")
    cmd = niced(cmd)
    log(f"building {tool.name} {tool.version} with {go_version} into {bin_dir} (cold: minutes)")
    tool.stamp().unlink(missing_ok=True)
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=tool.tool_dir(), env=env, capture_output=True, text=True)
    took = time.monotonic() - started
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise GoToolError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{tail}")
    stamp = {"fingerprint": tool.fingerprint(), "go": go_version, "seconds": round(took, 1)}
    tool.stamp().write_text(json.dumps(stamp))
    log(f"built {tool.name} {tool.version} in {took:.0f}s")
    return took


def main(tool: GoTool, argv: list[str] | None = None) -> int:
    """A tool module's ``__main__``: ``[--force]``, build if needed, print the binary's path."""
    args = sys.argv[1:] if argv is None else argv
    try:
        build(tool, force="--force" in args)
    except GoToolError as exc:
        stderr_log(str(exc))
        return 1
    sys.stdout.write(f"{tool.binary()}\n")
    return 0
