"""`mlms report`: a comparison as one self-contained HTML file.

The same runs and the same :class:`~mlmodelscope.report.compare.Comparison` as `mlms compare`
(numerical agreement and, for at most :data:`~mlmodelscope.report.compare.SIGNIFICANCE_RUNS`
runs, the significance verdicts included), written as a page that needs nothing but itself: no
external CSS, script, font or image, so it opens offline and can be attached to a ticket. The
plots are inline SVG drawn here (latency CDF per run, throughput against batch size, the task's
primary metric, by name, against p50 latency).

Every string that comes from a document is escaped. Every number in a table carries its exact
value in a ``data-value`` attribute (``repr`` of the float), next to the rounded text a reader
sees, so the page can be checked against the documents it was made from.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from mlmodelscope.analysis.plots import COLOURS
from mlmodelscope.contract.metric import (
    FRACTIONS,
    NOT_MEASURED,
    UNITS,
    format_cost,
    format_energy,
    format_metric,
)
from mlmodelscope.contract.result import Measurement, ResultDocument
from mlmodelscope.report.compare import (
    SIGNIFICANCE_RUNS,
    Comparison,
    Difference,
    LoadedRun,
    NumericalAgreement,
    RunInfo,
    compare,
)
from mlmodelscope.report.significance import DEFAULT_MIN_EFFECT
from mlmodelscope.report.verdicts import ALPHA, MetricVerdict, Outcome

PALETTE = COLOURS
"""One colour per run, in run order (Tableau 10), repeating after ten runs."""
CDF_POINTS = 400
"""At most this many points per CDF path (evenly spaced ranks of the raw latencies)."""


def esc(value: object) -> str:
    """A document's string as HTML/XML text or attribute value."""
    return escape(str(value), quote=True)


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


# ------------------------------------------------------------------------------ plot data


@dataclass(frozen=True)
class Series:
    """One run's points in a plot."""

    label: str
    colour: str
    points: list[tuple[float, float]]
    note: str = ""
    """Said in the legend, e.g. the batch size and where the points come from."""


def measurement_for(doc: ResultDocument, batch_size: int | None) -> Measurement | None:
    """The document's measurement of ``batch_size``, else its first one (``None`` when it has
    none, e.g. a Failed run)."""
    measurements = doc.measurements or []
    for measurement in measurements:
        if measurement.batch_size == batch_size:
            return measurement
    return measurements[0] if measurements else None


def cdf_points(measurement: Measurement) -> tuple[list[tuple[float, float]], str]:
    """(latency ms, fraction of queries at or below it), and where they come from: every raw
    latency (``raw``, thinned to :data:`CDF_POINTS` evenly spaced ranks) when the document
    kept them, else the latency percentiles with the minimum and maximum (``percentiles``)."""
    raw = measurement.raw.latencies_ns if measurement.raw is not None else []
    if raw:
        ordered = sorted(raw)
        n = len(ordered)
        step = max(1, math.ceil(n / CDF_POINTS))
        ranks = list(range(step - 1, n, step))
        if ranks[-1] != n - 1:
            ranks.append(n - 1)
        return [(ordered[0] / 1e6, 0.0)] + [(ordered[r] / 1e6, (r + 1) / n) for r in ranks], "raw"
    stats = measurement.latency
    points = [(stats.min_s * 1e3, 0.0), (stats.max_s * 1e3, 1.0)]
    for label, seconds in stats.percentiles_s.items():
        try:
            fraction = float(label.lstrip("p")) / 100
        except ValueError:
            continue
        points.append((seconds * 1e3, fraction))
    return sorted(points, key=lambda p: (p[1], p[0])), "percentiles"


def cdf_series(runs: Sequence[LoadedRun], comparison: Comparison) -> list[Series | None]:
    """Each run's latency CDF (``None`` for a run without measurements), at the batch size of
    the reference run's first row where the run has it, else at the run's first."""
    first = runs[0].document.results or []
    batch = first[0].batch_size if first else None
    found: list[Series | None] = []
    for index, (run, info) in enumerate(zip(runs, comparison.runs, strict=True)):
        measurement = measurement_for(run.document, batch)
        if measurement is None:
            found.append(None)
            continue
        points, source = cdf_points(measurement)
        note = f"batch {measurement.batch_size}, {source}"
        found.append(Series(info.label, colour(index), points, note))
    return found


