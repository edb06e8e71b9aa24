"""How often does `mlms gate` fail a pipeline when nothing changed, and does it catch a real
regression? Measured with fresh `mlms run` processes of the digits CNN.

The baseline spec: the digits CNN in ONNX Runtime (``mlmodelscope.agent.digits``), intra-op
threads 2 (``--threads``), SingleStream at batch sizes 1 and 128, 1 s windows, no tracing, raw
latencies kept. It runs ``--same + 1`` times, each ``python -m mlmodelscope run --raw`` in a
fresh process, one after the other; every consecutive pair (run i + 1 as the candidate, run i
as the baseline) is gated at the default thresholds. The false-alarm rate is the fraction of
those same-spec pairs whose exit status is 1 (regression), with its Clopper-Pearson 95 %
interval. Consecutive pairs share a run, so they are not quite independent trials: one odd run
can fail two pairs.

Between the baseline runs, candidates that really differ, each gated against the baseline run
just before it (so slow drift of a shared machine hits both alike):

* ``threads-1``: intra-op threads 1 instead of 2 (a bare session: slower at batch 128 on idle
  cores; on busy ones the second thread may help little or hurt);
* ``graph-off``: ONNX Runtime's graph optimizations disabled, the same model bytes run unfused;
* ``imagenet-normalized``: a preprocessing pitfall of examples/sweeps/digits-pitfalls.yaml
  (ImageNet's mean and std on top of the scaling) that costs several points of top-1;
* ``unscaled``: the pitfall that costs top-1 less than the default 1 point, so a pass of the
  top-1 check is the right answer.

Preprocessing is outside the timed queries and the gate does not compare it, so the pitfalls
are comparable runs with the same latencies. A slow variant counts as detected when one of its
latency or throughput checks is a regression, an accuracy variant when its top-1 check is; any
other exit 1 is a false alarm riding along and is reported as such. The verdicts (the bootstrap
intervals) are computed once per pair through the gate's own functions (``report.gate``: the
CLI's exit status is ``GateResult.status``); re-checking them at other thresholds is cheap and
exact, so the script also tabulates false alarms and detection at a range of latency and
throughput thresholds, the table to choose thresholds from.

The same runs are then gated against several baseline runs (``mlms gate CANDIDATE BASELINE
BASELINE ...``: latency and throughput judged by a prediction interval over the baselines'
run-to-run spread, :mod:`mlmodelscope.report.noise`), for k = 3 and 5: each same-spec run from
the (k + 1)th on against the k same-spec runs before it (false alarms), each variant against
the k same-spec runs before it (detection; variants with fewer before them are left out).
Trials overlap in their baselines, so they are less independent still than the pairs.

Last, the runs are gated pooled, as ``mlms gate --sweep`` gates a cell's repeats
(:func:`mlmodelscope.report.gate.gate_pooled`), for r = 3 and 5 (``--pool``): the same-spec
runs, in order, split into non-overlapping groups of r (a last, shorter group left out), each
group pooled against the group before it (false alarms); each r consecutive runs of a variant
pooled against the r same-spec runs before them (detection). ``--repeats R`` makes the run plan
run each variant R times in a row, so that variant groups exist; with the default 1 only the
same-spec groups are gated. A variant's repeats share their baseline runs in every mode.

    .venv/bin/python benchmarks/gate_rates.py --out gate-rates.json --markdown gate-rates.md
    .venv/bin/python benchmarks/gate_rates.py --quick      # 5 same-spec pairs, 4 variants
    .venv/bin/python benchmarks/gate_rates.py --same 62 --repeats 5  # 20 pooled trials at r = 3
    .venv/bin/python benchmarks/gate_rates.py --same 104 --repeats 5  # 20 at r = 5: run_all --full
    .venv/bin/python benchmarks/gate_rates.py --keep DIR   # then --from DIR: re-gate, no runs
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from machine_info import cpu_model, versions

from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.report.gate import (
    CheckStatus,
    GateStatus,
    Thresholds,
    check,
    gate_pooled,
    mismatches,
)
from mlmodelscope.report.noise import MIN_RUNS, run_verdicts
from mlmodelscope.report.verdicts import Metric, MetricVerdict, verdicts

SCENARIO: dict[str, Any] = {
    "type": "SingleStream",
    "batchSizes": [1, 128],
    "warmup": 20,
    "minQueryCount": 200,
    "minDuration": "1s",
}
THREADS = 2
"""The baseline's intra-op threads (``--threads``); inter-op threads are 1."""
SAME = "same"
LATENCY_METRICS = frozenset({Metric.P50, Metric.P99, Metric.THROUGHPUT})
ACCURACY_METRICS = frozenset({Metric.TOP1})
SWEEP = (10.0, 15.0, 20.0, 25.0, 30.0, 50.0, 100.0, 200.0, 400.0, 1000.0, 2000.0)
"""Latency-increase and throughput-decrease thresholds (percent, both alike) re-checked."""
KS = (3, 5)
"""Baseline runs per trial in the evaluation against several baseline runs."""
POOLS = (3, 5)
"""Runs per group in the pooled evaluation (``--pool``), candidate and baseline alike."""
GOAL = 0.05
"""The issue's goal for the false-alarm rate."""
RUN_TIMEOUT_S = 300


