"""`mlms analyze`'s plots (PNG, matplotlib's Agg backend) and its HTML page.

matplotlib is the optional extra ``mlmodelscope[analysis]``, imported only when plots are
drawn; without it :func:`require_matplotlib` raises an error that names the extra. Every
figure has the same size (:data:`FIGSIZE` at :data:`DPI`: 960 x 540 pixels), so a page lays
them out evenly. The HTML page embeds each PNG as a data URI (it opens on its own) and the
same PNGs are written beside it.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

ANALYSIS_EXTRA_HINT = "pip install 'mlmodelscope[analysis]'"
FIGSIZE = (9.6, 5.4)
DPI = 100
PIXELS = (960, 540)
"""Width and height of every PNG."""
COLOURS = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
"""Tableau 10: the plots' colours, and the report's one colour per run."""


class AnalysisExtraMissingError(RuntimeError):
    """matplotlib is not installed."""


def require_matplotlib() -> Any:
    """pyplot on the Agg backend (no display needed), or a clear error naming the extra."""
    try:
        import matplotlib
    except ImportError as exc:
        raise AnalysisExtraMissingError(
            f"mlms analyze draws its plots with matplotlib, which is not installed; install "
            f"it with: {ANALYSIS_EXTRA_HINT} (or pass --no-plots for the tables alone)"
        ) from exc
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "run"


def _short(name: str, width: int = 38) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


class _Figures:
    def __init__(self, out: Path) -> None:
        self.plt = require_matplotlib()
        self.out = out
        self.made: list[dict[str, str]] = []

    def new(self) -> tuple[Any, Any]:
        fig, ax = self.plt.subplots(figsize=FIGSIZE, dpi=DPI)
        return fig, ax

    def save(self, fig: Any, name: str, title: str, caption: str) -> None:
        fig.tight_layout()
        path = self.out / f"{name}.png"
        fig.savefig(path, dpi=DPI)
        self.plt.close(fig)
        self.made.append({"file": path.name, "title": title, "caption": caption})


def _ms(seconds: float | None) -> float:
    return 0.0 if seconds is None else float(seconds) * 1e3


def correction_plot(figs: _Figures, analysis: Mapping[str, Any]) -> None:
    bars = [
        (f"{r['label']}\nbatch {b['batch_size']}", b)
        for r in analysis["runs"]
        for b in r["batches"]
        if b.get("residual") is not None
    ]
    if not bars:
        return
    fig, ax = figs.new()
    width = 0.27
    keys = (
        ("untraced_predict_p50_s", "untraced predict p50"),
        ("raw_sum_s", "Σ raw layer times"),
        ("corrected_sum_s", "Σ corrected layer times"),
    )
    for k, (key, label) in enumerate(keys):
        xs = [i + (k - 1) * width for i in range(len(bars))]
        ax.bar(xs, [_ms(b.get(key)) for _, b in bars], width, label=label, color=COLOURS[k])
    for i, (_, b) in enumerate(bars):
        ax.annotate(
            f"residual {b['residual'] * 100:.1f} %",
            (i + width, _ms(b["corrected_sum_s"])),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xticks(range(len(bars)), [name for name, _ in bars], fontsize=8)
    ax.set_ylabel("ms per predict call")
    ax.set_yscale("log")
    ax.set_title("Leveled correction: profiled layer times against the untraced latency")
    ax.legend(fontsize=8)
    figs.save(
        fig,
        "correction",
        "Leveled correction",
        "Per run and batch size: the untraced predict p50, the sum of the profiler's raw "
        "layer times and the sum of the corrected ones; the residual is |Σ corrected - "
        "untraced| / untraced.",
    )


def top_layers_plot(figs: _Figures, table: Mapping[str, Any], index: int) -> None:
    rows = list(table["rows"])[::-1]
    if not rows:
        return
    fig, ax = figs.new()
    names = [
        _short(r["name"] if r["name"] == r["op_type"] else f"{r['name']} ({r['op_type']})")
        for r in rows
    ]
    ys = range(len(rows))
    ax.barh(
        [y + 0.2 for y in ys],
        [_ms(r["raw_s"]) for r in rows],
        0.4,
        label="raw (profiler)",
        color=COLOURS[1],
    )
    ax.barh(
        [y - 0.2 for y in ys],
        [_ms(r["corrected_s"]) for r in rows],
        0.4,
        label="corrected",
        color=COLOURS[0],
    )
    ax.set_yticks(list(ys), names, fontsize=8)
    ax.set_xlabel("ms per call (mean over the central traced calls)")
    values = [_ms(r[k]) for r in rows for k in ("raw_s", "corrected_s") if _ms(r[k]) > 0]
    if values and max(values) / min(values) > 100:
        ax.set_xscale("log")  # raw and corrected differ by orders of magnitude
    title = f"Top layers: {table['run']}, batch {table['batch_size']}"
    ax.set_title(title)
    ax.legend(fontsize=8)
    figs.save(
        fig,
        f"top-layers-{index}-{slug(table['run'])}-b{table['batch_size']}",
        title,
        "The layers with the largest corrected time, raw beside corrected.",
    )


def by_type_plot(figs: _Figures, table: Mapping[str, Any], index: int) -> None:
    rows = [r for r in table["rows"] if r["share"] is not None][:12][::-1]
    if not rows:
        return
    fig, ax = figs.new()
    ax.barh(range(len(rows)), [100 * r["share"] for r in rows], color=COLOURS[4])
    ax.set_yticks(range(len(rows)), [_short(r["op_type"]) for r in rows], fontsize=8)
    ax.set_xlabel("% of corrected layer time")
    title = f"Time by layer type: {table['run']}, batch {table['batch_size']}"
    ax.set_title(title)
    figs.save(
        fig,
        f"by-type-{index}-{slug(table['run'])}-b{table['batch_size']}",
        title,
        "Corrected layer time summed per op type, as a share of all layers.",
    )


def cost_plots(figs: _Figures, analysis: Mapping[str, Any]) -> None:
    tables = [t for t in analysis["cost"] if t["rows"]]
    if not tables:
        return
    for key, label, name in (
        ("flops", "FLOPs", "latency-vs-flops"),
        ("bytes_moved", "bytes moved (read + written)", "latency-vs-bytes"),
    ):
        fig, ax = figs.new()
        plotted = 0
        for i, table in enumerate(tables):
            points = [
                (r[key], _ms(r["corrected_s"]))
                for r in table["rows"]
                if r[key] > 0 and r["corrected_s"] > 0
            ]
            if not points:
                continue
            plotted += len(points)
            ax.scatter(
                [p[0] for p in points],
                [p[1] for p in points],
                s=28,
                color=COLOURS[i % len(COLOURS)],
                label=f"{table['run']}, batch {table['batch_size']}",
            )
        if not plotted:
            figs.plt.close(fig)
            continue
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("corrected layer latency (ms)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        title = f"Layer latency against {label}"
        ax.set_title(title)
        figs.save(
            fig,
            name,
            title,
            f"One point per layer with a graph node (log-log); layers with 0 {label} are left out.",
        )


def across_plot(figs: _Figures, table: Mapping[str, Any], index: int) -> None:
    rows = [r for r in table["rows"] if r["matched"] >= 2]
    if not rows:
        return
    runs = list(table["runs"])
    fig, ax = figs.new()
    width = 0.8 / len(runs)
    for k, run in enumerate(runs):
        xs = [i + (k - (len(runs) - 1) / 2) * width for i in range(len(rows))]
        ax.bar(
            xs,
            [_ms((r["by_run"].get(run) or {}).get("corrected_s")) for r in rows],
            width,
            label=run,
            color=COLOURS[k % len(COLOURS)],
        )
    ax.set_xticks(
        range(len(rows)),
        [_short(str(r["layer"]), 18) for r in rows],
        fontsize=8,
        rotation=30,
        ha="right",
    )
    ax.set_ylabel("corrected latency (ms)")
    title = f"Same layer across frameworks: {table['model']}, batch {table['batch_size']}"
    ax.set_title(title)
    ax.legend(fontsize=8)
    figs.save(
        fig,
        f"across-{index}-{slug(table['model'])}-b{table['batch_size']}",
        title,
        f"Layers matched by {table['matched_by']}; only layers found in two or more frameworks.",
    )


def draw(analysis: Mapping[str, Any], out: Path) -> list[dict[str, str]]:
    """Every plot of ``analysis`` as a PNG in ``out``; returns [{file, title, caption}]."""
    figs = _Figures(out)
    correction_plot(figs, analysis)
    for i, table in enumerate(analysis["top_layers"]):
        top_layers_plot(figs, table, i)
    for i, table in enumerate(analysis["time_by_layer_type"]):
        by_type_plot(figs, table, i)
    cost_plots(figs, analysis)
    for i, table in enumerate(analysis["across_frameworks"]):
        across_plot(figs, table, i)
    return figs.made


# ------------------------------------------------------------------------------ HTML


def _num(value: Any, scale: float = 1.0, digits: int = 4) -> str:
    if value is None:
        return '<td class="num none">-</td>'
    return f'<td class="num" data-value="{value!r}">{float(value) * scale:.{digits}g}</td>'


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _td(text: Any) -> str:
    return f"<td>{escape(str(text))}</td>"


def runs_section(analysis: Mapping[str, Any]) -> str:
    rows = []
    for run in analysis["runs"]:
        if not run["batches"]:
            rows.append(
                [
                    _td(run["label"]),
                    _td(run["framework"]),
                    _td("-"),
                    f'<td colspan="6">{escape(run.get("skipped", ""))}</td>',
                ]
            )
        for b in run["batches"]:
            held = b.get("within_tolerance")
            verdict = "-" if held is None else ("yes" if held else "no")
            rows.append(
                [
                    _td(run["label"]),
                    _td(run["framework"]),
                    _td(b["batch_size"]),
                    _num(b.get("untraced_predict_p50_s"), 1e3),
                    _num(b.get("raw_sum_s"), 1e3),
                    _num(b.get("corrected_sum_s"), 1e3),
                    _num(b.get("raw_residual"), 100, 3),
                    _num(b.get("residual"), 100, 3),
                    _td(
                        f"{verdict} (≤ {b.get('tolerance', 0) * 100:g} %)"
                        if b.get("residual") is not None
                        else b.get("skipped", "-")
                    ),
                ]
            )
    return _table(
        [
            "run",
            "framework",
            "batch",
            "untraced p50 ms",
            "Σ raw ms",
            "Σ corrected ms",
            "raw residual %",
            "residual %",
            "within tolerance",
        ],
        rows,
    )


def layer_tables(analysis: Mapping[str, Any]) -> str:
    parts = []
    for table in analysis["top_layers"]:
        rows = [
            [
                _td(r["name"]),
                _td(r["op_type"]),
                _num(r["raw_s"], 1e3),
                _num(r["corrected_s"], 1e3),
                _num(r["share"], 100, 3),
            ]
            for r in table["rows"]
        ]
        parts.append(
            f"<h3>{escape(table['run'])}, batch {table['batch_size']}</h3>"
            + _table(["layer", "type", "raw ms", "corrected ms", "% of untraced"], rows)
        )
    for table in analysis["top_operators"]:
        rows = [
            [
                _td(r["op_type"]),
                _num(r.get("count_per_call")),
                _num(r["raw_s"], 1e3),
                _num(r["corrected_s"], 1e3),
                _num(r.get("share"), 100, 3),
            ]
            for r in table["rows"]
        ]
        parts.append(
            f"<h3>Operators by self time: {escape(table['run'])}, batch "
            f"{table['batch_size']}</h3>"
            + _table(["op type", "per call", "raw ms", "corrected ms", "% of untraced"], rows)
        )
    return "".join(parts)


def cost_tables(analysis: Mapping[str, Any]) -> str:
    parts = []
    for table in analysis["cost"]:
        head = f"<h3>{escape(table['run'])}, batch {table['batch_size']}</h3>"
        if not table["rows"]:
            parts.append(head + f"<p>Not shown: {escape(str(table.get('skipped')))}</p>")
            continue
        rows = [
            [
                _td(r["name"]),
                _td(r["op_type"]),
                _num(r["corrected_s"], 1e3),
                _num(r["flops"]),
                _num(r["bytes_moved"]),
                _num(r["flops_per_s"], 1e-9),
                _num(r["arithmetic_intensity"]),
            ]
            for r in table["rows"]
        ]
        unmatched = table.get("unmatched") or []
        note = f"<p>No graph node for: {escape(', '.join(unmatched))}</p>" if unmatched else ""
        parts.append(
            head
            + _table(
                [
                    "layer",
                    "type",
                    "corrected ms",
                    "FLOPs",
                    "bytes moved",
                    "GFLOP/s",
                    "FLOPs per byte",
                ],
                rows,
            )
            + note
        )
    return "".join(parts)


def across_tables(analysis: Mapping[str, Any]) -> str:
    parts = []
    for table in analysis["across_frameworks"]:
        runs = list(table["runs"])
        rows = []
        for r in table["rows"]:
            cells = [_td(r["layer"]), _td(r["family"])]
            for run in runs:
                cell = r["by_run"].get(run)
                cells.append(
                    _td("-")
                    if cell is None
                    else f'<td class="num" data-value="{cell["corrected_s"]!r}">'
                    f"{cell['corrected_s'] * 1e3:.4g} <small>{escape(cell['name'])}"
                    "</small></td>"
                )
            rows.append(cells)
        parts.append(
            f"<h3>{escape(table['model'])}, batch {table['batch_size']} (matched by "
            f"{escape(table['matched_by'])})</h3>"
            + _table(["layer", "family", *[f"{r} ms" for r in runs]], rows)
        )
    return "".join(parts) or "<p>Not shown: no model was analyzed in two frameworks.</p>"


STYLE = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h2{border-bottom:1px solid #ddd;margin-top:1.6em}table{border-collapse:collapse;font-size:.9em}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left}th{background:#f4f4f4}
td.num{text-align:right;font-variant-numeric:tabular-nums}td.none{color:#999}
figure{margin:1em 0}figcaption{font-size:.85em;color:#555;max-width:760px}
img{max-width:100%;border:1px solid #eee}"""