def throughput_series(comparison: Comparison) -> list[Series]:
    """Samples/s against batch size, per run (rows without a throughput left out)."""
    found = []
    for index, info in enumerate(comparison.runs):
        points = sorted(
            (float(row.batch_size), row.throughput)
            for row in comparison.rows
            if row.run == info.label and row.throughput is not None
        )
        found.append(Series(info.label, colour(index), points))
    return found


def plotted_metric(comparison: Comparison) -> str | None:
    """The primary metric the accuracy plot shows: the reference's, else the first run's
    that has one (runs of another metric are left out of the plot, not mixed into it)."""
    names = [row.metric for row in comparison.rows if row.metric_value is not None]
    ref = [row.metric for row in comparison.rows if row.run == comparison.reference]
    return next((n for n in ref if n in names), names[0] if names else None)


def accuracy_series(comparison: Comparison) -> list[Series]:
    """The primary metric (% for a fraction such as top1 or miou) against p50 latency (ms),
    one point per run and batch size, of the runs whose metric is :func:`plotted_metric`."""
    name = plotted_metric(comparison)
    scale = 100.0 if name in FRACTIONS else 1.0
    found = []
    for index, info in enumerate(comparison.runs):
        points = [
            (row.p50_ms, scale * row.metric_value)
            for row in comparison.rows
            if row.run == info.label
            and row.p50_ms is not None
            and row.metric_value is not None
            and row.metric == name
        ]
        found.append(Series(info.label, colour(index), points))
    return found


# ------------------------------------------------------------------------------ SVG


@dataclass(frozen=True)
class Axis:
    """A linear or log10 axis over [lo, hi]."""

    lo: float
    hi: float
    log: bool = False

    @classmethod
    def over(
        cls,
        values: Sequence[float],
        log: bool = False,
        zero: bool = False,
        within: tuple[float, float] | None = None,
    ) -> Axis:
        """An axis covering ``values`` with a margin (log when asked, every value is positive
        and they span more than a factor of 10; from 0 when ``zero``; never beyond
        ``within``)."""
        finite = [v for v in values if math.isfinite(v)]
        if log:
            positive = [v for v in finite if v > 0]
            if positive and max(positive) / min(positive) > 10:
                return cls(min(positive) / 1.15, max(positive) * 1.15, log=True)
        if not finite:
            return cls(0.0, 1.0)
        lo, hi = (min(0.0, *finite) if zero else min(finite)), max(finite)
        if hi - lo <= 0:
            pad = abs(hi) * 0.1 or 1.0
            lo, hi = (lo if zero else lo - pad), hi + pad
        else:
            pad = (hi - lo) * 0.05
            lo, hi = (lo if zero else lo - pad), hi + pad
        if within is not None:
            lo, hi = max(lo, within[0]), min(hi, within[1])
        return cls(lo, hi)

    def fraction(self, value: float) -> float:
        if self.log:
            return (math.log10(value) - math.log10(self.lo)) / (
                math.log10(self.hi) - math.log10(self.lo)
            )
        return (value - self.lo) / (self.hi - self.lo)

    def ticks(self) -> list[float]:
        if self.log:
            found = []
            for exponent in range(math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi))):
                for mantissa in (1, 2, 5):
                    value = mantissa * 10.0**exponent
                    if self.lo <= value <= self.hi:
                        found.append(value)
            return found
        span = self.hi - self.lo
        magnitude = 10.0 ** math.floor(math.log10(span / 7))
        step = next(m * magnitude for m in (1, 2, 5, 10) if span / (m * magnitude) <= 7)
        first = math.ceil(self.lo / step) * step
        return [
            first + i * step
            for i in range(int((self.hi - first) / step + 1e-9) + 1)
            if first + i * step <= self.hi + 1e-12
        ]


