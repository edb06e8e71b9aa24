"""benchmarks/gate_rates.py's pure parts: a rate and its Clopper-Pearson interval from exit
statuses, the gate's answer re-checked at other thresholds, the run order, the pairing and
the pooled groups; and the pooled trials gated on fixed documents made from one real run (the
``results`` fixture), which must be the library's verdicts. No measurement: the measured rates
are in docs/benchmarks.md, never in a test."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from scipy.stats import binomtest

from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.report.gate import GateStatus, Thresholds, gate_pooled
from mlmodelscope.report.pooled import pooled_verdicts
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


def test_pooled_groups_do_not_overlap_and_meet_the_same_spec_runs_before_them(
    gate_rates: ModuleType,
) -> None:
    s, g, u = gate_rates.SAME, "graph-off", "unscaled"
    kinds = [s, s, s, g, g, g, s, s, s, u, u, u, s, s]
    assert gate_rates.pooled_groupings(kinds, 3) == [
        (g, (0, 1, 2), (3, 4, 5)),
        (s, (0, 1, 2), (6, 7, 8)),  # the last two same-spec runs make no group of 3
        (u, (6, 7, 8), (9, 10, 11)),
    ]
    assert gate_rates.pooled_groupings(kinds, 2) == [
        (s, (0, 1), (2, 6)),  # same-spec groups: consecutive among the same-spec runs
        (g, (1, 2), (3, 4)),  # the third graph-off run makes no group of 2
        (s, (2, 6), (7, 8)),
        (u, (7, 8), (9, 10)),
        (s, (7, 8), (12, 13)),
    ]
    assert gate_rates.pooled_groupings(kinds, 5) == []  # one group of 5, too few before g
    with pytest.raises(ValueError, match="at least 2 runs"):
        gate_rates.pooled_groupings(kinds, 1)


def test_with_repeats_each_variant_runs_r_times_in_a_row_for_the_pooled_trials(
    gate_rates: ModuleType,
) -> None:
    same = gate_rates.SAME
    variants = gate_rates.candidates(5, 3)
    assert gate_rates.schedule(20, variants, 1) == gate_rates.schedule(20, variants)
    order = gate_rates.schedule(62, variants, 5)
    assert order.count(same) == 63 and len(order) == 63 + 5 * len(variants)
    stretches = [(order[i], i) for i in range(len(order)) if i == 0 or order[i] != order[i - 1]]
    assert [kind for kind, _ in stretches if kind != same] == variants  # the order kept
    for kind, first in stretches:
        if kind != same:
            assert order[first : first + 5] == [kind] * 5 and order[first + 5] == same
    for r, expected in ((3, 20), (5, 11)):  # 63 same-spec runs: 21 groups of 3, 12 of 5
        trials = gate_rates.pooled_groupings(order, r)
        assert sum(kind == same for kind, _, _ in trials) == expected
        for kind, bases, cands in trials:
            assert len(bases) == len(cands) == r
            assert all(order[b] == same for b in bases) and max(bases) < min(cands)
            assert {order[c] for c in cands} == {kind}
            if kind != same:  # the r same-spec runs just before the group
                assert list(bases) == [i for i in range(cands[0]) if order[i] == same][-r:]
        # the first variant follows two same-spec runs only: left out at r = 3 and 5
        assert sum(kind != same for kind, _, _ in trials) == len(variants) - 1


def test_pooling_needs_groups_of_two(gate_rates: ModuleType) -> None:
    assert gate_rates.parse_args([]).pool == [3, 5]
    assert gate_rates.parse_args(["--pool", "4", "--repeats", "4"]).pool == [4]
    for bad in (["--pool", "1"], ["--repeats", "0"]):
        with pytest.raises(SystemExit):
            gate_rates.parse_args(bad)


def kept_runs(
    gate_rates: ModuleType, template: Path, folder: Path, kinds: list[str], slow: str
) -> list[Any]:
    """Kept documents named as the script keeps them (``NNN-KIND.json``): copies of a real run
    with fixed headline latencies and throughput, within 2 % of each other, ``slow`` runs 2x
    slower."""
    data = json.loads(template.read_text())
    for index, kind in enumerate(kinds):
        factor = (2.0 if kind == slow else 1.0) * (1 + 0.01 * (index % 5 - 2))
        rows = []
        for row in data["results"]:
            latency = row["latency_ms"]
            latency = latency | {"p50": latency["p50"] * factor, "p99": latency["p99"] * factor}
            rows.append(row | {"latency_ms": latency, "throughput": row["throughput"] / factor})
        (folder / f"{index:03d}-{kind}.json").write_text(json.dumps(data | {"results": rows}))
    return [gate_rates.Run.read(p) for p in sorted(folder.glob("*.json"))]


def document(run: Any) -> ResultDocument:
    return ResultDocument.model_validate_json(run.document.read_text())


def test_pooled_verdicts_are_the_librarys_and_are_counted_per_group(
    gate_rates: ModuleType, results: Path, tmp_path: Path
) -> None:
    s, g, u = gate_rates.SAME, "graph-off", "unscaled"
    kinds = [s, s, s, g, g, g, s, s, s, u, u, u, s, s]
    runs = kept_runs(gate_rates, results / "ort.json", tmp_path, kinds, slow=g)
    trials = gate_rates.gate_r(runs, 3)
    assert [(p.kind, p.candidate.index) for p in trials] == [(g, 3), (s, 6), (u, 9)]
    for pair in trials:
        bases = [document(b) for b in pair.baselines]
        cands = [document(c) for c in pair.candidates]
        labels = [c.document.stem for c in pair.candidates]
        direct = gate_pooled(
            cands,
            bases,
            Thresholds(),
            candidate_labels=labels,
            baseline_labels=[b.document.stem for b in pair.baselines],
        )
        assert direct.pooled and len(pair.candidates) == 3
        assert pair.verdicts == pooled_verdicts(labels[0], cands, bases)
        assert gate_rates.status_at(pair.verdicts, Thresholds()) is direct.status
    slow = trials[0]
    assert gate_rates.detects(slow.verdicts, Thresholds(), gate_rates.LATENCY_METRICS)
    at = gate_rates.figures(trials, Thresholds())
    assert (at["false_alarms"]["events"], at["false_alarms"]["trials"]) == (0, 1)
    assert (at["variants"][g]["detected"]["events"], at["variants"][g]["detected"]["trials"]) == (
        1,
        1,
    )
    assert at["variants"][u]["exit_1"]["events"] == 0
    table = gate_rates.pooled_table({3: trials, 5: gate_rates.gate_r(runs, 5)})
    assert "each group of r pooled against the r same-spec runs of the group before it" in table
    assert "| 3 | 0/1 = 0% [0%, 98%] | 1/1 = 100% [3%, 100%] | 0/1 = 0% [0%, 98%] |" in table
    assert "| 5 | no pairs | - | - | none |" in table
    alone = gate_rates.pooled_table({3: [p for p in trials if p.kind == s]})
    assert "No variant ran r times in a row (`--repeats`), so there is no detection trial." in alone
    row = gate_rates.pair_json(slow, Thresholds())
    assert (row["baseline_runs"], row["candidate_runs"]) == ([0, 1, 2], [3, 4, 5])
