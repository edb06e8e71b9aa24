"""Leveled measurement (the XSP idea): traces come from short passes *after* the measurement.

The latency an evaluation reports comes from the untraced measurement (the harness's hot loop
has no tracing in it), so no level of profiling can inflate it. After the measurement of each
batch size, short passes of N queries run the same batches again: first untraced (the
baseline of these passes), then once per level up to ``tracing.level`` — model (query,
preprocess, predict, postprocess spans), framework (plus the framework profiler's operators)
and library (plus GPU kernels and copies). Each pass times predict + postprocess of every
traced query exactly as the harness does, so ``p50 / untraced p50 - 1`` is what that level of
tracing costs per query; the result document reports it per level.

Every pass also keeps the predict time of each call (calls are numbered the same way in every
pass, so call ``c`` runs the same batch), and the framework pass the profiler's operators per
call: from these, :func:`mlmodelscope.analysis.xsp.correct` attributes the operators inside
the untraced latency (the leveled correction, ``correction`` per batch size).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mlmodelscope.agent.profilers import (
    LIBRARY_KINDS,
    FrameworkProfiler,
    ProfiledOp,
    ProfiledRun,
    ProfilingUnavailableError,
)
from mlmodelscope.agent.scenarios import gc_paused
from mlmodelscope.analysis.xsp import OpSample, correct
from mlmodelscope.telemetry.tracing import ATTR, EvaluationTracer

LEVELS = ("model", "framework", "library")
"""Tracing levels in order; each adds detail below the previous one."""
DEFAULT_QUERIES = 50
"""Queries per level per batch size (``MLMS_TRACE_QUERIES`` overrides)."""
WARMUP_QUERIES = 2
"""Untimed queries at the start of each pass (profiler and caches settle)."""

_CALLS = "_call_ns"
_OPS = "_ops"
"""Per-call records of a pass, used for the correction and dropped before the document."""

Clock = Callable[[], int]
Postprocess = Callable[[list[np.ndarray]], Any]
Preprocess = Callable[[Any], np.ndarray]


def levels_up_to(level: str) -> list[str]:
    """'framework' -> ['model', 'framework']; 'none' -> []."""
    return list(LEVELS[: LEVELS.index(level) + 1]) if level in LEVELS else []


def is_traced(query: int, sampling: float) -> bool:
    """Deterministic, evenly spread sampling: query q is traced when floor((q+1)f) > floor(qf)
    (f = 1 traces all, f = 0.5 every other one, f = 0 none)."""
    return math.floor((query + 1) * sampling + 1e-9) > math.floor(query * sampling + 1e-9)


def _p50(values: Sequence[int]) -> float | None:
    """Median in seconds, with the harness's nearest-rank estimator (comparable numbers)."""
    from mlmodelscope.agent.stats import percentile_of_sorted

    if not values:
        return None
    return percentile_of_sorted(np.sort(np.asarray(values, dtype=np.int64)), 50.0) / 1e9


