"""A :class:`~mlmodelscope.report.compare.Comparison` as Rich tables (what `mlms compare`
prints without ``--json``)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mlmodelscope.contract.metric import format_cost, format_energy, format_metric
from mlmodelscope.report.compare import (
    SIGNIFICANCE_RUNS,
    Agreement,
    Comparison,
    Difference,
    NumericalAgreement,
)
from mlmodelscope.report.gate import CheckStatus, GateResult
from mlmodelscope.report.verdicts import MetricVerdict, Outcome


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _delta(value: float | None, higher_is_better: bool) -> str:
    """``+5.2%`` coloured by whether it is better (green) or worse (red) than the reference."""
    if value is None:
        return ""
    text = f"{100 * value:+.1f}%"
    if abs(value) < 0.0005:
        return text
    better = (value > 0) == higher_is_better
    return f"[{'green' if better else 'red'}]{text}[/]"


def _value(value: Any) -> str:
    if value is None:
        return "[dim]-[/dim]"
    if isinstance(value, str):
        return escape(value)
    return escape(json.dumps(value))


def runs_table(comparison: Comparison) -> Table:
    table = Table(title="runs compared", title_justify="left", pad_edge=False)
    for column in ("run", "framework", "status", "run id", "source"):
        table.add_column(column, overflow="fold")
    for run in comparison.runs:
        status = run.status if run.error is None else f"{run.status}: {run.error}"
        table.add_row(
            escape(run.label),
            escape(run.framework),
            escape(status),
            run.run_id or "-",
            escape(run.source),
        )
    return table


def results_table(comparison: Comparison) -> tuple[Table, list[str]]:
    """One row per run and batch size, with the relative difference from the reference's row
    of the same scenario and batch size; plus footnotes saying why rows are INVALID. The metric
    is each run's primary metric by name (top1, miou, accuracy); Δ metric only between equal
    names."""
    table = Table(
        title=f"mlmodelscope comparison (Δ against {escape(comparison.reference)})",
        title_justify="left",
        caption="Δ: value / reference - 1, against the reference's row of the same scenario "
        "and batch size; metric: the task's primary metric, compared only with the same metric",
        caption_justify="left",
        pad_edge=False,
    )
    for column, justify in (
        ("run", "left"),
        ("scenario", "left"),
        ("batch", "right"),
        ("p50 ms", "right"),
        ("Δ p50", "right"),
        ("p99 ms", "right"),
        ("Δ p99", "right"),
        ("samples/s", "right"),
        ("Δ samples/s", "right"),
        ("metric", "right"),
        ("Δ metric", "right"),
        ("verdict", "left"),
    ):
        table.add_column(column, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    notes: list[str] = []
    for row in comparison.rows:
        if row.valid is None:
            verdict = "-"
        elif row.valid:
            verdict = "[green]VALID[/green]"
        else:
            notes.append(
                f"[{len(notes) + 1}] {row.run} batch {row.batch_size}: "
                + "; ".join(row.invalid_reasons)
            )
            verdict = f"[yellow]INVALID[{len(notes)}][/yellow]"
        table.add_row(
            escape(row.run),
            row.scenario,
            str(row.batch_size),
            _number(row.p50_ms, 3),
            _delta(row.p50_rel, higher_is_better=False),
            _number(row.p99_ms, 3),
            _delta(row.p99_rel, higher_is_better=False),
            _number(row.throughput, 0),
            _delta(row.throughput_rel, higher_is_better=True),
            format_metric(row.metric, row.metric_value),
            _delta(row.metric_rel, higher_is_better=True)
            if row.metric_note is None
            else f"[yellow]{escape(row.metric_note)}[/yellow]",
            verdict,
        )
    return table, notes


def efficiency_table(comparison: Comparison) -> Table:
    """Energy per inference (and the counter it was read from) and cost per 1,000 inferences,
    per run and batch size; ``not measured`` where the run has none."""
    table = Table(
        title="efficiency",
        title_justify="left",
        caption="energy: the GPU board's (nvml) or CPU packages' (rapl) counter over the "
        "reported window; cost: the price per node-hour given to the run at its throughput",
        caption_justify="left",
        pad_edge=False,
    )
    for column, justify in (
        ("run", "left"),
        ("scenario", "left"),
        ("batch", "right"),
        ("energy/inference", "right"),
        ("counter", "left"),
        ("cost/1k inferences", "right"),
    ):
        table.add_column(column, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for row in comparison.rows:
        table.add_row(
            escape(row.run),
            row.scenario,
            str(row.batch_size),
            format_energy(row.joules_per_inference),
            row.energy_method or "-",
            escape(format_cost(row.cost_per_1000)),
        )
    return table


def differences_table(title: str, comparison: Comparison, found: list[Difference]) -> Table:
    """Key by run: only the keys whose values differ."""
    table = Table(title=title, title_justify="left", pad_edge=False)
    table.add_column("key", no_wrap=True)
    for run in comparison.runs:
        table.add_column(escape(run.label), overflow="fold")
    for difference in found:
        table.add_row(escape(difference.key), *(_value(v) for v in difference.values))
    return table


def _yes_no(value: bool | None) -> str:
    if value is None:
        return "-"
    return "[green]yes[/green]" if value else "[yellow]no[/yellow]"


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def agreement_text(pair: Agreement) -> tuple[str, str, str]:
    """(top-1 agreement, samples that differ, the first of them) as plain text."""
    if pair.samples is None or pair.top1_agree is None:
        return "-", "-", "-"
    share = "-" if pair.top1_agreement is None else f"{100 * pair.top1_agreement:.2f}%"
    first = ", ".join(
        f"#{d.index}: {d.reference_class}→{d.run_class}" for d in pair.first_differences
    )
    if pair.top1_differ and pair.top1_differ > len(pair.first_differences):
        first += ", …"
    return f"{share} ({pair.top1_agree}/{pair.samples})", str(pair.top1_differ), first or "-"


NO_SIGNIFICANCE = (
    f"significance: not judged (more than {SIGNIFICANCE_RUNS} runs; compare fewer at a time)"
)
NO_AGREEMENT = (
    "numerical agreement: not shown (no other run evaluated the reference's dataset, or the "
    "reference has no accuracy pass)"
)


def agreement_table(agreement: NumericalAgreement) -> Table:
    """One row per run on the reference's dataset: bit-identical outputs, top-1 agreement, the
    first samples that differ (reference class → run class) and the chosen-class score
    differences where both picked the same class."""
    table = Table(
        title=f"numerical agreement with {escape(agreement.reference)} on "
        f"{escape(agreement.dataset)}",
        title_justify="left",
        caption="bit-identical: equal outputs_sha256; #i: a→b: sample i, the reference's top-1 "
        "class a, this run's b; |Δ score|: the raw output at the chosen class, over the samples "
        "where both chose the same class",
        caption_justify="left",
        pad_edge=False,
    )
    for column, justify in (
        ("run", "left"),
        ("bit-identical", "left"),
        ("top-1 agree", "right"),
        ("differ", "right"),
        ("first differing samples", "left"),
        ("max |Δ score|", "right"),
        ("mean |Δ score|", "right"),
        ("scores", "left"),
        ("note", "left"),
    ):
        table.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for pair in agreement.pairs:
        agree, differ, first = agreement_text(pair)
        if pair.top1_differ:
            differ = f"[yellow]{differ}[/yellow]"
        table.add_row(
            escape(pair.run),
            _yes_no(pair.bit_identical),
            agree,
            differ,
            escape(first),
            _score(pair.max_abs_score_diff),
            _score(pair.mean_abs_score_diff),
            pair.score_scale or "-",
            escape(pair.note or ""),
        )
    return table


OUTCOME_STYLE = {
    Outcome.FASTER: "green",
    Outcome.BETTER: "green",
    Outcome.SLOWER: "red",
    Outcome.WORSE: "red",
    Outcome.SAME: "default",
    Outcome.NOT_TESTABLE: "yellow",
}


def verdicts_table(reference: str, verdicts: list[MetricVerdict]) -> tuple[Table, list[str]]:
    """One row per run, metric, scenario and batch size: the verdict against the reference and
    its interval or p-value; plus one footnote per method."""
    table = Table(
        title=f"significance (against {escape(reference)})",
        title_justify="left",
        caption="ratio: run / reference with its confidence interval; p: McNemar's p-value",
        caption_justify="left",
        pad_edge=False,
    )
    for column in ("run", "metric", "where", "verdict", "interval or p-value", "method"):
        table.add_column(column, overflow="fold")
    methods: list[str] = []
    for verdict in verdicts:
        if verdict.method != "-" and verdict.method not in methods:
            methods.append(verdict.method)
        note = f"[{methods.index(verdict.method) + 1}]" if verdict.method != "-" else "-"
        testable = verdict.outcome is not Outcome.NOT_TESTABLE
        shown = str(verdict.outcome) if testable else verdict.evidence  # not testable: why
        table.add_row(
            escape(verdict.run),
            str(verdict.metric),
            verdict.where,
            f"[{OUTCOME_STYLE[verdict.outcome]}]{escape(shown)}[/]",
            escape(verdict.evidence) if testable else "-",
            note,
        )
    return table, [f"[{index}] {method}" for index, method in enumerate(methods, 1)]


def render(console: Console, comparison: Comparison) -> None:
    """Print the comparison: runs, headline numbers, the verdicts (when computed), numerical
    agreement, then the stack and spec differences."""
    console.print(runs_table(comparison))
    table, notes = results_table(comparison)
    console.print(table)
    for note in notes:
        console.print(note, highlight=False, markup=False)
    if comparison.rows:
        console.print(efficiency_table(comparison))
    if comparison.verdicts:
        table, methods = verdicts_table(comparison.reference, comparison.verdicts)
        console.print(table)
        for method in methods:
            console.print(method, highlight=False, markup=False)
    elif comparison.verdicts is None and len(comparison.runs) > SIGNIFICANCE_RUNS:
        console.print(NO_SIGNIFICANCE, highlight=False, markup=False)
    if comparison.agreement is not None:
        console.print(agreement_table(comparison.agreement))
        if comparison.agreement.other_datasets:
            console.print(
                "other datasets, not compared sample by sample: "
                + ", ".join(comparison.agreement.other_datasets),
                highlight=False,
                markup=False,
            )
    else:
        console.print(NO_AGREEMENT, highlight=False, markup=False)
    for title, found in (
        ("HW/SW stack differences", comparison.stack),
        ("spec differences", comparison.spec),
    ):
        if found:
            console.print(differences_table(title, comparison, found))
        else:
            console.print(f"{title}: none")


CHECK_STYLE = {
    CheckStatus.PASS: "green",
    CheckStatus.REGRESSION: "red",
    CheckStatus.NOT_TESTABLE: "yellow",
}


def gate_table(result: GateResult) -> Table:
    """`mlms gate`: one row per metric with its change, the verdict and the result."""
    table = Table(
        title=f"mlms gate: {escape(result.subject)} against {escape(result.against)}",
        title_justify="left",
        caption=result.rule,
        caption_justify="left",
        pad_edge=False,
    )
    for column in ("metric", "result", "why"):
        table.add_column(column, overflow="fold")
    for check in result.checks:
        style = CHECK_STYLE[check.status]
        table.add_row(escape(check.name), f"[{style}]{check.status}[/]", escape(check.reason))
    return table
