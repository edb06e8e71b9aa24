"""Latency statistics: the estimator, the summary fields, the verdict and the stability rule."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mlmodelscope.agent.stats import (
    LatencyStats,
    Verdict,
    is_stable,
    percentile_index,
    percentile_key,
    relative_change,
    summarize_latencies,
)


@pytest.mark.parametrize(
    ("p", "key"), [(50.0, "p50"), (90, "p90"), (99.9, "p99.9"), (99.99, "p99.99"), (95.5, "p95.5")]
)
def test_percentile_key(p: float, key: str) -> None:
    assert percentile_key(p) == key


@pytest.mark.parametrize(
    ("n", "p", "index"),
    [
        # LoadGen: sorted[floor(n * p)]; where n*p is whole it is one rank above nearest-rank.
        (10, 50.0, 5),
        (10, 90.0, 9),
        (10, 95.0, 9),
        (100, 99.0, 99),
        (100, 50.0, 50),
        (1000, 99.9, 999),
        (999, 99.9, 998),
        (7, 50.0, 3),
        (3, 99.0, 2),
        (1, 50.0, 0),
        (1, 99.9, 0),
        (10, 100.0, 9),
        # n*p not whole: the same as nearest rank, ceil(n*p) - 1
        (37, 90.0, 33),
        (1234, 99.9, 1232),
    ],
)
def test_percentile_index_follows_loadgen(n: int, p: float, index: int) -> None:
    assert percentile_index(n, p) == index


def test_percentile_index_is_exact_for_decimal_percentiles() -> None:
    # 10_000 * 99.99% is 9999 exactly; in floating point 10_000 * (99.99 / 100) is 9998.999...
    assert math.floor(10_000 * (99.99 / 100)) == 9998
    assert percentile_index(10_000, 99.99) == 9999
    assert percentile_index(10_000, 99.9) == 9990
    assert percentile_index(10_000, 57.3) == 5730


def test_percentile_index_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        percentile_index(0, 50)
    with pytest.raises(ValueError):
        percentile_index(10, 0)
    with pytest.raises(ValueError):
        percentile_index(10, 101)


def test_matches_nearest_rank_where_n_times_p_is_fractional() -> None:
    """Cross-check against numpy's inverted_cdf (nearest rank), which agrees off whole ranks."""
    values = np.random.default_rng(3).integers(1, 10**9, size=37)
    stats = summarize_latencies(values, [50, 90, 99])
    for p in (50, 90, 99):
        expected = np.percentile(values, p, method="inverted_cdf") / 1e9
        assert stats.percentile(p) == pytest.approx(expected, abs=0)


def test_summary_of_hand_computed_values() -> None:
    values = np.random.default_rng(0).permutation(np.arange(1, 101, dtype=np.int64))
    stats = summarize_latencies(values, [50, 90, 99, 99.9])
    assert stats.count == 100
    assert stats.min_s == 1e-9
    assert stats.max_s == 100e-9
    assert stats.mean_s == pytest.approx(50.5e-9)
    assert stats.stdev_s == pytest.approx(np.std(np.arange(1, 101), ddof=1) * 1e-9)
    assert stats.trimmed_mean_s == pytest.approx(50.5e-9)  # symmetric: cut 5 each side
    assert stats.percentiles == pytest.approx(
        {"p50": 51e-9, "p90": 91e-9, "p99": 100e-9, "p99.9": 100e-9}
    )


def test_trimmed_mean_drops_five_percent_each_side() -> None:
    values = [1_000] * 19 + [1_000_000]  # n = 20: one value cut from each end
    stats = summarize_latencies(values, [50])
    assert stats.trimmed_mean_s == pytest.approx(1e-6)
    assert stats.mean_s == pytest.approx((19 * 1_000 + 1_000_000) / 20 / 1e9)
    small = summarize_latencies([10, 20, 1000], [50])  # n < 20: nothing cut
    assert small.trimmed_mean_s == pytest.approx(small.mean_s)


def test_single_value_and_empty() -> None:
    one = summarize_latencies(np.array([2_000_000]), [50, 99])
    assert one.stdev_s == 0.0
    assert one.min_s == one.max_s == one.mean_s == one.percentile(99) == 0.002
    with pytest.raises(ValueError, match="empty"):
        summarize_latencies(np.array([], dtype=np.int64), [50])


def test_stats_to_dict_is_json_ready() -> None:
    stats = summarize_latencies(np.arange(1, 11, dtype=np.int64) * 1_000, [50, 99.9])
    doc = stats.to_dict()
    assert json.loads(json.dumps(doc)) == doc
    assert doc["count"] == 10
    assert set(doc["percentiles_s"]) == {"p50", "p99.9"}
    assert all(isinstance(doc[k], float) for k in ("mean_s", "stdev_s", "min_s", "trimmed_mean_s"))
    assert all(isinstance(v, float) for v in doc["percentiles_s"].values())
    assert isinstance(stats, LatencyStats)


def test_verdict() -> None:
    assert Verdict.from_reasons([]) == Verdict(True, ())
    bad = Verdict.from_reasons(["too short", "too few queries"])
    assert not bad.valid
    assert bad.to_dict() == {
        "valid": False,
        "result": "INVALID",
        "reasons": ["too short", "too few queries"],
    }
    assert Verdict.from_reasons([]).to_dict()["result"] == "VALID"


def test_relative_change() -> None:
    assert relative_change(100.0, 110.0) == pytest.approx(0.1)
    assert relative_change(100.0, 90.0) == pytest.approx(-0.1)
    assert relative_change(0.0, 0.0) == 0.0
    assert math.isinf(relative_change(0.0, 1.0))


def test_is_stable_uses_the_last_two_windows() -> None:
    assert not is_stable([], 10)
    assert not is_stable([1.0], 10)
    assert is_stable([100.0, 105.0], 10)
    assert is_stable([100.0, 95.0], 10)
    assert not is_stable([100.0, 111.0], 10)
    assert not is_stable([100.0, 110.0], 10)  # "less than" the tolerance
    assert is_stable([100.0, 200.0, 205.0], 10)
    assert not is_stable([100.0, 101.0, 150.0], 10)
