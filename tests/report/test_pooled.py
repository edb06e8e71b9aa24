"""The pooled judgement of several candidate runs (report/pooled.py): the interval of the ratio
of the medians is scipy's own bootstrap, and its verdicts clear the minimum effect."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import bootstrap

from mlmodelscope.report.pooled import (
    MedianRatio,
    PooledFigure,
    median_ratio,
    outcome,
    pooled_verdicts,
)
from mlmodelscope.report.verdicts import Metric, Outcome

BASELINE = [2.10, 1.95, 2.30, 2.02, 2.18]
CANDIDATE = [2.61, 2.44, 2.90, 2.52]
"""Fixed per-run figures (ms): five baseline runs and four candidate runs about 25 % slower."""


def test_the_interval_is_scipys_bootstrap_of_the_ratio_of_the_medians() -> None:
    level = 1 - 0.05 / 6
    found = median_ratio(BASELINE, CANDIDATE, level)

    def ratio(c: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        result: np.ndarray = np.median(c, axis=axis) / np.median(b, axis=axis)
        return result

    direct = bootstrap(
        (np.array(CANDIDATE), np.array(BASELINE)),
        ratio,
        paired=False,
        method="percentile",
        confidence_level=level,
        n_resamples=2000,
        vectorized=True,
        rng=np.random.default_rng(0),
    ).confidence_interval
    assert found.ratio == pytest.approx(np.median(CANDIDATE) / np.median(BASELINE))
    assert (found.low, found.high) == (direct.low, direct.high)
    assert found.level == level
    assert found.low < found.ratio < found.high
    # the same data and seed, the same interval: a gate does not flap
    assert median_ratio(BASELINE, CANDIDATE, level) == found


def test_against_one_baseline_run_only_the_candidate_runs_are_resampled() -> None:
    found = median_ratio([2.0], CANDIDATE, 0.95)
    direct = bootstrap(
        (np.array(CANDIDATE),),
        lambda c, axis=-1: np.median(c, axis=axis) / 2.0,
        method="percentile",
        confidence_level=0.95,
        n_resamples=2000,
        vectorized=True,
        rng=np.random.default_rng(0),
    ).confidence_interval
    assert (found.low, found.high) == (direct.low, direct.high)
    assert found.ratio == pytest.approx(np.median(CANDIDATE) / 2.0)
    with pytest.raises(ValueError, match="pooling needs 2 candidate values"):
        median_ratio(BASELINE, [2.5], 0.95)


def test_a_verdict_needs_the_whole_interval_beyond_the_minimum_effect() -> None:
    slower = MedianRatio(1.25, 1.10, 1.40, 0.99)
    assert outcome(Metric.P50, slower) is Outcome.SLOWER
    assert outcome(Metric.THROUGHPUT, slower) is Outcome.FASTER  # more samples per second
    lower = MedianRatio(0.8, 0.7, 0.9, 0.99)
    assert outcome(Metric.P99, lower) is Outcome.FASTER
    assert outcome(Metric.THROUGHPUT, lower) is Outcome.SLOWER
    # certain but within 5 %, or straddling 1: no difference
    assert outcome(Metric.P50, MedianRatio(1.04, 1.03, 1.045, 0.99)) is Outcome.SAME
    assert outcome(Metric.P50, MedianRatio(1.3, 0.9, 1.6, 0.99)) is Outcome.SAME


def test_a_figure_without_a_value_in_every_run_is_not_testable() -> None:
    missing = PooledFigure("Offline", 8, Metric.P50, (1.0, None), (1.0, 1.1))
    assert missing.why_not == "candidate run 2 of 2: no positive latency p50"
    server = PooledFigure("Server", 1, Metric.THROUGHPUT, (5.0, 6.0), (5.0, 5.5))
    assert server.why_not is not None and "arrival rate" in server.why_not
    assert PooledFigure("Offline", 8, Metric.P50, (1.0, 1.2), (1.1,)).why_not is None


def test_pooling_needs_two_candidate_runs() -> None:
    with pytest.raises(ValueError, match="pooling needs 2 candidate runs and 1 baseline run"):
        pooled_verdicts("cand", [], [])
