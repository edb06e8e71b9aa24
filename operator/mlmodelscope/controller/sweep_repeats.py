"""A sweep's cells over their repeats: each figure's median over the repeats that succeeded
and a bootstrap confidence interval of that median (``scipy.stats.bootstrap``).

Pure functions over the sweep's typed child rows, so a cell can be recomputed from
``status.children`` alone. The resampling is seeded (``RepeatInterval.seed``) and memoized
by its values: the same repeats give the same interval at every reconcile, so the status
does not flap, and an unchanged cell costs no resampling. One repeat has no interval, and
none is made up.
"""

from __future__ import annotations

import functools
import importlib.util
import statistics
from collections.abc import Callable, Iterable, Sequence
from typing import Final

import numpy as np

from mlmodelscope.spec.status import Phase
from mlmodelscope.spec.sweep import (
    CellEstimate,
    RepeatInterval,
    SweepCellStatus,
    SweepChildStatus,
)

HOW: Final = RepeatInterval()
"""How the operator draws every cell's interval (recorded in status.interval)."""
NEEDS_SCIPY: Final = "no interval: the operator has no scipy (pip install scipy)"
TOO_FEW: Final = "no interval: it needs 2 repeats that succeeded"


def scipy_available() -> bool:
    return importlib.util.find_spec("scipy") is not None


def median_interval(values: Sequence[float], how: RepeatInterval) -> tuple[float, float]:
    """The bootstrap interval (low, high) of the median of ``values`` (two or more).

    Identical values give the point interval [v, v] (scipy's resamples would all be equal
    and its interval undefined)."""
    if len(values) < 2:
        raise ValueError(f"an interval needs at least 2 values, got {len(values)}")
    key = tuple(float(v) for v in values)
    return _interval(key, how.method, how.confidence_level, how.resamples, how.seed)


@functools.lru_cache(maxsize=1024)
def _interval(
    values: tuple[float, ...], method: str, level: float, resamples: int, seed: int
) -> tuple[float, float]:
    data = np.asarray(values, dtype=np.float64)
    if np.ptp(data) == 0:
        return float(data[0]), float(data[0])
    from scipy.stats import bootstrap

    found = bootstrap(
        (data,),
        np.median,
        n_resamples=resamples,
        confidence_level=level,
        method=method,
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    interval = found.confidence_interval
    return float(interval.low), float(interval.high)


def estimate(values: Sequence[float], how: RepeatInterval) -> CellEstimate | None:
    """The median of ``values`` with its interval (none for one value, or without scipy);
    None for no values."""
    if not values:
        return None
    median = float(statistics.median(values))
    if len(values) < 2 or not scipy_available():
        return CellEstimate(median=median, repeats=len(values))
    low, high = median_interval(values, how)
    return CellEstimate(median=median, low=low, high=high, repeats=len(values))


def _values(
    rows: Iterable[SweepChildStatus], pick: Callable[[SweepChildStatus], float | None]
) -> list[float]:
    return [v for v in map(pick, rows) if v is not None]


def cell(rows: Sequence[SweepChildStatus], repeats: int, how: RepeatInterval) -> SweepCellStatus:
    """One cell from the rows of its repeats (one or more, the first giving the axes):
    medians and intervals over the repeats that succeeded, and how many of ``repeats`` did."""
    first = rows[0]
    done = [r for r in rows if r.phase == Phase.SUCCEEDED]
    failed = sum(1 for r in rows if r.phase == Phase.FAILED)
    p50 = estimate(_values(done, lambda r: r.p50_ms), how)
    throughput = estimate(_values(done, lambda r: r.throughput), how)
    metric = next((r.metric for r in done if r.metric), None)
    if metric is not None:
        metric_values = _values(done, lambda r: r.metric_value)
    else:  # a child that names no metric: its top-1, when it has one
        metric_values = _values(done, lambda r: r.top1)
        metric = "top1" if metric_values else None
    return SweepCellStatus(
        name=first.cell or first.name,
        model=first.model,
        framework=first.framework,
        device=first.device,
        gpu_product=first.gpu_product,
        scenario=first.scenario,
        batch_size=first.batch_size,
        repeats=repeats,
        succeeded=len(done),
        failed=failed,
        p50_ms=p50,
        throughput=throughput,
        metric=metric,
        metric_value=float(statistics.median(metric_values)) if metric_values else None,
        message=_message(len(done), failed, repeats, [p50, throughput]),
    )


def _message(succeeded: int, failed: int, repeats: int, figures: list[CellEstimate | None]) -> str:
    parts = [f"{succeeded} of {repeats} repeats succeeded"]
    if failed:
        parts.append(f"{failed} failed")
    if unfinished := repeats - succeeded - failed:
        parts.append(f"{unfinished} not finished")
    text = ", ".join(parts)
    measured = [f for f in figures if f is not None]
    if measured and all(f.repeats < 2 for f in measured):
        return f"{text}; {TOO_FEW}"
    if any(f.low is None for f in measured if f.repeats >= 2):
        return f"{text}; {NEEDS_SCIPY}"
    return text


def cells(
    rows: Iterable[SweepChildStatus], repeats: int, how: RepeatInterval = HOW
) -> list[SweepCellStatus]:
    """The cells of a sweep with repeats, in the order their first rows come (matrix order:
    the children's rows run repeat by repeat)."""
    grouped: dict[str, list[SweepChildStatus]] = {}
    for row in rows:
        grouped.setdefault(row.cell or row.name, []).append(row)
    return [cell(group, repeats, how) for group in grouped.values()]
