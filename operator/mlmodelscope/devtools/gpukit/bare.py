"""The bare PyTorch loop an evaluation is held against, and the comparisons.

Per call what the agent's predict does on a GPU: host-to-device copy, forward,
``torch.cuda.synchronize``, device-to-host copy; and the forward alone on inputs already on
the device. Each call is timed with ``time.perf_counter_ns`` (monotonic) after a warm-up,
garbage collection paused. NVML's energy counter is read right before the first timed call
and right after the last (:mod:`.energy`), so the warm-up is not in the energy per sample.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlmodelscope.devtools.gpukit.energy import Energy, Reading, combine, window_energy
from mlmodelscope.devtools.gpukit.plans import CPU_THREADS, Plan

GOAL_FRACTION = 0.02
GOAL_FLOOR_US = 20.0
"""Issue 3's harness overhead goal, the same on GPU: at most max(2 % of bare p50, 20 µs)."""
WARMUP = 10
"""Untimed calls before each window (the agent's default warm-up is 10 queries too)."""


@contextmanager
def gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class Timed:
    """One window: nanoseconds per call, and the energy counter read around the timed calls."""

    ns: list[int]
    start: Reading
    end: Reading


def timed_calls(
    call: Callable[[Any], object],
    batches: list[Any],
    warmup: int,
    min_s: float,
    min_n: int,
    meter: Energy | None = None,
) -> Timed:
    """Nanoseconds per call, after ``warmup`` calls, for at least ``min_s`` and ``min_n``;
    ``meter`` is read after the warm-up and after the last call."""
    meter = meter or Energy(enabled=False)
    for i in range(warmup):
        call(batches[i % len(batches)])
    latencies: list[int] = []
    with gc_paused():
        start = meter.read()
        end_s = time.monotonic() + min_s
        while len(latencies) < min_n or time.monotonic() < end_s:
            batch = batches[len(latencies) % len(batches)]
            t0 = time.perf_counter_ns()
            call(batch)
            latencies.append(time.perf_counter_ns() - t0)
        end = meter.read()
    return Timed(latencies, start, end)


class BareLoop:
    """The TorchScript file loaded once with torch's own API on the device; windows of the
    host round trip (what the agent's predict does) and of the forward alone."""

    def __init__(self, plan: Plan, model: Path, meta: dict[str, Any], gpu: bool) -> None:
        import torch

        from mlmodelscope.agent.datasets import synthetic_array
        from mlmodelscope.spec.evaluation import DType

        self.plan = plan
        self.gpu = gpu
        self.torch = torch
        self.device = "cuda:0" if gpu else "cpu"
        if not gpu:
            torch.set_num_threads(CPU_THREADS["intraOpThreads"])
        jit: Any = torch.jit  # untyped in some torch releases
        self.module = jit.load(str(model), map_location=self.device)
        self.module.eval()
        self.data = synthetic_array((plan.samples, *meta["dims"]), DType(meta["dtype"]), seed=0)
        self.energy = Energy(enabled=gpu)
        self._staging: dict[tuple[int, ...], Any] = {}

    def _sync(self) -> None:
        if self.gpu:
            cuda: Any = self.torch.cuda
            cuda.synchronize()

    def batches(self, b: int) -> list[Any]:
        return [self.data[i : i + b] for i in range(0, self.plan.samples - b + 1, b)]

    def host(self, x: Any) -> object:
        out = self.module(self.torch.from_numpy(x).to(self.device))
        self._sync()
        return out.cpu().numpy()

    def resident(self, x: Any) -> object:
        out = self.module(x)
        self._sync()
        return out

    def host_window(self, b: int) -> Timed:
        """One window of the host round trip at batch ``b``, energy metered."""
        plan = self.plan
        with self.torch.inference_mode():
            return timed_calls(
                self.host, self.batches(b), WARMUP, plan.bare_s, plan.min_queries, self.energy
            )

    def pinned(self, x: Any) -> object:
        """The host round trip through a pinned staging tensor (page-locked on a GPU): the
        batch is copied into it, then sent to the device without a pageable bounce."""
        torch = self.torch
        staging = self._staging.get(x.shape)
        if staging is None:
            staging = torch.empty(x.shape, dtype=torch.from_numpy(x).dtype, pin_memory=self.gpu)
            self._staging[x.shape] = staging
        np.copyto(staging.numpy(), x)  # one memcpy (torch's copy_ may wake its thread pool)
        out = self.module(staging.to(self.device, non_blocking=True))
        self._sync()
        return out.cpu().numpy()

    def window(self, call: Callable[[Any], object], b: int) -> Timed:
        """One window of ``call`` at batch ``b`` (no energy)."""
        plan = self.plan
        with self.torch.inference_mode():
            return timed_calls(call, self.batches(b), WARMUP, plan.bare_s, plan.min_queries)

    def row(self, scenario: str, b: int) -> dict[str, Any]:
        """Both windows at one batch size, summarized."""
        plan = self.plan
        timed = self.host_window(b)
        ns = timed.ns
        with self.torch.inference_mode():
            on_device = [self.torch.from_numpy(x).to(self.device) for x in self.batches(b)]
            dev = timed_calls(self.resident, on_device, WARMUP, plan.bare_s / 2, plan.min_queries)
        return {
            "scenario": scenario,
            "batch_size": b,
            "calls": len(ns),
            "p50_s": statistics.median(ns) / 1e9,
            "mean_s": statistics.fmean(ns) / 1e9,
            "throughput_samples_per_s": b * len(ns) / (sum(ns) / 1e9),
            "device_only_p50_s": statistics.median(dev.ns) / 1e9,
            "energy": window_energy(timed.start, timed.end, len(ns) * b),
        }

    def rows(self) -> list[dict[str, Any]]:
        """Every batch size of the plan, SingleStream then Offline."""
        plan = self.plan
        return [
            self.row(scenario, b)
            for scenario, sizes in (("SingleStream", plan.single_stream), ("Offline", plan.offline))
            for b in sizes
        ]


