"""Benanza's lower bound as the paper defines it: the best measured implementation per layer.

Each layer of a model is timed alone (its DLBricks brick) in several implementations: a
framework and a variant of it (ONNX Runtime at a graph-optimization level, PyTorch eager,
TensorFlow in a ``tf.function``). The bound is the sum over the model's layers of the fastest
implementation's median; an implementation's gap is its own sum of layers minus the bound over
the layers it ran, and the layers responsible are those farthest (absolute ms) from their best
implementation, each named with the implementation that was faster.

Pure: records in, records out. Measuring is :mod:`mlmodelscope.analysis.implementations`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

TOP_LAYERS = 3


@dataclass(frozen=True, order=True)
class Implementation:
    """Where a layer ran: a framework and a variant of it (an optimization level, a mode)."""

    framework: str
    variant: str = ""

    @property
    def label(self) -> str:
        return f"{self.framework} ({self.variant})" if self.variant else self.framework


@dataclass(frozen=True)
class Layer:
    """One layer instance of a model: its node name, its brick's signature, a readable name."""

    name: str
    signature: str
    description: str


@dataclass(frozen=True)
class LayerTiming:
    """The median time of one brick (by signature) in one implementation."""

    signature: str
    implementation: Implementation
    median_ms: float


@dataclass(frozen=True)
class LayerGap:
    """Layers sharing a signature, slower in one implementation than in their best one."""

    description: str
    layers: int
    """How many layers of the model share the signature (the gap counts each)."""
    ms: float
    implementation: Implementation
    best_ms: float
    best: Implementation

    @property
    def gap_ms(self) -> float:
        return self.layers * (self.ms - self.best_ms)

    def sentence(self) -> str:
        times = f" (x{self.layers})" if self.layers > 1 else ""
        return (
            f"{self.description}{times}: {self.ms:.3f} ms in {self.implementation.label}, "
            f"best {self.best_ms:.3f} ms in {self.best.label}"
        )


@dataclass(frozen=True)
class ImplementationRow:
    """One implementation of one model against the bound."""

    implementation: Implementation
    layers_ms: float
    """Sum of this implementation's time over the layers it ran."""
    bound_ms: float
    """The bound over the same layers (the model's bound when it ran them all)."""
    layers_run: int
    layers_total: int
    end_to_end_ms: float | None = None
    """The whole model in this implementation, where it could run it."""
    top: tuple[LayerGap, ...] = ()

    @property
    def gap_ms(self) -> float:
        return self.layers_ms - self.bound_ms

    @property
    def end_to_end_gap_ms(self) -> float | None:
        return None if self.end_to_end_ms is None else self.end_to_end_ms - self.bound_ms

    @property
    def complete(self) -> bool:
        return self.layers_run == self.layers_total


@dataclass(frozen=True)
class BestLayer:
    layer: Layer
    best: Implementation | None
    best_ms: float | None
    """None when no implementation ran the layer."""


@dataclass(frozen=True)
class MeasuredBound:
    model: str
    bound_ms: float
    """Sum over layers of the best measured implementation (layers none ran count 0)."""
    layers: tuple[BestLayer, ...]
    rows: tuple[ImplementationRow, ...]
    roofline_ms: float | None = None
    """The roofline beside it (``benanza.bound``'s sequential sum), where computed."""
    conditions: Mapping[str, Any] = field(default_factory=dict)
    """How the timings were taken: threads, runs, warm-up, versions."""

    @property
    def unmeasured(self) -> tuple[str, ...]:
        return tuple(b.layer.name for b in self.layers if b.best is None)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["unmeasured"] = list(self.unmeasured)
        for row, rec in zip(out["rows"], self.rows, strict=True):
            row["label"] = rec.implementation.label
            row["gap_ms"] = rec.gap_ms
            row["end_to_end_gap_ms"] = rec.end_to_end_gap_ms
            for item, gap in zip(row["top"], rec.top, strict=True):
                item["gap_ms"] = gap.gap_ms
                item["sentence"] = gap.sentence()
        return out


def best_per_signature(
    timings: Sequence[LayerTiming],
) -> dict[str, tuple[Implementation, float]]:
    """{signature: (fastest implementation, its median)}; ties go to the first in sort order."""
    best: dict[str, tuple[Implementation, float]] = {}
    for t in sorted(timings, key=lambda t: (t.signature, t.median_ms, t.implementation)):
        best.setdefault(t.signature, (t.implementation, t.median_ms))
    return best


