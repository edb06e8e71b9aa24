"""The spread over repetitions: each headline figure's mean over a measurement's repetitions
and a bootstrap confidence interval of that mean (``scipy.stats.bootstrap``).

Pure functions over one small record per repetition, so the interval can be recomputed from
the result document alone. By default the repetitions share one process (one warm-up, one
loaded model): the interval covers variation between repetitions, not between process
start-ups; with ``repetitionProcess: fresh`` each repetition has a process of its own and the
interval covers start-up state too.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

import numpy as np

STATISTIC: Final = "mean"
"""What each interval is of: the mean of the per-repetition figures."""
NEEDS_SCIPY: Final = "no interval: needs scipy, which is not installed (pip install scipy)"

Method = Literal["percentile", "BCa"]


@dataclass(frozen=True)
class Bootstrap:
    """How an interval is drawn: ``scipy.stats.bootstrap``'s method, level, resamples, seed.

    Percentile by default: with a handful of repetitions BCa estimates its bias and
    acceleration from the same few values, and the percentile interval never leaves the
    range the repetitions span.
    """

    method: Method = "percentile"
    confidence_level: float = 0.95
    resamples: int = 9999
    seed: int = 0


@dataclass(frozen=True)
class RepetitionFigures:
    """One repetition's headline figures: what the intervals are computed over."""

    repetition: int
    queries: int
    samples: int
    p50_s: float
    p99_s: float
    throughput_samples_per_s: float


@dataclass(frozen=True)
class FigureInterval:
    """A figure's point estimate over the repetitions and its confidence interval (``low``
    and ``high`` are None when no interval could be drawn)."""

    estimate: float
    low: float | None
    high: float | None


@dataclass(frozen=True)
class Spread:
    """Each headline figure over two or more repetitions, with how its interval was drawn."""

    figures: tuple[RepetitionFigures, ...]
    p50_s: FigureInterval
    p99_s: FigureInterval
    throughput_samples_per_s: FigureInterval
    bootstrap: Bootstrap
    note: str | None = None
    """Why ``low`` and ``high`` are absent, when they are."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; the bootstrap settings flattened next to the figures."""
        return {
            "repetitions": len(self.figures),
            "statistic": STATISTIC,
            **asdict(self.bootstrap),
            "p50_s": asdict(self.p50_s),
            "p99_s": asdict(self.p99_s),
            "throughput_samples_per_s": asdict(self.throughput_samples_per_s),
            "figures": [asdict(f) for f in self.figures],
            "note": self.note,
        }


def bootstrap_interval(values: Sequence[float], how: Bootstrap) -> FigureInterval:
    """The mean of ``values`` and its bootstrap interval; needs two values or more.

    Identical values give the point interval [v, v] (scipy's resamples would all be equal
    and its interval undefined).
    """
    data = np.asarray(values, dtype=np.float64)
    if data.size < 2:
        raise ValueError(f"an interval needs at least 2 values, got {data.size}")
    estimate = float(np.mean(data))
    if np.ptp(data) == 0:
        return FigureInterval(estimate, estimate, estimate)
    from scipy.stats import bootstrap

    found = bootstrap(
        (data,),
        np.mean,
        n_resamples=how.resamples,
        confidence_level=how.confidence_level,
        method=how.method,
        vectorized=True,
        rng=np.random.default_rng(how.seed),
    )
    interval = found.confidence_interval
    return FigureInterval(estimate, float(interval.low), float(interval.high))


def _scipy_missing() -> bool:
    return importlib.util.find_spec("scipy") is None


def spread_of(figures: Sequence[RepetitionFigures], how: Bootstrap) -> Spread | None:
    """The spread of ``figures``; None for fewer than two repetitions (no interval to draw)."""
    if len(figures) < 2:
        return None
    missing = _scipy_missing()

    def interval(pick: Callable[[RepetitionFigures], float]) -> FigureInterval:
        values = [pick(f) for f in figures]
        if missing:
            return FigureInterval(float(np.mean(values)), None, None)
        return bootstrap_interval(values, how)

    return Spread(
        figures=tuple(figures),
        p50_s=interval(lambda f: f.p50_s),
        p99_s=interval(lambda f: f.p99_s),
        throughput_samples_per_s=interval(lambda f: f.throughput_samples_per_s),
        bootstrap=how,
        note=NEEDS_SCIPY if missing else None,
    )
