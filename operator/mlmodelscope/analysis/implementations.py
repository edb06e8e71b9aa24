"""Benanza's bound, measured: every layer's DLBricks brick in ONNX Runtime, PyTorch, TensorFlow.

The model's exported graph is split into bricks (``dlbricks.split``, ``graph="raw"``: one node
each, deduplicated by signature). Each brick runs in every implementation:

- ONNX Runtime at three graph-optimization levels (``disable_all``, ``basic``, ``all``);
- PyTorch eager, under ``torch.inference_mode`` (NCHW, as exported);
- TensorFlow eager, and the same calls inside one ``tf.function`` (NHWC where the model has
  convolutions or pools; :mod:`mlmodelscope.analysis.lowering` says how and what lowers).

The whole model also runs end to end in each (ONNX Runtime: the model at that level; PyTorch
and TensorFlow: every node lowered, in graph order), where every node lowers. Each timing is
``dlbricks.time_call``'s: warm-up calls excluded, the median of ``runs`` ``perf_counter_ns``
samples. Thread settings are the same in every framework: ``threads`` intra-op threads and one
inter-op thread (ORT session options, ``torch.set_num_threads``, TensorFlow's threading
config); the report's conditions record what each framework reports in effect. A brick is
built (session, lowering, ``tf.function`` trace) once, before its warm-up.

Given a ``BrickStore``, brick timings are reused and recorded per implementation: the stack is
``dlbricks.system_stack`` of the raw graph with the implementation's framework, version,
variant (and TensorFlow's layout) in it; ONNX Runtime ``all`` is exactly ``mlms dlbricks
--graph raw``'s stack, so the two share timings.
"""

from __future__ import annotations

import contextlib
import platform
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlmodelscope.analysis.brickstore import BrickStore, stack_key
from mlmodelscope.analysis.devices import Device
from mlmodelscope.analysis.dlbricks import (
    BenchConfig,
    Brick,
    Timing,
    _measured,
    _stored_timings,
    record_values,
    session_options,
    split,
    system_stack,
    time_call,
)
from mlmodelscope.analysis.graph import load_model
from mlmodelscope.analysis.lowering import (
    REVISION,
    NodeFn,
    Operand,
    channels_last,
    tf_feed,
    tf_node,
    torch_node,
)
from mlmodelscope.analysis.measuredbound import (
    Implementation,
    Layer,
    LayerTiming,
    MeasuredBound,
    describe,
    measured_bound,
)
from mlmodelscope.tensorflow_import import before_tensorflow

FRAMEWORKS = ("onnxruntime", "pytorch", "tensorflow")
ORT_LEVELS = {
    "disable_all": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "all": "ORT_ENABLE_ALL",
}
IMPLEMENTATIONS = (
    *(Implementation("onnxruntime", level) for level in ORT_LEVELS),
    Implementation("pytorch", "eager"),
    Implementation("tensorflow", "eager"),
    Implementation("tensorflow", "tf.function"),
)


@dataclass(frozen=True)
class BoundConfig:
    """What ``measure`` runs: which frameworks, and the one timing protocol for all."""

    threads: int = 1
    warmup: int = 3
    runs: int = 20
    batch_size: int = 1
    frameworks: tuple[str, ...] = FRAMEWORKS

    def __post_init__(self) -> None:
        unknown = sorted(set(self.frameworks) - set(FRAMEWORKS))
        if unknown or not self.frameworks:
            raise ValueError(f"frameworks: {unknown or 'none'}; choose from {FRAMEWORKS}")
        self.bench()  # runs, warm-up and threads checked there

    def bench(self) -> BenchConfig:
        return BenchConfig(self.threads, self.warmup, self.runs, self.batch_size, graph="raw")

    @property
    def implementations(self) -> tuple[Implementation, ...]:
        return tuple(i for i in IMPLEMENTATIONS if i.framework in self.frameworks)


@dataclass(frozen=True)
class Step:
    op: str
    attrs: Mapping[str, Any]
    operands: tuple[Operand, ...]
    outputs: tuple[str, ...]
    """Every output the node names (Split has several); lowering decides which it can give."""


@dataclass(frozen=True)
class Program:
    """A graph as lowering sees it: its steps, its fed inputs and the value it returns."""

    steps: tuple[Step, ...]
    feeds: Mapping[str, np.ndarray]
    output: str
    model: Any = field(repr=False, default=None)
    """The ONNX ModelProto it came from (what ONNX Runtime runs)."""


