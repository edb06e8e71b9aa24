"""benchmarks/gate_rates.py's pure parts: a rate and its Clopper-Pearson interval from exit
statuses, the gate's answer re-checked at other thresholds, and the run order and pairing.
No measurement: the measured rates are in docs/benchmarks.md, never in a test."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from scipy.stats import binomtest

from mlmodelscope.report.gate import GateStatus, Thresholds
from mlmodelscope.report.verdicts import Metric, MetricVerdict, Outcome

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def gate_rates() -> ModuleType:
    """The script, imported by path; its folder on sys.path for its ``machine_info``."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location("gate_rates", BENCHMARKS / "gate_rates.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["gate_rates"] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def latency(metric: Metric, ratio: float, outcome: Outcome, batch: int = 1) -> MetricVerdict:
    """A verdict whose headline change is ``ratio`` (candidate over baseline)."""
    base = 100.0 if metric is Metric.THROUGHPUT else 1.0
    return MetricVerdict(
        "cand",
        metric,
        "SingleStream",
        batch,
        base,
        base * ratio,
        outcome,
        "bootstrap",
        ratio=ratio,
        low=ratio * 0.98,
        high=ratio * 1.02,
        level=0.95,
    )


def top1(baseline: float, candidate: float, outcome: Outcome) -> MetricVerdict:
    return MetricVerdict(
        "cand", Metric.TOP1, None, None, baseline, candidate, outcome, "McNemar", p_value=0.01
    )


def test_the_false_alarm_rate_and_its_interval_are_scipys_clopper_pearson(
    gate_rates: ModuleType,
) -> None:
    statuses = [0, 1, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]
    found = gate_rates.exit_rate(statuses)
    expected = binomtest(3, 20).proportion_ci(confidence_level=0.95, method="exact")
    assert (found.events, found.trials) == (3, 20)  # exit 2 is a trial, not a false alarm
    assert found.fraction == pytest.approx(0.15)
    assert found.low == pytest.approx(expected.low)
    assert found.high == pytest.approx(expected.high)
    assert str(found) == f"3/20 = 15% [{expected.low:.0%}, {expected.high:.0%}]"


def test_no_event_in_n_trials_has_the_closed_form_upper_bound(gate_rates: ModuleType) -> None:
    for n in (1, 5, 20, 100):
        found = gate_rates.exit_rate([0] * n)
        assert found.low == 0.0
        assert found.high == pytest.approx(1 - 0.025 ** (1 / n))  # (alpha/2)^(1/n)
    every = gate_rates.rate([True] * 20, level=0.9)
    assert every.high == 1.0
    assert every.low == pytest.approx(0.05 ** (1 / 20))


def test_no_trials_give_the_whole_range(gate_rates: ModuleType) -> None:
    found = gate_rates.rate([])
    assert (found.events, found.trials, found.low, found.high) == (0, 0, 0.0, 1.0)
    assert found.fraction is None
    assert str(found) == "no pairs"


def test_verdicts_re_checked_at_other_thresholds_give_the_gates_answer(
    gate_rates: ModuleType,
) -> None:
    verdicts = [
        latency(Metric.P50, 1.25, Outcome.SLOWER),
        latency(Metric.P99, 3.0, Outcome.SAME),  # large but not significant: never a regression
        latency(Metric.THROUGHPUT, 0.75, Outcome.SLOWER),
        top1(0.98, 0.97, Outcome.SAME),
    ]
    at = gate_rates.status_at
    assert at(verdicts, Thresholds()) is GateStatus.REGRESSION
    assert at(verdicts, gate_rates.thresholds_at(20)) is GateStatus.REGRESSION  # 25 % worse
    assert at(verdicts, gate_rates.thresholds_at(25)) is GateStatus.PASS  # 25 % is allowed
    assert at(None, Thresholds()) is GateStatus.NOT_COMPARABLE
    assert gate_rates.thresholds_at(25).max_accuracy_drop == Thresholds().max_accuracy_drop
    assert [gate_rates.short_name(v) for v in verdicts] == [
        "p50 b1",
        "p99 b1",
        "throughput b1",
        "top-1",
    ]
    assert [gate_rates.worse_by(v) for v in verdicts] == pytest.approx([25.0, None, 25.0, None])
    latency_metrics = gate_rates.LATENCY_METRICS
    assert gate_rates.detects(verdicts, gate_rates.thresholds_at(20), latency_metrics)
    assert not gate_rates.detects(verdicts, gate_rates.thresholds_at(25), latency_metrics)
    assert not gate_rates.detects(verdicts, Thresholds(), gate_rates.ACCURACY_METRICS)
    worse = [top1(0.98, 0.90, Outcome.WORSE)]
    assert gate_rates.detects(worse, Thresholds(), gate_rates.ACCURACY_METRICS)
    assert gate_rates.worse_by(worse[0]) == pytest.approx(8.0)


def test_every_variant_follows_a_same_spec_run_and_is_gated_against_it(
    gate_rates: ModuleType,
) -> None:
    variants = gate_rates.candidates(5, 3)
    assert sorted(variants) == sorted(
        ["threads-1"] * 5 + ["graph-off"] * 5 + ["imagenet-normalized"] * 3 + ["unscaled"] * 2
    )
    order = gate_rates.schedule(20, variants)
    assert order[0] == gate_rates.SAME
    assert order.count(gate_rates.SAME) == 21
    pairs = gate_rates.pairings(order)
    same = [(b, c) for kind, b, c in pairs if kind == gate_rates.SAME]
    assert len(same) == 20
    assert all(order[b] == gate_rates.SAME and b < c for _, b, c in pairs)
    for kind, b, c in pairs:  # the baseline is the last same-spec run before the candidate
        assert gate_rates.SAME not in order[b + 1 : c], (kind, b, c)
    assert sorted(order[c] for kind, _, c in pairs if kind != gate_rates.SAME) == sorted(variants)
    assert gate_rates.pairings([gate_rates.SAME]) == []


def test_against_k_baselines_each_run_meets_the_k_same_spec_runs_before_it(
    gate_rates: ModuleType,
) -> None:
    same = gate_rates.SAME
    order = gate_rates.schedule(20, gate_rates.candidates(5, 3))
    for k in (3, 5):
        trials = gate_rates.groupings(order, k)
        same_trials = [(b, c) for kind, b, c in trials if kind == same]
        assert len(same_trials) == 21 - k  # every same-spec run from the (k + 1)th on
        for kind, bases, c in trials:
            assert len(bases) == k and all(order[b] == same for b in bases), (kind, bases)
            assert list(bases) == [i for i in range(c) if order[i] == same][-k:]
            assert order[c] == kind
    # a variant with fewer than k same-spec runs before it is left out
    kinds = [same, "graph-off", same, same, same, "graph-off"]
    assert gate_rates.groupings(kinds, 3) == [(same, (0, 2, 3), 4), ("graph-off", (2, 3, 4), 5)]
    assert gate_rates.groupings([same, same], 3) == []
