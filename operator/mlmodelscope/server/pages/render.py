"""The dashboard's pages as HTML strings: the runs table, a comparison, one run, and errors.

Server-rendered, no script: filters and the choice of runs to compare are plain GET forms, so
every page works with JavaScript off, and every URL can be bookmarked. The comparison is
`mlms report`'s, with its tables (significance verdicts included) and inline SVG plots
(:mod:`mlmodelscope.report.html`); the CSS is inline too, so the pages need nothing from
outside the app.

Every string that comes from a document, the store or the request is escaped
(:func:`~mlmodelscope.report.html.esc`); numbers in tables carry their exact value in
``data-value``, as in the report.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final
from urllib.parse import quote, urlencode

import yaml

from mlmodelscope import __version__
from mlmodelscope.contract.metric import format_metric, primary_metric
from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.report import html as report
from mlmodelscope.report.compare import Comparison, LoadedRun, compare, flatten, row_metric
from mlmodelscope.spec.status import BatchResult
from mlmodelscope.store import RunSummary

esc = report.esc

FILTERS: Final = {
    "model": "model_name",
    "framework": "framework",
    "device": "device",
    "gpu": "gpu_product",
    "status": "status",
    "evaluation": "evaluation",
    "dataset": "dataset",
}
"""Filter (query parameter, and keyword of ``Store.list_runs``) -> RunSummary attribute."""

STYLE: Final = (
    report.STYLE
    + """
