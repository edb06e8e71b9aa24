"""The spread over repetitions: intervals against scipy called directly, on fixed figures."""

from __future__ import annotations

import numpy as np
import pytest

from mlmodelscope.agent import spread
from mlmodelscope.agent.spread import (
    Bootstrap,
    Method,
    RepetitionFigures,
    bootstrap_interval,
    spread_of,
)
from mlmodelscope.contract.result import Spread

P50S = [1.20e-3, 1.31e-3, 1.24e-3, 1.27e-3, 1.22e-3]


def figures(p50s: list[float]) -> list[RepetitionFigures]:
    """Repetitions whose p99 is twice and throughput the inverse of their p50."""
    return [RepetitionFigures(i, 100, 100, p, 2 * p, 1 / p) for i, p in enumerate(p50s)]


@pytest.mark.parametrize("method", ["percentile", "BCa"])
def test_the_interval_is_scipys_bootstrap_of_the_mean(method: Method) -> None:
    from scipy.stats import bootstrap

    how = Bootstrap(method=method, confidence_level=0.9, resamples=2000, seed=7)
    found = bootstrap_interval(P50S, how)
    expected = bootstrap(
        (np.asarray(P50S),),
        np.mean,
        n_resamples=2000,
        confidence_level=0.9,
        method=method,
        rng=np.random.default_rng(7),
    ).confidence_interval
    assert found.estimate == pytest.approx(np.mean(P50S))
    assert found.low == pytest.approx(expected.low)
    assert found.high == pytest.approx(expected.high)
    assert found.low is not None and found.high is not None
    assert found.low <= found.estimate <= found.high


def test_one_repetition_has_no_spread() -> None:
    assert spread_of(figures(P50S[:1]), Bootstrap()) is None
    with pytest.raises(ValueError, match="at least 2"):
        bootstrap_interval(P50S[:1], Bootstrap())


def test_identical_repetitions_give_a_point_interval() -> None:
    found = bootstrap_interval([2e-3, 2e-3, 2e-3], Bootstrap())
    assert found.estimate == found.low == found.high == pytest.approx(2e-3)


def test_the_spread_covers_every_figure_and_parses_as_the_contract() -> None:
    how = Bootstrap(seed=3)
    found = spread_of(figures(P50S), how)
    assert found is not None
    assert found.p99_s == bootstrap_interval([2 * p for p in P50S], how)
    assert found.throughput_samples_per_s == bootstrap_interval([1 / p for p in P50S], how)
    doc = Spread.model_validate(found.to_dict())
    assert doc.repetitions == 5 and len(doc.figures) == 5
    assert (doc.method, doc.confidence_level, doc.resamples) == ("percentile", 0.95, 9999)
    assert doc.seed == 3
    assert doc.note is None


def test_without_scipy_the_estimates_stay_and_the_note_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(spread, "_scipy_missing", lambda: True)
    found = spread_of(figures(P50S), Bootstrap())
    assert found is not None and found.note == spread.NEEDS_SCIPY
    assert found.p50_s.estimate == pytest.approx(np.mean(P50S))
    assert found.p50_s.low is None and found.p50_s.high is None