def program(model: Any, values: Mapping[str, np.ndarray]) -> Program | str:
    """``model``'s nodes with every operand's value (``values``: the recorded run, or a
    brick's feeds); a string says why it cannot be lowered."""
    from onnx import helper, numpy_helper

    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    steps = []
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Constant" and "value" in attrs:
            consts[node.output[0]] = numpy_helper.to_array(attrs["value"])
            continue
        operands = []
        for name in node.input:
            if not name:
                operands.append(Operand("", np.zeros(0, np.float32), True))
            elif name in consts:
                operands.append(Operand(name, consts[name], True))
            elif name in values:
                operands.append(Operand(name, np.asarray(values[name]), False))
            else:
                return f"{node.op_type}: no value recorded for its input {name!r}"
        attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
        steps.append(Step(node.op_type, attrs, tuple(operands), tuple(o for o in node.output if o)))
    inputs = [i.name for i in model.graph.input if i.name not in consts]
    return Program(
        tuple(steps),
        {n: np.asarray(values[n]) for n in inputs},
        model.graph.output[0].name,
        model,
    )


# ------------------------------------------------------------------------------ builders

Call = Callable[[], object]


def ort_call(prog: Program, level: str, threads: int) -> Call:
    import onnxruntime as ort

    options = session_options(threads, optimize=True)
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, ORT_LEVELS[level])
    session = ort.InferenceSession(
        prog.model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    feeds = dict(prog.feeds)
    session.run(None, feeds)
    return lambda: session.run(None, feeds)


def _lowered(prog: Program, lower: Callable[[Step], NodeFn | str]) -> list[NodeFn] | str:
    """Every step lowered, or the first that does not and why."""
    fns = []
    for step in prog.steps:
        fn = lower(step)
        if isinstance(fn, str):
            return f"{step.op}: {fn}"
        fns.append(fn)
    return fns


def _bind(env: dict[str, Any], outputs: tuple[str, ...], result: Any) -> None:
    """A step's result under its output names (a tuple where it has several)."""
    if len(outputs) == 1:
        env[outputs[0]] = result
    else:
        env.update(zip(outputs, result, strict=True))


def torch_call(prog: Program) -> Call | str:
    import torch

    fns = _lowered(prog, lambda s: torch_node(s.op, s.attrs, s.operands, len(s.outputs)))
    if isinstance(fns, str):
        return fns
    outs = [s.outputs for s in prog.steps]
    feeds = {n: torch.from_numpy(np.ascontiguousarray(v)) for n, v in prog.feeds.items()}

    def call() -> object:
        env = dict(feeds)
        for out, fn in zip(outs, fns, strict=True):
            _bind(env, out, fn(env))
        return env[prog.output]

    with torch.inference_mode():
        call()
    return call


def tf_call(prog: Program, nhwc: bool, function: bool) -> Call | str:
    before_tensorflow()
    import tensorflow as tf

    fns = _lowered(prog, lambda s: tf_node(s.op, s.attrs, s.operands, nhwc, len(s.outputs)))
    if isinstance(fns, str):
        return fns
    outs = [s.outputs for s in prog.steps]
    names = list(prog.feeds)
    tensors = [tf.constant(tf_feed(prog.feeds[n], nhwc)) for n in names]

    def run(*xs: Any) -> Any:
        env = dict(zip(names, xs, strict=True))
        for out, fn in zip(outs, fns, strict=True):
            _bind(env, out, fn(env))
        return env[prog.output]

    graph = tf.function(run) if function else run
    graph(*tensors)  # traced here, not in the warm-up
    return lambda: graph(*tensors)


def build(impl: Implementation, prog: Program, threads: int, nhwc: bool) -> Call | str:
    """A call running ``prog`` once in ``impl``, or why it cannot (a lowering or run error)."""
    try:
        if impl.framework == "onnxruntime":
            return ort_call(prog, impl.variant, threads)
        if impl.framework == "pytorch":
            return torch_call(prog)
        return tf_call(prog, nhwc, function=impl.variant == "tf.function")
    except Exception as exc:  # a lowering the framework rejects: that layer is not timed there
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"


@contextlib.contextmanager
def running(impl: Implementation) -> Iterator[None]:
    """The context every call of ``impl`` runs in (PyTorch: inference mode, no autograd)."""
    if impl.framework != "pytorch":
        yield
        return
    import torch

    with torch.inference_mode():
        yield


# ------------------------------------------------------------------------------ threads, stacks


def set_threads(frameworks: Sequence[str], threads: int) -> dict[str, dict[str, int]]:
    """Ask each framework for ``threads`` intra-op and one inter-op thread; return what each
    reports in effect (TensorFlow and PyTorch fix inter-op threads once per process)."""
    found: dict[str, dict[str, int]] = {
        "onnxruntime": {"intra_op_threads": threads, "inter_op_threads": 1}
    }
    if "pytorch" in frameworks:
        import torch

        torch.set_num_threads(threads)
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(1)
        found["pytorch"] = {
            "intra_op_threads": torch.get_num_threads(),
            "inter_op_threads": torch.get_num_interop_threads(),
        }
    if "tensorflow" in frameworks:
        before_tensorflow()
        import tensorflow as tf

        with contextlib.suppress(RuntimeError):
            tf.config.threading.set_intra_op_parallelism_threads(threads)
        with contextlib.suppress(RuntimeError):
            tf.config.threading.set_inter_op_parallelism_threads(1)
        found["tensorflow"] = {
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        }
    return found


def framework_version(framework: str) -> str:
    if framework == "onnxruntime":
        import onnxruntime

        return str(onnxruntime.__version__)
    if framework == "pytorch":
        import torch

        return str(torch.__version__)
    before_tensorflow()
    import tensorflow as tf

    return str(tf.__version__)


def implementation_stack(
    impl: Implementation, bench: BenchConfig, threads: Mapping[str, int], nhwc: bool
) -> dict[str, Any]:
    """The stack a brick timing in ``impl`` holds for (ORT ``all``: DLBricks' raw stack)."""
    stack = system_stack(bench)
    if impl.framework == "onnxruntime":
        return {**stack, "brick_optimization": impl.variant}
    stack.pop("provider", None)
    return {
        **stack,
        "framework": impl.framework,
        "framework_version": framework_version(impl.framework),
        "brick_optimization": impl.variant,
        "intra_op_threads": threads["intra_op_threads"],
        "inter_op_threads": threads["inter_op_threads"],
        "layout": "NHWC" if impl.framework == "tensorflow" and nhwc else "NCHW",
        "lowering": REVISION,
    }


# ------------------------------------------------------------------------------ measuring


def measure(
    model: str | Path,
    config: BoundConfig | None = None,
    name: str | None = None,
    store: BrickStore | None = None,
    roofline: Device | None = None,
) -> MeasuredBound:
    """Time every brick of ``model`` and the whole model in each implementation and compose
    Benanza's bound (:func:`measuredbound.measured_bound`); with ``roofline``, the roofline
    (``benanza.bound`` on that device, roofs raised to the best measured layers) beside it."""
    config = config or BoundConfig()
    bench = config.bench()
    costs, bricks = split(model, bench)
    layers = [
        Layer(c.name, c.signature, describe(c.op_type, c.attributes, (c.input_shapes or [None])[0]))
        for c in costs
    ]
    fixed, values = record_values(load_model(model), config.batch_size)
    whole = program(fixed, values)
    nhwc = channels_last([n.op_type for n in fixed.graph.node])
    threads = set_threads(config.frameworks, config.threads)
    timings: list[LayerTiming] = []
    end_to_end: dict[Implementation, float] = {}
    not_timed: dict[str, dict[str, str]] = defaultdict(dict)
    not_run: dict[str, str] = {}
    reused = 0
    for impl in config.implementations:
        stack = implementation_stack(impl, bench, threads[impl.framework], nhwc)
        key = stack_key(stack)
        stored = _stored_timings(store, key, list(bricks))
        reused += len(stored)
        measured_now = []
        with running(impl):
            for signature, brick in bricks.items():
                timing = stored.get(signature) or _time_brick(impl, brick, bench, nhwc)
                if isinstance(timing, str):
                    _note(not_timed[impl.label], brick.op_type, timing)
                    continue
                if signature not in stored:
                    measured_now.append(_measured(brick, timing))
                timings.append(LayerTiming(signature, impl, timing.p50_ms))
            call = build(impl, whole, config.threads, nhwc) if isinstance(whole, Program) else whole
            if isinstance(call, str):
                not_run[impl.label] = call
            else:
                end_to_end[impl] = time_call(call, bench).p50_ms
        if store is not None and measured_now:
            store.record_brick_timings(key, stack, measured_now)
    result = measured_bound(
        name or Path(model).stem,
        layers,
        timings,
        end_to_end,
        conditions={
            "batch_size": config.batch_size,
            "warmup": config.warmup,
            "runs": config.runs,
            "statistic": "median",
            "threads": threads,
            "versions": {f: framework_version(f) for f in config.frameworks},
            "tensorflow_layout": "NHWC" if nhwc else "NCHW",
            "cpu": platform.machine(),
            "not_timed": {k: dict(v) for k, v in not_timed.items()},
            "end_to_end_not_run": not_run,
            "bricks": len(bricks),
            "bricks_reused": reused,
        },
    )
    if roofline is None:
        return result
    from mlmodelscope.analysis.benanza import bound as roofline_bound

    best = {b.layer.name: b.best_ms for b in result.layers if b.best_ms is not None}
    roof = roofline_bound(model, roofline, config.batch_size, measured_layers=best)
    return MeasuredBound(
        result.model,
        result.bound_ms,
        result.layers,
        result.rows,
        roof.sequential_bound_ms,
        {**result.conditions, "roofline_device": roof.device.name},
    )


def _note(reasons: dict[str, str], op: str, reason: str) -> None:
    """Add ``reason`` to why ``op``'s layers were not timed (each distinct reason once)."""
    known = reasons.get(op, "")
    if reason not in known.split("; "):
        reasons[op] = f"{known}; {reason}" if known else reason


def _time_brick(impl: Implementation, brick: Brick, bench: BenchConfig, nhwc: bool) -> Timing | str:
    prog = program(brick.model, brick.feeds)
    if isinstance(prog, str):
        return prog
    call = build(impl, prog, bench.threads, nhwc)
    return call if isinstance(call, str) else time_call(call, bench)
