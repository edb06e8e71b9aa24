"""A sweep's cells over their repeats (controller/sweep_repeats.py): medians and bootstrap
intervals checked against scipy.stats.bootstrap called directly on the same values."""

from __future__ import annotations

import tomllib
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import bootstrap

from mlmodelscope.controller import sweep_repeats
from mlmodelscope.spec.sweep import RepeatInterval, SweepChildStatus

P50 = [1.21, 1.05, 1.47, 1.12, 1.30]
THROUGHPUT = [820.0, 951.0, 680.0, 893.0, 770.0]


def scipy_interval(values: list[float], how: RepeatInterval) -> tuple[float, float]:
    found = bootstrap(
        (np.asarray(values),),
        np.median,
        n_resamples=how.resamples,
        confidence_level=how.confidence_level,
        method=how.method,
        rng=np.random.default_rng(how.seed),
    )
    return float(found.confidence_interval.low), float(found.confidence_interval.high)


def row(repeat: int, phase: str | None = "Succeeded", **numbers: Any) -> SweepChildStatus:
    """The row of repeat ``repeat`` of the cell grid-cnn-onnxruntime-b1."""
    return SweepChildStatus.model_validate(
        {
            "name": f"grid-cnn-onnxruntime-b1-r{repeat}",
            "cell": "grid-cnn-onnxruntime-b1",
            "repeat": repeat,
            "phase": phase,
            "model": "cnn",
            "framework": "onnxruntime",
            "device": "cpu",
            "scenario": "SingleStream",
            "batchSize": 1,
            **numbers,
        }
    )


def measured(count: int) -> list[SweepChildStatus]:
    return [
        row(i + 1, p50Ms=P50[i], throughput=THROUGHPUT[i], metric="top1", metricValue=0.97)
        for i in range(count)
    ]


def test_the_interval_is_scipys_percentile_bootstrap_of_the_median() -> None:
    how = sweep_repeats.HOW
    assert (how.statistic, how.method, how.confidence_level) == ("median", "percentile", 0.95)
    [cell] = sweep_repeats.cells(measured(5), 5)
    assert cell.p50_ms is not None and cell.throughput is not None
    assert cell.p50_ms.median == float(np.median(P50)) == 1.21
    assert (cell.p50_ms.low, cell.p50_ms.high) == pytest.approx(scipy_interval(P50, how))
    assert cell.throughput.median == 820.0
    assert (cell.throughput.low, cell.throughput.high) == pytest.approx(
        scipy_interval(THROUGHPUT, how)
    )
    assert cell.p50_ms.repeats == cell.throughput.repeats == 5
    assert (cell.name, cell.model, cell.framework, cell.batch_size) == (
        "grid-cnn-onnxruntime-b1",
        "cnn",
        "onnxruntime",
        1,
    )
    assert (cell.repeats, cell.succeeded, cell.failed) == (5, 5, 0)
    assert (cell.metric, cell.metric_value) == ("top1", 0.97)
    assert cell.message == "5 of 5 repeats succeeded"


def test_another_level_and_seed_are_scipys_too() -> None:
    how = RepeatInterval(confidence_level=0.9, resamples=2000, seed=7)
    estimate = sweep_repeats.estimate(P50, how)
    assert estimate is not None
    assert (estimate.low, estimate.high) == pytest.approx(scipy_interval(P50, how))


def test_the_interval_is_the_same_at_every_reconcile() -> None:
    first = sweep_repeats.cells(measured(3), 3)
    sweep_repeats._interval.cache_clear()  # drawn again, not remembered
    assert sweep_repeats.cells(measured(3), 3) == first


def test_one_repeat_has_a_median_and_no_interval() -> None:
    [cell] = sweep_repeats.cells([*measured(1), row(2, "Running"), row(3, None)], 3)
    assert cell.p50_ms is not None
    assert (cell.p50_ms.median, cell.p50_ms.low, cell.p50_ms.high) == (P50[0], None, None)
    assert cell.p50_ms.repeats == 1 and cell.succeeded == 1
    assert cell.message == (
        "1 of 3 repeats succeeded, 2 not finished; no interval: it needs 2 repeats that succeeded"
    )


