"""The measuring path of the per-layer XSP check, for an ONNX model on ONNX Runtime's CPU provider.

Two measurements of the same layers, one process, one thread setting:

1. **Corrected, from a trace**: the leveled passes the agent runs at ``tracing.level:
   framework`` (:func:`mlmodelscope.telemetry.leveled.run_levels`: untraced baseline, model
   level, framework level with ONNX Runtime's session profiler), then
   :func:`mlmodelscope.analysis.xsp.correct`. Each ``Node`` event of the profile is a layer,
   named by its node in the graph ONNX Runtime runs (after its ORT_ENABLE_ALL rewrites).
2. **Independent, without a profiler**: DLBricks' bricks
   (:func:`mlmodelscope.analysis.dlbricks.split` with ``graph="optimized"``): each node of that
   same optimized graph alone in a session at ORT_DISABLE_ALL, so it runs the kernel the model
   runs, timed by :func:`mlmodelscope.analysis.dlbricks.benchmark_brick` (the same warm-up and
   runs as any brick), less ONNX Runtime's per-``run`` cost (a one-Identity model's p50), which
   a brick pays once per layer and the model once per call.

Both sessions get :func:`mlmodelscope.analysis.dlbricks.session_options` with the same
``threads`` and the sequential executor, so the node names of the profile and of the split
graph are the same and are the match key; the brick signature rides along. What the check
cannot hold equal, and so is part of the error it reports: an isolated brick runs with its
inputs and weights hot in cache from its own previous call, where the in-model layer finds
its input just written by the previous layer and its weights evicted by the other layers; and
a brick's input is a fresh array where the model's may be an arena buffer reused in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlmodelscope.analysis.dlbricks import (
    BenchConfig,
    benchmark_brick,
    run_overhead_ms,
    session_options,
    split,
)
from mlmodelscope.analysis.graph import load_model, random_feeds
from mlmodelscope.analysis.xsp_layers import LayerTime, ModelLayerCheck, compare


@dataclass(frozen=True)
class CheckConfig:
    """How both sides are measured: threads and batch for both; traced calls per level for the
    leveled passes; warm-up and timed runs per brick."""

    threads: int = 1
    batch_size: int = 1
    calls: int = 20
    warmup: int = 3
    runs: int = 20

    def bench(self) -> BenchConfig:
        return BenchConfig(self.threads, self.warmup, self.runs, self.batch_size, "optimized")


@dataclass(frozen=True)
class Traced:
    """The corrected layers of one model, and the correction's model-level numbers."""

    layers: tuple[LayerTime, ...]
    residual: float | None
    untraced_s: float | None
    skipped: str | None = None


@dataclass(frozen=True)
class Isolated:
    """The independent layer times of one model (brick p50 less the per-run cost)."""

    layers: tuple[LayerTime, ...]
    run_overhead_s: float
    bricks: int


class OrtLayerModel:
    """An ONNX Runtime model with what the leveled passes call: ``predict`` and ``profiler``."""

    name = "onnxruntime"

    def __init__(self, path: Path, threads: int) -> None:
        import onnxruntime as ort

        self._ort = ort
        self._bytes = load_model(path).SerializeToString()
        self._threads = threads
        self.session = self._session(None)
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def _session(self, profile_prefix: str | None) -> Any:
        options = session_options(self._threads, optimize=True)
        if profile_prefix is not None:
            options.enable_profiling = True
            options.profile_file_prefix = profile_prefix
        return self._ort.InferenceSession(self._bytes, options, providers=["CPUExecutionProvider"])

    def predict(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        out: list[np.ndarray] = self.session.run(
            self.outputs, dict(zip(self.inputs, inputs, strict=True))
        )
        return out

    def profiler(self, level: str) -> Any:
        from mlmodelscope.agent.profilers import OrtProfiler

        def feed(inputs: Sequence[np.ndarray]) -> tuple[Any, dict[str, np.ndarray]]:
            return self.outputs, dict(zip(self.inputs, inputs, strict=True))

        return OrtProfiler(level, self._session, feed, gpu=False)


def traced_layers(path: Path, config: CheckConfig) -> Traced:
    """The leveled passes up to the framework level and the correction of their layers."""
    from mlmodelscope.telemetry.leveled import LeveledPasses, run_levels
    from mlmodelscope.telemetry.tracing import EvaluationTracer

    model = OrtLayerModel(path, config.threads)
    feeds = random_feeds(model.session.get_inputs(), config.batch_size)
    batch = tuple(feeds[name] for name in model.inputs)
    tracer = EvaluationTracer.create({}, environ={})
    if tracer is None:
        raise RuntimeError("the OpenTelemetry SDK is needed: pip install 'mlmodelscope[telemetry]'")
    tracer.begin("xsp layer check", {})
    try:
        indices = [(np.zeros(config.batch_size, int),)]
        passes = LeveledPasses(tracer, model, [(batch,)], indices, count=config.calls)
        correction = run_levels(passes, "framework")["correction"]
    finally:
        tracer.end()
    if "skipped" in correction:
        return Traced((), None, None, str(correction["skipped"]))
    layers = tuple(
        LayerTime(str(r["name"]), str(r["op_type"]), float(r["corrected_s"]))
        for r in correction["layers"]
    )
    return Traced(layers, correction["residual"], correction["untraced_predict_p50_s"])


def isolated_layers(path: Path, config: CheckConfig) -> Isolated:
    """Every layer of the optimized graph timed alone as a brick (one brick per signature)."""
    bench = config.bench()
    overhead_ms = run_overhead_ms(bench)
    costs, bricks = split(path, bench)
    timings = {signature: benchmark_brick(brick, bench) for signature, brick in bricks.items()}
    layers = tuple(
        LayerTime(
            cost.name,
            cost.op_type,
            (timings[cost.signature].p50_ms - overhead_ms) / 1e3,
            cost.signature,
        )
        for cost in costs
    )
    return Isolated(layers, overhead_ms / 1e3, len(bricks))


def check_model(path: Path, name: str, config: CheckConfig | None = None) -> ModelLayerCheck:
    """Both measurements of one model and their per-layer comparison."""
    config = config or CheckConfig()
    traced = traced_layers(path, config)
    if traced.skipped is not None:
        return compare(name, (), (), notes=(f"no correction: {traced.skipped}",))
    isolated = isolated_layers(path, config)
    return compare(
        name,
        traced.layers,
        isolated.layers,
        residual=traced.residual,
        untraced_s=traced.untraced_s,
        notes=(
            f"{isolated.bricks} bricks; ONNX Runtime's per-run cost "
            f"{isolated.run_overhead_s * 1e6:.2f} µs subtracted from each",
        ),
    )