@dataclass(frozen=True)
class Variant:
    """A candidate spec: what changes from the baseline, and which metrics it should worsen."""

    name: str
    what: str
    framework: dict[str, Any] = field(default_factory=dict)
    preprocessing: list[dict[str, Any]] | None = None
    worsens: frozenset[Metric] = frozenset()
    """Empty: a regression is not expected (the ``unscaled`` control)."""


VARIANTS = (
    Variant(
        "threads-1",
        "intra-op threads 1 instead of 2",
        framework={"intraOpThreads": 1},
        worsens=LATENCY_METRICS,
    ),
    Variant(
        "graph-off",
        "graph optimizations off (the same bytes, unfused)",
        framework={"graphOptimizationLevel": "disable"},
        worsens=LATENCY_METRICS,
    ),
    Variant(
        "imagenet-normalized",
        "pitfall: ImageNet mean/std after the scaling",
        preprocessing=[
            {"scale": {"factor": 0.0625}},
            {"normalize": {"mean": [0.485], "std": [0.229]}},
            {"layout": {"from": "HWC", "to": "CHW"}},
        ],
        worsens=ACCURACY_METRICS,
    ),
    Variant(
        "unscaled",
        "pitfall: no scaling (top-1 under a point lower)",
        preprocessing=[{"layout": {"from": "HWC", "to": "CHW"}}],
    ),
)


# ------------------------------------------------------------------------------ the figures


@dataclass(frozen=True)
class Rate:
    """``events`` of ``trials``, and the Clopper-Pearson interval of the proportion."""

    events: int
    trials: int
    low: float
    high: float
    level: float

    @property
    def fraction(self) -> float | None:
        return self.events / self.trials if self.trials else None

    def __str__(self) -> str:
        if not self.trials:
            return "no pairs"
        return (
            f"{self.events}/{self.trials} = {self.events / self.trials:.0%} "
            f"[{self.low:.0%}, {self.high:.0%}]"
        )


def rate(outcomes: Iterable[bool], *, level: float = 0.95) -> Rate:
    """The proportion of true ``outcomes`` with its exact (Clopper-Pearson) interval at
    ``level``; no trials give the whole range [0, 1]."""
    from scipy.stats import binomtest

    found = list(outcomes)
    events, trials = sum(found), len(found)
    if not trials:
        return Rate(0, 0, 0.0, 1.0, level)
    interval = binomtest(events, trials).proportion_ci(confidence_level=level, method="exact")
    return Rate(events, trials, float(interval.low), float(interval.high), level)


def exit_rate(statuses: Iterable[int], *, level: float = 0.95) -> Rate:
    """How often the gate said "regression" (exit 1) among ``statuses`` (exit statuses)."""
    return rate((s == GateStatus.REGRESSION for s in statuses), level=level)


def regressions(found: Sequence[MetricVerdict], thresholds: Thresholds) -> list[MetricVerdict]:
    """The verdicts that the gate, at ``thresholds``, calls regressions."""
    return [v for v in found if check(v, thresholds).status is CheckStatus.REGRESSION]


def status_at(found: Sequence[MetricVerdict] | None, thresholds: Thresholds) -> GateStatus:
    """The gate's exit status for a pair's verdicts (``None``: not comparable)."""
    if found is None:
        return GateStatus.NOT_COMPARABLE
    return GateStatus.REGRESSION if regressions(found, thresholds) else GateStatus.PASS


def detects(
    found: Sequence[MetricVerdict] | None, thresholds: Thresholds, metrics: frozenset[Metric]
) -> bool:
    """Whether one of ``metrics`` is a regression at ``thresholds``."""
    return found is not None and any(v.metric in metrics for v in regressions(found, thresholds))


def thresholds_at(percent: float, base: Thresholds | None = None) -> Thresholds:
    """``base`` (the defaults) with latency increase and throughput decrease at ``percent``."""
    base = base or Thresholds()
    return Thresholds(percent, percent, base.max_accuracy_drop)


# ------------------------------------------------------------------------------ running


def child_env() -> dict[str, str]:
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}


