"""`mlms gate --sweep`: a whole EvaluationSweep against a baseline sweep, cell by cell.

The runs of the candidate sweep are grouped by matrix cell: the values of the axis labels a
sweep gives its children (model entry, framework, device, GPU product, scenario, batch size:
:data:`AXES`), which a cell's repeats share. Each cell is paired with the baseline sweep's runs
of the same cell measured on the same dataset (name and sample count,
:func:`..gate.dataset_of`) and gated once: a single candidate run as `mlms gate` gates runs
(:func:`..gate.gate_runs`; several baseline runs of one cell are its k baselines), several
(its repeats, in the order of their ``mlmodelscope.io/sweep-repeat`` label) pooled
(:func:`..gate.gate_pooled`), so a cell is one answer however many repeats it has. A
candidate cell the baseline sweep lacks is not comparable, named; so is one whose baseline
runs were all measured on another dataset, naming both datasets. Baseline runs of the cell on
another dataset, beside some on the candidate's, are left out with a note.

The sweep's answer: a regression when any cell regresses (the actionable answer comes first),
else not comparable when any cell is, else pass.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.report.gate import (
    HEADLINE,
    GateResult,
    GateStatus,
    Thresholds,
    counted_runs,
    dataset_of,
    gate_pooled,
    junit_suite,
    markdown,
    summary,
)
from mlmodelscope.spec.sweep import (
    LABEL_BATCH_SIZE,
    LABEL_DEVICE,
    LABEL_FRAMEWORK,
    LABEL_GPU_PRODUCT,
    LABEL_MODEL,
    LABEL_REPEAT,
    LABEL_SCENARIO,
)

AXES: Final = (
    LABEL_MODEL,
    LABEL_FRAMEWORK,
    LABEL_DEVICE,
    LABEL_GPU_PRODUCT,
    LABEL_SCENARIO,
    LABEL_BATCH_SIZE,
)
"""The labels that name a run's cell of its sweep's matrix."""

Cell = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class LabelledRun:
    """A run of a sweep and the label the gate calls it by."""

    label: str
    document: ResultDocument


def repeat_of(run: LabelledRun) -> int:
    """Which repeat of its cell the run is (``mlmodelscope.io/sweep-repeat``); 0 without."""
    value = (run.document.evaluation.labels or {}).get(LABEL_REPEAT, "")
    return int(value) if value.isdigit() else 0


def cell_of(document: ResultDocument) -> Cell:
    """The run's matrix cell: its axis labels, in :data:`AXES` order, those it has."""
    labels: Mapping[str, str] = document.evaluation.labels or {}
    return tuple((axis, labels[axis]) for axis in AXES if axis in labels)


def describe(cell: Cell) -> str:
    """``model=digits framework=onnxruntime batch-size=8``."""
    return " ".join(f"{axis.rsplit('/', 1)[-1].removeprefix('sweep-')}={v}" for axis, v in cell)


@dataclass(frozen=True)
class SweepGateResult:
    candidate: str
    """The candidate sweep's name."""
    baseline: str
    thresholds: Thresholds
    cells: list[tuple[Cell, GateResult]]
    """Each gated candidate cell, in matrix order."""
    unmatched: list[tuple[Cell, tuple[str, ...]]]
    """Candidate cells the baseline sweep has no run of: (cell, its runs' labels)."""

    @property
    def status(self) -> GateStatus:
        statuses = {result.status for _, result in self.cells}
        if GateStatus.REGRESSION in statuses:
            return GateStatus.REGRESSION
        if self.unmatched or GateStatus.NOT_COMPARABLE in statuses:
            return GateStatus.NOT_COMPARABLE
        return GateStatus.PASS


def gate_sweep(
    candidate: str,
    baseline: str,
    candidates: Sequence[LabelledRun],
    baselines: Sequence[LabelledRun],
    thresholds: Thresholds,
) -> SweepGateResult:
    """Gate every cell of the candidate sweep against the baseline sweep's runs of that cell
    on its dataset (see the module). A sweep with no runs is refused: ValueError naming it."""
    for name, runs in ((candidate, candidates), (baseline, baselines)):
        if not runs:
            raise ValueError(f"sweep {name} has no runs to gate")
    by_cell, grouped = _by_cell(baselines), _by_cell(candidates)
    cells: list[tuple[Cell, GateResult]] = []
    unmatched: list[tuple[Cell, tuple[str, ...]]] = []
    for cell, runs in grouped.items():
        found = by_cell.get(cell)
        if not found:
            unmatched.append((cell, tuple(run.label for run in runs)))
            continue
        cells.append((cell, _gate_cell(runs, found, thresholds)))
    cells.sort(key=lambda item: item[0])
    unmatched.sort()
    return SweepGateResult(candidate, baseline, thresholds, cells, unmatched)


