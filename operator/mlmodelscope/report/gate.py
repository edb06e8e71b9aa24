"""`mlms gate`: does a candidate run regress against a baseline run, beyond what noise explains?

First the runs must be comparable (:func:`mismatches`): the same model bytes, dataset (its
name and sample count, as the store's ``runs.dataset`` names it), scenario type, batch sizes
and framework; else the gate's answer is "not comparable" and names the field and both
values. Then each metric of :func:`~mlmodelscope.report.verdicts.verdicts` is checked against
its threshold (:func:`check`): a regression needs both the threshold exceeded and the
difference significant in the worse direction, so a noisy run cannot fail a pipeline and a
certain but small slowdown does not either. A metric the documents cannot test is skipped,
never failed.

Against several baseline runs of the same spec (:func:`gate_runs`), "significant" for latency
and throughput means outside the baseline runs' spread: a one-sided prediction interval for
one more run (:mod:`~mlmodelscope.report.noise`), which holds the variation between runs that
the bootstrap within two runs cannot see. It needs :data:`~mlmodelscope.report.noise.MIN_RUNS`
runs; with two the gate judges against the first, as with one, and says so.

Several candidate runs of one spec (a sweep cell's repeats, :func:`gate_pooled`) are gated
once, pooled: latency and throughput by the ratio of the medians over runs and its bootstrap
interval (:mod:`~mlmodelscope.report.pooled`), so more runs narrow the interval rather than
add chances of a false alarm.

Typed records and pure functions; :func:`junit_xml` and :func:`markdown` return text, the
command writes it.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Final

from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.report.noise import METHOD, MIN_RUNS, run_verdicts
from mlmodelscope.report.pooled import METHOD as POOLED_METHOD
from mlmodelscope.report.pooled import pooled_verdicts
from mlmodelscope.report.verdicts import Metric, MetricVerdict, Outcome, verdicts

DEFAULT_MAX_LATENCY_INCREASE: Final = 10.0
"""Percent, for p50 and p99 latency."""
DEFAULT_MAX_THROUGHPUT_DECREASE: Final = 10.0
"""Percent."""
DEFAULT_MAX_ACCURACY_DROP: Final = 1.0
"""Percentage points of top-1 accuracy."""


@dataclass(frozen=True)
class Thresholds:
    """How much worse each metric may get before the gate calls it a regression."""

    max_latency_increase: float = DEFAULT_MAX_LATENCY_INCREASE
    max_throughput_decrease: float = DEFAULT_MAX_THROUGHPUT_DECREASE
    max_accuracy_drop: float = DEFAULT_MAX_ACCURACY_DROP


class GateStatus(IntEnum):
    """The gate's answer, as the command's exit status."""

    PASS = 0
    REGRESSION = 1
    NOT_COMPARABLE = 2


class CheckStatus(StrEnum):
    PASS = "pass"
    REGRESSION = "regression"
    NOT_TESTABLE = "not testable"


@dataclass(frozen=True)
class Mismatch:
    """A field whose value makes the two runs not comparable."""

    field: str
    baseline: object
    candidate: object
    runs: tuple[str, str] = ("baseline", "candidate")
    """What to call the two runs: with several baselines, which one differs."""

    def __str__(self) -> str:
        return (
            f"{self.field} differs: {self.runs[0]} {self.baseline!r}, "
            f"{self.runs[1]} {self.candidate!r}"
        )


@dataclass(frozen=True)
class Check:
    """One metric against its threshold."""

    verdict: MetricVerdict
    change: float | None
    """Candidate against baseline: percent for latency and throughput, percentage points for
    top-1 accuracy (``None`` when a headline value is missing)."""
    limit: float
    """The threshold, in the same unit: the worst ``change`` allowed."""
    exceeded: bool
    status: CheckStatus
    reason: str

    @property
    def name(self) -> str:
        """``latency p50 SingleStream batch 1``, ``top-1 accuracy``."""
        if self.verdict.scenario is None:
            return str(self.verdict.metric)
        return f"{self.verdict.metric} {self.verdict.where}"


@dataclass(frozen=True)
class GateResult:
    candidate: str
    baseline: str
    """The baseline run's label; with several, the first's."""
    thresholds: Thresholds
    mismatches: list[Mismatch]
    """Empty when the runs are comparable."""
    checks: list[Check]
    """Empty when they are not."""
    baselines: tuple[str, ...] = ()
    """Every baseline run's label when there are several; empty for one."""
    notes: tuple[str, ...] = ()
    """What the reader must know about how the checks were judged."""
    candidates: tuple[str, ...] = ()
    """Every candidate run's label when several are pooled (:func:`gate_pooled`); empty for
    one."""

    @property
    def pooled(self) -> bool:
        """Several candidate runs judged as one."""
        return bool(self.candidates)

    @property
    def baseline_runs(self) -> int:
        """How many baseline runs the candidate was judged against."""
        return len(self.baselines) or 1

    @property
    def subject(self) -> str:
        """``cand``, or ``3 candidate runs (a, b, c) pooled``."""
        if not self.candidates:
            return self.candidate
        return f"{len(self.candidates)} candidate runs ({', '.join(self.candidates)}) pooled"

    @property
    def against(self) -> str:
        """``base``, or ``3 baseline runs (a, b, c)``."""
        if not self.baselines:
            return self.baseline
        return f"{len(self.baselines)} baseline runs ({', '.join(self.baselines)})"

    @property
    def between_runs(self) -> bool:
        """Latency and throughput judged against the baseline runs' spread."""
        return not self.candidates and len(self.baselines) >= MIN_RUNS

    @property
    def rule(self) -> str:
        """When a check is a regression, in words."""
        if self.pooled:
            return (
                "a regression: beyond the threshold against the baseline runs' median and, for "
                "latency and throughput, the interval of the ratio of the medians clearing the "
                "minimum effect on the worse side (top-1: the first candidate run significantly "
                "worse than the first baseline run)"
            )
        if self.between_runs:
            return (
                "a regression: beyond the threshold against the baseline runs' geometric mean "
                "and, for latency and throughput, outside their one-sided prediction interval "
                "(top-1: significantly worse than the first baseline run)"
            )
        return "a regression: beyond the threshold and significantly worse"

    @property
    def status(self) -> GateStatus:
        if self.mismatches:
            return GateStatus.NOT_COMPARABLE
        if any(c.status is CheckStatus.REGRESSION for c in self.checks):
            return GateStatus.REGRESSION
        return GateStatus.PASS


