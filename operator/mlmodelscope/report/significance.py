"""Whether a difference between two runs is real: a bootstrap confidence interval of the
latency ratio (scipy.stats.bootstrap) and McNemar's exact test on per-sample correctness
(scipy.stats.binomtest on the discordant pairs), each with a verdict; a latency verdict must
also clear a stated minimum effect. Pure functions over arrays; no command calls them yet."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

import numpy as np

DEFAULT_LEVEL: Final = 0.95
DEFAULT_MIN_EFFECT: Final = 0.05
"""A latency ratio within 5 % of 1 is no difference worth reporting, however certain."""
DEFAULT_RESAMPLES: Final = 2000


class Verdict(StrEnum):
    FASTER = "faster"
    SLOWER = "slower"
    BETTER = "more accurate"
    WORSE = "less accurate"
    SAME = "no significant difference"


@dataclass(frozen=True)
class LatencyComparison:
    """Candidate over baseline median latency, its interval, and what it means."""

    ratio: float
    low: float
    high: float
    level: float
    method: str
    min_effect: float
    verdict: Verdict


def latency_ratio(
    baseline: np.ndarray,
    candidate: np.ndarray,
    *,
    level: float = DEFAULT_LEVEL,
    min_effect: float = DEFAULT_MIN_EFFECT,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> LatencyComparison:
    """Bootstrap (BCa, independent samples, seeded) interval of median(candidate) /
    median(baseline). Slower when the whole interval lies above ``1 + min_effect``, faster when
    it lies below ``1 - min_effect``, else no significant difference."""
    from scipy.stats import bootstrap

    a = np.asarray(baseline, dtype=np.float64)
    b = np.asarray(candidate, dtype=np.float64)
    if a.size < 2 or b.size < 2:
        raise ValueError(f"need at least 2 latencies per run; got {a.size} and {b.size}")

    def ratio(c: np.ndarray, base: np.ndarray, axis: int = -1) -> np.ndarray:
        result: np.ndarray = np.median(c, axis=axis) / np.median(base, axis=axis)
        return result

    found = bootstrap(
        (b, a),
        ratio,
        n_resamples=resamples,
        confidence_level=level,
        method="BCa",
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    low, high = float(found.confidence_interval.low), float(found.confidence_interval.high)
    if low > 1 + min_effect:
        verdict = Verdict.SLOWER
    elif high < 1 - min_effect:
        verdict = Verdict.FASTER
    else:
        verdict = Verdict.SAME
    return LatencyComparison(
        ratio=float(ratio(b, a)),
        low=low,
        high=high,
        level=level,
        method=f"bootstrap BCa, {resamples} resamples, seed {seed}",
        min_effect=min_effect,
        verdict=verdict,
    )


@dataclass(frozen=True)
class AccuracyComparison:
    """Per-sample agreement of two runs on the same samples, and McNemar's exact test."""

    baseline_accuracy: float
    candidate_accuracy: float
    only_baseline_right: int
    only_candidate_right: int
    p_value: float
    alpha: float
    verdict: Verdict


def accuracy_mcnemar(
    baseline_correct: np.ndarray, candidate_correct: np.ndarray, *, alpha: float = 0.05
) -> AccuracyComparison:
    """McNemar's exact test: under no difference, each sample one run gets right and the other
    wrong is equally likely either way (a two-sided binomial test with p = 1/2)."""
    from scipy.stats import binomtest

    base = np.asarray(baseline_correct, dtype=bool)
    cand = np.asarray(candidate_correct, dtype=bool)
    if base.shape != cand.shape or base.ndim != 1:
        raise ValueError(
            f"per-sample records of {base.shape} and {cand.shape}: the runs must score the same "
            "samples"
        )
    only_base = int(np.sum(base & ~cand))
    only_cand = int(np.sum(cand & ~base))
    discordant = only_base + only_cand
    p_value = 1.0 if discordant == 0 else float(binomtest(only_cand, discordant, 0.5).pvalue)
    if p_value < alpha:
        verdict = Verdict.BETTER if only_cand > only_base else Verdict.WORSE
    else:
        verdict = Verdict.SAME
    return AccuracyComparison(
        baseline_accuracy=float(base.mean()),
        candidate_accuracy=float(cand.mean()),
        only_baseline_right=only_base,
        only_candidate_right=only_cand,
        p_value=p_value,
        alpha=alpha,
        verdict=verdict,
    )
