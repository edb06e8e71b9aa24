"""DLBricks (Li et al.): estimate a model's latency from benchmarks of its unique layers.

A model is split into one-node networks ("bricks"), deduplicated by ``LayerCost.signature``
(op, input shapes and dtypes, attributes) within and across models; each unique brick is
benchmarked once, and a model's estimate is the sum over its layers of their brick's p50.

Which graph is split matters. ONNX Runtime at ORT_ENABLE_ALL fuses Conv+Add+Relu, folds
constants and, on CPU, rewrites convolutions to its blocked NCHWc layout with reorders only at
chain ends; bricks cut from the exported graph would time unfused nodes each with its own
layout reorder and overestimate. The default (``graph="optimized"``) therefore splits the
graph ORT itself runs (``SessionOptions.optimized_model_filepath`` at ORT_ENABLE_ALL) and times
each brick with optimizations off, so a brick runs exactly the kernel the model runs;
``graph="raw"`` splits the exported graph and times bricks at ORT_ENABLE_ALL (the paper's
framework-agnostic variant). Shapes come from one recorded run (``graph.shapes_by_execution``)
since ONNX inference cannot type ORT's contrib ops. Integer inputs (shapes, indices) keep their
recorded values; float inputs are random.

Every brick carries ONNX Runtime's per-``run`` overhead, which the whole model pays once: it
is measured (a one-Identity model) and reported, and ``estimate_corrected_ms`` subtracts it
per layer.

Given a ``BrickStore`` (``mlms dlbricks --store``), bricks already measured on the same system
and software stack are reused instead of measured (``analysis/brickstore.py`` says what the
keys hold), and the bricks measured now are stored for the next estimate.
"""

from __future__ import annotations

import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlmodelscope.analysis.brickstore import (
    BrickStore,
    MeasuredBrick,
    brick_key,
    cpu_model,
    stack_key,
    usable_cpus,
)
from mlmodelscope.analysis.graph import LayerCost, layer_costs, load_model, with_batch_size

GRAPHS = ("optimized", "raw")
SKIPPED_OPS = frozenset({"Constant"})
"""Nodes that do no work at run time: not benchmarked, counted as 0."""


@dataclass(frozen=True)
class BenchConfig:
    """One measurement protocol for bricks and whole models alike."""

    threads: int = 1
    warmup: int = 3
    runs: int = 20
    batch_size: int = 1
    graph: str = "optimized"

    def __post_init__(self) -> None:
        if self.graph not in GRAPHS:
            raise ValueError(f"graph: {self.graph!r} is not one of {GRAPHS}")
        if self.runs < 1 or self.warmup < 0 or self.threads < 1:
            raise ValueError("runs and threads must be >= 1, warmup >= 0")


@dataclass(frozen=True)
class Timing:
    """Latencies of ``runs`` timed calls after ``warmup`` untimed ones (ms), and the wall
    time the whole benchmark took including session creation (s)."""

    p50_ms: float
    mean_ms: float
    min_ms: float
    runs: int
    warmup: int
    wall_s: float


@dataclass
class Brick:
    signature: str
    op_type: str
    model: Any
    feeds: dict[str, np.ndarray]
    layers: list[str] = field(default_factory=list)
    timing: Timing | None = None


@dataclass(frozen=True)
class ModelEstimate:
    model: str
    layers: int
    bricks: int
    estimate_ms: float
    estimate_corrected_ms: float
    measured_ms: float
    error_pct: float
    error_corrected_pct: float
    brick_bench_s: float
    """Wall time to benchmark this model's bricks alone (no sharing with other models)."""
    end_to_end_bench_s: float
    per_layer_ms: dict[str, float]
    bricks_measured: int = 0
    """Bricks benchmarked for this model in this estimate."""
    bricks_reused: int = 0
    """Bricks taken from the store (measured by an earlier estimate on the same stack)."""