def spec_document(models: Path, variant: Variant | None, threads: int) -> dict[str, Any]:
    from mlmodelscope.agent.digits import digits_evaluation

    name = f"gate-{variant.name if variant else SAME}"
    sections: dict[str, Any] = {
        "framework": {
            "intraOpThreads": threads,
            "interOpThreads": 1,
            **(variant.framework if variant else {}),
        },
        "scenario": SCENARIO,
        "tracing": {"level": "none"},
    }
    if variant is not None and variant.preprocessing is not None:
        sections["preprocessing"] = variant.preprocessing
    return digits_evaluation(models, "onnxruntime", name, **sections)


def write_specs(folder: Path, threads: int) -> dict[str, Path]:
    """One spec file per variant and the baseline's, the models built and the split cached."""
    import yaml

    from mlmodelscope.agent.digits import digits_split, ensure_digits_models

    models = ensure_digits_models()
    digits_split("test")
    specs = {}
    for variant in (None, *VARIANTS):
        document = spec_document(models, variant, threads)
        path = folder / f"{document['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(document))
        specs[variant.name if variant else SAME] = path
    return specs


@dataclass(frozen=True)
class Run:
    index: int
    variant: str
    document: Path
    wall_s: float | None
    """The whole process, spawn to exit (``None``: read back with ``--from``)."""
    p50_ms: dict[int, float]
    top1: float | None

    @classmethod
    def read(cls, path: Path, wall_s: float | None = None) -> Run:
        """A kept document, named ``NNN-VARIANT.json`` (its place in the run order)."""
        index, variant = path.stem.split("-", 1)
        data = json.loads(path.read_text())
        return cls(
            int(index),
            variant,
            path,
            wall_s,
            {row["batch_size"]: row["latency_ms"]["p50"] for row in data["results"]},
            (data.get("accuracy") or {}).get("top1"),
        )


