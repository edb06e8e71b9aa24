"""The dashboard's leaderboard and model history pages as HTML strings.

- the leaderboard (``/leaderboard``): one section per task, i.e. per primary metric (top1,
  miou, accuracy), holding one table per dataset (only runs of the same metric on the same
  dataset rank against each other), of the best Succeeded run per model, framework, device and
  GPU product (:func:`mlmodelscope.store.queries.leaderboard`, what ``GET /api/v1/leaderboard``
  answers), ranked across models by the primary metric, p50 or p99 latency, throughput, energy
  per inference or cost per 1,000 inferences (the rank menu, or a column's heading); GET-form
  filters for the task, dataset, framework, device and GPU;
- a model's history (``/models/{name}/history``): its runs oldest first with their dataset
  (:func:`mlmodelscope.store.queries.history`, as ``GET /api/v1/models/{name}/history``), with
  the report's SVG plots of the primary metric and p50 latency against time.

No script: every choice is a GET form or a link. Every string from the store or the request
is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Final
from urllib.parse import quote, urlencode

from mlmodelscope.contract.metric import FRACTIONS, format_metric
from mlmodelscope.report import html as report
from mlmodelscope.server.pages.render import (
    cost_cell,
    energy_cell,
    esc,
    history_url,
    model_link,
    page,
    run_url,
)
from mlmodelscope.store.queries import HistoryPoint, LeaderboardEntry, Metric

RANKS: Final[dict[str, str]] = {
    "metric_value": "primary metric (highest first)",
    "p50_ms": "p50 latency (lowest first)",
    "p99_ms": "p99 latency (lowest first)",
    "throughput": "throughput (highest first)",
    "joules_per_inference": "energy per inference (lowest first)",
    "cost_per_1000": "cost per 1,000 inferences (lowest first)",
}
"""What a leaderboard can rank by (a :data:`~mlmodelscope.store.queries.Metric`), as the
rank menu says it."""
BOARD_FILTERS: Final = {
    "metric_name": "task metric",
    "dataset": "dataset",
    "framework": "framework",
    "device": "device",
    "gpu": "GPU",
}
"""The leaderboard's filters: query parameter -> label."""
HISTORY_FILTERS: Final = {
    "dataset": "dataset",
    "framework": "framework",
    "device": "device",
    "gpu": "GPU",
    "status": "status",
}
"""The history's filters: query parameter -> label."""
TIME_UNITS: Final = (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0), ("seconds", 1.0))


