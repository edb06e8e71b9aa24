"""Latency statistics and verdicts: small frozen records and pure functions.

Every number a result document carries comes from here, computed over the *full* distribution
(all latencies of a window are kept, never a histogram or a reservoir), so a percentile can be
recomputed from the raw array in the document and must match.

Percentile estimator (``PERCENTILE_METHOD``): MLPerf LoadGen's rule, so results are comparable
with LoadGen logs. LoadGen (``results.cc``, ``PerformanceSummary::ProcessLatencies``) sorts the
latencies and reads ``sorted[floor(n * p)]`` (0-based, ``p`` a fraction). That is the
nearest-rank value ``sorted[ceil(n * p) - 1]`` except when ``n * p`` is a whole number, where
LoadGen takes the next rank up (e.g. n = 100: p99 is the largest value, not the 99th) -- the
more conservative choice. The index is computed exactly (the percentile's decimal text as a
fraction), so 99.9 never turns into 99.89999... by floating-point rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

PERCENTILE_METHOD = "loadgen: sorted[floor(n*p/100)] (0-based), clamped to n-1"
"""How percentiles are estimated; recorded in result documents."""

TRIM_FRACTION = 0.05
"""Fraction cut from each end of the sorted latencies for the trimmed mean."""


def percentile_key(p: float) -> str:
    """The key a percentile is reported under: 50 -> 'p50', 99.9 -> 'p99.9'."""
    return f"p{p:g}"


def percentile_index(n: int, p: float) -> int:
    """0-based index of percentile ``p`` (0 < p <= 100) in ``n`` sorted values, LoadGen's rule."""
    if n <= 0:
        raise ValueError("no values")
    if not 0 < p <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {p}")
    index = (n * Fraction(repr(float(p)))) // 100
    return min(int(index), n - 1)


def percentile_of_sorted(sorted_values: npt.NDArray[Any], p: float) -> float:
    """Percentile ``p`` of already sorted values (see ``percentile_index``)."""
    return float(sorted_values[percentile_index(len(sorted_values), p)])


@dataclass(frozen=True)
class LatencyStats:
    """Summary of one latency distribution, in seconds.

    ``stdev_s`` is the sample standard deviation (n - 1 in the denominator; 0 for one value);
    ``trimmed_mean_s`` drops ``floor(0.05 * n)`` values from each end (scipy's ``trim_mean``
    convention), a mean that a few outliers (GC, page faults) cannot drag.
    """

    count: int
    mean_s: float
    stdev_s: float
    min_s: float
    max_s: float
    trimmed_mean_s: float
    percentiles: dict[str, float]
    """Keyed by ``percentile_key`` ("p50", "p99.9"), in seconds."""

    def percentile(self, p: float) -> float:
        """The reported percentile ``p`` in seconds (it must have been requested)."""
        return self.percentiles[percentile_key(p)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: plain ints and floats, seconds."""
        return {
            "count": self.count,
            "mean_s": self.mean_s,
            "stdev_s": self.stdev_s,
            "min_s": self.min_s,
            "max_s": self.max_s,
            "trimmed_mean_s": self.trimmed_mean_s,
            "percentiles_s": dict(self.percentiles),
        }


def summarize_latencies(
    latencies_ns: npt.NDArray[Any] | Sequence[int], percentiles: Sequence[float]
) -> LatencyStats:
    """Statistics of every latency in ``latencies_ns`` (nanoseconds); raises on an empty array.

    Sums are taken in int64 nanoseconds, so the mean is exact before the final division.
    """
    values = np.sort(np.asarray(latencies_ns, dtype=np.int64))
    n = int(values.size)
    if n == 0:
        raise ValueError("cannot summarize an empty latency array")
    mean_ns = int(values.sum()) / n
    stdev_ns = float(np.std(values, ddof=1)) if n > 1 else 0.0
    cut = int(TRIM_FRACTION * n)
    trimmed = values[cut : n - cut]
    trimmed_mean_ns = int(trimmed.sum()) / int(trimmed.size)
    return LatencyStats(
        count=n,
        mean_s=mean_ns / 1e9,
        stdev_s=stdev_ns / 1e9,
        min_s=int(values[0]) / 1e9,
        max_s=int(values[-1]) / 1e9,
        trimmed_mean_s=trimmed_mean_ns / 1e9,
        percentiles={
            percentile_key(p): int(values[percentile_index(n, p)]) / 1e9 for p in percentiles
        },
    )


@dataclass(frozen=True)
class Verdict:
    """MLPerf-style validity: VALID, or INVALID with every reason (not only the first)."""

    valid: bool
    reasons: tuple[str, ...] = ()

    @classmethod
    def from_reasons(cls, reasons: Sequence[str]) -> Verdict:
        """VALID exactly when there is no reason against it."""
        return cls(valid=not reasons, reasons=tuple(reasons))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; ``result`` is the word a report prints."""
        return {
            "valid": self.valid,
            "result": "VALID" if self.valid else "INVALID",
            "reasons": list(self.reasons),
        }


def relative_change(a: float, b: float) -> float:
    """(b - a) / a as a fraction (0.1 = 10 %); infinite when a is 0 and b is not."""
    if a == 0:
        return 0.0 if b == 0 else float("inf")
    return (b - a) / abs(a)


def is_stable(p50s: Sequence[float], tolerance_percent: float) -> bool:
    """perf_analyzer's rule: the last two windows' values differ by less than the tolerance.

    Fewer than two windows are never stable: one window cannot show that it has settled.
    """
    if len(p50s) < 2:
        return False
    return abs(relative_change(p50s[-2], p50s[-1])) * 100.0 < tolerance_percent