def measured_bound(
    model: str,
    layers: Sequence[Layer],
    timings: Sequence[LayerTiming],
    end_to_end: Mapping[Implementation, float] | None = None,
    roofline_ms: float | None = None,
    top: int = TOP_LAYERS,
    conditions: Mapping[str, Any] | None = None,
) -> MeasuredBound:
    """The bound of ``model`` from per-brick ``timings``, a row per implementation that timed
    any of its layers, and each row's ``top`` layers farthest from their best implementation."""
    best = best_per_signature(timings)
    by_impl: dict[Implementation, dict[str, float]] = defaultdict(dict)
    for t in timings:
        by_impl[t.implementation][t.signature] = t.median_ms
    count: dict[str, int] = defaultdict(int)
    first: dict[str, Layer] = {}
    for layer in layers:
        count[layer.signature] += 1
        first.setdefault(layer.signature, layer)
    rows = []
    for impl in by_impl:  # in the order the timings name them
        own = by_impl[impl]
        ran = [layer for layer in layers if layer.signature in own]
        if not ran:
            continue
        gaps = [
            LayerGap(
                first[sig].description,
                count[sig],
                own[sig],
                impl,
                best[sig][1],
                best[sig][0],
            )
            for sig in dict.fromkeys(layer.signature for layer in ran)
            if best[sig][0] != impl and own[sig] > best[sig][1]
        ]
        gaps.sort(key=lambda g: -g.gap_ms)
        rows.append(
            ImplementationRow(
                implementation=impl,
                layers_ms=sum(own[layer.signature] for layer in ran),
                bound_ms=sum(best[layer.signature][1] for layer in ran),
                layers_run=len(ran),
                layers_total=len(layers),
                end_to_end_ms=(end_to_end or {}).get(impl),
                top=tuple(gaps[:top]),
            )
        )
    bests = tuple(
        BestLayer(layer, *best[layer.signature]) if layer.signature in best else
        BestLayer(layer, None, None)
        for layer in layers
    )  # fmt: skip
    return MeasuredBound(
        model=model,
        bound_ms=sum(b.best_ms for b in bests if b.best_ms is not None),
        layers=bests,
        rows=tuple(rows),
        roofline_ms=roofline_ms,
        conditions=dict(conditions or {}),
    )


def describe(op_type: str, attributes: Mapping[str, Any], input_shape: Sequence[int] | None) -> str:
    """A layer as a reader names it: ``Conv 3x3 s1 at [1,64,56,56]``, ``Gemm at [1,512]``."""
    parts = [op_type]
    kernel = attributes.get("kernel_shape")
    if kernel:
        parts.append("x".join(str(k) for k in kernel))
    strides = attributes.get("strides")
    if strides and kernel:
        parts.append("s" + "x".join(str(s) for s in dict.fromkeys(strides)))
    group = attributes.get("group")
    if isinstance(group, int) and group > 1:
        parts.append(f"g{group}")
    if input_shape is not None:
        parts.append(f"at [{','.join(str(d) for d in input_shape)}]")
    return " ".join(parts)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(results: Sequence[MeasuredBound]) -> list[str]:
    """A Markdown table per model and implementation (end to end, sum of layers, the bound,
    the gap, the roofline), and under it each implementation's layers farthest from their best
    and what it did not time or run, with the reason."""
    lines = [
        "| model | implementation | end to end ms | layers ms | bound ms | gap ms | roofline ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for result in results:
        for row in result.rows:
            ran = "" if row.complete else f" ({row.layers_run}/{row.layers_total} layers)"
            lines.append(
                f"| {result.model} | {row.implementation.label}{ran} | {_ms(row.end_to_end_ms)} "
                f"| {_ms(row.layers_ms)} | {_ms(row.bound_ms)} | {_ms(row.gap_ms)} "
                f"| {_ms(result.roofline_ms)} |"
            )
    for result in results:
        lines += ["", f"{result.model}: the layers farthest from their best implementation"]
        for row in result.rows:
            if not row.top:
                lines.append(f"- {row.implementation.label}: best on every layer it ran")
                continue
            for gap in row.top:
                lines.append(f"- {gap.sentence()} (+{gap.gap_ms:.3f} ms)")
        if result.unmeasured:
            lines.append(f"- no implementation ran: {', '.join(result.unmeasured)}")
        lines += _not_run(result.conditions)
    return lines


def _not_run(conditions: Mapping[str, Any]) -> list[str]:
    """What an implementation did not time or run end to end, and why (``measure``'s
    ``not_timed`` and ``end_to_end_not_run`` conditions)."""
    lines = [
        f"- not timed in {label}: {'; '.join(reasons.values())}"
        for label, reasons in (conditions.get("not_timed") or {}).items()
    ]
    return lines + [
        f"- not run end to end in {label}: {reason}"
        for label, reason in (conditions.get("end_to_end_not_run") or {}).items()
    ]
