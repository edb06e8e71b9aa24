"""XSP checked layer by layer: each layer's corrected time against an independent measurement.

The leveled correction (:mod:`mlmodelscope.analysis.xsp`) scales every call's operators to
that call's model-level budget, so its residual (Σ corrected layers against the untraced
latency) holds almost by construction: it checks the sum, not how the sum is shared out. This
module checks the shares. Each layer's corrected time from a framework-level trace is matched,
by layer identity (the node name the trace and the independent measurement both use), to the
same layer timed without a profiler (an isolated brick, or the layer's own timers), and its
relative error is ``(corrected - independent) / independent``.

Per model and pooled over models, :class:`ErrorDistribution` gives the median and the 90th
percentile of ``|error|`` (``np.percentile`` with :data:`PERCENTILE_METHOD`, linear
interpolation between the closest ranks), the signed median (is the correction biased one
way?) and the time-weighted error ``Σ|corrected - independent| / Σ independent`` (the error
where the time is spent: a 1 µs layer off by 100 % weighs little there). The same median and
90th percentile are given for the *share* error, each layer's share of its model's matched
layers on either side, which takes out the gap between the two sums (a model runs slower or
faster than its layers alone) and leaves how the correction shared its budget out. The
model-level residual is carried beside it. A layer whose independent time is not positive (a
brick at or under the framework's per-run cost once that is subtracted) has no relative
error: it is counted as not comparable, never dropped silently.

Pure functions over plain numbers; :mod:`mlmodelscope.telemetry.layercheck` measures them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np

PERCENTILE_METHOD: Final = "linear"
"""``np.percentile``'s method for the median and the 90th percentile (numpy's default: linear
interpolation between the two closest ranks, as R's type 7)."""


@dataclass(frozen=True)
class LayerTime:
    """One layer's time from one source (the corrected trace, or the independent measurement)."""

    name: str
    """The layer's identity in both sources: the ONNX node name the profiler reports."""
    op_type: str
    seconds: float
    signature: str = ""
    """The brick signature (op, shapes, dtypes, attributes) where the source knows it."""


@dataclass(frozen=True)
class LayerError:
    """A layer found in both sources, with its relative error."""

    name: str
    op_type: str
    corrected_s: float
    independent_s: float
    error: float
    """``(corrected_s - independent_s) / independent_s``: + when the trace says slower."""
    share_error: float = 0.0
    """The same for the layer's *share* of its model's matched layers on each side: the
    attribution's error with the gap between the two sums (in-model against isolated) taken
    out."""
    signature: str = ""


@dataclass(frozen=True)
class ErrorDistribution:
    """The per-layer relative errors of one model, or of several pooled."""

    layers: int
    median_abs: float | None
    """Median of ``|error|`` (None with no layer)."""
    p90_abs: float | None
    """90th percentile of ``|error|`` (:data:`PERCENTILE_METHOD`)."""
    median_signed: float | None
    time_weighted_abs: float | None
    """``Σ|corrected - independent| / Σ independent`` over the layers."""

    share_median_abs: float | None = None
    """Median of ``|share_error|``."""
    share_p90_abs: float | None = None
    """90th percentile of ``|share_error|``."""
    method: str = PERCENTILE_METHOD

    @classmethod
    def of(cls, matched: Sequence[LayerError]) -> ErrorDistribution:
        if not matched:
            return cls(0, None, None, None, None)
        errors = np.asarray([m.error for m in matched], dtype=np.float64)
        absolute = np.abs(errors)
        shares = np.abs(np.asarray([m.share_error for m in matched], dtype=np.float64))
        independent = sum(m.independent_s for m in matched)
        gap = sum(abs(m.corrected_s - m.independent_s) for m in matched)
        return cls(
            layers=len(matched),
            median_abs=_pct(absolute, 50),
            p90_abs=_pct(absolute, 90),
            median_signed=_pct(errors, 50),
            time_weighted_abs=gap / independent if independent > 0 else None,
            share_median_abs=_pct(shares, 50),
            share_p90_abs=_pct(shares, 90),
        )


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q, method=PERCENTILE_METHOD))


