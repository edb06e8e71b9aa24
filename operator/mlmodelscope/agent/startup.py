"""Start-up timeline: where the time goes from the agent process's start to its first timed
query (issue 16), recorded in the result document as ``startup``.

Phases are consecutive intervals on one monotonic clock (``time.perf_counter_ns``), so they add
up to the total. Their boundaries: the process's start (Linux: ``starttime`` in
``/proc/self/stat``, in clock ticks, usually 10 ms; elsewhere unknown), ``import mlmodelscope``
(``mlmodelscope._IMPORT_NS``), the CLI command starting (:func:`mark`), then the marks
:func:`mlmodelscope.agent.runner.evaluate` sets, up to the start of the first timed window.
One wall-clock reading relates the clock to UTC, so ``process_started_at`` and
``first_timed_query_at`` can be set against a Job's ``creationTimestamp``.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import mlmodelscope

PROCESS_START_SOURCE = "/proc/self/stat starttime"
_process_marks: list[tuple[str, int]] = []
_evaluations = 0


def mark(name: str) -> None:
    """End of a process-level phase before any evaluation (``cli``: the command started)."""
    if all(existing != name for existing, _ in _process_marks):
        _process_marks.append((name, time.perf_counter_ns()))


def process_start_ns() -> tuple[int, float] | None:
    """(the process's start on the ``perf_counter_ns`` clock, the resolution in seconds), or
    None where ``/proc/self/stat`` is not available."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22, starttime
        hz = os.sysconf("SC_CLK_TCK")
        boot_now = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        perf_now = time.perf_counter_ns()
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return perf_now - (boot_now - ticks * 1_000_000_000 // hz), 1.0 / hz


def _utc(wall_ns: int) -> str:
    moment = datetime.fromtimestamp(wall_ns / 1e9, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Timeline:
    """One evaluation's start-up phases. Create it when the evaluation starts; ``mark`` the end
    of each phase; ``document`` gives the result document's ``startup`` section."""

    def __init__(self) -> None:
        global _evaluations
        self.earlier_evaluations = _evaluations
        _evaluations += 1
        self._wall_ns, self._perf_ns = time.time_ns(), time.perf_counter_ns()
        self._start = process_start_ns()
        self._marks: list[tuple[str, int]] = [("interpreter", mlmodelscope._IMPORT_NS)]
        self._marks += _process_marks
        before = "command" if _process_marks else "before_evaluation"
        self._marks.append((before, self._perf_ns))

    def mark(self, name: str) -> None:
        """The phase ``name`` ends now."""
        self._marks.append((name, time.perf_counter_ns()))

    def wall(self, perf_ns: int) -> str:
        """UTC time of a ``perf_counter_ns`` reading of this process."""
        return _utc(self._wall_ns + perf_ns - self._perf_ns)

    def document(
        self, *, warmup_ns: int, first_query_ns: int, first_latency_ns: int, warmup_queries: int
    ) -> dict[str, Any]:
        """The ``startup`` section: phases up to ``first_query_ns`` (the first timed window's
        start), the last one ``warmup`` (``warmup_ns`` until then)."""
        marks = [*self._marks, ("measurement_setup", warmup_ns), ("warmup", first_query_ns)]
        if self._start is None:
            origin, resolution = marks[0][1], None
            marks = marks[1:]
        else:
            origin, resolution = self._start
        phases: dict[str, float] = {}
        previous = origin
        for name, at in marks:
            phases[name] = max(at - previous, 0) / 1e9
            previous = max(at, previous)
        return {
            "process_started_at": None if self._start is None else self.wall(origin),
            "process_start_source": PROCESS_START_SOURCE if self._start is not None else None,
            "process_start_resolution_s": resolution,
            "first_timed_query_at": self.wall(first_query_ns),
            "to_first_timed_query_s": max(first_query_ns - origin, 0) / 1e9,
            "phases_s": phases,
            "warmup_queries": warmup_queries,
            "first_timed_query_s": first_latency_ns / 1e9,
            "earlier_evaluations": self.earlier_evaluations,
        }