def run_once(index: int, variant: str, spec: Path, folder: Path) -> Run:
    """One ``mlms run --raw`` in a fresh process; its document moved to ``folder``."""
    out = folder / "out"
    command = [sys.executable, "-m", "mlmodelscope", "run", str(spec), "-o", str(out)]
    started = time.monotonic()
    proc = subprocess.run(
        [*command, "--raw", "--no-store"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    kept = folder / f"{index:03d}-{variant}.json"
    (out / f"{spec.stem}.json").replace(kept)
    shutil.rmtree(out)
    return Run.read(kept, wall)


def pairings(kinds: Sequence[str]) -> list[tuple[str, int, int]]:
    """Which runs to gate, from the run order's kinds: each same-spec run against the same-spec
    run before it, each variant against the last same-spec run before it. Items: (kind,
    baseline position, candidate position)."""
    found: list[tuple[str, int, int]] = []
    last: int | None = None
    for position, kind in enumerate(kinds):
        if last is not None:
            found.append((kind, last, position))
        if kind == SAME:
            last = position
    return found


def groupings(kinds: Sequence[str], k: int) -> list[tuple[str, tuple[int, ...], int]]:
    """Which runs to gate against ``k`` baseline runs: every run that has ``k`` same-spec runs
    before it, against those ``k`` (the latest). Items: (kind, baseline positions, candidate
    position)."""
    found: list[tuple[str, tuple[int, ...], int]] = []
    same: list[int] = []
    for position, kind in enumerate(kinds):
        if len(same) >= k:
            found.append((kind, tuple(same[-k:]), position))
        if kind == SAME:
            same.append(position)
    return found


def pooled_groupings(
    kinds: Sequence[str], r: int
) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    """Which runs to gate pooled, ``r`` against ``r``: the same-spec runs split in order into
    non-overlapping groups of ``r`` (a shorter last group left out), each against the group
    before it; every ``r`` consecutive runs of a variant (non-overlapping, within a stretch of
    that variant alone) against the ``r`` same-spec runs before them, when there are ``r``.
    Items, by their first candidate: (kind, baseline positions, candidate positions)."""
    if r < 2:
        raise ValueError(f"a pooled group needs at least 2 runs, not {r}")
    same = [position for position, kind in enumerate(kinds) if kind == SAME]
    blocks = [tuple(same[i : i + r]) for i in range(0, len(same) - r + 1, r)]
    found = [(SAME, before, block) for before, block in itertools.pairwise(blocks)]
    start = 0
    for end in range(1, len(kinds) + 1):
        if end < len(kinds) and kinds[end] == kinds[start]:
            continue
        if kinds[start] != SAME:
            before = [p for p in same if p < start][-r:]
            for first in range(start, end - r + 1, r):
                if len(before) == r:
                    found.append((kinds[start], tuple(before), tuple(range(first, first + r))))
        start = end
    return sorted(found, key=lambda item: item[2][0])


def schedule(same: int, variants: Sequence[str], repeats: int = 1) -> list[str]:
    """The run order: ``same + 1`` same-spec runs with the variants spread evenly among them,
    each right after a same-spec run (never before the first) and run ``repeats`` times in a
    row."""
    after: dict[int, list[str]] = {}
    for k, name in enumerate(variants):
        after.setdefault(1 + (k * same) // max(len(variants), 1), []).extend([name] * repeats)
    order: list[str] = []
    for i in range(same + 1):
        order += [SAME, *after.get(i, [])]
    return order


@dataclass
class Pair:
    """A candidate gated against one baseline run, or against several; or several candidate
    runs pooled."""

    kind: str
    """SAME, or the candidate's variant name."""
    baselines: tuple[Run, ...]
    candidate: Run
    """The candidate run; when several are pooled, the first."""
    verdicts: list[MetricVerdict] | None
    """``None``: not comparable."""
    why_not: list[str] = field(default_factory=list)
    candidates: tuple[Run, ...] = ()
    """Every candidate run when several are pooled; empty for one."""

    @property
    def baseline(self) -> Run:
        """The baseline run just before the candidate."""
        return self.baselines[-1]


@functools.cache
def _document(path: Path) -> ResultDocument:
    return ResultDocument.model_validate_json(path.read_text())


def gate_pair(kind: str, baseline: Run, candidate: Run) -> Pair:
    base, cand = _document(baseline.document), _document(candidate.document)
    found = mismatches(base, cand)
    if found:
        return Pair(kind, (baseline,), candidate, None, [str(m) for m in found])
    return Pair(kind, (baseline,), candidate, verdicts(kind, base, cand))


def gate_against(kind: str, baselines: Sequence[Run], candidate: Run) -> Pair:
    """``candidate`` against several baseline runs, as ``mlms gate CANDIDATE BASELINE...``
    judges it (at least :data:`~mlmodelscope.report.noise.MIN_RUNS`)."""
    if len(baselines) < MIN_RUNS:
        raise ValueError(f"{len(baselines)} baseline runs; the prediction needs {MIN_RUNS}")
    bases = [_document(b.document) for b in baselines]
    cand = _document(candidate.document)
    found = [str(m) for base in bases for m in mismatches(base, cand)]
    if found:
        return Pair(kind, tuple(baselines), candidate, None, found)
    return Pair(kind, tuple(baselines), candidate, run_verdicts(kind, bases, cand))


def gate_k(runs: Sequence[Run], k: int) -> list[Pair]:
    """Every trial of :func:`groupings` at ``k``, gated."""
    return [
        gate_against(kind, [runs[b] for b in bases], runs[c])
        for kind, bases, c in groupings(_kinds(runs), k)
    ]


def _label(run: Run) -> str:
    return run.document.stem


def gate_pooled_group(kind: str, baselines: Sequence[Run], candidates: Sequence[Run]) -> Pair:
    """``candidates`` pooled against ``baselines``, as ``mlms gate --sweep`` gates a cell's
    repeats (:func:`~mlmodelscope.report.gate.gate_pooled` at the default thresholds); the
    verdicts are kept for re-checking at others."""
    result = gate_pooled(
        [_document(c.document) for c in candidates],
        [_document(b.document) for b in baselines],
        Thresholds(),
        candidate_labels=[_label(c) for c in candidates],
        baseline_labels=[_label(b) for b in baselines],
    )
    found = None if result.mismatches else [c.verdict for c in result.checks]
    why_not = [str(m) for m in result.mismatches]
    return Pair(kind, tuple(baselines), candidates[0], found, why_not, tuple(candidates))


def gate_r(runs: Sequence[Run], r: int) -> list[Pair]:
    """Every trial of :func:`pooled_groupings` at ``r``, gated."""
    return [
        gate_pooled_group(kind, [runs[b] for b in bases], [runs[c] for c in cands])
        for kind, bases, cands in pooled_groupings(_kinds(runs), r)
    ]


# ------------------------------------------------------------------------------ reporting


def _check_json(verdict: MetricVerdict, thresholds: Thresholds) -> dict[str, Any]:
    found = check(verdict, thresholds)
    return {
        "check": found.name,
        "change": found.change,
        "ratio": verdict.ratio,
        "low": verdict.low,
        "high": verdict.high,
        "bound": verdict.bound,
        "p_value": verdict.p_value,
        "outcome": str(verdict.outcome),
        "status": str(found.status),
    }


def pair_json(pair: Pair, thresholds: Thresholds) -> dict[str, Any]:
    return {
        "kind": pair.kind,
        "baseline_run": pair.baseline.index,
        "baseline_runs": [b.index for b in pair.baselines],
        "candidate_run": pair.candidate.index,
        "candidate_runs": [c.index for c in pair.candidates or (pair.candidate,)],
        "status": int(status_at(pair.verdicts, thresholds)),
        "not_comparable": pair.why_not,
        "checks": [_check_json(v, thresholds) for v in pair.verdicts or []],
    }


SHORT = {Metric.P50: "p50", Metric.P99: "p99", Metric.THROUGHPUT: "throughput"}


def short_name(verdict: MetricVerdict) -> str:
    """``p50 b128``, ``throughput b1``, ``top-1``."""
    if verdict.metric is Metric.TOP1:
        return "top-1"
    return f"{SHORT[verdict.metric]} b{verdict.batch_size}"


def worse_by(verdict: MetricVerdict) -> float | None:
    """How much worse the candidate is (percent, or percentage points for top-1) when the
    gate's verdict is significantly worse; ``None`` when it is not. A threshold passes the
    check exactly when it is at least this."""
    found = check(verdict, Thresholds(0.0, 0.0, 0.0))
    if found.status is not CheckStatus.REGRESSION or found.change is None:
        return None
    return found.change if verdict.metric in (Metric.P50, Metric.P99) else -found.change


def triggers(pairs: Sequence[Pair], thresholds: Thresholds) -> dict[str, int]:
    """Per check (short name), in how many of ``pairs`` it was a regression."""
    counts: dict[str, int] = {}
    for pair in pairs:
        for v in regressions(pair.verdicts or [], thresholds):
            counts[short_name(v)] = counts.get(short_name(v), 0) + 1
    return counts


def variant_of(name: str) -> Variant:
    return next(v for v in VARIANTS if v.name == name)


def figures(pairs: Sequence[Pair], thresholds: Thresholds) -> dict[str, Any]:
    """False alarms, detection per variant and the checks that fired, at ``thresholds``."""
    same = [p for p in pairs if p.kind == SAME]
    result: dict[str, Any] = {
        "thresholds": thresholds.__dict__,
        "false_alarms": exit_rate(status_at(p.verdicts, thresholds) for p in same).__dict__,
        "not_comparable": sum(p.verdicts is None for p in pairs),
        "false_alarm_triggers": triggers(same, thresholds),
        "variants": {},
    }
    for variant in VARIANTS:
        mine = [p for p in pairs if p.kind == variant.name]
        if not mine:
            continue
        metrics = variant.worsens or ACCURACY_METRICS
        result["variants"][variant.name] = {
            "detected": rate(detects(p.verdicts, thresholds, metrics) for p in mine).__dict__,
            "exit_1": exit_rate(status_at(p.verdicts, thresholds) for p in mine).__dict__,
            "triggers": triggers(mine, thresholds),
        }
    return result


def per_check(pairs: Sequence[Pair]) -> dict[str, dict[str, Any]]:
    """Per check (short name) and kind of pair: the candidate/baseline ratios (top-1: the
    change in points) and the sizes of the significant worsenings (:func:`worse_by`)."""
    found: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        for v in pair.verdicts or []:
            mine = found.setdefault(short_name(v), {}).setdefault(
                pair.kind, {"ratios": [], "worse_by": []}
            )
            if v.metric is Metric.TOP1:
                if v.baseline is not None and v.candidate is not None:
                    mine["ratios"].append(100 * (v.candidate - v.baseline))
            elif v.ratio is not None:
                mine["ratios"].append(v.ratio)
            worse = worse_by(v)
            if worse is not None:
                mine["worse_by"].append(worse)
    return found


def _rate_cell(found: dict[str, Any]) -> str:
    return str(Rate(**found))


def _spread_cell(values: Sequence[float], digits: int = 2) -> str:
    import statistics

    if not values:
        return "-"
    return (
        f"{statistics.median(values):.{digits}f} "
        f"({min(values):.{digits}f}–{max(values):.{digits}f})"
    )


def _figure_cell(values: Sequence[float]) -> str:
    """Median (min–max) at 3 significant figures: bounds span 1 to 10⁸."""
    import statistics

    if not values:
        return "-"
    return f"{statistics.median(values):.3g} ({min(values):.3g}–{max(values):.3g})"


def _fired(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} ×{n}" for k, n in counts.items()) or "none"


def tables(pairs: Sequence[Pair]) -> str:
    """Markdown: the rates at the defaults, each check's ratios and significant worsenings,
    and the threshold sweep."""
    defaults = Thresholds()
    at = figures(pairs, defaults)
    lines = [
        f"At the defaults (latency +{defaults.max_latency_increase:g} %, throughput "
        f"-{defaults.max_throughput_decrease:g} %, top-1 -{defaults.max_accuracy_drop:g} pp); "
        "rates with their Clopper-Pearson 95 % interval:",
        "",
        "| pairs | candidate | gate exit 1 | detected (the metric it worsens) "
        "| checks that failed |",
        "|---|---|---|---|---|",
        f"| same spec, consecutive runs | the same spec | {_rate_cell(at['false_alarms'])} "
        f"(false alarms; goal ≤ {GOAL:.0%}) | – | {_fired(at['false_alarm_triggers'])} |",
    ]
    for name, found in at["variants"].items():
        variant = variant_of(name)
        detected = _rate_cell(found["detected"]) if variant.worsens else "– (a pass is right)"
        lines.append(
            f"| {name} against the run before | {variant.what} | {_rate_cell(found['exit_1'])} "
            f"| {detected} | {_fired(found['triggers'])} |"
        )
    kinds = [k for k in (SAME, *(v.name for v in VARIANTS)) if any(p.kind == k for p in pairs)]
    checks = per_check(pairs)
    lines += [
        "",
        "Per check: the candidate/baseline ratio, median (min–max) over the pairs (throughput: "
        "below 1 is slower; top-1: the change in points), and how many same-spec pairs were "
        "significantly worse by any amount, with the largest such worsening (%): the smallest "
        "threshold that passes every same-spec pair on that check.",
        "",
        "| check | "
        + " | ".join(f"{k} ({sum(p.kind == k for p in pairs)})" for k in kinds)
        + " | same spec: significantly worse | largest (%) |",
        "|---|" + "---|" * len(kinds) + "---|---:|",
    ]
    same_count = sum(p.kind == SAME for p in pairs)
    for name, by_kind in checks.items():
        cells = [_spread_cell(by_kind.get(k, {}).get("ratios", [])) for k in kinds]
        worse = by_kind.get(SAME, {}).get("worse_by", [])
        largest = f"{max(worse):.0f}" if worse else "-"
        lines.append(
            f"| {name} | " + " | ".join(cells) + f" | {len(worse)}/{same_count} | {largest} |"
        )
    slow = [v for v in VARIANTS if v.worsens == LATENCY_METRICS]
    lines += [
        "",
        "The same verdicts re-checked at other latency-increase and throughput-decrease "
        "thresholds (top-1 stays at the default):",
        "",
        "| threshold (%) | false alarms | "
        + " | ".join(f"{v.name} detected" for v in slow)
        + " | checks behind the false alarms |",
        "|---:|---|" + "---|" * len(slow) + "---|",
    ]
    for percent in SWEEP:
        found = figures(pairs, thresholds_at(percent))
        cells = [
            _rate_cell(found["variants"][v.name]["detected"])
            if v.name in found["variants"]
            else "-"
            for v in slow
        ]
        lines.append(
            f"| {percent:g} | {_rate_cell(found['false_alarms'])} | "
            + " | ".join(cells)
            + f" | {_fired(found['false_alarm_triggers'])} |"
        )
    return "\n".join(lines)


def _rates_rows(
    label: str, groups: dict[int, list[Pair]], shown: list[Variant], defaults: Thresholds
) -> list[str]:
    """Markdown header and rows: per group size (k baselines, r pooled runs), the false alarms
    and each shown variant's detection (or exit 1 where a pass is right) at ``defaults``."""
    lines = [
        f"| {label} | same spec: gate exit 1 (false alarms) | "
        + " | ".join(
            f"{v.name} {'detected' if v.worsens else 'exit 1 (a pass is right)'}" for v in shown
        )
        + " | checks behind the false alarms |",
        "|---:|---|" + "---|" * len(shown) + "---|",
    ]
    for size, pairs in groups.items():
        at = figures(pairs, defaults)
        cells = []
        for v in shown:
            found = at["variants"].get(v.name)
            key = "detected" if v.worsens else "exit_1"
            cells.append(_rate_cell(found[key]) if found else "-")
        lines.append(
            f"| {size} | {_rate_cell(at['false_alarms'])} | "
            + " | ".join(cells)
            + f" | {_fired(at['false_alarm_triggers'])} |"
        )
    return lines


def k_tables(by_k: dict[int, list[Pair]]) -> str:
    """Markdown: false alarms and detection at the defaults against k baseline runs, and per
    check the bound that a candidate must pass (median over the same-spec trials) beside the
    ratios the variants reached."""
    defaults = Thresholds()
    shown = [v for v in VARIANTS if any(p.kind == v.name for ps in by_k.values() for p in ps)]
    lines = [
        "Against k baseline runs (`mlms gate CANDIDATE BASELINE...`: latency and throughput "
        "judged by the prediction interval over the k runs, top-1 against the first), at the "
        "default thresholds; each same-spec run against the k same-spec runs before it, each "
        "variant against the k same-spec runs before it:",
        "",
    ]
    lines += _rates_rows("k", by_k, shown, defaults)
    slow = [v for v in shown if v.worsens == LATENCY_METRICS]
    lines += [
        "",
        "Per check: the prediction bound as a ratio to the baselines' geometric mean (latency: "
        "a slowdown must pass it; throughput: fall below it), median (min–max) over the "
        "same-spec trials, beside the ratio the slow variants reached, median (min–max):",
        "",
        "| check | "
        + " | ".join(f"bound, k = {k}" for k in by_k)
        + " | "
        + " | ".join(f"{v.name} ratio, k = {k}" for k in by_k for v in slow)
        + " |",
        "|---|" + "---|" * (len(by_k) * (1 + len(slow))) + "",
    ]
    names: dict[str, None] = {}
    for pairs in by_k.values():
        for pair in pairs:
            for verdict in pair.verdicts or []:
                if verdict.bound is not None:
                    names[short_name(verdict)] = None
    for name in names:
        cells = []
        for pairs in by_k.values():
            bounds = [
                v.bound
                for p in pairs
                if p.kind == SAME
                for v in p.verdicts or []
                if short_name(v) == name and v.bound is not None
            ]
            cells.append(_figure_cell(bounds))
        for pairs in by_k.values():
            for variant in slow:
                ratios = [
                    v.ratio
                    for p in pairs
                    if p.kind == variant.name
                    for v in p.verdicts or []
                    if short_name(v) == name and v.ratio is not None
                ]
                cells.append(_figure_cell(ratios))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pooled_table(by_r: dict[int, list[Pair]]) -> str:
    """Markdown: false alarms and detection at the defaults with r candidate runs pooled
    against r baseline runs, as ``mlms gate --sweep`` gates a cell's repeats."""
    defaults = Thresholds()
    shown = [v for v in VARIANTS if any(p.kind == v.name for ps in by_r.values() for p in ps)]
    lines = [
        "Pooled, as `mlms gate --sweep` gates a cell's repeats (`report.gate.gate_pooled`: "
        "latency and throughput by the bootstrap over runs of the ratio of the medians, top-1 "
        "by McNemar's test of the first candidate run against the first baseline run), at the "
        "default thresholds: the same-spec runs, in order, split into non-overlapping groups of "
        "r, each group of r pooled against the r same-spec runs of the group before it; each r "
        "consecutive runs of a variant pooled against the r same-spec runs before them:",
        "",
    ]
    lines += _rates_rows("r", by_r, shown, defaults)
    if not shown:
        lines += [
            "",
            "No variant ran r times in a row (`--repeats`), so there is no detection trial.",
        ]
    return "\n".join(lines)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--same", type=int, default=20, help="same-spec pairs (runs - 1)")
    parser.add_argument(
        "--slow", type=int, default=5, help="pairs of each slow variant (threads-1, graph-off)"
    )
    parser.add_argument(
        "--accuracy", type=int, default=3, help="pairs of imagenet-normalized (unscaled: 2)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="5 same-spec pairs, one of each variant"
    )
    parser.add_argument(
        "--threads", type=int, default=THREADS, help="the baseline's intra-op threads"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of each variant in a row, for the pooled detection trials",
    )
    parser.add_argument(
        "--pool",
        type=int,
        nargs="+",
        default=list(POOLS),
        metavar="R",
        help="runs per pooled group (at least 2 each)",
    )
    parser.add_argument("--keep", type=Path, help="keep the result documents in this folder")
    parser.add_argument(
        "--from",
        dest="source",
        type=Path,
        help="gate the documents a --keep run kept, running nothing",
    )
    parser.add_argument("--out", type=Path, help="every pair's checks and the rates, as JSON")
    parser.add_argument("--markdown", type=Path, help="the tables, as Markdown")
    args = parser.parse_args(argv)
    if args.quick:
        args.same, args.slow, args.accuracy = 5, 1, 1
    if args.same < 1 or args.slow < 0 or args.accuracy < 0 or args.threads < 1:
        parser.error("--same and --threads must be at least 1, --slow and --accuracy at least 0")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, not {args.repeats}")
    if any(r < 2 for r in args.pool):
        parser.error(f"--pool: a pooled group needs at least 2 runs; got {args.pool}")
    return args


def candidates(slow: int, accuracy: int, threads: int = THREADS) -> list[str]:
    """The variant runs, interleaved so that each kind spreads over the whole session
    (``threads-1`` only when the baseline has more threads)."""
    counts = {
        "threads-1": slow if threads > 1 else 0,
        "graph-off": slow,
        "imagenet-normalized": accuracy,
        "unscaled": min(accuracy, max(1, accuracy - 1)),
    }
    order: list[str] = []
    while any(counts.values()):
        for name in counts:
            if counts[name]:
                order.append(name)
                counts[name] -= 1
    return order


def _index(run: Run) -> int:
    return run.index


def _kinds(runs: Sequence[Run]) -> list[str]:
    return [r.variant for r in runs]


def measure(args: argparse.Namespace) -> tuple[list[Run], list[Pair], tuple[float, float, float]]:
    """Every run of the schedule, one fresh process after the other, then every pair gated;
    and the load average right after the last run."""
    folder = Path(tempfile.mkdtemp(prefix="mlms-gate-rates-")) if args.keep is None else args.keep
    folder.mkdir(parents=True, exist_ok=True)
    try:
        specs = write_specs(folder, args.threads)
        order = schedule(
            args.same, candidates(args.slow, args.accuracy, args.threads), args.repeats
        )
        runs: list[Run] = []
        for k, kind in enumerate(order):
            run = run_once(k, kind, specs[kind], folder)
            runs.append(run)
            p50 = ", ".join(f"b{b} {ms * 1e3:.0f} µs" for b, ms in run.p50_ms.items())
            top1 = "-" if run.top1 is None else f"{run.top1:.2%}"
            print(
                f"  run {k + 1}/{len(order)} {kind}: {run.wall_s:.1f} s, p50 {p50}, top-1 {top1}",
                flush=True,
            )
        load_after_runs = os.getloadavg()
        pairs = [gate_pair(kind, runs[b], runs[c]) for kind, b, c in pairings(order)]
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    return runs, pairs, load_after_runs


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started_at, started = _now(), time.monotonic()
    load_before = os.getloadavg()
    if args.source is not None:
        runs = sorted((Run.read(p) for p in args.source.glob("[0-9]*-*.json")), key=_index)
        pairs = [gate_pair(kind, runs[b], runs[c]) for kind, b, c in pairings(_kinds(runs))]
        load_after_runs = os.getloadavg()
        framework = json.loads(runs[0].document.read_text())["spec"]["framework"]
        args.threads = framework.get("intraOpThreads", args.threads)
    else:
        runs, pairs, load_after_runs = measure(args)
    wall = time.monotonic() - started
    load_after = os.getloadavg()
    defaults = Thresholds()
    by_k = {k: gate_k(runs, k) for k in KS}
    by_r = {r: gate_r(runs, r) for r in args.pool}
    markdown = tables(pairs) + "\n\n" + k_tables(by_k) + "\n\n" + pooled_table(by_r)
    what = (
        f"{len(runs)} fresh `mlms run --raw` processes (ONNX Runtime digits CNN, SingleStream "
        f"batch {' and '.join(str(b) for b in SCENARIO['batchSizes'])}, intra-op threads "
        f"{args.threads}, "
        f"{SCENARIO['minDuration']} windows), {sum(p.kind == SAME for p in pairs)} same-spec pairs"
    )
    if args.source is not None:
        what = f"the documents in {args.source} re-gated: {what}"
    heading = (
        f"Machine: {cpu_model()}, {os.cpu_count()} CPUs, load average {load_before[0]:.2f} → "
        f"{load_after[0]:.2f}; {started_at}; wall time {wall:.0f} s; {what}."
    )
    print()
    print(heading)
    print()
    print(markdown)
    if args.markdown:
        args.markdown.write_text(f"{heading}\n\n{markdown}\n")
    if args.out:
        report = {
            "benchmark": "gate-rates",
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "machine": {
                "cpu": cpu_model(),
                "cpus": os.cpu_count(),
                "loadavg_before": load_before,
                "loadavg_after_runs": load_after_runs,
                "loadavg_after": load_after,
                "platform": platform.platform(),
            },
            "versions": versions(),
            "started_at": started_at,
            "finished_at": _now(),
            "duration_s": wall,
            "settings": {
                "same_pairs": args.same,
                "slow_pairs": args.slow,
                "accuracy_pairs": args.accuracy,
                "scenario": SCENARIO,
                "intra_op_threads": args.threads,
                "repeats": args.repeats,
                "pool": args.pool,
                "variants": [v.__dict__ | {"worsens": sorted(v.worsens)} for v in VARIANTS],
            },
            "runs": [
                {
                    "index": r.index,
                    "variant": r.variant,
                    "wall_s": r.wall_s,
                    "p50_ms": r.p50_ms,
                    "top1": r.top1,
                }
                for r in runs
            ],
            "pairs": [pair_json(p, defaults) for p in pairs],
            "at_defaults": figures(pairs, defaults),
            "per_check": per_check(pairs),
            "sweep": {str(t): figures(pairs, thresholds_at(t)) for t in SWEEP},
            "k_baselines": {
                str(k): {
                    "at_defaults": figures(found, defaults),
                    "trials": [pair_json(p, defaults) for p in found],
                }
                for k, found in by_k.items()
            },
            "pooled": {
                str(r): {
                    "at_defaults": figures(found, defaults),
                    "trials": [pair_json(p, defaults) for p in found],
                }
                for r, found in by_r.items()
            },
            "table_markdown": markdown,
        }
        args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