# ------------------------------------------------------------------------------ deciding


def _identity(doc: ResultDocument) -> dict[str, object]:
    spec_scenario = doc.spec.get("scenario") or {}
    return {
        "status": doc.status,
        "model.sha256": doc.model.sha256 if doc.model is not None else None,
        "dataset": dataset_of(doc),
        "scenario.type": spec_scenario.get("type"),
        "scenario.batchSizes": spec_scenario.get("batchSizes"),
        "framework.name": (doc.spec.get("framework") or {}).get("name"),
    }


def dataset_of(doc: ResultDocument) -> str | None:
    """The run's dataset, its name and sample count (``digits/test (360 samples)``): a run is
    comparable only with runs of the same one. None for a run that never loaded its data."""
    return doc.dataset.identity() if doc.dataset is not None else None


def mismatches(baseline: ResultDocument, candidate: ResultDocument) -> list[Mismatch]:
    """The fields that make the runs not comparable, in a fixed order: status (both must have
    succeeded), ``model.sha256``, ``dataset`` (:func:`dataset_of`: another dataset or another
    sample count), the spec's ``scenario.type``, ``scenario.batchSizes`` and
    ``framework.name``."""
    base, cand = _identity(baseline), _identity(candidate)
    found = [Mismatch(key, base[key], cand[key]) for key in base if base[key] != cand[key]]
    if not found and base["status"] != "Succeeded":
        found.append(Mismatch("status", base["status"], cand["status"]))
    return found


def _percent(baseline: float | None, candidate: float | None) -> float | None:
    if baseline is None or candidate is None or baseline == 0:
        return None
    return 100 * (candidate / baseline - 1)


