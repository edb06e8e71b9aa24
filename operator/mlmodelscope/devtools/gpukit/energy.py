"""Energy per sample, the same way for the bare loop and the agent: NVML's energy counter
read right before a timed window's first call and right after its last, warm-up excluded.

The counter (``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver loaded)
is the board's, idle power included, and advances in steps, not continuously, so a short
window is refused (:data:`MIN_WINDOW_S`): its figure is recorded as None with the reason,
and every figure keeps its window's seconds beside it.

The agent's windows are read by wrapping the agent's window method in this process
(:func:`metered_windows`) for the length of one ``mlms run``: the reads happen between
windows, never inside a timed region, and nothing in the agent changes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from mlmodelscope.agent.energy import MIN_WINDOW_S as AGENT_MIN_WINDOW_S

MIN_WINDOW_S: Final = AGENT_MIN_WINDOW_S["nvml"]
"""The shortest window whose energy is reported: NVML's counter advances in steps (tens of
milliseconds apart on recent boards), too coarse for a shorter window. The agent's own
meter (:mod:`mlmodelscope.agent.energy`) holds its windows to the same."""


@dataclass(frozen=True)
class Reading:
    """The monotonic clock (``time.perf_counter_ns``) and the counter (J, None: unreadable)."""

    ns: int
    joules: float | None


class Energy:
    """GPU 0's energy counter through NVML; every read is None without it (or ``enabled``
    False: the CPU variant)."""

    def __init__(self, enabled: bool = True) -> None:
        self._nvml: Any = None
        self._handle: Any = None
        if not enabled:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self._nvml = pynvml
        except Exception:
            self._nvml = None

    def read(self) -> Reading:
        ns = time.perf_counter_ns()
        if self._nvml is None:
            return Reading(ns, None)
        try:
            millijoules = self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except Exception:
            return Reading(ns, None)
        return Reading(ns, float(millijoules) / 1e3)


def window_energy(start: Reading, end: Reading, samples: int) -> dict[str, Any]:
    """One window's energy per sample, or None with the reason: no counter, a window shorter
    than :data:`MIN_WINDOW_S`, a counter that did not advance, no samples."""
    seconds = (end.ns - start.ns) / 1e9
    row: dict[str, Any] = {
        "joules": None,
        "seconds": seconds,
        "samples": samples,
        "j_per_sample": None,
        "mean_power_w": None,
        "reason": None,
    }
    if start.joules is None or end.joules is None:
        row["reason"] = "no NVML energy counter"
        return row
    joules = end.joules - start.joules
    row["joules"] = joules
    if seconds < MIN_WINDOW_S:
        row["reason"] = f"window {seconds:.3f} s < {MIN_WINDOW_S:g} s: the counter is too coarse"
    elif joules <= 0:
        row["reason"] = f"the counter did not advance ({joules:.3f} J in {seconds:.3f} s)"
    elif samples <= 0:
        row["reason"] = "no samples"
    else:
        row["j_per_sample"] = joules / samples
        row["mean_power_w"] = joules / seconds
    return row


def combine(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """Several windows of one batch size (the bare loop's before and after) as one: joules,
    seconds and samples of the accepted windows summed; None with the first reason if none
    was accepted."""
    accepted = [w for w in windows if w["j_per_sample"] is not None]
    if not accepted:
        first = windows[0] if windows else {"reason": "no window"}
        return {
            "joules": None,
            "seconds": sum(w["seconds"] for w in windows),
            "samples": sum(w["samples"] for w in windows),
            "j_per_sample": None,
            "mean_power_w": None,
            "reason": first["reason"],
            "windows": len(windows),
            "windows_used": 0,
        }
    joules = sum(w["joules"] for w in accepted)
    seconds = sum(w["seconds"] for w in accepted)
    samples = sum(w["samples"] for w in accepted)
    return {
        "joules": joules,
        "seconds": seconds,
        "samples": samples,
        "j_per_sample": joules / samples,
        "mean_power_w": joules / seconds,
        "reason": None,
        "windows": len(windows),
        "windows_used": len(accepted),
    }


@dataclass
class AgentWindow:
    """One timed window of the agent: scenario, batch size, queries, samples, the reads."""

    scenario: str
    batch_size: int
    queries: int
    samples: int
    start: Reading
    end: Reading


@dataclass
class Metered:
    """What :func:`metered_windows` saw: every window in order, or why it saw none."""

    windows: list[AgentWindow] = field(default_factory=list)
    unavailable: str | None = None


@contextmanager
def metered_windows(meter: Energy) -> Iterator[Metered]:
    """Read the counter around every timed window the agent's scenario runner opens in this
    process (its warm-up runs outside them); the method is restored on exit."""
    seen = Metered()
    try:
        from mlmodelscope.agent import scenarios

        runner: Any = scenarios._Runner
        original = runner.window
    except (ImportError, AttributeError) as exc:
        seen.unavailable = f"the agent's window method is gone: {exc}"
        yield seen
        return

    def window(self: Any, qps: float | None, seed: Any, capacity: int) -> Any:
        start = meter.read()
        win = original(self, qps, seed, capacity)
        end = meter.read()
        ring = self.ring
        seen.windows.append(
            AgentWindow(
                str(self.type.value),
                int(ring.batch_size),
                int(win.queries),
                int(win.queries) * int(ring.samples_per_query),
                start,
                end,
            )
        )
        return win

    runner.window = window
    try:
        yield seen
    finally:
        runner.window = original


def agent_energy(measurements: list[dict[str, Any]], seen: Metered) -> list[dict[str, Any]]:
    """Per measurement (scenario, batch size) the energy of the window it reports: the last
    window of that batch size with the same number of queries."""
    rows = []
    for m in measurements:
        scenario, batch, queries = m.get("scenario"), m.get("batch_size"), m.get("queries")
        match = [
            w
            for w in seen.windows
            if (w.scenario, w.batch_size, w.queries) == (scenario, batch, queries)
        ]
        if match:
            energy = window_energy(match[-1].start, match[-1].end, match[-1].samples)
        else:
            reason = seen.unavailable or "no metered window matches the reported one"
            energy = {**window_energy(Reading(0, None), Reading(0, None), 0), "reason": reason}
            energy["seconds"] = None
        rows.append({"scenario": scenario, "batch_size": batch, **energy})
    return rows