def render_page(
    analysis: Mapping[str, Any], figures: Sequence[Mapping[str, str]], out: Path
) -> str:
    """The analysis as one HTML page, each figure embedded from ``out``."""
    imgs = []
    for fig in figures:
        data = base64.b64encode((out / fig["file"]).read_bytes()).decode()
        imgs.append(
            f'<figure><h3>{escape(fig["title"])}</h3><img alt="{escape(fig["title"])}" '
            f'src="data:image/png;base64,{data}" data-file="{escape(fig["file"])}">'
            f"<figcaption>{escape(fig['caption'])}</figcaption></figure>"
        )
    plots = "".join(imgs) or "<p>No plots (drawn with --no-plots, or nothing to draw).</p>"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>mlmodelscope analysis</title><style>{STYLE}</style></head><body>"
        "<h1>mlmodelscope analysis (XSP)</h1>"
        "<p>Layer and operator times from the framework profiler, corrected by leveled "
        "measurement: each traced call's operators share that call's model-level predict time, "
        "itself scaled to the untraced run, so the corrected layers add up to the untraced "
        "latency; the residual says how closely.</p>"
        f"<h2>Runs and residuals</h2>{runs_section(analysis)}"
        f"<h2>Plots</h2>{plots}"
        f"<h2>Top layers and operators</h2>{layer_tables(analysis)}"
        f"<h2>Latency, FLOPs and bytes moved</h2>{cost_tables(analysis)}"
        f"<h2>Same layer across frameworks</h2>{across_tables(analysis)}"
        "</body></html>\n"
    )


def write(analysis: Mapping[str, Any], out: Path, plots: bool = True) -> dict[str, Path]:
    """``analysis.json``, the PNGs and ``analysis.html`` in ``out`` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    figures = draw(analysis, out) if plots else []
    data = {**analysis, "figures": figures}
    json_path = out / "analysis.json"
    json_path.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    html_path = out / "analysis.html"
    html_path.write_text(render_page(analysis, figures, out))
    return {"json": json_path, "html": html_path}
