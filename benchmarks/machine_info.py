"""What ran a benchmark: the CPU and the versions measured, for every script's JSON and tables
(benchmarks/ is not a package: the scripts import this by name, from their own folder)."""

from __future__ import annotations

import contextlib
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (or platform's guess elsewhere)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def load_average() -> str:
    """The 1, 5 and 15 minute load averages as /proc/loadavg gives them, else "unknown"."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def versions() -> dict[str, str]:
    """Versions of what was measured (package metadata: imports no framework)."""
    from importlib import metadata

    found = {"python": platform.python_version()}
    for name, dists in (
        ("mlmodelscope", ("mlmodelscope",)),
        ("onnxruntime", ("onnxruntime", "onnxruntime-gpu")),
        ("torch", ("torch",)),
        ("tensorflow", ("tensorflow", "tensorflow-cpu")),
        ("numpy", ("numpy",)),
    ):
        for dist in dists:
            with contextlib.suppress(metadata.PackageNotFoundError):
                found[name] = metadata.version(dist)
                break
    return found