class LeveledPasses:
    """Runs the untraced baseline and the traced passes for one batch size."""

    def __init__(
        self,
        tracer: EvaluationTracer,
        backend: Any,
        queries: Sequence[tuple[tuple[np.ndarray, ...], ...]],
        sample_indices: Sequence[tuple[np.ndarray, ...]],
        *,
        raw_samples: Any = None,
        preprocess: Preprocess | None = None,
        postprocess: Postprocess | None = None,
        count: int = DEFAULT_QUERIES,
        sampling: float = 1.0,
        attributes: dict[str, Any] | None = None,
        clock: Clock = time.perf_counter_ns,
    ) -> None:
        self.tracer = tracer
        self.backend = backend
        self.queries = queries
        self.sample_indices = sample_indices
        self.raw = raw_samples
        self.preprocess = preprocess
        self.postprocess = postprocess
        self.count = max(int(count), 1)
        self.sampling = sampling
        self.attributes = attributes or {}
        self.clock = clock

    # ---------------------------------------------------------------------------- passes

    def untraced(self) -> dict[str, Any]:
        """The baseline: the same queries, same timing, no spans and no profiler."""
        predict, post, clock = self.backend.predict, self.postprocess, self.clock
        times: list[int] = []
        calls: list[int] = []
        with gc_paused(True):
            for q in range(WARMUP_QUERIES + self.count):
                query = self.queries[q % len(self.queries)]
                t0 = clock()
                for batch in query:
                    p0 = clock()
                    out = predict(batch)
                    calls.append(clock() - p0)
                    if post is not None:
                        post(out)
                t1 = clock()
                if q >= WARMUP_QUERIES:
                    times.append(t1 - t0)
                else:
                    calls.clear()
        return {
            "p50_s": _p50(times),
            "queries": len(times),
            "predict_p50_s": _p50(calls),
            _CALLS: calls,
        }

    def traced(self, level: str) -> dict[str, Any]:
        """One pass at ``level``; returns its p50 over traced queries and what it emitted."""
        profiler: FrameworkProfiler | None = None
        if level in ("framework", "library"):
            hook = getattr(self.backend, "profiler", None)
            try:
                profiler = hook(level) if hook is not None else None
            except ProfilingUnavailableError as exc:
                return {"skipped": str(exc)}
            if profiler is None:
                return {"skipped": f"the {self.backend.name} backend has no {level} profiler"}
        attrs = {**self.attributes, f"{ATTR}trace.level": level}
        with self.tracer.span(f"traced pass ({level})", attrs) as pass_span:
            try:
                result = self._run(level, profiler)
            finally:
                if profiler is not None:
                    profiler.close()
            pass_span.set_attributes(
                {
                    f"{ATTR}p50_s": result["p50_s"] or 0.0,
                    f"{ATTR}traced_queries": result["traced_queries"],
                }
            )
        return result

    def _run(self, level: str, profiler: FrameworkProfiler | None) -> dict[str, Any]:
        tracer, clock, post = self.tracer, self.clock, self.postprocess
        attrs = {**self.attributes, f"{ATTR}trace.level": level}
        predict = profiler.predict if profiler is not None else self.backend.predict
        predict_spans: dict[int, Any] = {}
        call_ns: dict[int, int] = {}
        times: list[int] = []
        calls = 0
        if profiler is not None:
            profiler.start()
        with gc_paused(True):
            for q in range(WARMUP_QUERIES + self.count):
                k = q % len(self.queries)
                query = self.queries[k]
                n = q - WARMUP_QUERIES
                if n < 0 or not is_traced(n, self.sampling):
                    for batch in query:
                        out = predict(batch)
                        if post is not None:
                            post(out)
                    continue
                elapsed = 0
                with tracer.span("query", {**attrs, f"{ATTR}query.index": n}) as query_span:
                    parent = tracer.context_of(query_span)
                    for b, batch in enumerate(query):
                        self._preprocess_span(k, b)
                        t0 = clock()
                        span = tracer.start_span("predict", parent)
                        p0 = clock()
                        if profiler is not None:
                            with profiler.annotate(calls):
                                out = predict(batch)
                        else:
                            out = predict(batch)
                        call_ns[calls] = clock() - p0
                        span.end()
                        if post is not None:
                            post_span = tracer.start_span("postprocess", parent)
                            post(out)
                            post_span.end()
                        elapsed += clock() - t0
                        predict_spans[calls] = span
                        calls += 1
                times.append(elapsed)
        emitted = 0
        ops: dict[int, list[OpSample]] = {}
        if profiler is not None:
            runs = profiler.stop()
            emitted = tracer.emit_runs(runs, predict_spans, level)
            ops = {run.index: op_samples(run) for run in runs}
        return {
            "p50_s": _p50(times),
            "traced_queries": len(times),
            "profiled_spans": emitted if profiler is not None else None,
            _CALLS: call_ns,
            _OPS: ops,
        }

    def _preprocess_span(self, ring_index: int, batch_index: int) -> None:
        """Real per-sample preprocessing of the query's raw samples, as one span (the
        measurement itself feeds batches preprocessed ahead of time, as MLPerf does)."""
        if self.preprocess is None or self.raw is None:
            return
        idx = self.sample_indices[ring_index][batch_index]
        with self.tracer.span("preprocess", {f"{ATTR}samples": len(idx)}):
            for j in idx:
                self.preprocess(self.raw[int(j)])


