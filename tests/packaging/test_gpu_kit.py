"""The GPU kit (docs/gpu.md): its CPU dry run through the very command the GPU machine runs,
the bundle's contents and size, the unpacking there, and the driver's time limits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from mlmodelscope.devtools.gpukit import bundle, driver
from mlmodelscope.devtools.gpukit.record import ENVIRONMENT_KEYS, NO_GPU, StepRecord, problems

ROOT = Path(__file__).parents[2]
MAX_FILES = 8
MAX_FILE_BYTES = 16 << 20


@pytest.mark.frameworks
def test_cpu_dry_run_writes_valid_results_with_gpu_steps_skipped(tmp_path: Path) -> None:
    """``run OUT`` as docs/gpu.md gives it, on a machine without a GPU: every GPU step runs
    its tiny CPU variant and is reported skipped, the results validate, the summary exists."""
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator"), "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, "-m", "mlmodelscope.devtools.gpukit", "run", str(out)]
    proc = subprocess.run(
        [*command, "--work", str(tmp_path / "work")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    document = json.loads((out / "results.json").read_text())
    assert problems(document) == []
    assert document["gpu"] is False
    steps = {s["name"]: s for s in document["steps"]}
    assert list(steps) == [s.name for s in driver.STEPS]
    assert steps["facts"]["status"] == "ok"
    assert steps["facts"]["data"]["cli_imports"] is True
    for name in ("eval-resnet50", "eval-bert_base", "trace"):
        assert (steps[name]["status"], steps[name]["reason"]) == ("skipped", NO_GPU)
        assert set(ENVIRONMENT_KEYS) <= set(steps[name]["environment"])
    for name in ("eval-resnet50", "eval-bert_base"):
        data = steps[name]["data"]
        assert data["frameworks_blocked"] == {"tensorflow": True, "keras": True}
        measured = {(r["scenario"], r["batch_size"]) for r in data["overhead"]}
        assert measured == {("SingleStream", 1), ("SingleStream", 2), ("Offline", 4)}
        assert data["backend"]["framework"] == "pytorch"
    models = steps["trace"]["data"]["models"]
    assert set(models) == {"resnet50", "bert_base"}
    assert "framework" in models["resnet50"]["tracing"]["levels"]
    assert models["resnet50"]["top_layers"]
    assert {n["name"] for n in document["not_yet"]} >= {"ncu-metrics", "benanza-gpu"}
    summary = (out / "summary.txt").read_text()
    assert "eval-resnet50: skipped (no GPU)" in summary
    assert "results.json: valid" in summary
    files = list(out.iterdir())
    assert len(files) <= MAX_FILES
    assert all(f.stat().st_size <= MAX_FILE_BYTES for f in files)
    assert {"results.json", "summary.txt", "trace-resnet50.trace.json.gz"} <= {
        f.name for f in files
    }


def test_a_step_past_its_limit_is_stopped_and_the_run_goes_on(tmp_path: Path) -> None:
    """A step that overruns is killed and recorded as timeout; a run out of time starts no
    further step and says so."""
    env = driver.step_env(ROOT, None)
    record, _ = driver.run_step(driver.Step("facts", 0.3, "x"), tmp_path, False, 0.3, env)
    assert (record.status, record.reason) == ("timeout", "stopped after 0.3 s")
    out = tmp_path / "out"
    assert driver.run(out, ROOT, tmp_path / "work", total_s=1.0) == 1
    document = json.loads((out / "results.json").read_text())
    assert problems(document) == []
    assert {s["status"] for s in document["steps"]} == {"not_run"}


def test_problems_name_what_is_wrong() -> None:
    document = {
        "kit": "mlmodelscope-gpukit",
        "format": 1,
        "started_at": "t",
        "gpu": True,
        "install": {},
        "not_yet": [],
        "steps": [
            StepRecord("a", "failed").to_dict(),
            StepRecord("b", "ok", environment={"device": "H100"}).to_dict(),
            {**StepRecord("c", "ok").to_dict(), "status": "done"},
        ],
    }
    found = problems(document)
    assert any("steps[0] (a).reason" in p for p in found)
    assert any("steps[1] (b).environment: missing" in p for p in found)
    assert any("steps[2] (c).status: 'done'" in p for p in found)


def test_the_bundle_covers_what_the_core_needs_beyond_the_gpu_machine() -> None:
    """Every core dependency the GPU machine lacks, and pydantic's own, is in the bundle and
    pinned in constraints.txt: a new core dependency fails here, not on the GPU."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    bundled = {bundle.normalize(p) for p in bundle.PACKAGES}
    has = {bundle.normalize(p) for p in bundle.GPU_MACHINE_HAS}
    for requirement in pyproject["project"]["dependencies"]:
        name = bundle.normalize(requirement.split(">")[0].split("=")[0].split("<")[0].strip())
        assert name in bundled | has, f"{name}: neither bundled nor on the GPU machine"
    for requirement in metadata.requires("pydantic") or []:
        if "extra ==" not in requirement:
            name = bundle.normalize(requirement.split(">")[0].split("=")[0].split("<")[0])
            assert name.strip() in bundled, f"pydantic needs {name}"
    pins = bundle.pins(ROOT / "constraints.txt")
    assert [p.split("==")[0] for p in pins] == list(bundle.PACKAGES)


