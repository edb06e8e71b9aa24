"""The bare PyTorch loop an evaluation is held against, and the comparison.

Per call what the agent's predict does on a GPU: host-to-device copy, forward,
``torch.cuda.synchronize``, device-to-host copy; and the forward alone on inputs already on
the device. Each call is timed with ``time.perf_counter_ns`` (monotonic) after a warm-up,
garbage collection paused. NVML's energy counter around each window gives energy per sample.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlmodelscope.devtools.gpukit.plans import CPU_THREADS, Plan

GOAL_FRACTION = 0.02
GOAL_FLOOR_US = 20.0
"""Issue 3's harness overhead goal, the same on GPU: at most max(2 % of bare p50, 20 µs)."""


@contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def timed_calls(
    call: Callable[[Any], object], batches: list[Any], warmup: int, min_s: float, min_n: int
) -> list[int]:
    """Nanoseconds per call, after ``warmup`` calls, for at least ``min_s`` and ``min_n``."""
    for i in range(warmup):
        call(batches[i % len(batches)])
    latencies: list[int] = []
    with _gc_paused():
        end = time.monotonic() + min_s
        while len(latencies) < min_n or time.monotonic() < end:
            batch = batches[len(latencies) % len(batches)]
            t0 = time.perf_counter_ns()
            call(batch)
            latencies.append(time.perf_counter_ns() - t0)
    return latencies


class Energy:
    """GPU 0's energy counter (NVML, millijoules); ``read`` is None where unsupported."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handle: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:
            self._nvml = None

    def read(self) -> float | None:
        if self._nvml is None:
            return None
        try:
            return float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)) / 1e3
        except Exception:
            return None


def bare_rows(plan: Plan, model: Path, meta: dict[str, Any], gpu: bool) -> list[dict[str, Any]]:
    """The bare loop per batch size: host round trip (the agent's work) and device only."""
    import torch

    from mlmodelscope.agent.datasets import synthetic_array
    from mlmodelscope.spec.evaluation import DType

    device = "cuda:0" if gpu else "cpu"
    if not gpu:
        torch.set_num_threads(CPU_THREADS["intraOpThreads"])
    module = torch.jit.load(str(model), map_location=device)  # type: ignore[no-untyped-call]
    module.eval()
    data = synthetic_array((plan.samples, *meta["dims"]), DType(meta["dtype"]), seed=0)
    cuda: Any = torch.cuda

    def sync() -> None:
        if gpu:
            cuda.synchronize()

    energy = Energy() if gpu else None

    def host(x: Any) -> object:
        out = module(torch.from_numpy(x).to(device))
        sync()
        return out.cpu().numpy()

    def resident(x: Any) -> object:
        out = module(x)
        sync()
        return out

    rows = []
    with torch.inference_mode():
        for scenario, sizes in (("SingleStream", plan.single_stream), ("Offline", plan.offline)):
            for b in sizes:
                batches = [data[i : i + b] for i in range(0, plan.samples - b + 1, b)]
                before = energy.read() if energy else None
                ns = timed_calls(host, batches, 10, plan.bare_s, plan.min_queries)
                after = energy.read() if energy else None
                on_device = [torch.from_numpy(x).to(device) for x in batches]
                dev_ns = timed_calls(resident, on_device, 10, plan.bare_s / 2, plan.min_queries)
                row = {
                    "scenario": scenario,
                    "batch_size": b,
                    "calls": len(ns),
                    "p50_s": statistics.median(ns) / 1e9,
                    "mean_s": statistics.fmean(ns) / 1e9,
                    "throughput_samples_per_s": b * len(ns) / (sum(ns) / 1e9),
                    "device_only_p50_s": statistics.median(dev_ns) / 1e9,
                }
                if before is not None and after is not None:
                    row["energy_j_per_sample"] = (after - before) / (len(ns) * b)
                rows.append(row)
    return rows


def merge_bare(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Bare windows before and after the agent's runs, averaged, so drift (clocks, heat)
    between them cancels; each window's p50 is kept."""
    rows = []
    for b, a in zip(before, after, strict=True):
        row = {**b, "p50_s": (b["p50_s"] + a["p50_s"]) / 2, "p50_before_s": b["p50_s"]}
        row["p50_after_s"] = a["p50_s"]
        row["throughput_samples_per_s"] = (
            b["throughput_samples_per_s"] + a["throughput_samples_per_s"]
        ) / 2
        rows.append(row)
    return rows


def overhead(agent: list[dict[str, Any]], bare: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Agent against bare per scenario and batch size: the p50 difference, held to issue 3's
    goal in SingleStream, and the throughput ratio."""
    by_key = {(r["scenario"], r["batch_size"]): r for r in bare}
    rows = []
    for a in agent:
        b = by_key.get((a["scenario"], a["batch_size"]))
        if b is None or a["p50_s"] is None:
            continue
        over_us = (a["p50_s"] - b["p50_s"]) * 1e6
        single = a["scenario"] == "SingleStream"
        goal_us = max(GOAL_FRACTION * b["p50_s"] * 1e6, GOAL_FLOOR_US) if single else None
        row = {
            "scenario": a["scenario"],
            "batch_size": a["batch_size"],
            "agent_p50_us": a["p50_s"] * 1e6,
            "bare_p50_us": b["p50_s"] * 1e6,
            "overhead_us": over_us,
            "overhead_pct": 100 * over_us / (b["p50_s"] * 1e6),
            "goal_us": goal_us,
            "meets_goal": None if goal_us is None else over_us <= goal_us,
        }
        if a.get("throughput_samples_per_s") and b.get("throughput_samples_per_s"):
            row["throughput_ratio"] = a["throughput_samples_per_s"] / b["throughput_samples_per_s"]
        rows.append(row)
    return rows


def energy_estimate(document: dict[str, Any]) -> dict[str, Any] | None:
    """The agent's energy per sample: NVML's mean power over the measurement times its
    duration, over the samples it ran (None without GPU metrics)."""
    devices = (document.get("gpu_metrics") or {}).get("devices") or []
    power = devices[0].get("power_watts", {}).get("mean") if devices else None
    measurements = document.get("measurements", [])
    seconds = sum(m.get("duration_s") or 0 for m in measurements)
    samples = sum(m.get("samples") or 0 for m in measurements)
    if power is None or not samples:
        return None
    return {"mean_power_w": power, "seconds": seconds, "j_per_sample": power * seconds / samples}
