"""Reusing DLBricks brick timings: what a timing is keyed by, and what stores it.

A brick's timing holds for one brick on one system and software stack. The brick is named
by ``brick_key``, the sha256 of its ``LayerCost.signature`` (op, input shapes and dtypes,
attributes: what ``dlbricks.split`` deduplicates by); the stack by ``stack_key``, the sha256
of ``dlbricks.system_stack`` (CPU model and usable CPUs, ONNX Runtime version and provider, intra-
and inter-op threads, which graph is split and the optimization level bricks run at, warm-up
and timed runs). Equal keys mean the stored timing stands for a new measurement.

The results store implements :class:`BrickStore` (``mlmodelscope.store.Store``); this package
may not import it (tests/test_layering.py), so the protocol is structural and ``mlms dlbricks``
wires the two together.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

PROC_CPUINFO = Path("/proc/cpuinfo")


class StoredTiming(Protocol):
    """A brick timing read back from a store."""

    @property
    def p50_ms(self) -> float: ...
    @property
    def mean_ms(self) -> float: ...
    @property
    def min_ms(self) -> float: ...
    @property
    def runs(self) -> int: ...
    @property
    def warmup(self) -> int: ...
    @property
    def measure_s(self) -> float: ...


@dataclass(frozen=True)
class MeasuredBrick:
    """A brick measured now, as it is stored."""

    brick_key: str
    signature: str
    op_type: str
    p50_ms: float
    mean_ms: float
    min_ms: float
    runs: int
    warmup: int
    measure_s: float
    """Wall time measuring the brick took: session creation, warm-up and timed runs."""


class BrickStore(Protocol):
    """Where brick timings are kept between estimates (``mlmodelscope.store.Store``)."""

    def brick_timings(
        self, stack_key: str, brick_keys: Collection[str]
    ) -> Mapping[str, StoredTiming]: ...

    def record_brick_timings(
        self, stack_key: str, stack: Mapping[str, Any], bricks: Iterable[MeasuredBrick]
    ) -> None: ...


def brick_key(signature: str) -> str:
    """The sha256 (hex) of a brick's signature: a fixed-size, stable key."""
    return hashlib.sha256(signature.encode()).hexdigest()


def stack_key(stack: Mapping[str, Any]) -> str:
    """The sha256 (hex) of ``stack`` as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(dict(stack), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU model from /proc/cpuinfo (x86 and ARM keys), else what ``platform`` says. The
    agent's provenance reads the same; this package may not import the agent."""
    if cpuinfo is None:
        try:
            cpuinfo = PROC_CPUINFO.read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    for line in cpuinfo.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key in ("model name", "Model", "Hardware", "cpu model") and value:
            return value
    return platform.processor() or platform.machine() or "unknown"


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
