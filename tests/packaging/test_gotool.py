"""The build-once-into-the-cache logic Helm and actionlint share (`devtools.gotool`), without
compiling anything: the stamp decides, a built tool is not rebuilt, an old Go is refused, and
Helm's stamp reads as it did before the logic was shared (a cache built then stays valid)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlmodelscope.devcluster import buildlock
from mlmodelscope.devtools import actionlint, gotool, helm

TOOL = gotool.GoTool(
    name="demo", label="Demo", package="example.com/demo/cmd/demo", version="v1.2.3", go_min=(1, 25)
)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MLMS_CACHE_DIR", str(tmp_path))
    return tmp_path


def built(tool: gotool.GoTool, fingerprint: str) -> None:
    tool.binary().parent.mkdir(parents=True, exist_ok=True)
    tool.binary().write_text("#!/bin/sh\n")
    tool.stamp().write_text(json.dumps({"fingerprint": fingerprint, "seconds": 1.0}))


def test_helm_keeps_its_cache_layout_and_stamp(cache: Path) -> None:
    assert helm.helm_path() == cache / "tools" / f"helm-{helm.HELM_VERSION}" / "bin" / "helm"
    assert helm.HELM.stamp() == helm.tool_dir() / ".stamp"
    before = {"helm": helm.HELM_VERSION, "ldflags": helm.ldflags(), "cgo": "0", "trimpath": "1"}
    assert helm.fingerprint() == json.dumps(before, sort_keys=True)
    assert actionlint.ACTIONLINT.binary().parent == cache / "tools" / "actionlint-v1.7.12" / "bin"


def test_the_stamp_decides_whether_a_tool_is_built(cache: Path) -> None:
    assert not gotool.is_built(TOOL)
    built(TOOL, TOOL.fingerprint())
    assert gotool.is_built(TOOL)
    built(TOOL, json.dumps({"demo": "v1.2.2"}))
    assert not gotool.is_built(TOOL)
    TOOL.stamp().write_text("not json")
    assert not gotool.is_built(TOOL)


def test_a_built_tool_is_not_rebuilt(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built(TOOL, TOOL.fingerprint())
    monkeypatch.setenv("PATH", str(cache))  # no `go`: a build would fail
    assert gotool.build(TOOL) == 0.0
    with pytest.raises(gotool.GoToolError, match=r"`go` is not on PATH; Go >= 1\.25 builds Demo"):
        gotool.build(TOOL, force=True)


def test_an_old_go_is_refused(tmp_path: Path) -> None:
    go = tmp_path / "go"
    go.write_text("#!/bin/sh\necho go1.24.9\n")
    go.chmod(0o755)
    with pytest.raises(gotool.GoToolError, match=r"go1\.24\.9 is too old: Demo v1\.2\.3 needs"):
        gotool.check_go(TOOL, str(go), {"PATH": "/usr/bin:/bin"})
    go.write_text("#!/bin/sh\necho go1.26.0\n")
    assert gotool.check_go(TOOL, str(go), {"PATH": "/usr/bin:/bin"}) == "go1.26.0"


HOLD_THEN_BUILD = """
import json, sys, time
from pathlib import Path
from mlmodelscope.devcluster.buildlock import build_lock
binary, stamp, fingerprint = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
with build_lock("demo"):
    print("holding", flush=True)
    time.sleep(1.0)
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_text("#!/bin/sh\\n")
    stamp.write_text(json.dumps({"fingerprint": fingerprint}))
"""


def test_a_build_in_another_process_is_waited_for_not_repeated(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make test` starts tests beside the Go builds: a test that needs a tool still being
    built waits on its lock and then finds it built (no `go` on PATH: a second build fails)."""
    paths = [str(TOOL.binary()), str(TOOL.stamp()), TOOL.fingerprint()]
    other = subprocess.Popen(
        [sys.executable, "-c", HOLD_THEN_BUILD, *paths],
        env={**os.environ, "MLMS_CACHE_DIR": str(cache)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert other.stdout is not None and other.stdout.readline() == "holding\n"
    monkeypatch.setenv("PATH", str(cache))
    said: list[str] = []
    started = time.monotonic()
    assert gotool.build(TOOL, log=said.append) == 0.0
    assert time.monotonic() - started > 0.5
    assert other.wait(timeout=30) == 0
    assert said[0].startswith("waiting for the build of demo that another process runs")
    assert said[1].startswith("  demo: waited ")
    assert buildlock.lock_path("demo") == cache / "locks" / "build-demo.lock"
