"""XSP's leveled correction: operator times that add up to the untraced model latency.

A framework profiler inflates what it measures: it records an event per operator, and the call
it profiles gets slower (ONNX Runtime's session profiling, torch's profiler and TensorFlow's
TraceMe all do). Leveled measurement (XSP, Li et al.) keeps that inflation out of the levels
above: each level's latency is taken from the pass at that level, and a deeper level's spans
are attributed *inside* the time of the level above. The chain here, per batch size:

1. **untraced** — the predict time of every call with no spans and no profiler: ``T``, its
   median, is the model's latency (what the level above the model level measures).
2. **model level** — the predict time of call ``c`` with spans on, ``M_c``. Its own overhead
   (the model-level spans) is the pass-to-pass difference ``median(M) - T``; it is removed by
   rescaling each call to the untraced run: the call's budget is ``B_c = M_c * T / median(M)``
   (so ``median(B) = T``; a ratio rather than a difference, so a call faster than the
   overhead, or a noisy pass, never gets a negative budget).
3. **framework level** — the profiler's operators of the same call (calls are numbered the
   same way in every pass, so call ``c`` runs the same batch). Their self times ``o_c,i`` add
   up to ``S_c``, less than the profiled call ``F_c``: the rest (``F_c - S_c``) is time between
   operators (the profiler's bookkeeping, which the pass-to-pass difference
   ``median(F) - median(M)`` estimates, and the framework's own dispatch). The corrected time
   of operator ``i`` in call ``c`` is its share of the budget: ``o_c,i * B_c / S_c``, which
   removes the profiler's overhead (gaps and per-operator cost alike) and keeps each
   operator's share of the measured operator time.

Per layer (a top-level operator, its nested operators included) and per operator type (self
times), the raw and corrected times are means over the *central* traced calls: those whose
budget ``B_c`` lies between its 25th and 75th percentiles (a midmean) and whose raw operator
time ``S_c`` between its 10th and 90th, so a preempted call on a busy machine distorts neither
the budget nor the shares. Means keep the table additive: the corrected layers add up
to the mean budget of the central calls. The **residual** is
``|sum of corrected layers - T| / T``: how far the level above's central calls, scaled to the
untraced run, sit from its median (a skewed or drifting model-level pass shows here).
``raw_residual`` is the same for the uncorrected times: what the profile alone would claim,
which the correction fixes.
:data:`TOLERANCE` is the stated bound; the document says whether it held.

Pure functions over plain numbers, so they are unit-tested without a framework; the traced
passes (:mod:`mlmodelscope.telemetry.leveled`) collect the inputs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

TOLERANCE = 0.05
"""Stated bound on the residual (5 %): the corrected layer table must add up to the untraced
latency within it. Why 5 %: a table of medians is exact only when every call splits the same
way; on a shared CPU, call-to-call variation of operator shares is a few percent (ONNX
Runtime's profiler also rounds each operator to a whole microsecond), and the harness's own
run-to-run spread of a p50 on such a machine is of the same order, so a tighter bound would
judge the machine, not the attribution."""
METHOD = "xsp-leveled-proportional"


@dataclass(frozen=True)
class OpSample:
    """One profiled operator in one call, in the shape the correction needs."""

    name: str
    op_type: str
    self_ns: int
    """Its duration minus its nested operators' (nested operators are never counted twice)."""
    total_ns: int
    top_level: bool
    """Directly under predict: a layer. Its ``total_ns`` includes the operators it calls."""


def central(
    calls: Sequence[int], budgets: Mapping[int, float], sums: Mapping[int, int]
) -> list[int]:
    """The calls whose budget lies within its 25th-75th percentiles and whose raw operator
    time within its 10th-90th (a wider band: ONNX Runtime rounds each operator to a
    microsecond, so many calls tie); else those of the budget band alone; else all."""

    def within(values: Mapping[int, float], lo_pct: float, hi_pct: float) -> set[int]:
        data = np.asarray([values[c] for c in calls], dtype=np.float64)
        lo, hi = np.percentile(data, lo_pct), np.percentile(data, hi_pct)
        return {c for c in calls if lo <= values[c] <= hi}

    by_budget = within(budgets, 25, 75)
    by_sum = within({c: float(sums[c]) for c in calls}, 10, 90)
    kept = [c for c in calls if c in by_budget and c in by_sum]
    return kept or [c for c in calls if c in by_budget] or list(calls)


def median(values: Sequence[float]) -> float:
    """The median (midpoint of the two middle values for an even count)."""
    return float(np.median(np.asarray(values, dtype=np.float64)))


def _layer_keys(ops: Sequence[OpSample]) -> list[tuple[str, str, int]]:
    """(name, op type, occurrence) of each top-level op: torch names an op by its type, so the
    second ``aten::linear`` of a call is a different layer from the first."""
    seen: dict[tuple[str, str], int] = defaultdict(int)
    keys = []
    for op in ops:
        if not op.top_level:
            continue
        base = (op.name, op.op_type)
        keys.append((op.name, op.op_type, seen[base]))
        seen[base] += 1
    return keys


def correct(
    untraced_ns: Sequence[int],
    model_ns: Mapping[int, int],
    framework_ns: Mapping[int, int],
    ops: Mapping[int, Sequence[OpSample]],
    *,
    tolerance: float = TOLERANCE,
) -> dict[str, Any]:
    """The leveled correction of one batch size (see the module docstring).

    ``untraced_ns``: predict time of each untraced call; ``model_ns`` / ``framework_ns``:
    predict time per call index in the model- and framework-level passes; ``ops``: the
    profiler's operators per call index. Calls missing from either traced pass, or with no
    operator time, are left out (``calls`` says how many were used). Raises ValueError when
    nothing can be corrected, with the reason."""
    if not untraced_ns:
        raise ValueError("no untraced calls: the baseline pass did not run")
    calls = sorted(
        c for c in framework_ns if c in model_ns and sum(op.self_ns for op in ops.get(c, ())) > 0
    )
    if not calls:
        raise ValueError("no traced call has both a model-level time and profiled operators")
    t_untraced = median(untraced_ns)
    m_median = median([model_ns[c] for c in model_ns])
    f_median = median([framework_ns[c] for c in framework_ns])
    model_overhead = m_median - t_untraced
    layer_raw: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    layer_corr: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    type_raw: dict[str, list[float]] = defaultdict(list)
    type_corr: dict[str, list[float]] = defaultdict(list)
    type_count: dict[str, list[int]] = defaultdict(list)
    order: dict[tuple[str, str, int], list[int]] = defaultdict(list)
    outside: list[float] = []
    op_counts: list[int] = []
    scales: list[float] = []
    budgets = {c: model_ns[c] * t_untraced / m_median if m_median > 0 else 0.0 for c in calls}
    sums = {c: sum(op.self_ns for op in ops[c]) for c in calls}
    paired = len(calls)
    calls = central(calls, budgets, sums)
    for c in calls:
        call_ops = ops[c]
        op_sum = sums[c]
        scale = budgets[c] / op_sum
        scales.append(scale)
        op_counts.append(len(call_ops))
        outside.append(
            max(framework_ns[c] - op_sum, 0) / framework_ns[c] if framework_ns[c] else 0.0
        )
        top = [op for op in call_ops if op.top_level]
        for position, (key, op) in enumerate(zip(_layer_keys(call_ops), top, strict=True)):
            layer_raw[key].append(op.total_ns)
            layer_corr[key].append(op.total_ns * scale)
            order[key].append(position)
        per_type: dict[str, float] = defaultdict(float)
        per_type_n: dict[str, int] = defaultdict(int)
        for op in call_ops:
            per_type[op.op_type] += op.self_ns
            per_type_n[op.op_type] += 1
        for op_type, ns in per_type.items():
            type_raw[op_type].append(ns)
            type_corr[op_type].append(ns * scale)
            type_count[op_type].append(per_type_n[op_type])
    n = len(calls)

    def per_call(values: list[float]) -> float:
        # the mean per call: a layer absent from some calls counts 0 there
        return sum(values) / n

    layers: list[dict[str, Any]] = [
        {
            "name": name,
            "op_type": op_type,
            "occurrence": k,
            "order": int(median(order[(name, op_type, k)])),
            "calls": len(layer_raw[(name, op_type, k)]),
            "raw_s": per_call(layer_raw[(name, op_type, k)]) / 1e9,
            "corrected_s": per_call(layer_corr[(name, op_type, k)]) / 1e9,
        }
        for (name, op_type, k) in layer_raw
    ]
    layers.sort(key=lambda r: (int(r["order"]), str(r["name"])))
    operators: list[dict[str, Any]] = [
        {
            "op_type": op_type,
            "count_per_call": median(type_count[op_type]),
            "raw_s": per_call(type_raw[op_type]) / 1e9,
            "corrected_s": per_call(type_corr[op_type]) / 1e9,
        }
        for op_type in type_raw
    ]
    operators.sort(key=lambda r: -float(r["corrected_s"]))
    t_s = t_untraced / 1e9
    for row in [*layers, *operators]:
        row["share"] = row["corrected_s"] / t_s if t_s else None
    raw_sum = sum(float(r["raw_s"]) for r in layers)
    corrected_sum = sum(float(r["corrected_s"]) for r in layers)
    residual = abs(corrected_sum - t_s) / t_s if t_s else None
    profiler_overhead = f_median - m_median
    return {
        "method": METHOD,
        "level": "framework",
        "calls": n,
        "paired_calls": paired,
        "tolerance": tolerance,
        "untraced_predict_p50_s": t_s,
        "model_level_predict_p50_s": m_median / 1e9,
        "framework_level_predict_p50_s": f_median / 1e9,
        "model_overhead_s": model_overhead / 1e9,
        "profiler_overhead_s": profiler_overhead / 1e9,
        "profiler_overhead_per_event_s": profiler_overhead / 1e9 / (median(op_counts) + 1),
        "outside_operators_share_raw": median(outside),
        "scale_p50": median(scales),
        "raw_sum_s": raw_sum,
        "corrected_sum_s": corrected_sum,
        "raw_residual": abs(raw_sum - t_s) / t_s if t_s else None,
        "residual": residual,
        "within_tolerance": residual is not None and residual <= tolerance,
        "layers": layers,
        "operators": operators,
    }