@dataclass(frozen=True)
class Report:
    config: BenchConfig
    models: list[ModelEstimate]
    unique_bricks: int
    total_layers: int
    run_overhead_ms: float
    brick_bench_s: float
    """Wall time to benchmark every unique brick once (shared across models)."""
    end_to_end_bench_s: float
    """Wall time to benchmark every model end to end with the same protocol."""
    unshared_brick_bench_s: float
    """What the bricks would cost if each model's were benchmarked separately."""
    stack: dict[str, Any] = field(default_factory=dict)
    """The system and software stack the bricks' timings hold for."""
    stack_key: str = ""
    bricks_measured: int = 0
    """Unique bricks benchmarked in this estimate (``brick_bench_s`` is their wall time)."""
    bricks_reused: int = 0
    """Unique bricks taken from the store instead of benchmarked."""
    reuse_saved_s: float = 0.0
    """The reused bricks' stored measuring wall times: the benchmarking reuse saved."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def session_options(threads: int, optimize: bool) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if optimize
        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    return options


def system_stack(config: BenchConfig) -> dict[str, Any]:
    """The system and software stack a brick timing under ``config`` holds for: what
    :func:`session_options` and :func:`benchmark_brick` set, and the machine they ran on."""
    import onnxruntime as ort

    return {
        "cpu": cpu_model(),
        "architecture": platform.machine(),
        "cpus": usable_cpus(),
        "framework": "onnxruntime",
        "framework_version": ort.__version__,
        "provider": "CPUExecutionProvider",
        "intra_op_threads": config.threads,
        "inter_op_threads": 1,
        "execution_mode": "sequential",
        "graph": config.graph,
        "brick_optimization": "disable_all" if config.graph == "optimized" else "enable_all",
        "warmup": config.warmup,
        "runs": config.runs,
    }


def optimized_graph(model: Any, threads: int = 1) -> Any:
    """The graph ONNX Runtime runs for ``model`` on this CPU (ORT_ENABLE_ALL), as a ModelProto."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "optimized.onnx"
        options = session_options(threads, optimize=True)
        options.optimized_model_filepath = str(out)
        ort.InferenceSession(
            load_model(model).SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        return onnx.load(str(out))


def time_session(session: Any, feeds: Mapping[str, np.ndarray], config: BenchConfig) -> Timing:
    """Warm-up calls excluded; p50, mean and min of ``config.runs`` perf_counter_ns samples."""
    return time_call(lambda: session.run(None, feeds), config)


def time_call(call: Callable[[], object], config: BenchConfig) -> Timing:
    """``call`` timed as a session is: ``config.warmup`` untimed calls, then p50, mean and min
    of ``config.runs`` perf_counter_ns samples (any framework's brick or model)."""
    start = time.perf_counter()
    for _ in range(config.warmup):
        call()
    samples = []
    for _ in range(config.runs):
        t0 = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    return Timing(
        p50_ms=statistics.median(samples),
        mean_ms=statistics.fmean(samples),
        min_ms=min(samples),
        runs=config.runs,
        warmup=config.warmup,
        wall_s=time.perf_counter() - start,
    )


def benchmark_model(model: Any, config: BenchConfig, optimize: bool = True) -> Timing:
    """Time a whole model (or a brick) under ``config``; session creation counts in wall_s."""
    import onnxruntime as ort

    from mlmodelscope.analysis.graph import random_feeds

    start = time.perf_counter()
    proto = load_model(model)
    session = ort.InferenceSession(
        proto.SerializeToString(),
        session_options(config.threads, optimize),
        providers=["CPUExecutionProvider"],
    )
    feeds = random_feeds(session.get_inputs(), config.batch_size)
    timing = time_session(session, feeds, config)
    return Timing(**{**asdict(timing), "wall_s": time.perf_counter() - start})


def run_overhead_ms(config: BenchConfig) -> float:
    """p50 of one ``session.run`` of a one-Identity model: the fixed cost every brick pays."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "overhead",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    session = ort.InferenceSession(
        model.SerializeToString(),
        session_options(config.threads, False),
        providers=["CPUExecutionProvider"],
    )
    big = BenchConfig(config.threads, config.warmup, max(200, config.runs), config.batch_size)
    return time_session(session, {"x": np.zeros(1, np.float32)}, big).p50_ms


def record_values(model: Any, batch_size: int) -> tuple[Any, dict[str, np.ndarray]]:
    """``model`` at ``batch_size`` and every value of one run with random inputs."""
    import onnx
    import onnxruntime as ort

    from mlmodelscope.analysis.graph import random_feeds

    fixed = with_batch_size(model, batch_size)
    exposed = onnx.ModelProto()
    exposed.CopyFrom(fixed)
    known = {v.name for v in exposed.graph.output}
    for node in exposed.graph.node:
        for name in node.output:
            if name and name not in known:
                exposed.graph.output.append(onnx.ValueInfoProto(name=name))
                known.add(name)
    session = ort.InferenceSession(
        exposed.SerializeToString(), session_options(1, False), providers=["CPUExecutionProvider"]
    )
    feeds = random_feeds(session.get_inputs(), batch_size)
    names = [o.name for o in session.get_outputs()]
    values = dict(zip(names, session.run(names, feeds), strict=True))
    return fixed, {**feeds, **values}


def split(model: Any, config: BenchConfig) -> tuple[list[LayerCost], dict[str, Brick]]:
    """The model's layers (from the graph ``config.graph`` names) and a brick per signature."""
    import onnx
    from onnx import helper, numpy_helper

    proto = load_model(model)
    if config.graph == "optimized":
        proto = optimized_graph(proto, config.threads)
    fixed, values = record_values(proto, config.batch_size)
    shapes = {n: (tuple(int(d) for d in v.shape), v.dtype.name) for n, v in values.items()}
    costs = layer_costs(fixed, config.batch_size, shapes=shapes)
    initializers = {init.name: init for init in fixed.graph.initializer}
    rng = np.random.default_rng(0)
    bricks: dict[str, Brick] = {}
    for node, cost in zip(fixed.graph.node, costs, strict=True):
        if node.op_type in SKIPPED_OPS:
            continue
        if cost.signature in bricks:
            bricks[cost.signature].layers.append(cost.name)
            continue
        graph_inputs: list[Any] = []
        inits: list[Any] = []
        feeds: dict[str, np.ndarray] = {}
        for name in node.input:
            if not name or name in feeds or any(i.name == name for i in inits):
                continue
            if name in initializers:
                inits.append(initializers[name])
                continue
            value = values[name]
            if not np.issubdtype(value.dtype, np.floating):
                inits.append(numpy_helper.from_array(value, name))  # shapes, indices: as recorded
                continue
            graph_inputs.append(
                helper.make_tensor_value_info(
                    name, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape)
                )
            )
            feeds[name] = rng.random(value.shape, dtype=np.float32).astype(value.dtype)
        outputs = [onnx.ValueInfoProto(name=o) for o in node.output if o]
        graph = helper.make_graph([node], f"brick_{len(bricks)}", graph_inputs, outputs, inits)
        brick_model = helper.make_model(graph, opset_imports=list(fixed.opset_import))
        brick_model.ir_version = fixed.ir_version
        bricks[cost.signature] = Brick(
            cost.signature, node.op_type, brick_model, feeds, [cost.name]
        )
    return [c for c in costs if c.op_type not in SKIPPED_OPS], bricks


