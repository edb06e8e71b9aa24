"""What the per-layer timings say: Benanza's measured bound and its suggestions, DLBricks'
estimate against the measured model. Pure: timings in, records out; standard library and
:mod:`mlmodelscope.analysis.measuredbound` only (measuring is :mod:`.layerbench`).

Benanza's bound is the sum over the model's layers of the best device time any variant
(precision, cuDNN algorithm search on or off) measured for the layer alone; each variant is
held against it end to end. The suggestions compare what a user can switch: tensor cores
(TF32, FP16), cuDNN's algorithm search, fusion (convolution with batch norm), and launch
overhead (the whole model's wall time against its device time and a CUDA graph's replay).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mlmodelscope.analysis.measuredbound import (
    Implementation,
    Layer,
    LayerTiming,
    measured_bound,
)

FRAMEWORK = "pytorch-cuda"
POINTWISE = frozenset(
    {"batch_norm", "relu", "add", "gelu", "div", "mul", "layer_norm", "softmax", "dropout"}
)
"""Operators a fusing compiler folds into their neighbours (memory-bound, no reduction over
a weight): their share of the device time is what fusion could save at most."""


@dataclass(frozen=True)
class BrickTime:
    """One brick (by signature) in one variant: device and wall medians (ms)."""

    signature: str
    variant: str
    device_ms: float
    wall_ms: float


def op_name(signature: str) -> str:
    """``aten.conv2d.default(...)`` → ``conv2d``."""
    return signature.split("(", 1)[0].removeprefix("aten.").split(".")[0]


def bound(
    model: str,
    layers: Sequence[str],
    descriptions: Mapping[str, str],
    times: Sequence[BrickTime],
    end_to_end_ms: Mapping[str, float],
    conditions: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Benanza's measured bound over every variant, and the bound within each precision
    (the best over cuDNN search on and off only), as ``MeasuredBound.to_dict()`` records."""
    records = [
        Layer(f"{i}", sig, descriptions.get(sig, op_name(sig))) for i, sig in enumerate(layers)
    ]
    impl = {t.variant: Implementation(FRAMEWORK, t.variant) for t in times}
    timings = [LayerTiming(t.signature, impl[t.variant], t.device_ms) for t in times]
    e2e = {impl[v]: ms for v, ms in end_to_end_ms.items() if v in impl}
    overall = measured_bound(model, records, timings, e2e, conditions=conditions).to_dict()
    per_precision = {}
    for precision in dict.fromkeys(v.split(",")[0] for v in impl):
        own = [t for t in timings if t.implementation.variant.split(",")[0] == precision]
        per_precision[precision] = measured_bound(model, records, own, e2e).bound_ms
    overall["bound_ms_per_precision"] = per_precision
    return overall


def _pct(new: float, old: float) -> float:
    return round(100.0 * (new - old) / old, 1) if old else 0.0


def _best(e2e: Mapping[str, float], precision: str) -> tuple[str, float] | None:
    own = [(v, ms) for v, ms in e2e.items() if v.split(",")[0] == precision]
    return min(own, key=lambda item: item[1]) if own else None