@dataclass(frozen=True)
class ModelLayerCheck:
    """One model's layers matched across the two sources, and their error distribution."""

    model: str
    matched: tuple[LayerError, ...]
    only_in_trace: tuple[str, ...]
    """Layers the trace has and the independent measurement lacks."""
    only_independent: tuple[str, ...]
    """Layers measured independently that the trace never showed."""
    not_comparable: tuple[str, ...]
    """Layers in both whose independent time is not positive: no relative error."""
    distribution: ErrorDistribution
    residual: float | None = None
    """The model-level residual of the same correction (``xsp.correct``'s ``residual``)."""
    untraced_s: float | None = None
    """The untraced predict p50 the corrected layers were scaled to."""
    corrected_sum_s: float = 0.0
    """Σ corrected over the matched layers."""
    independent_sum_s: float = 0.0
    """Σ independent over the matched layers."""
    notes: tuple[str, ...] = field(default=())

    @property
    def sum_error(self) -> float | None:
        """Σ corrected against Σ independent over the matched layers, relative."""
        if self.independent_sum_s <= 0:
            return None
        return (self.corrected_sum_s - self.independent_sum_s) / self.independent_sum_s


def _by_name(layers: Iterable[LayerTime], source: str) -> dict[str, LayerTime]:
    out: dict[str, LayerTime] = {}
    for layer in layers:
        if layer.name in out:
            raise ValueError(f"{source}: layer {layer.name!r} appears twice; names must be unique")
        out[layer.name] = layer
    return out


def compare(
    model: str,
    corrected: Iterable[LayerTime],
    independent: Iterable[LayerTime],
    *,
    residual: float | None = None,
    untraced_s: float | None = None,
    notes: Sequence[str] = (),
) -> ModelLayerCheck:
    """Match ``corrected`` to ``independent`` by layer name (in the trace's order) and compute
    each matched layer's relative error and the model's distribution. Raises ValueError when
    a name appears twice in one source (the match would be ambiguous)."""
    trace = _by_name(corrected, "corrected")
    alone = _by_name(independent, "independent")
    pairs: list[tuple[LayerTime, LayerTime]] = []
    not_comparable: list[str] = []
    for name, layer in trace.items():
        other = alone.get(name)
        if other is None:
            continue
        if other.seconds <= 0:
            not_comparable.append(name)
            continue
        pairs.append((layer, other))
    corrected_sum = sum(c.seconds for c, _ in pairs)
    independent_sum = sum(i.seconds for _, i in pairs)
    # a share ratio needs a positive corrected sum; with none, the share error is the error
    rescale = independent_sum / corrected_sum if corrected_sum > 0 else 1.0
    matched = [
        LayerError(
            name=c.name,
            op_type=c.op_type,
            corrected_s=c.seconds,
            independent_s=i.seconds,
            error=(c.seconds - i.seconds) / i.seconds,
            share_error=(c.seconds * rescale - i.seconds) / i.seconds,
            signature=i.signature or c.signature,
        )
        for c, i in pairs
    ]
    return ModelLayerCheck(
        model=model,
        matched=tuple(matched),
        only_in_trace=tuple(n for n in trace if n not in alone),
        only_independent=tuple(n for n in alone if n not in trace),
        not_comparable=tuple(not_comparable),
        distribution=ErrorDistribution.of(matched),
        residual=residual,
        untraced_s=untraced_s,
        corrected_sum_s=corrected_sum,
        independent_sum_s=independent_sum,
        notes=tuple(notes),
    )


def pooled(checks: Iterable[ModelLayerCheck]) -> ErrorDistribution:
    """Every matched layer of every model in one distribution (each layer counts once)."""
    return ErrorDistribution.of([m for check in checks for m in check.matched])


def by_op_type(checks: Iterable[ModelLayerCheck]) -> dict[str, ErrorDistribution]:
    """The pooled distribution per op type, largest count first (where the error lives)."""
    groups: dict[str, list[LayerError]] = {}
    for check in checks:
        for m in check.matched:
            groups.setdefault(m.op_type, []).append(m)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return {op_type: ErrorDistribution.of(errors) for op_type, errors in ordered}