def check(verdict: MetricVerdict, thresholds: Thresholds) -> Check:
    """One metric against its threshold: a regression when the change is worse than the
    threshold and the verdict is significant in the worse direction."""
    if verdict.metric is Metric.TOP1:
        change = (
            None
            if verdict.baseline is None or verdict.candidate is None
            else 100 * (verdict.candidate - verdict.baseline)
        )
        limit, unit, worse = -thresholds.max_accuracy_drop, "pp", Outcome.WORSE
    elif verdict.metric is Metric.THROUGHPUT:
        change = _percent(verdict.baseline, verdict.candidate)
        limit, unit, worse = -thresholds.max_throughput_decrease, "%", Outcome.SLOWER
    else:
        change = _percent(verdict.baseline, verdict.candidate)
        limit, unit, worse = thresholds.max_latency_increase, "%", Outcome.SLOWER
    higher_is_worse = verdict.metric in (Metric.P50, Metric.P99)
    exceeded = change is not None and (change > limit if higher_is_worse else change < limit)
    shown = "no change measured" if change is None else f"{change:+.2f}{unit}"
    allowed = f"the {limit:+g}{unit} allowed"
    if verdict.outcome is Outcome.NOT_TESTABLE:
        status = CheckStatus.NOT_TESTABLE
        reason = f"{shown} (limit {limit:+g}{unit}); not testable: {verdict.why}"
    elif exceeded and verdict.outcome is worse:
        status = CheckStatus.REGRESSION
        reason = f"{shown} exceeds {allowed} and is significant: {verdict.outcome} "
        reason += f"({verdict.evidence})"
    elif exceeded:
        status = CheckStatus.PASS
        reason = f"{shown} exceeds {allowed} but is not significantly {worse}: "
        reason += f"{verdict.outcome} ({verdict.evidence})"
    else:
        status = CheckStatus.PASS
        reason = f"{shown} within {allowed}; {verdict.outcome} ({verdict.evidence})"
    return Check(verdict, change, limit, exceeded, status, reason)


def gate(
    candidate: ResultDocument,
    baseline: ResultDocument,
    thresholds: Thresholds,
    *,
    labels: tuple[str, str] = ("candidate", "baseline"),
) -> GateResult:
    """The gate's decision; the statistics run only for comparable runs."""
    found = mismatches(baseline, candidate)
    checks = (
        [] if found else [check(v, thresholds) for v in verdicts(labels[0], baseline, candidate)]
    )
    return GateResult(labels[0], labels[1], thresholds, found, checks)


def gate_runs(
    candidate: ResultDocument,
    baselines: Sequence[ResultDocument],
    thresholds: Thresholds,
    *,
    labels: Sequence[str],
) -> GateResult:
    """The gate's decision against one or more baseline runs (``labels``: the candidate's,
    then each baseline's). One baseline is :func:`gate`. Every baseline must be comparable
    with the candidate (so with each other). From :data:`~mlmodelscope.report.noise.MIN_RUNS`
    on, latency and throughput are judged against the runs' spread
    (:func:`~mlmodelscope.report.noise.run_verdicts`); two are too few for that, and the gate
    judges against the first as with one, with a note."""
    if len(labels) != len(baselines) + 1:
        raise ValueError(f"{len(labels)} labels for {len(baselines) + 1} runs")
    if len(baselines) == 1:
        return gate(candidate, baselines[0], thresholds, labels=(labels[0], labels[1]))
    found = [
        Mismatch(m.field, m.baseline, m.candidate, (f"baseline {label}", "candidate"))
        for base, label in zip(baselines, labels[1:], strict=True)
        for m in mismatches(base, candidate)
    ]
    notes: tuple[str, ...] = ()
    if found:
        checks: list[Check] = []
    elif len(baselines) >= MIN_RUNS:
        judged = run_verdicts(labels[0], baselines, candidate)
        checks = [check(v, thresholds) for v in judged]
        notes = (
            f"latency and throughput: {METHOD} (k = {len(baselines)}), against their "
            "geometric mean; top-1 accuracy: McNemar's test against the first baseline run, "
            f"{labels[1]}",
        )
    else:
        checks = [check(v, thresholds) for v in verdicts(labels[0], baselines[0], candidate)]
        notes = (
            f"{len(baselines)} baseline runs: a {METHOD} needs at least {MIN_RUNS}; every "
            f"metric judged against the first, {labels[1]}, by the bootstrap within the two "
            "runs, as with one baseline",
        )
    return GateResult(labels[0], labels[1], thresholds, found, checks, tuple(labels[1:]), notes)


