"""`mlms analyze`: XSP's analysis tables over result documents with leveled corrections.

Input is one or many result documents (plain JSON, as the agent writes them or the store
returns them) whose tracing reached framework level, so each batch size carries a
``correction`` (:mod:`mlmodelscope.analysis.xsp`). Output is one JSON-ready dict of tables:

- ``runs``: per document and batch size, the untraced latency and the correction's residual;
- ``top_layers`` / ``top_operators``: the largest layers by corrected time, and the operator
  types by corrected self time, per document and batch size;
- ``time_by_layer_type``: corrected layer time summed per op type;
- ``cost``: each layer's corrected latency beside its FLOPs and bytes moved
  (:func:`mlmodelscope.analysis.graph.layer_costs`), for ONNX Runtime documents whose model
  file is on this machine; layers are matched to the graph by ONNX node name, in the graph
  ONNX Runtime actually ran (optimized at the document's level) and else the original;
- ``across_frameworks``: the same layer in each framework, for documents of the same model
  (by name) in different frameworks at the same batch size: matched by layer name and type
  when the documents share names, else by op family and order (the k-th convolution in one
  framework with the k-th in the other), and ``matched_by`` says which.

Plots and the HTML page are in :mod:`mlmodelscope.analysis.plots` (matplotlib is optional).
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ANALYSIS_FORMAT = "mlmodelscope.io/analysis/v1"
DEFAULT_TOP = 10

Doc = Mapping[str, Any]
CostLookup = Callable[[Doc, int], "tuple[dict[str, Any] | None, str | None]"]
"""(document, batch size) -> ({node name: LayerCost}, None) or (None, why not)."""


class AnalysisInputError(ValueError):
    """A document cannot be analyzed; the message says which and how to fix it."""


@dataclass(frozen=True)
class AnalyzedRun:
    """One result document and the label its rows carry."""

    label: str
    source: str
    document: Doc

    @property
    def model(self) -> str:
        return str((self.document.get("model") or {}).get("name") or "?")

    @property
    def framework(self) -> str:
        backend = self.document.get("backend") or {}
        spec = self.document.get("spec") or {}
        return str(backend.get("framework") or (spec.get("framework") or {}).get("name") or "?")

    def corrections(self) -> list[tuple[int, dict[str, Any]]]:
        """(batch size, correction) of every batch size that has one (skipped ones too)."""
        tracing = self.document.get("tracing") or {}
        return [
            (int(entry["batch_size"]), dict(entry["correction"]))
            for entry in tracing.get("by_batch_size") or []
            if entry.get("correction")
        ]


def label_runs(sources: Sequence[tuple[str, Doc]]) -> list[AnalyzedRun]:
    """Label each document ``model/framework`` (``evaluation name`` appended when two share
    it, then a counter), in the given order."""
    runs: list[AnalyzedRun] = []
    seen: dict[str, int] = defaultdict(int)
    bases = []
    for _, doc in sources:
        model = (doc.get("model") or {}).get("name") or "?"
        framework = (doc.get("backend") or {}).get("framework") or "?"
        bases.append(f"{model}/{framework}")
    counts = {b: bases.count(b) for b in bases}
    for (source, doc), base in zip(sources, bases, strict=True):
        label = base
        if counts[base] > 1:
            label = f"{base} ({(doc.get('evaluation') or {}).get('name') or source})"
        seen[label] += 1
        if seen[label] > 1:
            label = f"{label} #{seen[label]}"
        runs.append(AnalyzedRun(label, source, doc))
    return runs


def load_documents(paths: Sequence[Path]) -> list[tuple[str, Doc]]:
    """Read result documents; a file that is not one is an error naming it."""
    out: list[tuple[str, Doc]] = []
    for path in paths:
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise AnalysisInputError(f"{path}: cannot read a result document ({exc})") from exc
        if not isinstance(doc, dict) or doc.get("kind") != "EvaluationResult":
            raise AnalysisInputError(
                f"{path} is not a result document (kind EvaluationResult); pass the .json "
                "`mlms run` wrote, not its .trace.json"
            )
        out.append((str(path), doc))
    return out


# ------------------------------------------------------------------------------ costs


def _model_path(doc: Doc) -> Path | None:
    uri = str(((doc.get("spec") or {}).get("model") or {}).get("uri") or "")
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    path = Path(uri) if uri and "://" not in uri else None
    return path if path is not None and path.is_file() else None


class OrtCosts:
    """Layer costs of an ONNX Runtime document's model, matched by the names its profiler
    records: those of the graph ONNX Runtime ran (optimized at the document's
    ``graph_optimization_level``, so fused nodes keep their fused names) and, for names the
    optimizer left alone, the original graph. Cached per (model, level, batch size)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str, int], dict[str, Any]] = {}

    def __call__(self, doc: Doc, batch_size: int) -> tuple[dict[str, Any] | None, str | None]:
        framework = (doc.get("backend") or {}).get("framework")
        if framework != "onnxruntime":
            return None, f"costs come from the ONNX graph; this run is {framework}"
        path = _model_path(doc)
        if path is None:
            return None, "the model file named in the spec is not on this machine"
        details = (doc.get("backend") or {}).get("details") or {}
        level = str(details.get("graph_optimization_level") or "all")
        key = (str(path), level, batch_size)
        if key not in self._cache:
            self._cache[key] = ort_costs(path, level, batch_size)
        return self._cache[key], None