body{margin:0 auto;padding:0 24px 24px;line-height:1.35}
header{display:flex;gap:1.4em;align-items:baseline;padding:12px 0 8px;
border-bottom:2px solid #4e79a7;margin-bottom:8px}
header .brand{font-weight:600;font-size:1.1em;color:#222;text-decoration:none}
header a{color:#2a5d8f}footer{margin-top:2.5em;font-size:.8em;color:#777}
a{color:#2a5d8f}.scroll{overflow-x:auto;max-width:100%}
form.filters{display:flex;flex-wrap:wrap;gap:10px 14px;align-items:flex-end;
background:#f7f9fb;border:1px solid #dde3ea;padding:10px 12px;margin:.6em 0}
form.filters label{display:flex;flex-direction:column;font-size:.8em;color:#555;gap:2px}
form.filters select{font-size:1rem;min-width:9em;max-width:18em}
button{font-size:.95em;padding:4px 14px;border:1px solid #2a5d8f;background:#4e79a7;
color:#fff;border-radius:3px;cursor:pointer}
a.clear{font-size:.9em;align-self:center}
table.listing tbody tr:hover{background:#f3f7fb}
table.listing td{white-space:nowrap}table.listing td.wrap{white-space:normal;min-width:8em}
.count{color:#555;font-size:.9em}.actions{margin:.6em 0;display:flex;gap:1em;
align-items:center}.hint{color:#666;font-size:.85em}
.status-Succeeded{color:#1a7f37}.status-Failed{color:#c62828}.status-Running{color:#b26a00}
.note{color:#555;background:#f7f7f7;border-left:3px solid #bbb;padding:6px 10px}
.error{border:1px solid #e0a0a0;background:#fff5f5;padding:8px 12px;margin:.6em 0}
.error pre{white-space:pre-wrap;margin:.4em 0 0}
pre.spec{background:#f7f7f7;border:1px solid #e3e3e3;padding:10px 12px;overflow-x:auto;
font-size:.85em;line-height:1.3}
table.facts th{text-align:left;font-weight:600;width:11em}
table.kv td:first-child{white-space:nowrap}table.kv td{word-break:break-word}
table.stack:not(.kv) td:not(:first-child),table.spec td:not(:first-child){background:#fff6d6}
table.stack:not(.kv) td.none,table.spec td.none{background:#fdf0f0}
table.stack td:first-child,table.spec td:first-child{white-space:nowrap}
table.stack td:not(:first-child),table.spec td:not(:first-child){overflow-wrap:anywhere}
table.listing{font-size:.86em}
.figures{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:0 28px}
.figures svg.chart{width:100%;max-width:760px;height:auto}
.columns{display:flex;flex-wrap:wrap;gap:0 32px}.columns>section{flex:1 1 440px;min-width:0}
ul.links{padding-left:1.2em}table.headline td.verdict{min-width:18em}
form.launch fieldset{border:1px solid #dde3ea;background:#f7f9fb;margin:.6em 0;
display:flex;flex-wrap:wrap;gap:8px 14px;align-items:flex-end}
form.launch label{display:flex;flex-direction:column;font-size:.8em;color:#555;gap:2px}
form.launch label.check{flex-direction:row;align-items:center;gap:4px;font-size:.95em}
form.launch .whole{flex-basis:100%}form.launch textarea{font-family:monospace;min-width:30em}
form.launch input[name=node_selector]{min-width:30em}
.error-text,.field-error{color:#c62828;font-size:.85em;display:block}
.state-succeeded{color:#1a7f37}.state-failed{color:#c62828}.state-running{color:#b26a00}
.state-cancelled,.state-interrupted{color:#777}pre.message{white-space:pre-wrap;margin:0}
th.ranked{background:#dce7f3}a.model{font-weight:600}
div.dataset h3{font-size:1em;margin:.9em 0 .3em;overflow-wrap:anywhere}
[hidden]{display:none!important}
"""
)


# ------------------------------------------------------------------------------ layout


def page(title: str, body: str) -> str:
    """A whole page: header with the way back to the runs, ``body``, footer."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · mlmodelscope</title><style>{STYLE}</style></head><body>"
        '<header><a class="brand" href="/">mlmodelscope results</a>'
        '<a href="/">runs</a><a href="/leaderboard">leaderboard</a>'
        '<a href="/launch">launch</a><a href="/launches">launches</a><a href="/try">try</a>'
        '<a href="/openapi.json">API (OpenAPI)</a></header>'
        f"<main><h1>{esc(title)}</h1>{body}</main>"
        f"<footer>mlmodelscope {esc(__version__)}</footer></body></html>\n"
    )


def error_page(title: str, message: str) -> str:
    """A 4xx/5xx page: what went wrong, and the way back."""
    return page(
        title, f'<p class="error">{esc(message)}</p><p><a href="/">Back to the runs</a></p>'
    )


def run_url(run_id: str) -> str:
    return f"/runs/{quote(run_id, safe='')}"


def _when(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S")


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.2f}%"


def _rate(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f}"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def significant(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits without an exponent (``0.0000833``)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def energy_cell(joules: float | None, method: str | None) -> str:
    """Energy per inference in mJ (the exact J in ``data-value``, the counter in the title);
    blank when not measured."""
    if joules is None:
        return '<td class="num none" data-column="joules_per_inference"></td>'
    title = f' title="{esc(method)} counter"' if method else ""
    return (
        f'<td class="num" data-column="joules_per_inference" data-value="{joules!r}"{title}>'
        f"{esc(significant(joules * 1e3))}</td>"
    )


def cost_cell(usd: float | None) -> str:
    """Cost per 1,000 inferences in USD; blank without a price."""
    if usd is None:
        return '<td class="num none" data-column="cost_per_1000"></td>'
    return (
        f'<td class="num" data-column="cost_per_1000" data-value="{usd!r}">'
        f"{esc(significant(usd))}</td>"
    )


# ------------------------------------------------------------------------------ runs


def filter_options(runs: Sequence[RunSummary]) -> dict[str, list[str]]:
    """Each filter's known values among ``runs``, sorted."""
    return {
        name: sorted({str(v) for run in runs if (v := getattr(run, attribute)) is not None})
        for name, attribute in FILTERS.items()
    }


def _select(name: str, options: Sequence[str], chosen: str | None) -> str:
    values = list(options)
    if chosen is not None and chosen not in values:
        values.append(chosen)  # a filter from the URL that no recent run has
    items = '<option value="">any</option>' + "".join(
        f'<option value="{esc(v)}"{" selected" if v == chosen else ""}>{esc(v)}</option>'
        for v in values
    )
    return f'<label>{esc(name)}<select name="{esc(name)}">{items}</select></label>'


def history_url(model: str) -> str:
    """The page of ``model``'s runs over time."""
    return f"/models/{quote(model, safe='')}/history"


def model_link(model: str | None) -> str:
    if not model:
        return "-"
    return f'<a class="model" href="{esc(history_url(model))}">{esc(model)}</a>'


def _run_row(run: RunSummary) -> str:
    first: BatchResult | None = run.results[0] if run.results else None
    batch = p50 = p99 = throughput = None
    if first is not None:
        batch, throughput = first.batch_size, first.throughput
        p50, p99 = first.latency_ms.p50, first.latency_ms.p99
    framework = " ".join(v for v in (run.framework, run.framework_version) if v) or "-"
    device = " · ".join(v for v in (run.device, run.gpu_product) if v) or "-"
    status = f'<span class="status-{esc(run.status)}">{esc(run.status)}</span>'
    if run.error_type:
        status += f" ({esc(run.error_type)})"
    elif run.valid is not None:
        status += (
            ' · <span class="valid">VALID</span>'
            if run.valid
            else (' · <span class="invalid">INVALID</span>')
        )
    label = run.evaluation or "-"
    if run.namespace:
        label = f"{run.namespace}/{label}"
    return (
        f'<tr data-run-id="{esc(run.run_id)}">'
        f'<td><input type="checkbox" name="run" value="{esc(run.run_id)}" '
        f'aria-label="select {esc(label)} ({esc(run.run_id[:8])})"></td>'
        f'<td><a href="{esc(run_url(run.run_id))}" title="{esc(run.run_id)}">'
        f"<code>{esc(run.run_id[:8])}</code></a></td>"
        f'<td class="wrap">{esc(label)}</td><td>{model_link(run.model_name)}</td>'
        f'<td class="wrap dataset">{esc(run.dataset or "-")}</td>'
        f"<td>{esc(framework)}</td><td>{esc(device)}</td><td>{esc(run.scenario or '-')}</td>"
        f"<td>{status}</td>"
        + report.number("metric_value", run.metric_value, _metric(run.metric, run.metric_value))
        + report.number("batch_size", batch, "" if batch is None else str(batch))
        + report.number("p50_ms", p50, _ms(p50))
        + report.number("p99_ms", p99, _ms(p99))
        + report.number("throughput", throughput, _rate(throughput))
        + f"<td>{esc(_when(run.started_at))}</td></tr>"
    )


RUN_COLUMNS: Final = (
    ("", ""),
    ("run", "the run's page"),
    ("evaluation", ""),
    ("model", ""),
    ("dataset", "the data the numbers came from: its name and sample count"),
    ("framework", ""),
    ("device / GPU", ""),
    ("scenario", ""),
    ("status", "status, and the verdict of every batch size"),
    ("metric", "the task's primary metric, by name: top1, miou, accuracy"),
    ("batch", "the first batch size, which the latency and throughput columns are of"),
    ("p50 ms", "at the first batch size"),
    ("p99 ms", "at the first batch size"),
    ("samples/s", "at the first batch size"),
    ("started (UTC)", ""),
)


def runs_page(
    runs: Sequence[RunSummary],
    chosen: Mapping[str, str | None],
    options: Mapping[str, Sequence[str]],
    limit: int,
) -> str:
    """The runs table (newest first, each run's dataset in its own column) under its filter
    form; checkboxes choose runs for ``/compare``."""
    filters = "".join(_select(name, options.get(name, []), chosen.get(name)) for name in FILTERS)
    form = (
        f'<form class="filters" method="get" action="/">{filters}'
        f'<input type="hidden" name="limit" value="{limit}">'
        '<button type="submit">Filter</button><a class="clear" href="/">clear filters</a></form>'
    )
    active = {k: v for k, v in chosen.items() if v is not None}
    shown = ", ".join(f"{k} = {v}" for k, v in active.items())
    count = f"{len(runs)} run{'s' if len(runs) != 1 else ''}" + (f" where {shown}" if shown else "")
    if len(runs) >= limit:
        count += f" (the {limit} newest)"
    if not runs:
        empty = (
            "No runs match these filters."
            if active
            else "No runs recorded yet: `mlms run spec.yaml` records every run it makes."
        )
        return page("Runs", f'{form}<p class="note">{esc(empty)}</p>')
    head = "".join(
        f'<th title="{esc(hint)}">{esc(name)}</th>' if hint else f"<th>{esc(name)}</th>"
        for name, hint in RUN_COLUMNS
    )
    table = (
        f'<div class="scroll"><table class="listing" id="runs"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(_run_row(run) for run in runs)}</tbody></table></div>"
    )
    compare_form = (
        f'<form method="get" action="/compare">{table}<div class="actions">'
        '<button type="submit">Compare selected runs</button><span class="hint">Tick two or '
        "more runs; the first ticked (topmost) is the reference.</span></div></form>"
    )
    return page("Runs", f'{form}<p class="count">{esc(count)}, newest first</p>{compare_form}')


# ------------------------------------------------------------------------------ compare


def compare_url(run_ids: Sequence[str]) -> str:
    return "/compare?" + urlencode([("run", run_id) for run_id in run_ids])


def _figures(
    runs: Sequence[LoadedRun], comparison: Comparison, names: Sequence[str] | None = None
) -> str:
    """The report's plots whose titles are ``names`` (None: every one)."""
    figures = "".join(
        f"<figure><h3>{esc(name)}</h3>{svg}<figcaption>{esc(caption)}</figcaption></figure>"
        for name, caption, svg in report.plots(runs, comparison)
        if names is None or name in names
    )
    return f'<div class="figures">{figures}</div>'


def compare_page(runs: Sequence[LoadedRun], comparison: Comparison) -> str:
    """`mlms report`'s comparison of ``runs`` (the first is the reference), with links to
    each run's page; the significance verdicts are ``comparison``'s (none: not judged)."""
    links = "".join(
        f'<li><a href="{esc(run_url(info.run_id))}">{esc(info.label)}</a> '
        f'<span class="hint">{esc(info.framework)} · {esc(info.status)}</span></li>'
        for info in comparison.runs
        if info.run_id
    )
    body = (
        f'<ul class="links">{links}</ul>'
        f'<h2>Runs</h2><div class="scroll">{report.runs_table(runs, comparison.runs)}</div>'
        "<h2>Results</h2><p>Δ: value / reference - 1, against the row of the same scenario "
        f"and batch size of the reference run, <b>{esc(comparison.reference)}</b>; empty "
        "where it has none. Green is better, red worse.</p>"
        f'<div class="scroll">{report.results_table(comparison)}</div>'
        f'<h2>Significance</h2><div class="scroll">{report.verdicts_section(comparison)}</div>'
        f"<h2>Plots</h2>{_figures(runs, comparison)}"
        f"<h2>Numerical agreement</h2>{report.agreement_section(comparison)}"
        f"<h2>HW/SW stack differences</h2>"
        f'<div class="scroll">'
        f"{report.differences_table('stack', comparison, comparison.stack)}</div>"
        f'<h2>Spec differences</h2><div class="scroll">'
        f"{report.differences_table('spec', comparison, comparison.spec)}</div>"
    )
    return page(f"Compare {len(runs)} runs", body)


# ------------------------------------------------------------------------------ one run


def _facts(doc: ResultDocument) -> str:
    evaluation = doc.evaluation.name or "-"
    if doc.evaluation.namespace:
        evaluation = f"{doc.evaluation.namespace}/{evaluation}"
    facts: list[tuple[str, str | None]] = [
        ("status", doc.status),
        ("evaluation", evaluation),
        ("run id", doc.run_id),
        ("started", doc.started_at),
        ("finished", doc.finished_at),
        ("duration", f"{doc.duration_s:.2f} s"),
    ]
    if doc.backend is not None:
        backend = doc.backend
        facts.append(
            ("framework", f"{backend.framework} {backend.framework_version} on {backend.device}")
        )
    if doc.model is not None:
        facts.append(("model", f"{doc.model.name} ({doc.model.format})"))
        facts.append(("model sha256", doc.model.sha256))
    manifest = doc.evaluation.model_manifest
    if manifest is not None:
        versions = " ← ".join(
            f"{m.name}@{m.resource_version}" if m.resource_version else m.name
            for m in manifest.chain
        )
        facts.append(("Model manifest", versions))
    if doc.dataset is not None:
        facts.append(("dataset", doc.dataset.identity()))
    facts += _efficiency_facts(doc)
    facts += [
        ("spec sha256", doc.spec_sha256),
        ("agent", doc.agent_version),
        ("image", doc.image),
    ]
    rows = "".join(
        f'<tr><th>{esc(name)}</th><td class="{"status-" + esc(value) if name == "status" else ""}">'
        f"{esc(value)}</td></tr>"
        for name, value in facts
        if value is not None
    )
    return f'<table class="facts">{rows}</table>'


def _efficiency_facts(doc: ResultDocument) -> list[tuple[str, str | None]]:
    """Where the run's cost came from (or why it has none), and why energy was not measured
    where it was not (documents of older agents: neither)."""
    facts: list[tuple[str, str | None]] = []
    if doc.cost is not None:
        cost = doc.cost
        if cost.price_per_node_hour is not None:
            source = f" ({cost.source})" if cost.source else ""
            price = f"{cost.price_per_node_hour:g} {cost.currency} per node-hour{source}"
            facts.append(("price", price))
        else:
            facts.append(("price", cost.reason))
    reasons = {
        m.energy.reason: None
        for m in doc.measurements or []
        if m.energy is not None and m.energy.reason is not None
    }
    if reasons:
        facts.append(("energy", "; ".join(reasons)))
    return facts


def trace_link(jaeger_url: str | None, trace_id: str | None) -> str | None:
    """The trace in the Jaeger UI at ``jaeger_url``; None without either."""
    if not jaeger_url or not trace_id:
        return None
    return f"{jaeger_url.rstrip('/')}/trace/{quote(trace_id, safe='')}"


def _trace(doc: ResultDocument, jaeger_url: str | None) -> str:
    if doc.trace_id is None:
        why = doc.tracing.reason if doc.tracing is not None and doc.tracing.reason else None
        return (
            '<p class="note trace">No trace link: this run has no trace id'
            + (f" ({esc(why)})" if why else " (it was not traced, or exported no spans)")
            + ".</p>"
        )
    if not jaeger_url:
        return (
            f'<p class="note trace">Trace <code>{esc(doc.trace_id)}</code>: no link, because '
            "this server was started without a Jaeger URL (<code>jaeger_url</code>). "
            f"<code>mlms trace {esc(doc.trace_id)}</code> breaks it down in a terminal.</p>"
        )
    url = trace_link(jaeger_url, doc.trace_id)
    return (
        f'<p class="trace">Trace <a class="trace" href="{esc(url)}">'
        f"<code>{esc(doc.trace_id)}</code> in Jaeger</a></p>"
    )


HEADLINE_COLUMNS: Final = (
    "scenario",
    "batch",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "mean ms",
    "samples/s",
    "queries/s",
    "energy mJ/inference",
    "cost USD/1k inferences",
    "metric",
    "top-5",
    "verdict",
)


def _verdict(row: BatchResult) -> str:
    if row.valid is None:
        return '<td class="verdict">-</td>'
    if row.valid:
        return '<td class="verdict valid">VALID</td>'
    reasons = "; ".join(row.invalid_reasons)
    return f'<td class="verdict invalid wrap">INVALID: {esc(reasons)}</td>'


def _headline(doc: ResultDocument) -> str:
    """One row per batch size: the document's ``results``, each with the primary metric by
    name (a document from before rows named it: its top-1)."""
    rows = doc.results or []
    metrics = [row_metric(doc, row) for row in rows]
    body = "".join(
        f'<tr data-batch="{row.batch_size}"><td>{esc(row.scenario)}</td>'
        + report.number("batch_size", row.batch_size, str(row.batch_size))
        + report.number("p50_ms", row.latency_ms.p50, _ms(row.latency_ms.p50))
        + report.number("p90_ms", row.latency_ms.p90, _ms(row.latency_ms.p90))
        + report.number("p99_ms", row.latency_ms.p99, _ms(row.latency_ms.p99))
        + report.number("mean_ms", row.latency_ms.mean, _ms(row.latency_ms.mean))
        + report.number("throughput", row.throughput, _rate(row.throughput))
        + report.number("qps", row.qps, _rate(row.qps))
        + energy_cell(row.joules_per_inference, row.energy_method)
        + cost_cell(row.cost_per_1000)
        + report.number("metric_value", value, _metric(name, value))
        + report.number("top5", row.top5, _pct(row.top5))
        + _verdict(row)
        + "</tr>"
        for row, (name, value) in zip(rows, metrics, strict=True)
    )
    head = "".join(f"<th>{esc(c)}</th>" for c in HEADLINE_COLUMNS)
    return (
        f'<div class="scroll"><table class="headline"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def _metric(name: str | None, value: float | None) -> str:
    """``miou 67.93%``; blank without a value."""
    return "" if value is None else format_metric(name, value)


def _task(doc: ResultDocument) -> str:
    """The ``task`` section: its type, primary metric and every metric (per-class lists too)."""
    if doc.task is None:
        return ""
    task = doc.task
    cells = {
        "type": task.type,
        "primary": _metric(task.primary, primary_metric(doc).value),
        **{k: _text(v) for k, v in task.metrics.items()},
        "output": task.output or "",
        "skipped": str(task.skipped) if task.skipped else "",
    }
    rows = "".join(
        f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in cells.items() if v != ""
    )
    return f'<h2>Task</h2><table class="facts task">{rows}</table>'


def _accuracy(doc: ResultDocument) -> str:
    if doc.accuracy is None:
        why = doc.accuracy_skipped or "the run did not get to its accuracy pass"
        return f'<p class="note">No accuracy: {esc(why)}</p>'
    fields = doc.accuracy.to_json_dict()
    cells = {
        "top1": _pct(fields.pop("top1", None)),
        "top5": _pct(fields.pop("top5", None)),
        **{k: _text(v) for k, v in fields.items()},
    }
    rows = "".join(
        f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in cells.items() if v != ""
    )
    return f'<table class="facts accuracy">{rows}</table>'


def _key_values(name: str, values: Mapping[str, Any]) -> str:
    rows = "".join(
        f"<tr><td><code>{esc(k)}</code></td><td>{esc(_text(v))}</td></tr>"
        for k, v in values.items()
    )
    return f'<table class="kv {esc(name)}"><tbody>{rows}</tbody></table>'


def run_page(run: LoadedRun, jaeger_url: str | None) -> str:
    """One run: headline numbers per batch size, accuracy, error, trace link, the HW/SW stack
    and the spec; links to the raw document in the API."""
    doc = run.document
    run_id = doc.run_id or ""
    api = f"/api/v1/runs/{quote(run_id, safe='')}"
    history = (
        f' · <a href="{esc(history_url(doc.model.name))}">History of model '
        f"{esc(doc.model.name)}</a>"
        if doc.model is not None and doc.model.name
        else ""
    )
    parts = [
        f'<p><a href="{esc(api)}">Raw result document (JSON)</a>{history}</p>',
        _facts(doc),
        _trace(doc, jaeger_url),
    ]
    if doc.error is not None:
        where = f" in <code>{esc(doc.error.field)}</code>" if doc.error.field else ""
        parts.append(
            f'<h2>Error</h2><div class="error"><b>{esc(doc.error.type)}</b>{where}'
            f"<pre>{esc(doc.error.message)}</pre></div>"
        )
    if doc.results:
        parts.append(f"<h2>Results per batch size</h2>{_headline(doc)}")
    if has_correction(doc):
        parts.append(
            f'<p><a href="{esc(run_url(run_id))}/analysis">Layer analysis (XSP leveled '
            "correction): top layers and operators, plots</a></p>"
        )
    parts.append(f"{_task(doc)}<h2>Accuracy</h2>{_accuracy(doc)}")
    if doc.measurements:
        plots = ("Latency CDF", "Throughput against batch size")
        parts.append(f"<h2>Plots</h2>{_figures([run], compare([run]), plots)}")
    stack = flatten(doc.stack.to_json_dict()) if doc.stack is not None else {}
    stack_html = _key_values("stack", stack) if stack else '<p class="note">No stack recorded.</p>'
    spec = yaml.safe_dump(doc.spec, sort_keys=False, default_flow_style=None, width=88)
    parts.append(
        '<div class="columns">'
        f"<section><h2>HW/SW stack</h2>{stack_html}</section>"
        f'<section><h2>Spec</h2><pre class="spec">{esc(spec)}</pre></section></div>'
    )
    title = f"Run {doc.evaluation.name or run_id}"
    return page(title, "".join(parts))


def has_correction(doc: Any) -> bool:
    """The run was traced at framework level and has a leveled correction."""
    return doc.tracing is not None and any(
        b.correction is not None for b in doc.tracing.by_batch_size
    )


def analysis_page(run: LoadedRun, analysis: Mapping[str, Any], figures_html: str) -> str:
    """One run's `mlms analyze` page: residuals, plots (when matplotlib is installed), top
    layers and operators, FLOPs and bytes where the model file is reachable."""
    from mlmodelscope.analysis.plots import cost_tables, layer_tables, runs_section

    doc = run.document
    run_id = doc.run_id or ""
    body = (
        f'<p><a href="{esc(run_url(run_id))}">Back to the run</a></p>'
        "<p>Layer times from the framework profiler, corrected by leveled measurement: each "
        "traced call's operators share that call's model-level predict time, scaled to the "
        "untraced run; the residual is |Σ corrected − untraced| / untraced.</p>"
        f"<h2>Residuals</h2>{runs_section(analysis)}"
        f"<h2>Plots</h2>{figures_html}"
        f"<h2>Top layers and operators</h2>{layer_tables(analysis)}"
        f"<h2>Latency, FLOPs and bytes moved</h2>{cost_tables(analysis)}"
    )
    return page(f"Analysis of run {doc.evaluation.name or run_id}", body)