def _wheel(folder: Path, name: str, version: str) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}/__init__.py", f"VERSION = {version!r}\n")
        archive.writestr(f"{name}-{version}.dist-info/METADATA", f"Name: {name}\n")
    return path


def test_size_check_adds_wheels_and_tree_against_the_budget(tmp_path: Path) -> None:
    _wheel(tmp_path, "small_pkg", "1.0")
    check = bundle.size_check(tmp_path, tree=1000)
    assert check.ok and check.total_bytes == check.wheels_bytes + 1000
    assert not bundle.SizeCheck(1, bundle.BUDGET_BYTES).ok
    assert bundle.BUDGET_BYTES < bundle.TRANSFER_LIMIT_BYTES
    tree = bundle.tree_bytes(ROOT)
    assert 0 < tree < bundle.BUDGET_BYTES // 2, "the working tree alone nears the budget"
    prepared = ROOT / bundle.WHEELS
    if any(prepared.glob("*.whl")):  # after `gpukit prepare`: the real bundle
        assert bundle.size_check(prepared, tree).ok


def test_install_unpacks_what_is_missing_and_keeps_what_is_newer(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "gpukit_probe", "1.0")
    _wheel(wheels, "pydantic", "0.1")  # older than the one installed here
    site = tmp_path / "site"
    (site / "stale").mkdir(parents=True)
    report = bundle.install(wheels, site)
    assert report["unpacked"] == ["gpukit-probe 1.0"]
    assert report["kept"][0].startswith("pydantic ")
    assert not (site / "stale").exists() and not (site / "pydantic").exists()
    probe = subprocess.run(
        [sys.executable, "-c", "import gpukit_probe; print(gpukit_probe.VERSION)"],
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "1.0"


def test_a_wheel_for_another_python_is_never_unpacked(tmp_path: Path) -> None:
    """The bundle is for 3.12; a dry run on another Python leaves its cpXY wheels alone."""
    other = "cp39"
    wheel = tmp_path / f"pydantic_core-9.0-{other}-{other}-manylinux2014_x86_64.whl"
    _wheel(tmp_path, "gpukit_probe", "1.0").rename(wheel)
    assert not bundle.fits_this_python(wheel)
    assert bundle.fits_this_python(tmp_path / "x-1.0-py3-none-any.whl")
    ours = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert bundle.fits_this_python(tmp_path / f"x-1.0-{ours}-{ours}-manylinux_2_17_x86_64.whl")
    report = bundle.install(tmp_path, tmp_path / "site")
    assert report["unfit"] == [wheel.name] and report["unpacked"] == []


def test_the_remote_call_carries_the_wheels_and_fits_the_limits() -> None:
    call = bundle.run_call()
    assert call["carry"] == [".gpukit/wheels"]
    assert driver.TOTAL_S + 30 <= call["timeout_s"] <= 600
    assert sum(s.timeout_s for s in driver.STEPS) <= driver.TOTAL_S
    assert "$OUT" in call["command"]
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", ".gpukit/wheels/x.whl"], cwd=ROOT, check=False
    )
    assert ignored.returncode == 0, ".gpukit/ must be git-ignored (it travels by carry)"


def test_the_committed_gpu_run_is_valid_and_quoted_as_measured() -> None:
    """benchmarks/gpu/ holds what a GPU run measured; docs/gpu.md quotes its summary as is."""
    runs = sorted((ROOT / "benchmarks" / "gpu").glob("*/results.json"))
    assert runs, "no GPU run committed under benchmarks/gpu/"
    for results in runs:
        document = json.loads(results.read_text())
        assert problems(document) == [], results
        assert document["environment"]["cuda_available"] is True, results
        assert {s["name"]: s["status"] for s in document["steps"]} == {
            "facts": "ok", "eval-resnet50": "ok", "eval-bert_base": "ok", "trace": "ok"
        }  # fmt: skip
    run = ROOT / "benchmarks" / "gpu" / "2026-11-26-h100"
    docs = (ROOT / "docs" / "gpu.md").read_text()
    marker = f"<!-- benchmarks/gpu/{run.name}/summary.txt -->\n```text\n"
    quoted = docs.split(marker, 1)[1].split("\n```", 1)[0]
    assert quoted == (run / "summary.txt").read_text().rstrip("\n")
    assert json.loads((run / "results.json").read_text())["gpu"]
