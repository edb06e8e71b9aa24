"""``mlms trace``: where did predict time go? A trace turned into a breakdown table.

Input is the agent's trace file (``<result>.trace.json``, found from the result document) or a
trace fetched from Jaeger's query API (``/api/traces/<id>``); both become the same span list.
For each traced pass (level, batch size) the breakdown reports the model-level split of query
time (preprocess / predict / postprocess), the top layers by *self* time (a layer's time minus
its child layers', so nested operators are never counted twice and shares add up to at most
100 % of predict time) and, at library level, the top GPU kernels and copies by total time.
"""

from __future__ import annotations

import json
import urllib.request
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlmodelscope.agent.profilers import LIBRARY_KINDS

ATTR = "mlmodelscope."
STAGES = ("preprocess", "predict", "postprocess")


@dataclass
class Span:
    """The parts of a span a breakdown needs, whatever the source."""

    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_ns(self) -> int:
        return max(self.end_ns - self.start_ns, 0)


def spans_from_trace_file(data: Mapping[str, Any]) -> list[Span]:
    """The agent's trace file (see :func:`mlmodelscope.telemetry.tracing.write_trace_file`)."""
    return [
        Span(
            span_id=s["span_id"],
            parent_id=s.get("parent_span_id"),
            name=s["name"],
            start_ns=int(s["start_ns"]),
            end_ns=int(s["end_ns"]),
            attributes=dict(s.get("attributes") or {}),
        )
        for s in data.get("spans", [])
    ]


def spans_from_jaeger(data: Mapping[str, Any]) -> list[Span]:
    """Jaeger's ``/api/traces/<id>`` answer (times in microseconds, tags as key/value lists)."""
    out: list[Span] = []
    for trace in data.get("data") or []:
        for s in trace.get("spans", []):
            parent = next(
                (r["spanID"] for r in s.get("references", []) if r.get("refType") == "CHILD_OF"),
                None,
            )
            start = int(s["startTime"]) * 1000
            tags = {t["key"]: t.get("value") for t in s.get("tags", [])}
            out.append(
                Span(
                    s["spanID"],
                    parent,
                    s["operationName"],
                    start,
                    start + int(s["duration"]) * 1000,
                    tags,
                )
            )
    return out