def gate_pooled(
    candidates: Sequence[ResultDocument],
    baselines: Sequence[ResultDocument],
    thresholds: Thresholds,
    *,
    candidate_labels: Sequence[str],
    baseline_labels: Sequence[str],
) -> GateResult:
    """The gate's one decision for several candidate runs of one spec against one or more
    baseline runs, pooled (:func:`~mlmodelscope.report.pooled.pooled_verdicts`). One
    candidate run is :func:`gate_runs`. Every run must be comparable with the first
    candidate run (so with each other)."""
    if len(candidate_labels) != len(candidates) or len(baseline_labels) != len(baselines):
        raise ValueError(
            f"{len(candidate_labels)} and {len(baseline_labels)} labels for "
            f"{len(candidates)} candidate and {len(baselines)} baseline runs"
        )
    if len(candidates) == 1:
        return gate_runs(
            candidates[0], baselines, thresholds, labels=[*candidate_labels, *baseline_labels]
        )
    first, label = candidates[0], candidate_labels[0]
    found = [
        Mismatch(m.field, m.baseline, m.candidate, (f"candidate {label}", f"candidate {other}"))
        for doc, other in zip(candidates[1:], candidate_labels[1:], strict=True)
        for m in mismatches(first, doc)
    ] + [
        Mismatch(m.field, m.baseline, m.candidate, (f"baseline {other}", f"candidate {label}"))
        for doc, other in zip(baselines, baseline_labels, strict=True)
        for m in mismatches(doc, first)
    ]
    checks: list[Check] = []
    notes: tuple[str, ...] = ()
    if not found:
        checks = [check(v, thresholds) for v in pooled_verdicts(label, candidates, baselines)]
        against = counted_runs(len(baselines), "baseline")
        notes = (
            f"pooled {len(candidates)} candidate runs against {against}: "
            f"latency and throughput by a {POOLED_METHOD}; top-1 accuracy: McNemar's test of "
            f"the first candidate run, {label}, against the first baseline run, "
            f"{baseline_labels[0]}",
        )
    several = tuple(baseline_labels) if len(baselines) > 1 else ()
    return GateResult(
        label,
        baseline_labels[0],
        thresholds,
        found,
        checks,
        several,
        notes,
        tuple(candidate_labels),
    )


# ------------------------------------------------------------------------------ reporting


def counted_runs(count: int, role: str) -> str:
    """``3 baseline runs``, ``1 baseline run``."""
    return f"{count} {role} run{'' if count == 1 else 's'}"


HEADLINE = {
    GateStatus.PASS: "PASS",
    GateStatus.REGRESSION: "REGRESSION",
    GateStatus.NOT_COMPARABLE: "NOT COMPARABLE",
}


def summary(result: GateResult) -> str:
    """One line: the answer and why."""
    head = f"{HEADLINE[result.status]}: {result.subject} against {result.against}"
    if result.mismatches:
        return f"{head}: not comparable: " + "; ".join(str(m) for m in result.mismatches)
    counts = {s: sum(c.status is s for c in result.checks) for s in CheckStatus}
    return (
        f"{head}: {counts[CheckStatus.REGRESSION]} regressions, {counts[CheckStatus.PASS]} "
        f"passed, {counts[CheckStatus.NOT_TESTABLE]} not testable"
    )


def _value(metric: Metric, value: float | None) -> str:
    if value is None:
        return "-"
    if metric is Metric.TOP1:
        return f"{100 * value:.2f}%"
    if metric is Metric.THROUGHPUT:
        return f"{value:.0f}/s"
    return f"{value:.3f} ms"


