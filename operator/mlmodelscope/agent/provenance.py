"""Provenance: the hardware and software stack a result was measured on, and the spec's hash.

A benchmark number is only comparable when its stack is known, so every result document
carries :func:`collect_stack`. Collection never imports a framework (that would slow the agent
and could initialise CUDA): library versions come from package metadata, GPUs from NVML.
Everything is best effort: a missing source leaves its key out instead of failing the run.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import platform
import socket
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from mlmodelscope.contract.redact import redact_tree
from mlmodelscope.spec.evaluation import EvaluationSpec

PROC_CPUINFO = Path("/proc/cpuinfo")
PROC_MEMINFO = Path("/proc/meminfo")
OS_RELEASE = Path("/etc/os-release")
CGROUP_ROOT = Path("/sys/fs/cgroup")

LIBRARIES: dict[str, tuple[str, ...]] = {
    "numpy": ("numpy",),
    "torch": ("torch",),
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "tensorflow-macos"),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino"),
    "onnx": ("onnx",),
    "scikit-learn": ("scikit-learn",),
    "pillow": ("pillow",),
    "mlmodelscope": ("mlmodelscope",),
    "pydantic": ("pydantic",),
}
"""Library name as reported -> distributions that provide it (first installed one wins)."""


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """CPU model name and physical core count from /proc/cpuinfo text (x86 and ARM)."""
    model = None
    cores: set[tuple[str, str]] = set()
    physical_id = "0"
    for line in text.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if model is None and key in ("model name", "Model", "Hardware", "cpu model"):
            model = value
        elif key == "physical id":
            physical_id = value
        elif key == "core id":
            cores.add((physical_id, value))
    info: dict[str, Any] = {}
    if model:
        info["model"] = model
    if cores:
        info["physical_cores"] = len(cores)
    return info


def parse_meminfo(text: str) -> int | None:
    """MemTotal in bytes from /proc/meminfo text."""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            with contextlib.suppress(IndexError, ValueError):
                return int(parts[1]) * (1024 if parts[2:3] == ["kB"] else 1)
    return None


def _cgroup_cpu_limit() -> float | None:
    """CPUs the container may use per cgroup v2 ``cpu.max`` (None when unlimited)."""
    text = _read(CGROUP_ROOT / "cpu.max")
    if not text:
        return None
    quota, _, period = text.strip().partition(" ")
    if quota == "max":
        return None
    with contextlib.suppress(ValueError, ZeroDivisionError):
        return int(quota) / int(period or "100000")
    return None


def _cgroup_memory_limit() -> int | None:
    text = _read(CGROUP_ROOT / "memory.max")
    if text and text.strip().isdigit():
        return int(text.strip())
    return None


def _cpu() -> dict[str, Any]:
    info: dict[str, Any] = parse_cpuinfo(_read(PROC_CPUINFO) or "")
    info.setdefault("model", platform.processor() or platform.machine() or "unknown")
    info["architecture"] = platform.machine()
    info["logical_cores"] = os.cpu_count()
    with contextlib.suppress(AttributeError, OSError):
        info["available_cores"] = len(os.sched_getaffinity(0))
    if (limit := _cgroup_cpu_limit()) is not None:
        info["cgroup_limit"] = limit
    return info


def _memory() -> dict[str, Any]:
    info: dict[str, Any] = {}
    if (total := parse_meminfo(_read(PROC_MEMINFO) or "")) is not None:
        info["total_bytes"] = total
    if (limit := _cgroup_memory_limit()) is not None:
        info["cgroup_limit_bytes"] = limit
    return info


def _os() -> dict[str, Any]:
    info: dict[str, Any] = {
        "system": platform.system(),
        "kernel": platform.release(),
        "version": platform.version(),
        "platform": platform.platform(),
    }
    for line in (_read(OS_RELEASE) or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            info["distribution"] = line.partition("=")[2].strip().strip('"')
    return info


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries that shape results, from package metadata only."""
    versions = {}
    for name, distributions in LIBRARIES.items():
        for dist in distributions:
            try:
                versions[name] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
            break
    return versions


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_info() -> dict[str, Any] | None:
    """GPUs as NVML sees them (driver, CUDA driver version, per-device name and memory), or
    None without nvidia-ml-py or a driver. NVML is read-only and does not create a CUDA context.
    """
    try:
        nvml: Any = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:
        return None
    try:
        cuda = int(nvml.nvmlSystemGetCudaDriverVersion())
        devices = []
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            device: dict[str, Any] = {
                "index": index,
                "name": _text(nvml.nvmlDeviceGetName(handle)),
                "memory_total_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
            }
            with contextlib.suppress(Exception):
                device["uuid"] = _text(nvml.nvmlDeviceGetUUID(handle))
            devices.append(device)
        return {
            "count": len(devices),
            "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_driver_version": f"{cuda // 1000}.{cuda % 1000 // 10}",
            "devices": devices,
        }
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def collect_stack(
    *, backend_info: dict[str, Any] | None = None, image: str | None = None
) -> dict[str, Any]:
    """The stack this process runs on, as a JSON-ready dict for the result document.

    ``image`` defaults to ``$MLMS_IMAGE``; node and pod come from ``$MLMS_NODE_NAME`` and
    ``$MLMS_POD_NAME`` (the job sets all three through the downward API). Keys whose source is
    unavailable (no GPU, no NVML, not in a pod) are omitted.
    """
    host: dict[str, Any] = {"hostname": socket.gethostname()}
    for key, env in (("node", "MLMS_NODE_NAME"), ("pod", "MLMS_POD_NAME")):
        if value := os.environ.get(env):
            host[key] = value
    stack: dict[str, Any] = {
        "host": host,
        "cpu": _cpu(),
        "memory": _memory(),
        "os": _os(),
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "libraries": library_versions(),
    }
    if image := image or os.environ.get("MLMS_IMAGE"):
        stack["container"] = {"image": image}
    if (gpus := gpu_info()) is not None:
        stack["gpu"] = gpus
    if backend_info is not None:
        stack["backend"] = dict(backend_info)
    return stack


