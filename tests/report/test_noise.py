"""The gate against several baseline runs (report/noise.py) on fixed data: the prediction bound
is scipy's t quantile over the baselines' logs, a candidate inside their run-to-run spread
passes however far it is from one of them, one well outside fails, and the level is split
over the checks judged (Bonferroni). The command on real documents is in test_gate.py."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.report.gate import CheckStatus, Thresholds, check
from mlmodelscope.report.noise import FAMILY_ALPHA, METHOD, Judged, run_verdicts, spread
from mlmodelscope.report.verdicts import Metric, MetricVerdict, Outcome
from mlmodelscope.spec.status import BatchResult, LatencySummary

BASELINE_P50 = (1.0, 1.3, 1.15)
"""Three runs of one spec, p50 in ms: 30 % apart at the extremes, as consecutive runs on a
shared machine are."""


def headlines(
    p50: float, *, scenario: str = "SingleStream", batches: tuple[int, ...] = (1, 8)
) -> ResultDocument:
    """A document with only headline rows (p99 ten times p50, throughput batch over p50); the
    fields the prediction interval reads, nothing else."""
    rows = [
        BatchResult(
            batch_size=batch,
            scenario=scenario,
            latency_ms=LatencySummary(p50=p50, p99=10 * p50),
            throughput=1000 * batch / p50,
        )
        for batch in batches
    ]
    only_rows: dict[str, Any] = {"results": rows}  # unvalidated: the part the interval reads
    return ResultDocument.model_construct(**only_rows)


def judged(candidate: float, baselines: tuple[float, ...] = BASELINE_P50) -> list[MetricVerdict]:
    return run_verdicts("cand", [headlines(p) for p in baselines], headlines(candidate))


def by_name(found: list[MetricVerdict]) -> dict[tuple[Metric, int | None], MetricVerdict]:
    return {(v.metric, v.batch_size): v for v in found}


def test_the_bound_is_the_t_prediction_bound_of_the_logs() -> None:
    values = [0.9, 1.0, 1.3, 1.15, 2.0]
    alpha = 0.05 / 6
    logs = np.log(values)
    margin = (
        stats.t.ppf(1 - alpha, len(values) - 1)
        * np.std(logs, ddof=1)
        * math.sqrt(1 + 1 / len(values))
    )
    found = spread(values)
    assert found.k == 5
    assert found.mean == pytest.approx(np.mean(logs))
    assert found.sd == pytest.approx(np.std(logs, ddof=1))
    assert found.geometric_mean == pytest.approx(stats.gmean(values))
    assert found.margin(alpha) == pytest.approx(margin)
    latency = Judged(Metric.P50, found, 1.0, alpha)
    assert found.geometric_mean * latency.bound == pytest.approx(math.exp(np.mean(logs) + margin))
    throughput = Judged(Metric.THROUGHPUT, found, 1.0, alpha)
    assert found.geometric_mean * throughput.bound == pytest.approx(
        math.exp(np.mean(logs) - margin)
    )
    with pytest.raises(ValueError, match="at least 2"):
        spread([1.0])
    with pytest.raises(ValueError, match="positive"):
        spread([1.0, 0.0, 2.0])


def test_inside_the_spread_passes_though_30_percent_slower_than_one_baseline() -> None:
    found = by_name(judged(1.3))
    p50 = found[Metric.P50, 1]
    assert p50.outcome is Outcome.SAME
    assert p50.ratio == pytest.approx(1.3 / stats.gmean(BASELINE_P50))
    assert p50.baseline == pytest.approx(stats.gmean(BASELINE_P50))
    assert 1.3 / BASELINE_P50[0] == pytest.approx(1.3)  # 30 % slower than the first baseline
    result = check(p50, Thresholds())
    assert result.exceeded and result.status is CheckStatus.PASS, result.reason
    assert result.change == pytest.approx(100 * (1.3 / stats.gmean(BASELINE_P50) - 1))
    assert all(check(v, Thresholds()).status is CheckStatus.PASS for v in found.values())
    assert METHOD in p50.method and "k = 3" in p50.method
    assert "bound" in p50.evidence and "3 runs" in p50.evidence and "99.17%" in p50.evidence


def test_well_outside_the_spread_fails_and_well_below_is_faster() -> None:
    slow = by_name(judged(5.0))
    for batch in (1, 8):
        for metric in (Metric.P50, Metric.P99, Metric.THROUGHPUT):
            verdict = slow[metric, batch]
            assert verdict.outcome is Outcome.SLOWER, verdict
            assert check(verdict, Thresholds()).status is CheckStatus.REGRESSION
    assert (slow[Metric.P50, 1].bound or 0) > 1  # latency: the upper bound
    assert 0 < (slow[Metric.THROUGHPUT, 1].bound or 0) < 1  # throughput: the lower
    fast = by_name(judged(0.2))
    assert fast[Metric.P50, 1].outcome is Outcome.FASTER
    assert fast[Metric.THROUGHPUT, 1].outcome is Outcome.FASTER
    assert check(fast[Metric.THROUGHPUT, 1], Thresholds()).status is CheckStatus.PASS


def test_a_slow_candidate_inside_a_wider_spread_passes() -> None:
    """What the bound costs: the same 5x slowdown passes against runs that varied 3x."""
    found = by_name(judged(5.0, (1.0, 3.0, 1.5)))
    assert found[Metric.P50, 1].outcome is Outcome.SAME


def test_the_level_is_split_over_the_checks_judged() -> None:
    six = by_name(judged(1.0))
    assert [v.level for v in six.values()] == pytest.approx([1 - FAMILY_ALPHA / 6] * 6)
    assert {v.baseline_runs for v in six.values()} == {3}
    server = run_verdicts(
        "cand",
        [headlines(p, scenario="Server", batches=(1,)) for p in BASELINE_P50],
        headlines(1.0, scenario="Server", batches=(1,)),
    )
    throughput = by_name(server)[Metric.THROUGHPUT, 1]
    assert throughput.outcome is Outcome.NOT_TESTABLE and "arrival rate" in (throughput.why or "")
    assert by_name(server)[Metric.P50, 1].level == pytest.approx(1 - FAMILY_ALPHA / 2)


def test_a_missing_figure_is_not_testable_and_too_few_runs_are_refused() -> None:
    bare = headlines(1.0)
    assert bare.results is not None
    bare.results[0].latency_ms.p99 = None
    found = by_name(run_verdicts("cand", [headlines(p) for p in BASELINE_P50], bare))
    assert found[Metric.P99, 1].outcome is Outcome.NOT_TESTABLE
    assert found[Metric.P99, 1].why == "candidate: no positive latency p99"
    assert found[Metric.P50, 1].level == pytest.approx(1 - FAMILY_ALPHA / 5)
    with pytest.raises(ValueError, match="at least 3 baseline runs"):
        run_verdicts("cand", [headlines(1.0)] * 2, headlines(1.0))
