"""Provenance: the stack is collected without importing frameworks, GPU info via NVML is
optional, and equal specs hash equal."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from mlmodelscope.agent import provenance
from mlmodelscope.agent.provenance import (
    collect_stack,
    gpu_info,
    parse_cpuinfo,
    parse_meminfo,
    spec_hash,
    summarize_stack,
)
from mlmodelscope.spec.evaluation import EvaluationSpec

CPUINFO = """\
processor\t: 0
model name\t: Example CPU @ 3.00GHz
physical id\t: 0
core id\t\t: 0

processor\t: 1
model name\t: Example CPU @ 3.00GHz
physical id\t: 0
core id\t\t: 0

processor\t: 2
model name\t: Example CPU @ 3.00GHz
physical id\t: 0
core id\t\t: 1
"""


def test_parse_proc_files() -> None:
    assert parse_cpuinfo(CPUINFO) == {"model": "Example CPU @ 3.00GHz", "physical_cores": 2}
    assert parse_cpuinfo("") == {}
    assert parse_meminfo("MemFree: 1 kB\nMemTotal:       16384 kB\n") == 16384 * 1024
    assert parse_meminfo("nothing") is None


def test_collect_stack_reads_proc_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    (tmp_path / "meminfo").write_text("MemTotal: 2048 kB\n")
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    (cgroup / "cpu.max").write_text("150000 100000\n")
    (cgroup / "memory.max").write_text("max\n")
    monkeypatch.setattr(provenance, "PROC_CPUINFO", tmp_path / "cpuinfo")
    monkeypatch.setattr(provenance, "PROC_MEMINFO", tmp_path / "meminfo")
    monkeypatch.setattr(provenance, "CGROUP_ROOT", cgroup)
    monkeypatch.setattr(provenance, "gpu_info", lambda: None)
    monkeypatch.setenv("MLMS_IMAGE", "ghcr.io/mlmodelscope/agent-onnxruntime:0.1.0")
    monkeypatch.setenv("MLMS_NODE_NAME", "node-a")
    monkeypatch.setenv("MLMS_POD_NAME", "eval-pod")

    stack = collect_stack(backend_info={"framework": "onnxruntime", "device": "cpu"})
    assert stack["cpu"]["model"] == "Example CPU @ 3.00GHz"
    assert stack["cpu"]["physical_cores"] == 2
    assert stack["cpu"]["logical_cores"] >= 1
    assert stack["cpu"]["cgroup_limit"] == 1.5
    assert stack["memory"] == {"total_bytes": 2048 * 1024}
    assert stack["container"] == {"image": "ghcr.io/mlmodelscope/agent-onnxruntime:0.1.0"}
    assert stack["host"]["node"] == "node-a" and stack["host"]["pod"] == "eval-pod"
    assert stack["python"]["version"].count(".") == 2
    assert stack["os"]["kernel"]
    assert stack["libraries"]["numpy"] and stack["libraries"]["pydantic"]
    assert "gpu" not in stack
    assert stack["backend"] == {"framework": "onnxruntime", "device": "cpu"}
    json.dumps(stack)  # JSON-ready
    assert collect_stack(image="explicit:1")["container"] == {"image": "explicit:1"}

    summary = summarize_stack(stack, modelSha256="ab" * 32)
    assert summary["framework"] == "onnxruntime"
    assert summary["cpu"] == "Example CPU @ 3.00GHz"
    assert summary["node"] == "node-a" and summary["modelSha256"] == "ab" * 32
    assert all(isinstance(v, str) for v in summary.values())


def test_collect_stack_without_env_or_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("MLMS_IMAGE", "MLMS_NODE_NAME", "MLMS_POD_NAME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(provenance, "PROC_CPUINFO", tmp_path / "missing")
    monkeypatch.setattr(provenance, "PROC_MEMINFO", tmp_path / "missing")
    monkeypatch.setattr(provenance, "CGROUP_ROOT", tmp_path / "missing")
    stack = collect_stack()
    assert "container" not in stack and "backend" not in stack
    assert set(stack["host"]) == {"hostname"}
    assert stack["cpu"]["model"] and stack["memory"] == {}


def test_collecting_does_not_import_frameworks() -> None:
    code = (
        "import sys, json\n"
        "from mlmodelscope.agent.provenance import collect_stack\n"
        "collect_stack()\n"
        "print(json.dumps([m for m in ('torch', 'tensorflow', 'onnxruntime', 'onnx', 'sklearn')"
        " if m in sys.modules]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


class FakeNVML(types.ModuleType):
    def __init__(self, fail_init: bool = False) -> None:
        super().__init__("pynvml")
        self.fail_init = fail_init
        self.shutdown = False

    def nvmlInit(self) -> None:  # noqa: N802 - NVML's names
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdown = True

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        return 12040

    def nvmlSystemGetDriverVersion(self) -> bytes:  # noqa: N802
        return b"550.54.15"

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:  # noqa: N802
        return "NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:  # noqa: N802
        return types.SimpleNamespace(total=80 * 2**30)

    def nvmlDeviceGetUUID(self, handle: int) -> str:  # noqa: N802
        return f"GPU-{handle}"


def test_gpu_info_from_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNVML()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    info = gpu_info()
    assert info is not None
    assert info["count"] == 2 and info["driver_version"] == "550.54.15"
    assert info["cuda_driver_version"] == "12.4"
    assert info["devices"][1] == {
        "index": 1,
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_total_bytes": 80 * 2**30,
        "uuid": "GPU-1",
    }
    assert fake.shutdown
    stack = collect_stack()
    assert stack["gpu"]["count"] == 2
    assert summarize_stack(stack)["gpu"] == "NVIDIA A100-SXM4-80GB"


def test_gpu_info_is_omitted_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML(fail_init=True))
    assert gpu_info() is None
    assert "gpu" not in collect_stack()
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert gpu_info() is None


SPEC: dict[str, Any] = {
    "model": {
        "name": "digits-cnn",
        "uri": "models/digits.onnx",
        "format": "onnx",
        "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
    },
    "framework": {"name": "onnxruntime"},
    "dataset": {"type": "digits"},
}


def test_spec_hash_is_canonical() -> None:
    a = EvaluationSpec.model_validate(SPEC)
    reordered = json.loads(json.dumps(dict(reversed(list(SPEC.items())))))
    b = EvaluationSpec.model_validate(reordered)
    explicit = EvaluationSpec.model_validate({**SPEC, "retries": 0, "timeout": "1h"})
    assert spec_hash(a) == spec_hash(b) == spec_hash(explicit)
    assert len(spec_hash(a)) == 64
    changed = EvaluationSpec.model_validate({**SPEC, "retries": 1})
    assert spec_hash(changed) != spec_hash(a)