def test_a_failed_repeat_is_counted_and_left_out_of_the_figures() -> None:
    rows = [*measured(2), row(3, "Failed", message="OOMKilled")]
    [cell] = sweep_repeats.cells(rows, 3)
    assert (cell.succeeded, cell.failed) == (2, 1)
    assert cell.p50_ms is not None and cell.p50_ms.repeats == 2
    assert cell.p50_ms.median == pytest.approx(np.median(P50[:2]))
    assert (cell.p50_ms.low, cell.p50_ms.high) == pytest.approx(
        scipy_interval(P50[:2], sweep_repeats.HOW)
    )
    assert cell.message == "2 of 3 repeats succeeded, 1 failed"


def test_identical_repeats_give_a_point_interval() -> None:
    estimate = sweep_repeats.estimate([2.5, 2.5, 2.5], sweep_repeats.HOW)
    assert estimate is not None and (estimate.median, estimate.low, estimate.high) == (2.5,) * 3


def test_no_repeat_finished_gives_no_figures() -> None:
    [cell] = sweep_repeats.cells([row(1, "Running"), row(2, None)], 2)
    assert (cell.p50_ms, cell.throughput, cell.metric, cell.metric_value) == (None,) * 4
    assert cell.message == "0 of 2 repeats succeeded, 2 not finished"


def test_the_task_metric_is_the_median_and_top1_stands_in_for_an_unnamed_one() -> None:
    rows = [row(i + 1, metric="map", metricValue=v) for i, v in enumerate([0.36, 0.37, 0.30])]
    [cell] = sweep_repeats.cells(rows, 3)
    assert (cell.metric, cell.metric_value) == ("map", 0.36)
    older = [row(i + 1, top1=v) for i, v in enumerate([0.97, 0.98])]
    [cell] = sweep_repeats.cells(older, 2)
    assert (cell.metric, cell.metric_value) == ("top1", pytest.approx(0.975))


def test_cells_keep_the_order_of_their_first_rows() -> None:
    def other(repeat: int) -> SweepChildStatus:
        return row(repeat).model_copy(
            update={"name": f"grid-cnn-pytorch-b1-r{repeat}", "cell": "grid-cnn-pytorch-b1"}
        )

    rows = [row(1), other(1), row(2), other(2)]  # repeat by repeat, as the children run
    assert [c.name for c in sweep_repeats.cells(rows, 2)] == [
        "grid-cnn-onnxruntime-b1",
        "grid-cnn-pytorch-b1",
    ]


def test_without_scipy_the_median_stays_and_the_message_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sweep_repeats, "scipy_available", lambda: False)
    [cell] = sweep_repeats.cells(measured(3), 3)
    assert cell.p50_ms is not None and cell.p50_ms.median == 1.21 and cell.p50_ms.low is None
    assert cell.message == f"3 of 3 repeats succeeded; {sweep_repeats.NEEDS_SCIPY}"


def test_an_interval_needs_two_values() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        sweep_repeats.median_interval([1.0], sweep_repeats.HOW)


def test_bca_is_undefined_where_the_middle_repeats_tie() -> None:
    """Why the method is percentile: BCa's acceleration comes from the jackknife, and where
    the middle values tie every leave-one-out median is the same, so scipy has no BCa
    interval to give; the percentile interval is there, within the values' range."""
    values = np.asarray([1.0, 1.1, 1.1, 1.2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = bootstrap((values,), np.median, method="BCa", rng=0)
    assert np.isnan(found.confidence_interval.low) and np.isnan(found.confidence_interval.high)
    estimate = sweep_repeats.estimate(list(values), sweep_repeats.HOW)
    assert estimate is not None and estimate.low is not None and estimate.high is not None
    assert 1.0 <= estimate.low <= estimate.median <= estimate.high <= 1.2


def test_the_operator_extra_installs_scipy() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    extra = pyproject["project"]["optional-dependencies"]["operator"]
    assert any(dependency.startswith("scipy") for dependency in extra)