def merge_bare(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Bare windows before and after the agent's runs, averaged, so drift (clocks, heat)
    between them cancels; each window's p50 and energy are kept, the energy of both combined."""
    rows = []
    for b, a in zip(before, after, strict=True):
        row = {**b, "p50_s": (b["p50_s"] + a["p50_s"]) / 2, "p50_before_s": b["p50_s"]}
        row["p50_after_s"] = a["p50_s"]
        row["throughput_samples_per_s"] = (
            b["throughput_samples_per_s"] + a["throughput_samples_per_s"]
        ) / 2
        row["energy"] = combine([b["energy"], a["energy"]])
        row["energy_before"], row["energy_after"] = b["energy"], a["energy"]
        rows.append(row)
    return rows


def goal_us(bare_p50_us: float) -> float:
    """Issue 3's goal for a SingleStream bare p50."""
    return max(GOAL_FRACTION * bare_p50_us, GOAL_FLOOR_US)


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
        goal = goal_us(b["p50_s"] * 1e6) if single else None
        row = {
            "scenario": a["scenario"],
            "batch_size": a["batch_size"],
            "agent_p50_us": a["p50_s"] * 1e6,
            "bare_p50_us": b["p50_s"] * 1e6,
            "overhead_us": over_us,
            "overhead_pct": 100 * over_us / (b["p50_s"] * 1e6),
            "goal_us": goal,
            "meets_goal": None if goal is None else over_us <= goal,
        }
        if a.get("throughput_samples_per_s") and b.get("throughput_samples_per_s"):
            row["throughput_ratio"] = a["throughput_samples_per_s"] / b["throughput_samples_per_s"]
        rows.append(row)
    return rows


def energy_rows(agent: list[dict[str, Any]], bare: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per scenario and batch size the agent's window energy beside the bare loop's."""
    by_key = {(r["scenario"], r["batch_size"]): r.get("energy") for r in bare}
    return [
        {
            "scenario": a["scenario"],
            "batch_size": a["batch_size"],
            "agent": {k: v for k, v in a.items() if k not in ("scenario", "batch_size")},
            "bare": by_key.get((a["scenario"], a["batch_size"])),
        }
        for a in agent
    ]


def round_order(rounds: int) -> list[tuple[str, str]]:
    """A B, B A, A B, ...: a linear drift of the machine favours neither side."""
    return [("agent", "bare") if r % 2 == 0 else ("bare", "agent") for r in range(rounds)]


def interleaved_summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Rounds of (agent p50, bare p50) as one verdict: the median of the per-round
    differences, their spread, and issue 3's goal on the median bare p50."""
    diffs = [r["agent_p50_us"] - r["bare_p50_us"] for r in rounds]
    if not diffs:
        return {"rounds": [], "overhead_median_us": None, "meets_goal": None}
    bare = statistics.median(r["bare_p50_us"] for r in rounds)
    median = statistics.median(diffs)
    goal = goal_us(bare)
    return {
        "rounds": [{**r, "overhead_us": d} for r, d in zip(rounds, diffs, strict=True)],
        "order": " ".join("".join(s[0].upper() for s in r["order"]) for r in rounds),
        "agent_p50_median_us": statistics.median(r["agent_p50_us"] for r in rounds),
        "bare_p50_median_us": bare,
        "overhead_median_us": median,
        "overhead_min_us": min(diffs),
        "overhead_max_us": max(diffs),
        "overhead_spread_us": max(diffs) - min(diffs),
        "goal_us": goal,
        "meets_goal": median <= goal,
    }


SUSPECTS = ("plain", "sampler", "pinned")
"""The batch-1 suspects' windows: the bare round trip as it is, with the agent's NVML sampler
thread running beside it (10 Hz, as in ``mlms run``), and through pinned staging."""


def suspect_rounds(
    loop: BareLoop, rounds: int, sampler: Callable[[], Any] | None
) -> dict[str, Any]:
    """Batch 1, the three :data:`SUSPECTS` windows per round in rotating order, each round's
    p50 per window and the medians: does the sampler thread, or pageable copies, cost what
    the agent's batch-1 queries cost beyond the bare loop's? ``sampler`` makes a started
    sampler (a context manager); None: no NVML here, the sampler window runs without one."""
    per: dict[str, list[float]] = {name: [] for name in SUSPECTS}
    order_log = []
    calls = {"plain": loop.host, "sampler": loop.host, "pinned": loop.pinned}
    for r in range(rounds):
        order = SUSPECTS[r % 3 :] + SUSPECTS[: r % 3]
        order_log.append("".join(n[0] for n in order))
        for name in order:
            if name == "sampler" and sampler is not None:
                with sampler():
                    timed = loop.window(calls[name], 1)
            else:
                timed = loop.window(calls[name], 1)
            per[name].append(statistics.median(timed.ns) / 1e3)
    medians = {name: statistics.median(v) for name, v in per.items()}
    return {
        "batch_size": 1,
        "order": " ".join(order_log),
        "p50_us": per,
        "median_p50_us": medians,
        "sampler_minus_plain_us": medians["sampler"] - medians["plain"],
        "pinned_minus_plain_us": medians["pinned"] - medians["plain"],
        "sampler_ran": sampler is not None,
    }