def _by_cell(runs: Sequence[LabelledRun]) -> dict[Cell, list[LabelledRun]]:
    """The runs of each cell, in repeat order (runs without a repeat label keep theirs)."""
    grouped: dict[Cell, list[LabelledRun]] = {}
    for run in sorted(runs, key=repeat_of):
        grouped.setdefault(cell_of(run.document), []).append(run)
    return grouped


def _gate_cell(
    runs: Sequence[LabelledRun], found: Sequence[LabelledRun], thresholds: Thresholds
) -> GateResult:
    """A cell's candidate ``runs`` against its baseline runs of the first run's dataset; when
    the cell has none on it, against all of them, which the gate refuses as not comparable,
    naming both datasets."""
    dataset = dataset_of(runs[0].document)
    same = [b for b in found if dataset_of(b.document) == dataset]
    chosen = same or list(found)
    result = gate_pooled(  # one candidate run: gate_runs
        [r.document for r in runs],
        [b.document for b in chosen],
        thresholds,
        candidate_labels=[r.label for r in runs],
        baseline_labels=[b.label for b in chosen],
    )
    left_out = [b for b in found if dataset_of(b.document) != dataset] if same else []
    if not left_out:
        return result
    others = ", ".join(f"{b.label} ({dataset_of(b.document)})" for b in left_out)
    note = f"left out the baseline runs of this cell on another dataset than {dataset}: {others}"
    return replace(result, notes=(*result.notes, note))


# ------------------------------------------------------------------------------ reporting


def sweep_summary(result: SweepGateResult) -> str:
    """One line: the answer and how many cells gave each."""
    counts = {s: sum(r.status is s for _, r in result.cells) for s in GateStatus}
    return (
        f"{HEADLINE[result.status]}: sweep {result.candidate} against sweep {result.baseline}: "
        f"{len(result.cells) + len(result.unmatched)} cells, "
        f"{counts[GateStatus.REGRESSION]} regressed, {counts[GateStatus.PASS]} passed, "
        f"{counts[GateStatus.NOT_COMPARABLE] + len(result.unmatched)} not comparable"
    )


def cell_lines(result: SweepGateResult) -> list[str]:
    """One line per cell: its values and its gate's summary."""
    lines = [f"{describe(cell)}: {summary(gated)}" for cell, gated in result.cells]
    lines += [
        f"{describe(cell)}: {HEADLINE[GateStatus.NOT_COMPARABLE]}: {', '.join(labels)} "
        f"{'has' if len(labels) == 1 else 'have'} no run of this cell in sweep {result.baseline}"
        for cell, labels in result.unmatched
    ]
    return lines


def sweep_junit_xml(result: SweepGateResult) -> str:
    """JUnit XML: one ``testsuite`` per cell (as `mlms gate` writes for its runs; a pooled
    cell's names its counts of runs), and one ``comparable`` testcase with an ``error`` for
    each cell the baseline sweep lacks."""
    root = ET.Element("testsuites", name=f"mlms gate sweep {result.candidate}")
    for cell, gated in result.cells:
        root.append(junit_suite(gated, name=f"mlms gate {describe(cell)}"))
    for cell, labels in result.unmatched:
        suite = ET.SubElement(
            root, "testsuite", name=f"mlms gate {describe(cell)}", tests="1", errors="1"
        )
        suite.set("failures", "0")
        suite.set("skipped", "0")
        case = ET.SubElement(suite, "testcase", classname="mlms.gate", name="comparable")
        ET.SubElement(
            case,
            "error",
            type="not comparable",
            message=f"{', '.join(labels)}: no run of this cell in sweep {result.baseline}",
        )
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def sweep_markdown(result: SweepGateResult) -> str:
    """A Markdown summary: the answer, one row per cell (a pooled cell's with its counts of
    runs), then each cell's own summary."""
    lines = [
        f"# mlms gate: {HEADLINE[result.status]}",
        "",
        f"Sweep **{result.candidate}** against sweep **{result.baseline}**, cell by cell.",
        "",
        "| cell | result |",
        "|---|---|",
    ]
    lines += [f"| {describe(cell)} | {_cell_result(gated)} |" for cell, gated in result.cells]
    lines += [
        f"| {describe(cell)} | {HEADLINE[GateStatus.NOT_COMPARABLE]} (no baseline run) |"
        for cell, _ in result.unmatched
    ]
    for cell, gated in result.cells:
        lines += ["", f"### {describe(cell)}", ""]
        lines += markdown(gated).splitlines()[2:]  # without its own headline
    return "\n".join(lines) + "\n"


def _cell_result(gated: GateResult) -> str:
    """``PASS``, or ``PASS (3 candidate runs pooled against 3 baseline runs)``."""
    if not gated.pooled:
        return HEADLINE[gated.status]
    return (
        f"{HEADLINE[gated.status]} ({len(gated.candidates)} candidate runs pooled against "
        f"{counted_runs(gated.baseline_runs, 'baseline')})"
    )