_ORT_LEVELS = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


def ort_costs(path: Path, level: str, batch_size: int) -> dict[str, Any]:
    """{node name: LayerCost} of the original graph, overlaid with the optimized graph's."""
    import onnxruntime as ort

    from mlmodelscope.analysis.graph import layer_costs, load_model, shapes_by_execution

    found = {c.name: c for c in layer_costs(path, batch_size)}
    with tempfile.TemporaryDirectory(prefix="mlms-analyze-") as tmp:
        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(
            ort.GraphOptimizationLevel, _ORT_LEVELS.get(level, "ORT_ENABLE_ALL")
        )
        options.log_severity_level = 3
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        optimized = load_model(options.optimized_model_filepath)
        try:
            shapes = shapes_by_execution(optimized, batch_size)
        except Exception:  # a graph ORT cannot rerun as given: keep inferred shapes
            shapes = None
        found.update({c.name: c for c in layer_costs(optimized, batch_size, shapes=shapes)})
    return found


# ------------------------------------------------------------------------------ matching

_FAMILIES = (
    ("conv", ("conv",)),
    ("matmul", ("gemm", "linear", "matmul", "addmm", "dense", "mm")),
    ("pool", ("pool",)),
    ("norm", ("norm",)),
    ("softmax", ("softmax",)),
    ("activation", ("relu", "sigmoid", "tanh", "gelu", "swish", "silu", "elu")),
    ("reshape", ("reshape", "flatten", "view", "squeeze", "reorder", "transpose", "permute")),
    ("add", ("add", "biasadd")),
)


def op_family(op_type: str) -> str:
    """A framework-neutral family of an op type: Conv, aten::conv2d and Conv2D are 'conv'."""
    t = op_type.lower().split("::")[-1].lstrip("_")
    for family, words in _FAMILIES:
        if any(w in t for w in words):
            return family
    return t


def _match_by_order(layers: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int], Any]:
    seen: dict[str, int] = defaultdict(int)
    keyed = {}
    for row in sorted(layers, key=lambda r: r["order"]):
        family = op_family(str(row["op_type"]))
        keyed[(family, seen[family])] = row
        seen[family] += 1
    return keyed


def across_frameworks(runs: Sequence[AnalyzedRun], top: int = DEFAULT_TOP) -> list[dict[str, Any]]:
    """Per model and batch size with documents in two or more frameworks, the same layer's
    corrected time in each (the first document of the model is the reference)."""
    groups: dict[tuple[str, int], list[tuple[AnalyzedRun, dict[str, Any]]]] = defaultdict(list)
    for run in runs:
        for batch, corr in run.corrections():
            if corr.get("layers"):
                groups[(run.model, batch)].append((run, corr))
    out = []
    for (model, batch), members in groups.items():
        if len({run.framework for run, _ in members}) < 2:
            continue
        names = [
            {(r["name"], r["op_type"], r.get("occurrence", 0)) for r in c["layers"]}
            for _, c in members
        ]
        shared = set.intersection(*names)
        by_name = len(shared) * 2 >= min(len(n) for n in names)
        keyed: list[dict[Any, Any]] = []
        for _, corr in members:
            if by_name:
                keyed.append(
                    {(r["name"], r["op_type"], r.get("occurrence", 0)): r for r in corr["layers"]}
                )
            else:
                keyed.append(_match_by_order(corr["layers"]))
        reference = keyed[0]
        rows = []
        for key, ref_row in reference.items():
            cells = {}
            for (run, _), table in zip(members, keyed, strict=True):
                row = table.get(key)
                if row is not None:
                    cells[run.label] = {
                        "name": row["name"],
                        "op_type": row["op_type"],
                        "corrected_s": row["corrected_s"],
                    }
            rows.append(
                {
                    "layer": ref_row["name"] if by_name else f"{key[0]} #{key[1]}",
                    "family": op_family(str(ref_row["op_type"])),
                    "order": ref_row["order"],
                    "matched": len(cells),
                    "by_run": cells,
                }
            )
        rows.sort(key=lambda r: r["order"])
        unmatched = {
            run.label: sorted(str(k) for k in table if k not in reference)
            for (run, _), table in zip(members, keyed, strict=True)
        }
        out.append(
            {
                "model": model,
                "batch_size": batch,
                "runs": [run.label for run, _ in members],
                "matched_by": "name and type" if by_name else "op family and order",
                "rows": rows,
                "unmatched": {k: v for k, v in unmatched.items() if v},
            }
        )
    return out