def fetch_jaeger(base_url: str, trace_id: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """GET ``<base_url>/api/traces/<trace_id>`` from Jaeger's query service."""
    url = f"{base_url.rstrip('/')}/api/traces/{trace_id}"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        data: dict[str, Any] = json.loads(response.read())
    if not data.get("data"):
        errors = data.get("errors") or "no such trace"
        raise LookupError(f"Jaeger at {base_url} has no trace {trace_id}: {errors}")
    return data


def load_spans(
    source: str, jaeger: str | None = None, timeout_s: float = 10.0
) -> tuple[str | None, list[Span]]:
    """Spans from a result document, a trace file, or (with ``jaeger``) a trace id.

    A result document's trace file (``tracing.trace_file``) is read when it exists; otherwise,
    with ``jaeger`` given, its ``trace_id`` is fetched from Jaeger."""
    path = Path(source)
    if path.is_file():
        doc = json.loads(path.read_text())
        if "spans" in doc and "format" in doc:
            return doc.get("trace_id"), spans_from_trace_file(doc)
        trace_id = doc.get("trace_id")
        name = (doc.get("tracing") or {}).get("trace_file")
        trace_file = path.with_name(name) if name else path.with_name(path.stem + ".trace.json")
        if trace_file.is_file() and jaeger is None:
            data = json.loads(trace_file.read_text())
            return data.get("trace_id"), spans_from_trace_file(data)
        if jaeger is not None and trace_id:
            return trace_id, spans_from_jaeger(fetch_jaeger(jaeger, trace_id, timeout_s))
        if trace_file.is_file():
            data = json.loads(trace_file.read_text())
            return data.get("trace_id"), spans_from_trace_file(data)
        raise FileNotFoundError(
            f"{path} has no trace file next to it ({trace_file.name})"
            + ("" if trace_id else " and no trace_id")
            + "; pass --jaeger URL to fetch the trace by id, or run with tracing.level model+"
        )
    if jaeger is None:
        raise FileNotFoundError(f"{source} is not a file; to look up a trace id, pass --jaeger URL")
    return source, spans_from_jaeger(fetch_jaeger(jaeger, source, timeout_s))


# ----------------------------------------------------------------------------------- tables


@dataclass
class Row:
    """One line of a breakdown table."""

    name: str
    kind: str
    count: int = 0
    total_ns: int = 0
    self_ns: int = 0

    def to_dict(self, denominator_ns: int, by_self: bool) -> dict[str, Any]:
        value = self.self_ns if by_self else self.total_ns
        return {
            "name": self.name,
            "kind": self.kind,
            "count": self.count,
            "total_s": self.total_ns / 1e9,
            "self_s": self.self_ns / 1e9,
            "mean_s": self.total_ns / 1e9 / max(self.count, 1),
            "share_of_predict": value / denominator_ns if denominator_ns else None,
        }


def _descendants(root: Span, children: Mapping[str, list[Span]]) -> Iterable[Span]:
    stack = list(children.get(root.span_id, ()))
    while stack:
        span = stack.pop()
        yield span
        stack.extend(children.get(span.span_id, ()))


def breakdown(spans: Sequence[Span], top: int = 10) -> list[dict[str, Any]]:
    """One entry per traced pass (level, batch size), deepest level first."""
    children: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        if span.parent_id:
            children[span.parent_id].append(span)
    groups: dict[tuple[str, int], list[Span]] = defaultdict(list)
    for span in spans:
        if span.name == "query" and f"{ATTR}trace.level" in span.attributes:
            level = str(span.attributes[f"{ATTR}trace.level"])
            batch = int(span.attributes.get(f"{ATTR}batch_size", 0))
            groups[(level, batch)].append(span)
    order = {"library": 0, "framework": 1, "model": 2}
    out: list[dict[str, Any]] = []
    for (level, batch), queries in sorted(
        groups.items(), key=lambda g: (order.get(g[0][0], 9), g[0][1])
    ):
        out.append(_group(level, batch, queries, children, top))
    return out


def _group(
    level: str, batch: int, queries: list[Span], children: Mapping[str, list[Span]], top: int
) -> dict[str, Any]:
    query_ns = sum(q.duration_ns for q in queries)
    stages: dict[str, int] = dict.fromkeys(STAGES, 0)
    predict_ns = 0
    layers: dict[tuple[str, str], Row] = {}
    kernels: dict[str, Row] = {}
    for query in queries:
        for stage in children.get(query.span_id, ()):
            if stage.name in stages:
                stages[stage.name] += stage.duration_ns
            if stage.name != "predict":
                continue
            predict_ns += stage.duration_ns
            for span in _descendants(stage, children):
                kind = str(span.attributes.get(f"{ATTR}span.kind", ""))
                if kind == "layer":
                    op_type = str(span.attributes.get(f"{ATTR}op_type", ""))
                    op_type = "" if op_type == span.name else op_type
                    row = layers.setdefault((span.name, op_type), Row(span.name, op_type))
                    inner = sum(
                        c.duration_ns
                        for c in children.get(span.span_id, ())
                        if c.attributes.get(f"{ATTR}span.kind") == "layer"
                    )
                    row.count += 1
                    row.total_ns += span.duration_ns
                    row.self_ns += max(span.duration_ns - inner, 0)
                elif kind in LIBRARY_KINDS:
                    row = kernels.setdefault(span.name, Row(span.name, kind))
                    row.count += 1
                    row.total_ns += span.duration_ns
                    row.self_ns += span.duration_ns
    top_layers = sorted(layers.values(), key=lambda r: -r.self_ns)[:top]
    top_kernels = sorted(kernels.values(), key=lambda r: -r.total_ns)[:top]
    return {
        "level": level,
        "batch_size": batch,
        "queries": len(queries),
        "query_time_s": query_ns / 1e9,
        "stages": {
            name: {"total_s": ns / 1e9, "share_of_query": ns / query_ns if query_ns else None}
            for name, ns in stages.items()
        },
        "predict_time_s": predict_ns / 1e9,
        "layers_time_s": sum(r.self_ns for r in layers.values()) / 1e9,
        "kernels_time_s": sum(r.total_ns for r in kernels.values()) / 1e9,
        "layers": [r.to_dict(predict_ns, by_self=True) for r in top_layers],
        "kernels": [r.to_dict(predict_ns, by_self=False) for r in top_kernels],
    }


# ------------------------------------------------------------------------------------ output


def render(console: Any, trace_id: str | None, groups: Sequence[Mapping[str, Any]]) -> None:
    """Rich tables: per traced pass, the stage split, then top layers and kernels."""
    from rich.table import Table

    if not groups:
        console.print(
            f"trace {trace_id}: no traced queries (tracing.level none, or sampling 0)",
            highlight=False,
        )
        return
    console.print(f"trace {trace_id}", highlight=False)
    for g in groups:
        head = (
            f"{g['level']} level, batch {g['batch_size']}: {g['queries']} queries, "
            f"predict {g['predict_time_s'] * 1e3:.3f} ms in all"
        )
        stages = ", ".join(
            f"{name} {v['share_of_query'] * 100:.1f} %"
            for name, v in g["stages"].items()
            if v["share_of_query"] is not None and v["total_s"] > 0
        )
        console.print(f"\n[bold]{head}[/bold]  ({stages} of query time)", highlight=False)
        for key, title, by in (("layers", "layer", "self"), ("kernels", "kernel / copy", "total")):
            rows = g[key]
            if not rows:
                continue
            table = Table(title=f"top {title}s by {by} time", title_justify="left")
            for col in (title, "type", "calls", f"{by} ms", "mean ms", "% of predict"):
                left = col in (title, "type")
                table.add_column(col, justify="left" if left else "right", overflow="fold")
            for r in rows:
                share = r["share_of_predict"]
                table.add_row(
                    r["name"],
                    r["kind"],
                    str(r["count"]),
                    f"{(r['self_s'] if by == 'self' else r['total_s']) * 1e3:.3f}",
                    f"{r['mean_s'] * 1e3:.4f}",
                    "-" if share is None else f"{share * 100:.1f}",
                )
            console.print(table)
