"""Small Go commands of our own, built once from ``hack/<name>`` into the tool cache.

A `SourceTool` is a folder of Go sources whose go.mod and go.sum pin one upstream module (the
registry's go-containerregistry, the DNS's CoreDNS). `build` compiles it into
``<cache>/tools/<name>-<version>/bin/<binary>`` when the binary is missing or its stamp names
other pins or other sources, ``-mod=readonly`` so the committed go.sum is the pin and the
source folder is never written.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mlmodelscope.devcluster import versions
from mlmodelscope.devcluster.build import build_flags, go_env, niced
from mlmodelscope.devcluster.buildlock import build_lock

Log = Callable[[str], None]
HACK: Path = Path(__file__).resolve().parents[3] / "hack"


class SourceBuildError(RuntimeError):
    """The sources are missing, Go is missing, or ``go build`` failed (its output's tail)."""


@dataclass(frozen=True)
class SourceTool:
    name: str
    """Folder under hack/ and the cache folder's prefix."""
    binary: str
    module: str
    """The upstream module the sources pin, for messages and the stamp."""
    version: str
    sources: tuple[str, ...] = ("go.mod", "go.sum", "main.go")

    @property
    def source_dir(self) -> Path:
        return HACK / self.name

    def tool_dir(self) -> Path:
        return versions.cache_base() / "tools" / f"{self.name}-{self.version}"

    def binary_path(self) -> Path:
        return self.tool_dir() / "bin" / self.binary

    def fingerprint(self) -> str:
        """The pin and a hash of the sources: a change to either rebuilds."""
        digest = hashlib.sha256()
        for name in self.sources:
            digest.update(name.encode() + b"\0" + (self.source_dir / name).read_bytes() + b"\0")
        data = {self.module: self.version, "sources": digest.hexdigest(), "cgo": "0"}
        return json.dumps(data, sort_keys=True)

    def _stamp(self) -> Path:
        return self.tool_dir() / "stamp.json"

    def is_built(self) -> bool:
        if not self.binary_path().is_file() or not self._stamp().is_file():
            return False
        try:
            return bool(json.loads(self._stamp().read_text())["fingerprint"] == self.fingerprint())
        except (ValueError, KeyError, OSError):
            return False

    def build(self, log: Log, *, force: bool = False) -> float:
        """Compile into the tool cache; the seconds it took (0.0 when up to date)."""
        if not force and self.is_built():
            return 0.0
        with build_lock(self.name, log):
            if not force and self.is_built():  # another process built it meanwhile
                return 0.0
            return self._build(log)

    def _build(self, log: Log) -> float:
        if not (self.source_dir / "main.go").is_file():
            raise SourceBuildError(f"no sources at {self.source_dir} (a source checkout builds it)")
        go = shutil.which("go")
        if go is None:
            raise SourceBuildError(f"`go` is not on PATH; Go >= 1.25 builds {self.binary}")
        binary = self.binary_path()
        binary.parent.mkdir(parents=True, exist_ok=True)
        self._stamp().unlink(missing_ok=True)
        cmd = [go, "build", *build_flags("-s -w"), "-o", str(binary), "."]
        cmd = niced(cmd)
        log(f"building {self.binary} ({self.module} {self.version})")
        started = time.monotonic()
        env = go_env(GOFLAGS="-mod=readonly -buildvcs=false")
        proc = subprocess.run(cmd, cwd=self.source_dir, env=env, capture_output=True, text=True)
        took = time.monotonic() - started
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
            raise SourceBuildError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{tail}")
        stamp = {"fingerprint": self.fingerprint(), "seconds": round(took, 1)}
        self._stamp().write_text(json.dumps(stamp))
        log(f"built {self.binary} in {took:.1f}s → {binary}")
        return took


def main(tool: SourceTool, argv: Sequence[str] | None = None) -> int:
    """``python -m <module> [--force]`` of a tool's module: build if needed, print the path."""
    args = list(sys.argv[1:] if argv is None else argv)

    def log(msg: str) -> None:
        sys.stderr.write(msg + "\n")

    try:
        tool.build(log, force="--force" in args)
    except SourceBuildError as exc:
        log(str(exc))
        return 1
    sys.stdout.write(f"{tool.binary_path()}\n")
    return 0