# ------------------------------------------------------------------------------ tables


def _layer_rows(corr: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            k: r.get(k)
            for k in ("name", "op_type", "occurrence", "order", "raw_s", "corrected_s", "share")
        }
        for r in corr.get("layers") or []
    ]


def cost_rows(
    layers: Sequence[Mapping[str, Any]], costs: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Each layer with a graph node of the same name: latency, FLOPs, bytes moved, and the
    rates they imply; plus the names with no node."""
    rows, unmatched = [], []
    for layer in layers:
        cost = costs.get(str(layer["name"]))
        if cost is None:
            unmatched.append(str(layer["name"]))
            continue
        seconds = float(layer["corrected_s"])
        moved = int(cost.bytes_read) + int(cost.bytes_written)
        rows.append(
            {
                "name": layer["name"],
                "op_type": layer["op_type"],
                "corrected_s": seconds,
                "flops": int(cost.flops),
                "bytes_moved": moved,
                "params_bytes": int(cost.params_bytes),
                "flops_per_s": cost.flops / seconds if seconds > 0 else None,
                "bytes_per_s": moved / seconds if seconds > 0 else None,
                "arithmetic_intensity": cost.flops / moved if moved else None,
            }
        )
    return rows, unmatched


def analyze(
    runs: Sequence[AnalyzedRun], *, top: int = DEFAULT_TOP, costs: CostLookup | None = None
) -> dict[str, Any]:
    """Every table of the analysis (see the module docstring). A document with no
    correction is listed in ``runs`` with why; it is an error only when none has one."""
    if not runs:
        raise AnalysisInputError("no result documents to analyze")
    lookup = costs if costs is not None else OrtCosts()
    summary, top_layers, top_ops, by_type, cost = [], [], [], [], []
    for run in runs:
        corrections = run.corrections()
        entry: dict[str, Any] = {
            "label": run.label,
            "source": run.source,
            "model": run.model,
            "framework": run.framework,
            "device": (run.document.get("backend") or {}).get("device"),
            "batches": [],
        }
        if not corrections:
            level = (run.document.get("tracing") or {}).get("level", "none")
            entry["skipped"] = (
                f"no leveled correction (tracing.level {level}); run with tracing.level framework"
            )
        for batch, corr in corrections:
            keep = (
                "calls",
                "untraced_predict_p50_s",
                "raw_sum_s",
                "corrected_sum_s",
                "raw_residual",
                "residual",
                "tolerance",
                "within_tolerance",
                "model_overhead_s",
                "profiler_overhead_s",
                "outside_operators_share_raw",
                "skipped",
            )
            entry["batches"].append(
                {"batch_size": batch, **{k: corr[k] for k in keep if k in corr}}
            )
            if corr.get("skipped"):
                continue
            layers = _layer_rows(corr)
            ident = {"run": run.label, "batch_size": batch}
            ranked = sorted(layers, key=lambda r: -float(r["corrected_s"] or 0))
            top_layers.append({**ident, "rows": ranked[:top]})
            top_ops.append({**ident, "rows": list(corr.get("operators") or [])[:top]})
            per_type: dict[str, float] = defaultdict(float)
            for row in layers:
                per_type[str(row["op_type"])] += float(row["corrected_s"] or 0)
            total = sum(per_type.values())
            by_type.append(
                {
                    **ident,
                    "rows": [
                        {"op_type": t, "corrected_s": s, "share": s / total if total else None}
                        for t, s in sorted(per_type.items(), key=lambda kv: -kv[1])
                    ],
                }
            )
            found, why = lookup(run.document, batch)
            if found is None:
                cost.append({**ident, "skipped": why, "rows": []})
                continue
            rows, unmatched = cost_rows(layers, found)
            cost.append({**ident, "rows": rows, "unmatched": unmatched})
        summary.append(entry)
    if not top_layers:
        reasons = "; ".join(
            f"{e['label']}: {e.get('skipped', 'corrections skipped')}" for e in summary
        )
        raise AnalysisInputError(f"no document has a leveled correction to analyze ({reasons})")
    return {
        "format": ANALYSIS_FORMAT,
        "top": top,
        "runs": summary,
        "top_layers": top_layers,
        "top_operators": top_ops,
        "time_by_layer_type": by_type,
        "cost": cost,
        "across_frameworks": across_frameworks(runs, top),
    }
