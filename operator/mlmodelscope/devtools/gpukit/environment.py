"""The machine a step ran on: device, driver, CUDA, cuDNN and torch, from torch and NVML.

Every key of :data:`~mlmodelscope.devtools.gpukit.record.ENVIRONMENT_KEYS` is present; a value
that cannot be read here (no GPU, no NVML) is None, never a guess.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES: dict[str, tuple[str, ...]] = {
    "torch": ("torch",), "numpy": ("numpy",), "onnx": ("onnx",),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu"), "pydantic": ("pydantic",),
    "pydantic_core": ("pydantic-core",), "yaml": ("PyYAML",), "typer": ("typer",),
    "rich": ("rich",), "pynvml": ("nvidia-ml-py",), "prometheus_client": ("prometheus-client",),
    "opentelemetry.sdk": ("opentelemetry-sdk",),
    "tensorflow": ("tensorflow", "tensorflow-cpu"),
}  # fmt: skip
"""Modules whose presence (and version) the facts step records."""


def _nvml() -> dict[str, Any]:
    """Driver, CUDA driver API version and per-GPU facts from NVML ({} without it)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:
        return {"nvml_error": f"{type(exc).__name__}: {exc}"}
    try:
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            gpu: dict[str, Any] = {"index": i, "name": _text(pynvml.nvmlDeviceGetName(handle))}
            reads: dict[str, Callable[[Any], Any]] = {
                "memory_total_bytes": lambda h: pynvml.nvmlDeviceGetMemoryInfo(h).total,
                "power_limit_watts": lambda h: pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1e3,
                "sm_clock_max_hertz": lambda h: pynvml.nvmlDeviceGetMaxClockInfo(h, 1) * 1e6,
                "mig_mode": lambda h: pynvml.nvmlDeviceGetMigMode(h)[0],
            }
            for key, read in reads.items():
                try:
                    gpu[key] = read(handle)
                except Exception:
                    gpu[key] = None
            gpus.append(gpu)
        return {
            "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
            "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}",
            "gpus": gpus,
        }
    finally:
        pynvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def environment() -> dict[str, Any]:
    """Device name, driver, CUDA (runtime torch was built for, and the driver's), cuDNN,
    torch and Python versions."""
    env: dict[str, Any] = {
        "device": "cpu",
        "driver": None,
        "cuda": None,
        "cudnn": None,
        "torch": None,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
    }
    try:
        import torch
    except ImportError:
        return env
    env["torch"] = torch.__version__
    env["cuda"] = torch.version.cuda
    env["cudnn"] = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
    env["cuda_available"] = torch.cuda.is_available()
    if env["cuda_available"]:
        env["device"] = torch.cuda.get_device_name(0)
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        env["tf32"] = {  # torch's defaults, which every step keeps
            "matmul": torch.backends.cuda.matmul.allow_tf32,
            "cudnn": torch.backends.cudnn.allow_tf32,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
        }
        nvml = _nvml()
        env["driver"] = nvml.get("driver")
        env["cuda_driver"] = nvml.get("cuda_driver")
        env["nvml"] = nvml
    return env


def packages() -> dict[str, str | None]:
    """Each of :data:`PACKAGES` (module: distributions): the installed version, "present" for a
    module found with no distribution metadata, None when absent. Nothing is imported."""
    found: dict[str, str | None] = {}
    for module, distributions in PACKAGES.items():
        version = next(filter(None, map(_version, distributions)), None)
        if version is None and _findable(module):
            version = "present"
        found[module] = version
    return found


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def tools() -> dict[str, str | None]:
    """Paths of the command-line tools the later steps will need."""
    return {tool: shutil.which(tool) for tool in ("nvidia-smi", "ncu", "nsys")}


def profiling() -> dict[str, Any]:
    """Whether this user may read the GPU performance counters (``ncu`` needs them): the
    driver's ``RmProfilingAdminOnly`` (1: administrators only) and the effective user id."""
    admin_only = None
    try:
        for line in Path("/proc/driver/nvidia/params").read_text().splitlines():
            if line.startswith("RmProfilingAdminOnly:"):
                admin_only = int(line.split(":", 1)[1])
    except (OSError, ValueError):
        pass
    return {"rm_profiling_admin_only": admin_only, "euid": os.geteuid()}