def suggestions(
    layers: Sequence[str],
    times: Sequence[BrickTime],
    end_to_end: Mapping[str, Mapping[str, float]],
    graphs_ms: Mapping[str, float],
    fused_ms: Mapping[str, float],
) -> list[dict[str, Any]]:
    """What to switch, each with the measured figures behind it: ``end_to_end`` is
    {variant: {"wall_ms", "device_ms"}}; ``graphs_ms`` and ``fused_ms`` the whole model's
    wall time per variant replayed as a CUDA graph and with convolution and batch norm fused.
    Precision and algorithm search are compared on the device time (what they change; at
    small batches the host's launch rate sets the wall time and its noise would decide),
    fusion and CUDA graphs on the wall time (they also take launches away)."""
    wall = {v: e["wall_ms"] for v, e in end_to_end.items()}
    device = {v: e.get("device_ms", e["wall_ms"]) for v, e in end_to_end.items()}
    out: list[dict[str, Any]] = []
    base = _best(device, "fp32")
    for precision in ("tf32", "fp16"):
        best = _best(device, precision)
        if base and best:
            out.append(
                {
                    "kind": "tensor cores",
                    "sentence": f"{precision}: {base[1]:.3f} → {best[1]:.3f} ms on the device "
                    f"({_pct(best[1], base[1]):+.1f} %), best fp32 {base[0]!r}, "
                    f"best {precision} {best[0]!r}",
                    "from_ms": base[1],
                    "to_ms": best[1],
                    "change_pct": _pct(best[1], base[1]),
                }
            )
    by = {(t.signature, t.variant): t.device_ms for t in times}
    for precision in dict.fromkeys(v.split(",")[0] for v in device):
        off, on = f"{precision}, cudnn search off", f"{precision}, cudnn search on"
        if off in device and on in device:
            gains = sorted(
                (
                    (by[(s, off)] - by[(s, on)], s)
                    for s in dict.fromkeys(layers)
                    if (s, off) in by and (s, on) in by
                ),
                reverse=True,
            )
            out.append(
                {
                    "kind": "algorithm search",
                    "precision": precision,
                    "sentence": f"{precision}: cuDNN search {device[off]:.3f} → "
                    f"{device[on]:.3f} ms on the device ({_pct(device[on], device[off]):+.1f} %)",
                    "from_ms": device[off],
                    "to_ms": device[on],
                    "change_pct": _pct(device[on], device[off]),
                    "layers_faster_with_search": [
                        {"layer": op_name(s), "signature": s, "saves_ms": round(g, 4)}
                        for g, s in gains[:3]
                        if g > 0
                    ],
                }
            )
    for variant, ms in fused_ms.items():
        if variant in wall:
            out.append(
                {
                    "kind": "fusion",
                    "variant": variant,
                    "sentence": f"{variant}: convolution and batch norm fused "
                    f"{wall[variant]:.3f} → {ms:.3f} ms wall time "
                    f"({_pct(ms, wall[variant]):+.1f} %)",
                    "from_ms": wall[variant],
                    "to_ms": ms,
                    "change_pct": _pct(ms, wall[variant]),
                }
            )
    for variant, ms in graphs_ms.items():
        if variant in wall:
            on_device = end_to_end[variant].get("device_ms")
            out.append(
                {
                    "kind": "launch overhead",
                    "variant": variant,
                    "sentence": f"{variant}: {wall[variant]:.3f} ms wall time, of it "
                    f"{on_device:.3f} ms on the device; as a CUDA graph {ms:.3f} ms "
                    f"({_pct(ms, wall[variant]):+.1f} %)",
                    "from_ms": wall[variant],
                    "device_ms": on_device,
                    "to_ms": ms,
                    "change_pct": _pct(ms, wall[variant]),
                }
            )
    return out


def pointwise_share(
    layers: Sequence[str], times: Sequence[BrickTime], variant: str
) -> dict[str, Any]:
    """The device time of ``variant``'s pointwise layers (:data:`POINTWISE`) and its share
    of all its layers' time: fusion's ceiling."""
    by = {t.signature: t.device_ms for t in times if t.variant == variant}
    total = sum(by.get(s, 0.0) for s in layers)
    pointwise = sum(by.get(s, 0.0) for s in layers if op_name(s) in POINTWISE)
    return {
        "variant": variant,
        "pointwise_ms": round(pointwise, 4),
        "layers_ms": round(total, 4),
        "share_pct": round(100.0 * pointwise / total, 1) if total else None,
    }


def dlbricks_estimate(
    model: str,
    batch_size: int,
    layers: Sequence[str],
    times: Mapping[str, float],
    measured_ms: float,
    overhead_ms: float,
) -> dict[str, Any]:
    """DLBricks: the model's latency as the sum of its bricks' wall times (each measured
    alone), and corrected for the timing overhead every brick carries once, against the
    model measured end to end the same way."""
    per_layer = [times[s] for s in layers if s in times]
    estimate = sum(per_layer)
    corrected = sum(max(0.0, t - overhead_ms) for t in per_layer) + overhead_ms
    by_op: dict[str, float] = {}
    for s in layers:
        if s in times:
            by_op[op_name(s)] = by_op.get(op_name(s), 0.0) + times[s]
    return {
        "model": model,
        "batch_size": batch_size,
        "layers": len(layers),
        "layers_timed": len(per_layer),
        "bricks": len(set(layers)),
        "estimate_ms": round(estimate, 4),
        "estimate_corrected_ms": round(corrected, 4),
        "measured_ms": round(measured_ms, 4),
        "error_pct": _pct(estimate, measured_ms),
        "error_corrected_pct": _pct(corrected, measured_ms),
        "overhead_ms": round(overhead_ms, 4),
        "by_op_ms": {k: round(v, 4) for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])},
    }