def benchmark_brick(brick: Brick, config: BenchConfig) -> Timing:
    """Time one brick under the same protocol as the whole model (see the module docstring
    for why optimizations are off for bricks of the optimized graph)."""
    import onnxruntime as ort

    start = time.perf_counter()
    session = ort.InferenceSession(
        brick.model.SerializeToString(),
        session_options(config.threads, optimize=config.graph == "raw"),
        providers=["CPUExecutionProvider"],
    )
    timing = time_session(session, brick.feeds, config)
    return Timing(**{**asdict(timing), "wall_s": time.perf_counter() - start})


def estimate(
    models: Sequence[str | Path],
    config: BenchConfig | None = None,
    names: Iterable[str] | None = None,
    store: BrickStore | None = None,
) -> Report:
    """Split, benchmark each unique brick once, compose each model's estimate, and measure
    each model end to end under the same protocol. With ``store``, bricks it holds for this
    system and stack are reused, and the bricks benchmarked here are recorded in it."""
    config = config or BenchConfig()
    labels = list(names) if names is not None else [Path(m).stem for m in models]
    stack = system_stack(config)
    key = stack_key(stack)
    overhead = run_overhead_ms(config)
    shared: dict[str, Timing] = {}
    reused: set[str] = set()
    results = []
    brick_wall = 0.0
    unshared = 0.0
    total_layers = 0
    for label, path in zip(labels, models, strict=True):
        layers, bricks = split(path, config)
        total_layers += len(layers)
        new = [s for s in bricks if s not in shared]
        stored = _stored_timings(store, key, new)
        shared.update(stored)
        reused.update(stored)
        measured_now = []
        for signature in new:
            if signature in stored:
                continue
            shared[signature] = benchmark_brick(bricks[signature], config)
            brick_wall += shared[signature].wall_s
            measured_now.append(_measured(bricks[signature], shared[signature]))
        if store is not None and measured_now:
            store.record_brick_timings(key, stack, measured_now)
        own_wall = sum(shared[signature].wall_s for signature in bricks)
        unshared += own_wall
        per_layer = {layer.name: shared[layer.signature].p50_ms for layer in layers}
        est = sum(per_layer.values())
        corrected = sum(max(0.0, t - overhead) for t in per_layer.values()) + overhead
        measured = benchmark_model(path, config)
        results.append(
            ModelEstimate(
                model=label,
                layers=len(layers),
                bricks=len(bricks),
                estimate_ms=est,
                estimate_corrected_ms=corrected,
                measured_ms=measured.p50_ms,
                error_pct=100 * (est - measured.p50_ms) / measured.p50_ms,
                error_corrected_pct=100 * (corrected - measured.p50_ms) / measured.p50_ms,
                brick_bench_s=own_wall,
                end_to_end_bench_s=measured.wall_s,
                per_layer_ms=per_layer,
                bricks_measured=len(measured_now),
                bricks_reused=len(stored),
            )
        )
    return Report(
        config=config,
        models=results,
        unique_bricks=len(shared),
        total_layers=total_layers,
        run_overhead_ms=overhead,
        brick_bench_s=brick_wall,
        end_to_end_bench_s=sum(r.end_to_end_bench_s for r in results),
        unshared_brick_bench_s=unshared,
        stack=stack,
        stack_key=key,
        bricks_measured=len(shared) - len(reused),
        bricks_reused=len(reused),
        reuse_saved_s=sum(shared[signature].wall_s for signature in reused),
    )