WIDTH, HEIGHT = 760, 340
LEFT, RIGHT, TOP, BOTTOM = 64, 220, 16, 48
"""Plot area margins; the legend sits in the right margin."""


def _tick_text(value: float) -> str:
    return f"{value:.6g}"


def _f(value: float) -> str:
    return f"{value:.2f}"


def chart(
    name: str,
    series: Sequence[Series | None],
    x: Axis,
    y: Axis,
    x_label: str,
    y_label: str,
    lines: bool,
    markers: bool,
    describe: Callable[[Series, tuple[float, float]], str] | None = None,
) -> str:
    """One SVG plot: axes with ticks, one path (``lines``) and/or circles (``markers``) per
    series, a legend. Every element of a series carries ``class="<name>"`` and
    ``data-run``."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(value: float) -> float:
        return LEFT + x.fraction(value) * plot_w

    def py(value: float) -> float:
        return TOP + (1 - y.fraction(value)) * plot_h

    parts = [
        f'<svg class="chart" id="{esc(name)}" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{esc(y_label)} against '
        f'{esc(x_label)}">',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" class="frame"/>',
    ]
    for tick in x.ticks():
        tx = _f(px(tick))
        parts.append(
            f'<line class="grid" x1="{tx}" y1="{TOP}" x2="{tx}" y2="{TOP + plot_h}"/>'
            f'<text class="tick" x="{tx}" y="{TOP + plot_h + 16}" text-anchor="middle">'
            f"{_tick_text(tick)}</text>"
        )
    for tick in y.ticks():
        ty = _f(py(tick))
        parts.append(
            f'<line class="grid" x1="{LEFT}" y1="{ty}" x2="{LEFT + plot_w}" y2="{ty}"/>'
            f'<text class="tick" x="{LEFT - 6}" y="{ty}" text-anchor="end" '
            f'dominant-baseline="middle">{_tick_text(tick)}</text>'
        )
    parts.append(
        f'<text class="label" x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 8}" '
        f'text-anchor="middle">{esc(x_label)}{" (log scale)" if x.log else ""}</text>'
        f'<text class="label" transform="translate(14 {TOP + plot_h / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle">{esc(y_label)}</text>'
    )
    spacing = 30 if any(item is not None and item.note for item in series) else 18
    for index, item in enumerate(series):
        legend_y = TOP + 8 + spacing * index
        if item is None:
            continue
        shown = [(a, b) for a, b in item.points if not x.log or a > 0]
        run = esc(item.label)
        if lines and shown:
            d = " ".join(
                f"{'M' if i == 0 else 'L'}{_f(px(a))},{_f(py(b))}" for i, (a, b) in enumerate(shown)
            )
            parts.append(
                f'<path class="{name}" data-run="{run}" d="{d}" fill="none" '
                f'stroke="{item.colour}" stroke-width="2"><title>{run}</title></path>'
            )
        if markers:
            for point in shown:
                title = describe(item, point) if describe else run
                parts.append(
                    f'<circle class="{name}" data-run="{run}" cx="{_f(px(point[0]))}" '
                    f'cy="{_f(py(point[1]))}" r="4" fill="{item.colour}">'
                    f"<title>{esc(title)}</title></circle>"
                )
        legend = item.label if len(item.label) <= 30 else item.label[:29] + "…"
        note = (
            f'<tspan class="note" x="{WIDTH - RIGHT + 28}" dy="13">{esc(item.note)}</tspan>'
            if item.note
            else ""
        )
        parts.append(
            f'<g class="legend"><title>{run}{esc(f" ({item.note})" if item.note else "")}'
            f'</title><rect x="{WIDTH - RIGHT + 12}" y="{legend_y - 5}" width="10" height="10" '
            f'fill="{item.colour}"/><text x="{WIDTH - RIGHT + 28}" y="{legend_y + 4}">'
            f"{esc(legend)}{note}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def plots(runs: Sequence[LoadedRun], comparison: Comparison) -> list[tuple[str, str, str]]:
    """(title, caption, SVG) of each plot."""
    cdfs = cdf_series(runs, comparison)
    cdf_x = Axis.over([p[0] for s in cdfs if s for p in s.points], log=True)
    missing = [info.label for info, s in zip(comparison.runs, cdfs, strict=True) if s is None]
    cdf_caption = (
        "Fraction of queries answered within a latency, from every measured query where the "
        "document kept them (raw), else from its percentiles; at the reference's first batch "
        "size where a run measured it."
        + (f" No measurements: {', '.join(missing)}." if missing else "")
    )
    throughput = throughput_series(comparison)
    accuracy = accuracy_series(comparison)
    metric = plotted_metric(comparison) or "top1"
    percent = metric in FRACTIONS
    unit = "%" if percent else (f" {UNITS[metric]}" if metric in UNITS else "")
    others = sorted(
        {r.run for r in comparison.rows if r.metric_value is not None and r.metric != metric}
    )
    accuracy_caption = f"{metric} against p50 latency, one point per run and batch size." + (
        f" Another metric, not plotted: {', '.join(others)}." if others else ""
    )

    def described(item: Series, point: tuple[float, float]) -> str:
        return f"{item.label}: p50 {point[0]:.6g} ms, {metric} {point[1]:.4g}{unit}"

    return [
        (
            "Latency CDF",
            cdf_caption,
            chart(
                "cdf",
                cdfs,
                cdf_x,
                Axis(0.0, 1.02),
                "latency (ms)",
                "fraction of queries",
                lines=True,
                markers=False,
            ),
        ),
        (
            "Throughput against batch size",
            "Samples per second of each run at each batch size it measured.",
            chart(
                "throughput",
                throughput,
                Axis.over([p[0] for s in throughput for p in s.points]),
                Axis.over([p[1] for s in throughput for p in s.points], zero=True),
                "batch size",
                "samples/s",
                lines=True,
                markers=True,
            ),
        ),
        (
            f"{metric} against latency",
            accuracy_caption,
            chart(
                "accuracy",
                accuracy,
                Axis.over([p[0] for s in accuracy for p in s.points], log=True),
                Axis.over(
                    [p[1] for s in accuracy for p in s.points],
                    within=(0.0, 100.0) if percent else None,
                ),
                "p50 latency (ms)",
                f"{metric} ({unit.strip()})" if unit else metric,
                lines=False,
                markers=True,
                describe=described,
            ),
        ),
    ]


# ------------------------------------------------------------------------------ tables


def number(column: str, value: float | None, text: str) -> str:
    """A table cell holding a number: the exact value in ``data-value``, ``text`` shown."""
    if value is None:
        return f'<td class="num none" data-column="{column}">-</td>'
    return f'<td class="num" data-column="{column}" data-value="{value!r}">{esc(text)}</td>'


def delta(column: str, value: float | None, higher_is_better: bool) -> str:
    """A relative difference cell, ``better``/``worse`` than the reference as its class."""
    if value is None:
        return f'<td class="num delta none" data-column="{column}"></td>'
    kind = ""
    if abs(value) >= 0.0005:
        kind = " better" if (value > 0) == higher_is_better else " worse"
    return (
        f'<td class="num delta{kind}" data-column="{column}" data-value="{value!r}">'
        f"{100 * value:+.1f}%</td>"
    )


def runs_table(runs: Sequence[LoadedRun], infos: Sequence[RunInfo]) -> str:
    rows = []
    for index, (run, info) in enumerate(zip(runs, infos, strict=True)):
        doc = run.document
        status = info.status if info.error is None else f"{info.status}: {info.error}"
        model = doc.model.name if doc.model is not None else doc.spec.get("model", {}).get("name")
        dataset = doc.dataset.name if doc.dataset is not None else None
        rows.append(
            f'<tr data-run="{esc(info.label)}"><td><span class="swatch" '
            f'style="background:{colour(index)}"></span>{esc(info.label)}</td>'
            f"<td>{esc(info.framework)}</td><td>{esc(model or '-')}</td>"
            f"<td>{esc(dataset or '-')}</td><td>{esc(status)}</td>"
            f"<td>{esc(doc.started_at)}</td><td><code>{esc(info.run_id or '-')}</code></td>"
            f"<td><code>{esc(doc.trace_id or '-')}</code></td><td>{esc(info.source)}</td></tr>"
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "run",
            "framework",
            "model",
            "dataset",
            "status",
            "started",
            "run id",
            "trace id",
            "source",
        )
    )
    return (
        f'<table class="runs"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


RESULT_COLUMNS = (
    "run",
    "scenario",
    "batch",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "mean ms",
    "samples/s",
    "energy/inference",
    "cost/1k inferences",
    "metric",
    "verdict",
    "Δ p50",
    "Δ p99",
    "Δ samples/s",
    "Δ metric",
)


def measured(column: str, value: float | None, text: str) -> str:
    """An efficiency cell: the value in ``data-value``, or ``not measured``."""
    if value is None:
        return f'<td class="num none" data-column="{column}">{esc(NOT_MEASURED)}</td>'
    return number(column, value, text)


def results_table(comparison: Comparison) -> str:
    """One row per run, scenario and batch size; INVALID rows footnoted with their reasons."""
    rows: list[str] = []
    notes: list[str] = []
    for row in comparison.rows:
        if row.valid is None:
            verdict = '<td class="verdict">-</td>'
        elif row.valid:
            verdict = '<td class="verdict valid">VALID</td>'
        else:
            notes.append(
                f'<li id="invalid-{len(notes) + 1}">{esc(row.run)} batch {row.batch_size}: '
                f"{esc('; '.join(row.invalid_reasons))}</li>"
            )
            verdict = (
                f'<td class="verdict invalid">INVALID <a href="#invalid-{len(notes)}">'
                f"[{len(notes)}]</a></td>"
            )
        if row.metric_note is not None:
            metric_delta = (
                f'<td class="delta not-comparable" data-column="metric_rel">'
                f"{esc(row.metric_note)}</td>"
            )
        else:
            metric_delta = delta("metric_rel", row.metric_rel, higher_is_better=True)
        rows.append(
            f'<tr data-run="{esc(row.run)}" data-scenario="{esc(row.scenario)}" '
            f'data-batch="{row.batch_size}"><td>{esc(row.run)}</td><td>{esc(row.scenario)}</td>'
            + number("batch_size", row.batch_size, str(row.batch_size))
            + number("p50_ms", row.p50_ms, f"{row.p50_ms:.3f}" if row.p50_ms is not None else "")
            + number("p90_ms", row.p90_ms, f"{row.p90_ms:.3f}" if row.p90_ms is not None else "")
            + number("p99_ms", row.p99_ms, f"{row.p99_ms:.3f}" if row.p99_ms is not None else "")
            + number(
                "mean_ms", row.mean_ms, f"{row.mean_ms:.3f}" if row.mean_ms is not None else ""
            )
            + number(
                "throughput",
                row.throughput,
                f"{row.throughput:,.0f}" if row.throughput is not None else "",
            )
            + measured(
                "joules_per_inference",
                row.joules_per_inference,
                f"{format_energy(row.joules_per_inference)} ({row.energy_method})",
            )
            + measured("cost_per_1000", row.cost_per_1000, format_cost(row.cost_per_1000))
            + number("metric_value", row.metric_value, format_metric(row.metric, row.metric_value))
            + verdict
            + delta("p50_rel", row.p50_rel, higher_is_better=False)
            + delta("p99_rel", row.p99_rel, higher_is_better=False)
            + delta("throughput_rel", row.throughput_rel, higher_is_better=True)
            + metric_delta
            + "</tr>"
        )
    head = "".join(f"<th>{esc(c)}</th>" for c in RESULT_COLUMNS)
    table = (
        f'<table class="results"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    if notes:
        table += f'<ol class="notes">{"".join(notes)}</ol>'
    return table


def _value(value: Any) -> str:
    if value is None:
        return '<td class="none">-</td>'
    text = value if isinstance(value, str) else json.dumps(value)
    return f"<td>{esc(text)}</td>"


def differences_table(name: str, comparison: Comparison, found: Sequence[Difference]) -> str:
    """Key by run: only the keys whose values differ (``-`` where a run lacks the key)."""
    if not found:
        return f'<p class="{name} none">none: every run has the same values</p>'
    head = "<th>key</th>" + "".join(f"<th>{esc(run.label)}</th>" for run in comparison.runs)
    rows = "".join(
        f"<tr><td><code>{esc(d.key)}</code></td>{''.join(_value(v) for v in d.values)}</tr>"
        for d in found
    )
    return f'<table class="{name}"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def _yes_no(value: bool | None) -> str:
    if value is None:
        return '<td class="identical none" data-column="bit_identical">-</td>'
    kind = "valid" if value else "invalid"
    return (
        f'<td class="identical {kind}" data-column="bit_identical" '
        f'data-value="{str(value).lower()}">{"yes" if value else "no"}</td>'
    )


def agreement_table(agreement: NumericalAgreement) -> str:
    """One row per run on the reference's dataset: bit-identical outputs, top-1 agreement, the
    first samples whose top-1 class differs, and the chosen-class score differences."""
    rows = []
    for pair in agreement.pairs:
        share = pair.top1_agreement
        agree = (
            "-"
            if share is None or pair.samples is None
            else f"{100 * share:.2f}% ({pair.top1_agree}/{pair.samples})"
        )
        first = "".join(
            f'<li data-index="{d.index}" data-reference-class="{d.reference_class}" '
            f'data-run-class="{d.run_class}">#{d.index}: {d.reference_class} → {d.run_class}</li>'
            for d in pair.first_differences
        )
        more = (
            "<li>…</li>"
            if pair.top1_differ and pair.top1_differ > len(pair.first_differences)
            else ""
        )
        rows.append(
            f'<tr data-run="{esc(pair.run)}"><td>{esc(pair.run)}</td>'
            + _yes_no(pair.bit_identical)
            + number("top1_agreement", share, agree)
            + number(
                "top1_differ",
                pair.top1_differ,
                "" if pair.top1_differ is None else str(pair.top1_differ),
            )
            + (f'<td><ul class="samples">{first}{more}</ul></td>' if first else "<td>-</td>")
            + number(
                "max_abs_score_diff",
                pair.max_abs_score_diff,
                f"{pair.max_abs_score_diff:.3g}" if pair.max_abs_score_diff is not None else "",
            )
            + number(
                "mean_abs_score_diff",
                pair.mean_abs_score_diff,
                f"{pair.mean_abs_score_diff:.3g}" if pair.mean_abs_score_diff is not None else "",
            )
            + f'<td class="scale">{esc(pair.score_scale or "-")}</td>'
            + f'<td class="note">{esc(pair.note or "")}</td></tr>'
        )
    head = "".join(
        f"<th>{esc(c)}</th>"
        for c in (
            "run",
            "bit-identical",
            "top-1 agree",
            "differ",
            "first differing samples",
            "max |Δ score|",
            "mean |Δ score|",
            "scores",
            "note",
        )
    )
    return (
        f'<table class="agreement"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def agreement_section(comparison: Comparison) -> str:
    """The "Numerical agreement" section: what it compares, then :func:`agreement_table`."""
    agreement = comparison.agreement
    if agreement is None:
        return (
            '<p class="agreement none">Not shown: no other run evaluated the reference\'s '
            "dataset, or the reference has no accuracy pass.</p>"
        )
    others = (
        " Other datasets, not compared sample by sample: "
        f"{esc(', '.join(agreement.other_datasets))}."
        if agreement.other_datasets
        else ""
    )
    return (
        f"<p>Each run against the reference, <b>{esc(agreement.reference)}</b>, on "
        f"{esc(agreement.dataset)}, from the accuracy pass: bit-identical means equal "
        "<code>outputs_sha256</code>; <i>#i: a → b</i> is sample i (dataset order), whose top-1 "
        "class is a in the reference and b in the run; |Δ score| is the difference of the raw "
        "first output at the chosen class, over the samples where both chose the same class."
        f"{others}</p>{agreement_table(agreement)}"
    )


OUTCOME_CLASS = {
    Outcome.FASTER: "better",
    Outcome.BETTER: "better",
    Outcome.SLOWER: "worse",
    Outcome.WORSE: "worse",
    Outcome.SAME: "same",
    Outcome.NOT_TESTABLE: "untestable",
}
"""The verdict cell's class: its colour, as the Δ columns' (green better, red worse)."""
VERDICT_COLUMNS = ("run", "metric", "where", "verdict", "interval or p-value", "method")


def methods_of(verdicts: Sequence[MetricVerdict]) -> list[str]:
    """The methods the verdicts name, each once, in order of first use: the legend, whose
    1-based positions the method column cites (a not testable verdict names none)."""
    return list(dict.fromkeys(v.method for v in verdicts if v.outcome is not Outcome.NOT_TESTABLE))


def _data(name: str, value: float | None) -> str:
    return "" if value is None else f' data-{name}="{value!r}"'


def verdicts_table(verdicts: Sequence[MetricVerdict]) -> str:
    """One row per run, metric, scenario and batch size, as `mlms compare` prints them: the
    verdict (``not testable: <why>`` when there is none), the interval or p-value with its
    exact numbers in ``data-*`` attributes, and the method as a footnote of the legend under
    the table (``ol.methods``, items ``#method-<n>``)."""
    methods = methods_of(verdicts)
    rows = []
    for v in verdicts:
        testable = v.outcome is not Outcome.NOT_TESTABLE
        where = (
            ""
            if v.scenario is None
            else f' data-scenario="{esc(v.scenario)}" data-batch="{v.batch_size}"'
        )
        if testable:
            note = methods.index(v.method) + 1
            evidence = (
                f'<td class="evidence"{_data("ratio", v.ratio)}{_data("low", v.low)}'
                f"{_data('high', v.high)}{_data('level', v.level)}"
                f"{_data('p-value', v.p_value)}>{esc(v.evidence)}</td>"
            )
            method = (
                f'<td class="method"><a href="#method-{note}" title="{esc(v.method)}">'
                f"[{note}]</a></td>"
            )
        else:
            evidence = '<td class="evidence none">-</td>'
            method = '<td class="method none">-</td>'
        rows.append(
            f'<tr data-run="{esc(v.run)}" data-metric="{esc(v.metric)}"{where} '
            f'data-outcome="{esc(v.outcome)}"><td>{esc(v.run)}</td><td>{esc(v.metric)}</td>'
            f"<td>{esc(v.where)}</td>"
            f'<td class="outcome {OUTCOME_CLASS[v.outcome]}">'
            f"{esc(v.outcome if testable else v.evidence)}</td>{evidence}{method}</tr>"
        )
    head = "".join(f"<th>{esc(c)}</th>" for c in VERDICT_COLUMNS)
    legend = "".join(f'<li id="method-{n}">{esc(text)}</li>' for n, text in enumerate(methods, 1))
    return (
        f'<table class="verdicts"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
        + (f'<p class="legend">Methods:</p><ol class="methods">{legend}</ol>' if legend else "")
    )


def verdicts_section(comparison: Comparison) -> str:
    """The "Significance" section: what the verdicts are, then :func:`verdicts_table`; or why
    there are none (not judged: more than :data:`SIGNIFICANCE_RUNS` runs)."""
    if comparison.verdicts is None:
        why = (
            f"more than {SIGNIFICANCE_RUNS} runs; compare fewer at a time"
            if len(comparison.runs) > SIGNIFICANCE_RUNS
            else "not asked for"
        )
        return f'<p class="verdicts none">Not judged: {esc(why)}.</p>'
    if not comparison.verdicts:
        return (
            '<p class="verdicts none">Nothing to judge: no other run has a row of the '
            "reference's scenario and batch size, or a top-1 accuracy.</p>"
        )
    return (
        f"<p>Each run against the reference, <b>{esc(comparison.reference)}</b>: per scenario "
        "and batch size the p50 and p99 latency and the throughput, and once the top-1 "
        "accuracy. ratio: run / reference with its confidence interval; p: McNemar's p-value. "
        "Faster or slower only when the whole interval lies beyond "
        f"±{DEFAULT_MIN_EFFECT:.0%} of 1; better or worse only when p &lt; {ALPHA:.2g} for "
        "every labelling the documents allow; <i>not testable</i> says why the documents "
        "cannot tell.</p>"
        f"{verdicts_table(comparison.verdicts)}"
    )


def leveled_section(runs: Sequence[LoadedRun]) -> str:
    """The "Leveled correction (XSP)" section, for runs traced at framework level: each
    run's residual per batch size and its top layers and operators by corrected time (the
    tables of `mlms analyze`, which adds FLOPs, bytes moved and plots). Empty when no run
    has a correction."""
    from mlmodelscope.analysis.pipeline import analyze, label_runs
    from mlmodelscope.analysis.plots import layer_tables, runs_section

    with_correction = [
        (run.source, run.document.to_json_dict())
        for run in runs
        if run.document.tracing is not None
        and any(b.correction is not None for b in run.document.tracing.by_batch_size)
    ]
    if not with_correction:
        return ""
    try:
        analysis = analyze(label_runs(with_correction), top=5, costs=lambda doc, batch: (None, ""))
    except ValueError as exc:
        return f"<h2>Leveled correction (XSP)</h2><p>Not shown: {esc(exc)}</p>"
    return (
        "<h2>Leveled correction (XSP)</h2><p>Layer times from the framework profiler, each "
        "traced call's operators sharing that call's model-level predict time scaled to the "
        "untraced run; the residual is |Σ corrected − untraced| / untraced. "
        "<code>mlms analyze</code> adds FLOPs, bytes moved and plots.</p>"
        f"{runs_section(analysis)}{layer_tables(analysis)}"
    )


# ------------------------------------------------------------------------------ page

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#222;
max-width:1400px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.9em;margin:.5em 0}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.none{color:#999}.better{color:#1a7f37}.worse{color:#c62828}
.valid{color:#1a7f37}.invalid{color:#b26a00}.swatch{display:inline-block;width:10px;
height:10px;margin-right:6px}code{font-size:.95em}.notes{font-size:.85em}
figure{margin:1em 0}figcaption{font-size:.85em;color:#555;max-width:760px}
svg.chart{font-size:11px;background:#fff}svg .frame{fill:none;stroke:#999}
svg .grid{stroke:#eee}svg .tick{fill:#555}svg .label{fill:#222;font-size:12px}
svg .note{fill:#777}ul.samples{margin:0;padding-left:1.2em}
td.outcome.untestable{color:#b26a00;max-width:32em}ol.methods{font-size:.85em;max-width:1000px}
p.legend{font-size:.85em;margin:.4em 0 0}
"""


def render_html(runs: Sequence[LoadedRun], comparison: Comparison | None = None) -> str:
    """The report of ``runs`` (the first is the reference) as one HTML page; without a
    ``comparison``, ``compare`` of the runs, judging significance for at most
    :data:`SIGNIFICANCE_RUNS` of them."""
    if comparison is None:
        comparison = compare(runs, significance=len(runs) <= SIGNIFICANCE_RUNS)
    title = "mlmodelscope report: " + ", ".join(run.label for run in comparison.runs)
    figures = "".join(
        f"<figure><h3>{esc(name)}</h3>{svg}<figcaption>{esc(caption)}</figcaption></figure>"
        for name, caption, svg in plots(runs, comparison)
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{esc(title)}</h1>"
        f"<h2>Runs</h2>{runs_table(runs, comparison.runs)}"
        f"<h2>Comparison</h2><p>Δ: value / reference - 1, against the row of the same "
        f"scenario and batch size of the reference run, <b>{esc(comparison.reference)}</b>; "
        f"empty where it has none.</p>{results_table(comparison)}"
        f"<h2>Significance</h2>{verdicts_section(comparison)}"
        f"<h2>Numerical agreement</h2>{agreement_section(comparison)}"
        f"<h2>Plots</h2>{figures}"
        f"{leveled_section(runs)}"
        f"<h2>HW/SW stack differences</h2>"
        f"{differences_table('stack', comparison, comparison.stack)}"
        f"<h2>Spec differences</h2>{differences_table('spec', comparison, comparison.spec)}"
        "</body></html>\n"
    )