def junit_xml(result: GateResult) -> str:
    """JUnit XML: one testcase per checked metric, a ``failure`` for a regression and
    ``skipped`` for a metric not testable; runs that are not comparable give one testcase,
    ``comparable``, with an ``error`` naming the fields."""
    suite = junit_suite(result)
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def junit_suite(result: GateResult, name: str = "mlms gate") -> ET.Element:
    """:func:`junit_xml`'s ``testsuite`` element; a pooled result's names how many candidate
    and baseline runs it pooled (``properties``)."""
    suite = ET.Element("testsuite", name=name)
    if result.pooled:
        properties = ET.SubElement(suite, "properties")
        for key, value in (
            ("candidate-runs", len(result.candidates)),
            ("baseline-runs", result.baseline_runs),
        ):
            ET.SubElement(properties, "property", name=key, value=str(value))
    cases = 0
    failures = errors = skipped = 0
    if result.mismatches:
        case = ET.SubElement(suite, "testcase", classname="mlms.gate", name="comparable")
        error = ET.SubElement(
            case,
            "error",
            type="not comparable",
            message="; ".join(str(m) for m in result.mismatches),
        )
        error.text = summary(result)
        cases, errors = 1, 1
    for item in result.checks:
        cases += 1
        case = ET.SubElement(suite, "testcase", classname="mlms.gate", name=item.name)
        if item.status is CheckStatus.REGRESSION:
            failures += 1
            failure = ET.SubElement(case, "failure", type="regression", message=item.reason)
            failure.text = f"method: {item.verdict.method}"
        elif item.status is CheckStatus.NOT_TESTABLE:
            skipped += 1
            ET.SubElement(case, "skipped", message=item.reason)
        else:
            out = ET.SubElement(case, "system-out")
            out.text = f"{item.reason}\nmethod: {item.verdict.method}"
    if result.notes:
        notes = ET.SubElement(suite, "system-out")
        notes.text = "\n".join(f"note: {n}" for n in result.notes)
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    return suite


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(result: GateResult) -> str:
    """A Markdown summary: the answer, the thresholds, one table row per metric, the
    methods and notes."""
    t = result.thresholds
    if result.baselines:
        against = f"{len(result.baselines)} baseline runs " + ", ".join(
            f"**{_cell(b)}**" for b in result.baselines
        )
    else:
        against = f"baseline **{_cell(result.baseline)}**"
    if result.pooled:
        subject = f"{len(result.candidates)} candidate runs " + ", ".join(
            f"**{_cell(c)}**" for c in result.candidates
        )
        subject += ", pooled,"
    else:
        subject = f"Candidate **{_cell(result.candidate)}**"
    if result.pooled:
        rule = (
            "the threshold exceeded (against the baseline runs' median) and, for latency and "
            "throughput, the bootstrap interval over runs of the ratio of the medians clearing "
            "the minimum effect; for top-1, the difference significant between the first runs"
        )
    elif result.between_runs:
        rule = (
            "the threshold exceeded (against the baseline runs' geometric mean) and, for latency "
            "and throughput, the candidate outside their one-sided prediction interval; for "
            "top-1, the difference significant against the first baseline run"
        )
    else:
        rule = "the threshold exceeded and the difference significant"
    lines = [
        f"## mlms gate: {HEADLINE[result.status]}",
        "",
        f"{subject} against {against}. Thresholds: latency "
        f"(p50, p99) at most +{t.max_latency_increase:g}%, throughput at most "
        f"-{t.max_throughput_decrease:g}%, top-1 accuracy at most -{t.max_accuracy_drop:g} "
        f"percentage points; a regression needs {rule}.",
        "",
    ]
    if result.mismatches:
        lines += ["Not comparable:", ""]
        lines += [
            f"- `{m.field}`: {_cell(m.runs[0])} `{m.baseline!r}`, {_cell(m.runs[1])} "
            f"`{m.candidate!r}`"
            for m in result.mismatches
        ]
        return "\n".join(lines) + "\n"
    base_column = "baseline (geometric mean)" if result.between_runs else "baseline"
    cand_column = "candidate"
    if result.pooled:
        base_column, cand_column = "baseline (median)", "candidate (median)"
    lines += [
        f"| metric | {base_column} | {cand_column} | change | verdict | evidence | result |",
        "|---|---:|---:|---:|---|---|---|",
    ]
    methods: dict[str, list[str]] = {}
    for item in result.checks:
        v = item.verdict
        change = "-" if item.change is None else f"{item.change:+.2f}"
        change += "" if item.change is None else ("pp" if v.metric is Metric.TOP1 else "%")
        result_text = "**regression**" if item.status is CheckStatus.REGRESSION else item.status
        lines.append(
            f"| {_cell(item.name)} | {_value(v.metric, v.baseline)} | "
            f"{_value(v.metric, v.candidate)} | {change} | {v.outcome} | "
            f"{_cell(v.evidence)} | {result_text} |"
        )
        if v.method != "-" and str(v.metric) not in methods.setdefault(v.method, []):
            methods[v.method].append(str(v.metric))
    if methods:
        lines += ["", "Methods:", ""]
        lines += [f"- {_cell(', '.join(metrics))}: {_cell(m)}" for m, metrics in methods.items()]
    if result.notes:
        lines += ["", "Notes:", ""] + [f"- {_cell(n)}" for n in result.notes]
    return "\n".join(lines) + "\n"
