"""What `mlms run` prints: a comparison table across evaluations and frameworks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.table import Table

from mlmodelscope.agent.runner import RunOutcome
from mlmodelscope.contract.metric import NOT_MEASURED, format_cost, format_energy, format_metric


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def results_table(outcomes: Sequence[RunOutcome]) -> tuple[Table, list[str]]:
    """One row per evaluation and batch size, plus footnotes saying why rows are INVALID."""
    table = Table(title="mlmodelscope results", title_justify="left", pad_edge=False)
    widest = max((len(o.document["evaluation"]["name"]) for o in outcomes), default=10)
    for column, justify in (
        ("evaluation", "left"),
        ("framework", "left"),
        ("scenario", "left"),
        ("batch", "right"),
        ("p50 ms", "right"),
        ("p99 ms", "right"),
        ("samples/s", "right"),
        ("metric", "right"),
        ("verdict", "left"),
    ):
        table.add_column(
            column,
            justify=justify,  # type: ignore[arg-type]
            no_wrap=True,
            min_width=min(widest, 28) if column == "evaluation" else None,
        )
    notes: list[str] = []
    for outcome in outcomes:
        doc = outcome.document
        backend = doc.get("backend", {})
        framework = (
            f"{backend.get('framework', '?')} {backend.get('framework_version', '')} "
            f"{backend.get('device', '')}"
        )
        for row in doc.get("results", []):
            verdict = "[green]VALID[/green]"
            if not row["valid"]:
                notes.append(
                    f"[{len(notes) + 1}] {doc['evaluation']['name']} batch {row['batch_size']}: "
                    + "; ".join(row["invalid_reasons"])
                )
                verdict = f"[yellow]INVALID[{len(notes)}][/yellow]"
            table.add_row(
                doc["evaluation"]["name"],
                " ".join(framework.split()),
                row["scenario"],
                str(row["batch_size"]),
                _ms(row["latency_ms"]["p50"]),
                _ms(row["latency_ms"]["p99"]),
                f"{row['throughput']:.0f}",
                _metric(row),
                verdict,
            )
    return table, notes


def efficiency_table(outcomes: Sequence[RunOutcome]) -> tuple[Table, list[str]]:
    """Energy per inference and cost per 1,000 inferences per evaluation and batch size, plus
    one line per distinct reason a figure is not measured."""
    table = Table(title="efficiency", title_justify="left", pad_edge=False)
    for column, justify in (
        ("evaluation", "left"),
        ("batch", "right"),
        ("energy/inference", "right"),
        ("counter", "left"),
        ("cost/1k inferences", "right"),
    ):
        table.add_column(column, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    reasons: dict[str, None] = {}
    for outcome in outcomes:
        doc = outcome.document
        for row, m in zip(doc.get("results", []), doc.get("measurements", []), strict=False):
            energy = m.get("energy") or {}
            if row.get("joules_per_inference") is None:
                reasons[f"energy {energy.get('reason') or NOT_MEASURED}"] = None
            if row.get("cost_per_1000") is None:
                reasons[f"cost {(doc.get('cost') or {}).get('reason') or NOT_MEASURED}"] = None
            table.add_row(
                doc["evaluation"]["name"],
                str(row["batch_size"]),
                format_energy(row.get("joules_per_inference")),
                row.get("energy_method") or "-",
                format_cost(row.get("cost_per_1000")),
            )
    return table, list(reasons)


def spread_lines(outcomes: Sequence[RunOutcome]) -> list[str]:
    """One line per measurement with repetitions: each headline figure's mean over them and
    its interval, e.g. 'p50 1.234 ms [1.200–1.270]'."""
    lines = []
    for outcome in outcomes:
        name = outcome.document["evaluation"]["name"]
        for m in outcome.document.get("measurements", []):
            spread = m.get("spread")
            if spread:
                fresh = m.get("repetition_process") == "fresh"
                lines.append(f"{name} batch {m['batch_size']}: {_spread_text(spread, fresh)}")
    return lines


def _spread_text(spread: dict[str, Any], fresh: bool) -> str:
    figures = ", ".join(
        (
            _interval("p50", spread["p50_s"], 1e3, "ms", ".3f"),
            _interval("p99", spread["p99_s"], 1e3, "ms", ".3f"),
            _interval("", spread["throughput_samples_per_s"], 1.0, "samples/s", ".0f"),
        )
    )
    count = f"{spread['repetitions']} repetitions" + (", each in a fresh process" if fresh else "")
    if spread["note"]:
        return f"{figures}; mean of {count}, {spread['note']}"
    level, method = spread["confidence_level"], spread["method"]
    return f"{figures}; mean and {level:.0%} interval over {count} (bootstrap {method})"


def _interval(label: str, figure: dict[str, Any], scale: float, unit: str, fmt: str) -> str:
    """'p50 1.234 ms [1.200–1.270]', or without brackets when there is no interval."""
    text = " ".join(part for part in (label, f"{figure['estimate'] * scale:{fmt}}", unit) if part)
    if figure["low"] is None or figure["high"] is None:
        return text
    return f"{text} [{figure['low'] * scale:{fmt}}–{figure['high'] * scale:{fmt}}]"


def _metric(row: dict[str, Any]) -> str:
    """The task's primary metric with its name, e.g. 'top1 98.00%', 'miou 67.93%' or
    'psnr 28.31 dB'."""
    name, value = row.get("metric"), row.get("metric_value")
    if name is None or value is None:
        return _pct(row["top1"])
    return format_metric(name, value)


def agreement(outcomes: Sequence[RunOutcome]) -> dict[str, Any] | None:
    """How far the evaluations' outputs and top-1 accuracies are from the first one's, when
    they ran the same samples (same output shape): the cross-framework consistency check."""
    with_outputs = [o for o in outcomes if o.outputs is not None]
    if len(with_outputs) < 2:
        return None
    reference = with_outputs[0]
    assert reference.outputs is not None
    rows = []
    for other in with_outputs[1:]:
        assert other.outputs is not None
        if other.outputs.shape != reference.outputs.shape:
            continue
        diff = np.abs(other.outputs.astype(np.float64) - reference.outputs.astype(np.float64))
        rows.append(
            {
                "evaluation": other.document["evaluation"]["name"],
                "max_abs_output_diff": float(diff.max()),
            }
        )
    accuracies = [
        o.document["accuracy"]["top1"]
        for o in with_outputs
        if o.document.get("accuracy") and o.document["accuracy"]["top1"] is not None
    ]
    return {
        "reference": reference.document["evaluation"]["name"],
        "outputs": rows,
        "top1_spread_percentage_points": (
            100 * (max(accuracies) - min(accuracies)) if accuracies else None
        ),
    }
