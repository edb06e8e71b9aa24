"""The comparison statistics against scipy called directly, and against a hand computation."""

from __future__ import annotations

import numpy as np
import pytest

from mlmodelscope.report.significance import Verdict, accuracy_mcnemar, latency_ratio


def latencies(seed: int, median_ms: float, n: int = 300) -> np.ndarray:
    """Right-skewed latencies in seconds, as a loaded machine gives them."""
    rng = np.random.default_rng(seed)
    return median_ms / 1e3 * rng.lognormal(0.0, 0.25, size=n)


def test_the_latency_interval_is_scipys_bootstrap_of_the_median_ratio() -> None:
    from scipy.stats import bootstrap

    a, b = latencies(1, 2.0), latencies(2, 2.3)
    ours = latency_ratio(a, b, resamples=999, seed=5)
    direct = bootstrap(
        (b, a),
        lambda c, base, axis=-1: np.median(c, axis=axis) / np.median(base, axis=axis),
        n_resamples=999,
        method="BCa",
        vectorized=True,
        rng=np.random.default_rng(5),
    )
    assert ours.low == pytest.approx(direct.confidence_interval.low, rel=1e-12)
    assert ours.high == pytest.approx(direct.confidence_interval.high, rel=1e-12)
    assert ours.ratio == pytest.approx(np.median(b) / np.median(a), rel=1e-12)
    assert ours.low < ours.ratio < ours.high and ours.level == 0.95
    assert "BCa" in ours.method


def test_verdicts_need_the_whole_interval_past_the_minimum_effect() -> None:
    base = latencies(1, 2.0)
    assert latency_ratio(base, latencies(2, 4.0)).verdict == Verdict.SLOWER
    assert latency_ratio(base, latencies(3, 1.0)).verdict == Verdict.FASTER
    assert latency_ratio(base, latencies(4, 2.0)).verdict == Verdict.SAME
    # clearly 6 % slower with 1,000 latencies each, but under an 8 % minimum effect: no
    # difference worth a verdict
    many = latencies(5, 2.0, n=1000)
    slower = latencies(6, 2.0 * 1.06, n=1000)
    assert latency_ratio(many, slower, min_effect=0.01).verdict == Verdict.SLOWER
    assert latency_ratio(many, slower, min_effect=0.08).verdict == Verdict.SAME
    with pytest.raises(ValueError, match="at least 2 latencies"):
        latency_ratio(base[:1], base)


def test_mcnemar_is_the_exact_binomial_test_on_the_discordant_samples() -> None:
    """10 samples only the baseline gets right, 2 only the candidate: p = 2 P(X <= 2) for
    X ~ Binomial(12, 1/2) = 2 (1 + 12 + 66) / 4096."""
    base = np.array([True] * 10 + [False] * 2 + [True] * 80 + [False] * 8)
    cand = np.array([False] * 10 + [True] * 2 + [True] * 80 + [False] * 8)
    result = accuracy_mcnemar(base, cand)
    assert result.p_value == pytest.approx(2 * 79 / 4096, rel=1e-12)
    assert (result.only_baseline_right, result.only_candidate_right) == (10, 2)
    assert result.verdict == Verdict.WORSE
    assert result.baseline_accuracy == 0.9 and result.candidate_accuracy == 0.82
    assert accuracy_mcnemar(cand, base).verdict == Verdict.BETTER
    assert accuracy_mcnemar(base, base).verdict == Verdict.SAME
    assert accuracy_mcnemar(base, base).p_value == 1.0
    with pytest.raises(ValueError, match="must score the same samples"):
        accuracy_mcnemar(base, cand[:-1])