def _when(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S")


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _rate(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f}"


def _metric(name: str | None, value: float | None) -> str:
    return "" if value is None else format_metric(name, value)


def _verdict(valid: bool | None) -> str:
    if valid is None:
        return "<td>-</td>"
    return '<td class="valid">VALID</td>' if valid else '<td class="invalid">INVALID</td>'


def _hardware(device: str | None, gpu: str | None) -> str:
    return " · ".join(v for v in (device, gpu) if v) or "-"


def _framework(name: str | None, version: str | None) -> str:
    return " ".join(v for v in (name, version) if v) or "-"


def _select(name: str, label: str, options: Sequence[str], chosen: str | None) -> str:
    values = list(options)
    if chosen is not None and chosen not in values:
        values.append(chosen)  # a filter from the URL that no recent run has
    items = '<option value="">any</option>' + "".join(
        f'<option value="{esc(v)}"{" selected" if v == chosen else ""}>{esc(v)}</option>'
        for v in values
    )
    return f'<label>{esc(label)}<select name="{esc(name)}">{items}</select></label>'


def _batch_field(batch_size: int | None) -> str:
    value = "" if batch_size is None else str(batch_size)
    return (
        '<label>batch size<input type="number" name="batch_size" min="1" '
        f'value="{value}" style="width:6em"></label>'
    )


def _form(action: str, fields: str, clear: str) -> str:
    return (
        f'<form class="filters" method="get" action="{esc(action)}">{fields}'
        f'<button type="submit">Show</button><a class="clear" href="{esc(clear)}">'
        "clear filters</a></form>"
    )


# ------------------------------------------------------------------------------ leaderboard

BOARD_COLUMNS: Final = (
    ("#", "rank"),
    ("model", "the model's history"),
    ("framework", "of the best run (the row spans every version)"),
    ("device / GPU", ""),
    ("metric", "the task's primary metric"),
    ("p50 ms", "at the batch size"),
    ("p99 ms", "at the batch size"),
    ("samples/s", "at the batch size"),
    (
        "energy mJ/inference",
        "at the batch size, from the GPU board's (nvml) or the CPU packages' (rapl) energy "
        "counter; blank: not measured",
    ),
    ("cost USD/1k inferences", "at the batch size, from a price per node-hour; blank: none given"),
    ("verdict", "the best run's verdict at the batch size"),
    ("runs", "Succeeded runs of this model and hardware that measured the batch size"),
    ("best run", "its page"),
    ("evaluation", ""),
    ("started (UTC)", ""),
)
RANKED_COLUMN: Final = {
    "metric_value": "metric",
    "p50_ms": "p50 ms",
    "p99_ms": "p99 ms",
    "throughput": "samples/s",
    "joules_per_inference": "energy mJ/inference",
    "cost_per_1000": "cost USD/1k inferences",
}
RANK_OF_COLUMN: Final = {column: rank for rank, column in RANKED_COLUMN.items()}
"""A rankable column's heading -> the rank its link asks for."""
UNMEASURED: Final = {
    "joules_per_inference": " and measured its energy per inference",
    "cost_per_1000": " and was given a price per node-hour",
}


def _board_row(position: int, entry: LeaderboardEntry) -> str:
    name = model_link(entry.model_name)
    return (
        f'<tr data-run-id="{esc(entry.run_id)}"><td class="num">{position}</td>'
        f"<td>{name}</td><td>{esc(_framework(entry.framework, entry.framework_version))}</td>"
        f"<td>{esc(_hardware(entry.device, entry.gpu_product))}</td>"
        + report.number(
            "metric_value", entry.metric_value, _metric(entry.metric, entry.metric_value)
        )
        + report.number("p50_ms", entry.p50_ms, _ms(entry.p50_ms))
        + report.number("p99_ms", entry.p99_ms, _ms(entry.p99_ms))
        + report.number("throughput", entry.throughput, _rate(entry.throughput))
        + energy_cell(entry.joules_per_inference, entry.energy_method)
        + cost_cell(entry.cost_per_1000)
        + _verdict(entry.valid)
        + report.number("runs", entry.runs, str(entry.runs))
        + f'<td><a class="run" href="{esc(run_url(entry.run_id))}" title="{esc(entry.run_id)}">'
        f"<code>{esc(entry.run_id[:8])}</code></a></td>"
        f'<td class="wrap">{esc(entry.evaluation or "-")}</td>'
        f"<td>{esc(_when(entry.started_at))}</td></tr>"
    )


def _head(name: str, hint: str, rank: str, query: Mapping[str, str]) -> str:
    """A column heading; a rankable column's is a link that ranks by it (``query``: the
    page's own query string, its rank replaced)."""
    ranked = RANK_OF_COLUMN.get(name)
    attributes = (' class="ranked"' if ranked == rank else "") + (
        f' title="{esc(hint)}"' if hint else ""
    )
    if ranked is None:
        return f"<th{attributes}>{esc(name)}</th>"
    href = "/leaderboard?" + urlencode({**query, "rank": ranked})
    return f'<th{attributes}><a class="rank" href="{esc(href)}">{esc(name)}</a></th>'


def _table(
    task: str,
    dataset: str | None,
    entries: Sequence[LeaderboardEntry],
    api: Mapping[str, str],
    here: Mapping[str, str],
) -> str:
    """One dataset's table of a task; ``api``: the query of its JSON link, ``here``: the
    page's query."""
    rank = api["metric"]
    head = "".join(_head(name, hint, rank, here) for name, hint in BOARD_COLUMNS)
    rows = "".join(_board_row(i, entry) for i, entry in enumerate(entries, 1))
    link = "/api/v1/leaderboard?" + urlencode(
        {**api, "metric_name": task, **({"dataset": dataset} if dataset else {})}
    )
    return (
        f'<div class="dataset" data-dataset="{esc(dataset or "")}">'
        f"<h3>Dataset {esc(dataset or '-')}</h3>"
        f'<div class="scroll"><table class="listing leaderboard" data-task="{esc(task)}" '
        f'data-dataset="{esc(dataset or "")}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{rows}</tbody></table></div>"
        f'<p class="hint"><a href="{esc(link)}">This table as JSON</a> (the API lists it by '
        "model)</p></div>"
    )


def _board(
    task: str,
    tables: Mapping[str | None, Sequence[LeaderboardEntry]],
    api: Mapping[str, str],
    here: Mapping[str, str],
) -> str:
    """One task's section: a table per dataset."""
    if not tables:
        link = "/api/v1/leaderboard?" + urlencode({**api, "metric_name": task})
        note = (
            "No run of this task matches these filters at this batch size"
            f"{UNMEASURED.get(api['metric'], '')}."
        )
        body = (
            f'<p class="note">{esc(note)}</p>'
            f'<p class="hint"><a href="{esc(link)}">This table as JSON</a></p>'
        )
    else:
        body = "".join(
            _table(task, dataset, entries, api, here) for dataset, entries in tables.items()
        )
    return (
        f'<section class="board" data-task="{esc(task)}"><h2>Task metric {esc(task)}</h2>'
        f"{body}</section>"
    )


def leaderboard_page(
    boards: Sequence[tuple[str, Mapping[str | None, Sequence[LeaderboardEntry]]]],
    chosen: Mapping[str, str | None],
    options: Mapping[str, Sequence[str]],
    rank: Metric,
    batch_size: int,
) -> str:
    """One section per task and in it one table per dataset (``boards``: primary metric name
    and, by dataset, its entries best first) under the filter form."""
    filters = "".join(
        _select(name, label, options.get(name, []), chosen.get(name))
        for name, label in BOARD_FILTERS.items()
    )
    ranks = "".join(
        f'<option value="{esc(k)}"{" selected" if k == rank else ""}>{esc(v)}</option>'
        for k, v in RANKS.items()
    )
    fields = (
        f'{filters}<label>rank by<select name="rank">{ranks}</select></label>'
        f"{_batch_field(batch_size)}"
    )
    form = _form("/leaderboard", fields, "/leaderboard")
    active = {k: v for k, v in chosen.items() if v is not None}
    intro = (
        f"<p>Per model, framework, device and GPU product, the Succeeded run with the best "
        f"{esc(RANKS[rank])} at batch size {batch_size}, ranked across models. Only runs of "
        "the same primary metric (the same task) on the same dataset rank against each other; "
        "a column's heading ranks by it.</p>"
    )
    if not boards:
        empty = (
            "No task matches these filters."
            if active
            else "No Succeeded run with a primary metric is recorded yet."
        )
        return page("Leaderboard", f'{form}{intro}<p class="note">{esc(empty)}</p>')
    api = {**active, "metric": rank, "batch_size": str(batch_size)}
    here = {**active, "rank": rank, "batch_size": str(batch_size)}
    sections = "".join(_board(task, tables, api, here) for task, tables in boards)
    return page("Leaderboard", f"{form}{intro}{sections}")


# ------------------------------------------------------------------------------ history

HISTORY_COLUMNS: Final = (
    "run",
    "started (UTC)",
    "evaluation",
    "dataset",
    "framework",
    "device / GPU",
    "status",
    "batch",
    "metric",
    "p50 ms",
    "p99 ms",
    "samples/s",
    "verdict",
)


def _history_row(point: HistoryPoint) -> str:
    batch = point.batch_size
    return (
        f'<tr data-run-id="{esc(point.run_id)}">'
        f'<td><a class="run" href="{esc(run_url(point.run_id))}" title="{esc(point.run_id)}">'
        f"<code>{esc(point.run_id[:8])}</code></a></td>"
        f"<td>{esc(_when(point.started_at))}</td>"
        f'<td class="wrap">{esc(point.evaluation or "-")}</td>'
        f'<td class="wrap dataset">{esc(point.dataset or "-")}</td>'
        f"<td>{esc(_framework(point.framework, point.framework_version))}</td>"
        f"<td>{esc(_hardware(point.device, point.gpu_product))}</td>"
        f'<td><span class="status-{esc(point.status)}">{esc(point.status)}</span></td>'
        + report.number("batch_size", batch, "" if batch is None else str(batch))
        + report.number(
            "metric_value", point.metric_value, _metric(point.metric, point.metric_value)
        )
        + report.number("p50_ms", point.p50_ms, _ms(point.p50_ms))
        + report.number("p99_ms", point.p99_ms, _ms(point.p99_ms))
        + report.number("throughput", point.throughput, _rate(point.throughput))
        + _verdict(point.valid)
        + "</tr>"
    )


def _time_axis(points: Sequence[HistoryPoint]) -> tuple[datetime, str, float]:
    """(origin, unit, seconds per unit) of the plots' x axis: time since the first run, in
    the largest unit the span covers at least twice."""
    origin = points[0].started_at
    span = (points[-1].started_at - origin).total_seconds()
    unit, seconds = next(((u, s) for u, s in TIME_UNITS if span >= 2 * s), TIME_UNITS[-1])
    return origin, unit, seconds


def history_plots(points: Sequence[HistoryPoint]) -> str:
    """The primary metric and p50 latency of ``points`` against time, one series per
    framework, device and GPU product, and per dataset when they span several (the report's
    SVG charts); empty without two points."""
    measured = [p for p in points if p.p50_ms is not None or p.metric_value is not None]
    if len(measured) < 2:
        return ""
    origin, unit, seconds = _time_axis(measured)
    several = len({p.dataset for p in measured}) > 1
    configs: dict[tuple[str | None, ...], list[HistoryPoint]] = {}
    for point in measured:
        key = (point.framework, point.device, point.gpu_product)
        configs.setdefault(key + ((point.dataset,) if several else ()), []).append(point)
    names = sorted({p.metric for p in measured if p.metric_value is not None and p.metric})
    metric = names[0] if len(names) == 1 else None
    scale = 100.0 if metric in FRACTIONS else 1.0

    def x(point: HistoryPoint) -> float:
        return (point.started_at - origin).total_seconds() / seconds

    def series(value: str) -> list[report.Series]:
        found = []
        for index, (config, group) in enumerate(configs.items()):
            label = " · ".join(v for v in config if v) or "-"
            if value == "metric":
                xy = [
                    (x(p), scale * p.metric_value)
                    for p in group
                    if p.metric_value is not None and p.metric == metric
                ]
            else:
                xy = [(x(p), p.p50_ms) for p in group if p.p50_ms is not None]
            found.append(report.Series(label, report.colour(index), xy))
        return found

    x_label = f"{unit} since {_when(origin)} UTC"
    figures = []
    plotted = [("latency", "p50 latency (ms)", series("latency"))]
    if metric is not None:
        y_name = f"{metric} (%)" if scale == 100.0 else metric
        plotted.insert(0, ("metric", y_name, series("metric")))
    for name, y_label, drawn in plotted:
        values = [p for s in drawn for p in s.points]
        if not values:
            continue
        svg = report.chart(
            f"history-{name}",
            drawn,
            report.Axis.over([p[0] for p in values]),
            report.Axis.over(
                [p[1] for p in values],
                zero=name == "latency",
                within=(0.0, 100.0) if name == "metric" and scale == 100.0 else None,
            ),
            x_label,
            y_label,
            lines=True,
            markers=True,
            describe=lambda s, p: f"{s.label}: {p[1]:.4g} at {p[0]:.3g} {unit}",
        )
        figures.append(f"<figure><h3>{esc(y_label)} over time</h3>{svg}</figure>")
    return f'<div class="figures">{"".join(figures)}</div>'


def history_page(
    model: str,
    points: Sequence[HistoryPoint],
    chosen: Mapping[str, str | None],
    options: Mapping[str, Sequence[str]],
    batch_size: int | None,
) -> str:
    """``model``'s runs oldest first (``points``), plots of them, and the filter form."""
    url = history_url(model)
    filters = "".join(
        _select(name, label, options.get(name, []), chosen.get(name))
        for name, label in HISTORY_FILTERS.items()
    )
    form = _form(url, filters + _batch_field(batch_size), url)
    active = {k: v for k, v in chosen.items() if v is not None}
    query = {**active, **({"batch_size": str(batch_size)} if batch_size else {})}
    api = f"/api/v1{url}" + (f"?{urlencode(query)}" if query else "")
    at = f"batch size {batch_size}" if batch_size else "each run's smallest batch size"
    intro = (
        f"<p>Every recorded run of <b>{esc(model)}</b>, oldest first; numbers at {esc(at)}. "
        f'<a href="{esc(api)}">The same as JSON</a>; '
        f'<a href="/?model={esc(quote(model, safe=""))}">the runs page</a> compares them.</p>'
    )
    if not points:
        note = '<p class="note">No run of this model matches these filters.</p>'
        return page(f"History of {model}", f"{form}{intro}{note}")
    head = "".join(f"<th>{esc(c)}</th>" for c in HISTORY_COLUMNS)
    rows = "".join(_history_row(p) for p in points)
    count = f"{len(points)} run{'s' if len(points) != 1 else ''}"
    table = (
        f'<p class="count">{esc(count)}</p><div class="scroll"><table class="listing" '
        f'id="history"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'
    )
    plots = history_plots(points)
    body = f"{form}{intro}{table}" + (f"<h2>Over time</h2>{plots}" if plots else "")
    return page(f"History of {model}", body)