def summarize_stack(stack: dict[str, Any], **extra: str) -> dict[str, str]:
    """A flat string map of the headline facts, for the status's ``stack`` (max 64 entries)."""
    summary: dict[str, str] = {}
    backend = stack.get("backend") or {}
    for key, name in (
        ("framework", "framework"),
        ("framework_version", "frameworkVersion"),
        ("device", "device"),
    ):
        if key in backend:
            summary[name] = str(backend[key])
    cpu = stack.get("cpu", {})
    if "model" in cpu:
        summary["cpu"] = str(cpu["model"])
    if cpu.get("logical_cores") is not None:
        summary["cpuCores"] = str(cpu.get("available_cores", cpu["logical_cores"]))
    if "total_bytes" in stack.get("memory", {}):
        summary["memoryGiB"] = f"{stack['memory']['total_bytes'] / 2**30:.1f}"
    gpu = stack.get("gpu")
    if gpu and gpu.get("devices"):
        summary["gpu"] = str(gpu["devices"][0]["name"])
        summary["gpuCount"] = str(gpu["count"])
        summary["gpuDriver"] = str(gpu["driver_version"])
        summary["cudaDriver"] = str(gpu["cuda_driver_version"])
    os_info = stack.get("os", {})
    if "kernel" in os_info:
        summary["kernel"] = str(os_info["kernel"])
    summary["python"] = str(stack.get("python", {}).get("version", platform.python_version()))
    if image := stack.get("container", {}).get("image"):
        summary["image"] = str(image)
    if node := stack.get("host", {}).get("node"):
        summary["node"] = str(node)
    summary.update(extra)
    return dict(list(summary.items())[:64])


def spec_hash(spec: EvaluationSpec) -> str:
    """SHA-256 of the spec's canonical JSON: equal specs hash equal, however they were written
    (key order, defaults spelled out or not), so results can be grouped by exact configuration.

    Hashed as the result document shows the spec, URI credentials redacted: anyone can
    recompute it from the document, and a presigned URI signed anew each run still groups."""
    canonical = json.dumps(
        redact_tree(spec.model_dump(mode="json", by_alias=True, exclude_none=True)),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