def _stored_timings(
    store: BrickStore | None, stack: str, signatures: Sequence[str]
) -> dict[str, Timing]:
    """The timings ``store`` holds for ``signatures`` on ``stack``, by signature; ``wall_s``
    is the stored measuring time."""
    if store is None or not signatures:
        return {}
    by_key = {brick_key(signature): signature for signature in signatures}
    found = store.brick_timings(stack, list(by_key))
    return {
        by_key[k]: Timing(t.p50_ms, t.mean_ms, t.min_ms, t.runs, t.warmup, t.measure_s)
        for k, t in found.items()
        if k in by_key
    }


def _measured(brick: Brick, timing: Timing) -> MeasuredBrick:
    return measured_brick(brick_key(brick.signature), brick.signature, brick.op_type, timing)


def measured_brick(key: str, signature: str, op_type: str, timing: Timing) -> MeasuredBrick:
    """What the store keeps of a brick timed once (here, or by a brick Job's worker)."""
    return MeasuredBrick(
        brick_key=key,
        signature=signature,
        op_type=op_type,
        p50_ms=timing.p50_ms,
        mean_ms=timing.mean_ms,
        min_ms=timing.min_ms,
        runs=timing.runs,
        warmup=timing.warmup,
        measure_s=timing.wall_s,
    )