def op_samples(run: ProfiledRun) -> list[OpSample]:
    """A run's operators (not GPU kernels) with self times: an op's duration minus its nested
    operators', so nested operators (torch's aten::conv2d > aten::convolution > ...) are
    never counted twice."""
    inner = [0] * len(run.ops)
    children = [0] * len(run.ops)
    parents: list[int | None] = []
    for op in run.ops:
        parent = op.parent
        while parent is not None and run.ops[parent].kind in LIBRARY_KINDS:
            parent = run.ops[parent].parent
        parents.append(parent)
        if op.kind not in LIBRARY_KINDS and parent is not None:
            inner[parent] += op.duration_ns
            children[parent] += 1
    total = sum(
        op.duration_ns
        for i, op in enumerate(run.ops)
        if op.kind not in LIBRARY_KINDS and parents[i] is None
    )
    wrappers = {
        i
        for i, op in enumerate(run.ops)
        if is_wrapper(op, children[i], total) and parents[i] is None
    }
    out: list[OpSample] = []
    for i, op in enumerate(run.ops):
        if op.kind in LIBRARY_KINDS:
            continue
        parent = parents[i]
        out.append(
            OpSample(
                name=op.name,
                op_type=str(op.attributes.get("op_type", op.name)),
                self_ns=max(op.duration_ns - inner[i], 0),
                total_ns=op.duration_ns,
                top_level=i not in wrappers and (parent is None or parent in wrappers),
            )
        )
    return out


def is_wrapper(op: ProfiledOp, children: int, total_ns: int) -> bool:
    """A function around the model's operators (a TorchScript module's ``forward``), not a
    layer: its children are the layers. Told by its name (not a framework op: no ``::``),
    more than one child and more than half of the call's operator time."""
    return (
        op.kind == "layer"
        and "::" not in op.name
        and children > 1
        and total_ns > 0
        and op.duration_ns * 2 > total_ns
        and str(op.attributes.get("op_type", op.name)) == op.name
    )


def leveled_correction(baseline: dict[str, Any], levels: dict[str, Any]) -> dict[str, Any]:
    """The correction from the passes' per-call records, or why there is none."""
    model, framework = levels.get("model", {}), levels.get("framework", {})
    if _OPS not in framework:
        return {"skipped": framework.get("skipped", "the framework level did not run")}
    if not framework[_OPS]:
        return {"skipped": "the framework profiler recorded no operators"}
    try:
        return correct(baseline[_CALLS], model[_CALLS], framework[_CALLS], framework[_OPS])
    except (KeyError, ValueError) as exc:
        return {"skipped": f"cannot correct: {exc}"}


def run_levels(passes: LeveledPasses, level: str) -> dict[str, Any]:
    """Baseline plus every level up to ``level``, with each level's overhead vs the baseline,
    and from framework level on the leveled correction of the operators (``correction``)."""
    baseline = passes.untraced()
    out: dict[str, Any] = {"untraced": baseline, "levels": {}}
    for name in levels_up_to(level):
        result = passes.traced(name)
        base, p50 = baseline["p50_s"], result.get("p50_s")
        if base and p50 is not None:
            result["overhead_vs_untraced"] = p50 / base - 1.0
        out["levels"][name] = result
    if "framework" in out["levels"]:
        out["correction"] = leveled_correction(baseline, out["levels"])
    for record in (baseline, *out["levels"].values()):
        record.pop(_CALLS, None)
        record.pop(_OPS, None)
    return out
