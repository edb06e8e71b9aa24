"""Framework profilers turned into one neutral shape: per predict call, a list of timed ops.

Each framework profiles differently (torch.profiler's Chrome trace, ONNX Runtime's JSON
profile, TensorFlow's XSpace protobuf) and each keeps its own clock. What tracing needs is the
same for all three: for every traced predict call, the operators (framework level) and GPU
kernels and copies (library level) with start times *relative to that call's start*, and which
op each one sits under. The conversion functions here are pure (dicts and lists in, records
out), so they are unit-tested with recorded or synthetic traces on machines without a GPU.

Anchoring: every traced call is wrapped in a marker the profiler records (a torch
``record_function``, a TensorFlow ``TraceMe``; ONNX Runtime's own per-run ``model_run`` event).
Offsets are taken from the marker's start, and :mod:`mlmodelscope.telemetry.tracing` adds them
to the predict span's start, which converts the profiler's clock to epoch nanoseconds.

The profiler classes import their framework lazily and are created by a backend's
``profiler(level)`` hook, never in the measured hot loop.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mlmodelscope.tensorflow_import import before_tensorflow

OpKind = Literal["layer", "kernel", "memcpy", "memset"]
AttrValue = str | int | float | bool

MARKER_PREFIX = "mlms.query#"
"""torch marker names: ``mlms.query#<index>``."""
TF_MARKER = "mlms.query"
TF_MARKER_STAT = "mlms_query"
"""TensorFlow TraceMe name and the stat that carries the query index."""
LIBRARY_KINDS: frozenset[str] = frozenset({"kernel", "memcpy", "memset"})


@dataclass
class ProfiledOp:
    """One operator or GPU activity inside a traced predict call."""

    name: str
    kind: OpKind
    start_ns: int
    """Offset from the start of the predict call (its marker), in nanoseconds."""
    duration_ns: int
    parent: int | None = None
    """Index of the enclosing op in the same run's ``ops``; None: directly under predict."""
    attributes: dict[str, AttrValue] = field(default_factory=dict)


@dataclass
class ProfiledRun:
    """Everything the profiler saw during one traced predict call."""

    index: int
    """The query index its marker carried."""
    duration_ns: int
    """The marker's own duration (the call as the profiler timed it)."""
    ops: list[ProfiledOp] = field(default_factory=list)
    """Parents always come before their children."""


# ------------------------------------------------------------------------------------ helpers


@dataclass
class _Interval:
    """A profiler event in its own clock (nanoseconds), before it is tied to a run."""

    name: str
    start: int
    end: int
    thread: Any
    kind: OpKind
    attributes: dict[str, AttrValue]
    key: Any = None
    """Correlation key (torch: the runtime call's correlation id)."""
    parent: _Interval | None = None
    run: int | None = None
    """Position of the run in the output list."""
    slot: int = -1
    """Index in the run's ops once placed."""


def _nest(intervals: list[_Interval], tolerance_ns: int = 1000) -> None:
    """Set ``parent`` to the innermost enclosing interval on the same thread (a call stack).

    ``tolerance_ns`` absorbs the rounding of microsecond timestamps, where a child can appear
    to end a hair after its parent.
    """
    by_thread: dict[Any, list[_Interval]] = {}
    for iv in intervals:
        by_thread.setdefault(iv.thread, []).append(iv)
    for items in by_thread.values():
        items.sort(key=lambda iv: (iv.start, -iv.end))
        stack: list[_Interval] = []
        for iv in items:
            while stack and stack[-1].end <= iv.start:
                stack.pop()
            iv.parent = next((c for c in reversed(stack) if c.end + tolerance_ns >= iv.end), None)
            stack.append(iv)


class _Windows:
    """Traced calls' marker windows ``(start, end, query index)``, sorted by start. Runs are
    numbered in that order: which run does a timestamp belong to, and where does each begin?"""

    def __init__(self, markers: Sequence[tuple[int, int, int]]) -> None:
        self.windows = sorted(markers)
        self.starts = [w[0] for w in self.windows]

    def runs(self) -> list[ProfiledRun]:
        """One empty run per window, in window order (the positions the lookups return)."""
        return [ProfiledRun(index=w[2], duration_ns=w[1] - w[0]) for w in self.windows]

    def containing(self, t: int) -> int | None:
        """The run whose window contains ``t`` (start inclusive, end inclusive)."""
        i = bisect.bisect_right(self.starts, t) - 1
        return i if i >= 0 and t <= self.windows[i][1] else None

    def latest_before(self, t: int) -> int | None:
        """The run that started last at or before ``t`` (async GPU work lands after its call)."""
        i = bisect.bisect_right(self.starts, t) - 1
        return i if i >= 0 else None


def _assemble(
    runs: list[ProfiledRun], origins: Sequence[int], placed: Sequence[_Interval]
) -> list[ProfiledRun]:
    """Append each interval to its run (parents first), offsets from the run's marker."""
    for iv in sorted(placed, key=lambda iv: (iv.start, -iv.end)):
        if iv.run is None:
            continue
        run = runs[iv.run]
        parent = iv.parent
        while parent is not None and (parent.run != iv.run or parent.slot < 0):
            parent = parent.parent
        iv.slot = len(run.ops)
        run.ops.append(
            ProfiledOp(
                name=iv.name,
                kind=iv.kind,
                start_ns=iv.start - origins[iv.run],
                duration_ns=max(iv.end - iv.start, 0),
                parent=None if parent is None else parent.slot,
                attributes=iv.attributes,
            )
        )
    return runs


def _us_to_ns(value: Any) -> int:
    return round(float(value) * 1000.0)


def _scalar_attrs(args: Mapping[str, Any], keys: Sequence[str]) -> dict[str, AttrValue]:
    out: dict[str, AttrValue] = {}
    for key in keys:
        value = args.get(key)
        if isinstance(value, bool | int | float | str):
            out[key] = value
        elif isinstance(value, list | dict):
            out[key] = json.dumps(value, separators=(",", ":"))
    return out


# ------------------------------------------------------------------------------------ torch

_TORCH_OP_CATS = frozenset({"cpu_op", "operator", "Operator", "python_function"})
_TORCH_RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})
_TORCH_GPU_CATS: dict[str, OpKind] = {
    "kernel": "kernel",
    "Kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "Memcpy": "memcpy",
    "gpu_memset": "memset",
    "Memset": "memset",
}
_TORCH_KERNEL_ARGS = ("device", "stream", "grid", "block", "registers per thread", "bytes")


def torch_runs_from_chrome_trace(
    trace: Mapping[str, Any] | Sequence[Mapping[str, Any]], library: bool = True
) -> list[ProfiledRun]:
    """Turn torch.profiler's Chrome trace (``export_chrome_trace``) into runs.

    Markers are ``user_annotation`` events named ``mlms.query#<i>``. CPU operators nest by
    containment on their thread; a GPU kernel or copy goes under the operator that launched it
    (its ``correlation`` id matches a CUDA runtime call, which sits inside that operator), or,
    without one, under the run whose call started last before it. Timestamps are microseconds.
    """
    events = trace.get("traceEvents", []) if isinstance(trace, Mapping) else trace
    markers: list[tuple[int, int, int]] = []
    ops: list[_Interval] = []
    runtime: list[_Interval] = []
    gpu: list[_Interval] = []
    for ev in events:
        if ev.get("ph") != "X":
            continue
        cat = str(ev.get("cat", ""))
        name = str(ev.get("name", ""))
        start = _us_to_ns(ev.get("ts", 0))
        end = start + _us_to_ns(ev.get("dur", 0))
        args: Mapping[str, Any] = ev.get("args") or {}
        thread = (ev.get("pid"), ev.get("tid"))
        if cat == "user_annotation" and name.startswith(MARKER_PREFIX):
            with contextlib.suppress(ValueError):
                markers.append((start, end, int(name[len(MARKER_PREFIX) :])))
        elif cat in _TORCH_OP_CATS:
            attrs = _scalar_attrs(args, ("Input Dims", "Input type"))
            ops.append(_Interval(name, start, end, thread, "layer", {"op_type": name, **attrs}))
        elif cat in _TORCH_RUNTIME_CATS:
            runtime.append(
                _Interval(name, start, end, thread, "layer", {}, args.get("correlation"))
            )
        elif library and cat in _TORCH_GPU_CATS:
            attrs = _scalar_attrs(args, _TORCH_KERNEL_ARGS)
            kind = _TORCH_GPU_CATS[cat]
            gpu.append(_Interval(name, start, end, thread, kind, attrs, args.get("correlation")))
    if not markers:
        return []
    windows = _Windows(markers)
    _nest(ops + runtime)
    for iv in ops:
        iv.run = windows.containing(iv.start)
    launcher: dict[Any, _Interval] = {}
    calls = {id(call) for call in runtime}
    for call in runtime:
        parent = call.parent  # the innermost operator around the runtime call launched it
        while parent is not None and id(parent) in calls:
            parent = parent.parent
        if parent is not None and call.key is not None:
            launcher[call.key] = parent
    for iv in gpu:
        op = launcher.get(iv.key)
        if op is not None and op.run is not None:
            iv.parent, iv.run = op, op.run
        else:
            iv.run = windows.latest_before(iv.start)
    placed = [iv for iv in ops if iv.run is not None] + [iv for iv in gpu if iv.run is not None]
    return _assemble(windows.runs(), windows.starts, placed)


# ----------------------------------------------------------------------------- onnxruntime

_ORT_NODE_ATTRS = ("op_name", "provider", "node_index", "input_type_shape", "output_type_shape")


def ort_runs_from_profile(
    events: Sequence[Mapping[str, Any]], indices: Sequence[int | None], library: bool = True
) -> list[ProfiledRun]:
    """Turn ONNX Runtime's profile (``end_profiling()``'s JSON list) into runs.

    Every ``session.run`` writes one ``model_run`` event; the k-th one belongs to the k-th
    predict call of the profiling session, whose query index is ``indices[k]`` (None: a call
    that was not traced, e.g. warm-up). ``Node`` events (``<node>_kernel_time``) are the
    operators; with the CUDA provider's profiler, ``Kernel`` events are GPU kernels, placed
    under the node named in their ``parent_name`` argument when present.
    """
    runs_at: list[tuple[int, int]] = []
    nodes: list[_Interval] = []
    kernels: list[_Interval] = []
    for ev in events:
        cat = str(ev.get("cat", ""))
        name = str(ev.get("name", ""))
        start = _us_to_ns(ev.get("ts", 0))
        end = start + _us_to_ns(ev.get("dur", 0))
        args: Mapping[str, Any] = ev.get("args") or {}
        if cat == "Session" and name == "model_run":
            runs_at.append((start, end))
        elif cat == "Node" and name.endswith("_kernel_time"):
            node = name[: -len("_kernel_time")]
            attrs = _scalar_attrs(args, _ORT_NODE_ATTRS)
            attrs["op_type"] = str(args.get("op_name", node))
            nodes.append(_Interval(node, start, end, ev.get("tid"), "layer", attrs))
        elif library and cat in ("Kernel", "kernel"):
            attrs = _scalar_attrs(args, ("stream", "grid_x", "block_x", "op_name"))
            kernels.append(
                _Interval(name, start, end, None, "kernel", attrs, args.get("parent_name"))
            )
    runs_at.sort()
    markers = [
        (start, end, int(index))
        for (start, end), index in zip(runs_at, indices, strict=False)
        if index is not None
    ]
    if not markers:
        return []
    lookup = _Windows(markers)
    by_name: dict[tuple[int, str], _Interval] = {}
    for iv in nodes:
        iv.run = lookup.containing(iv.start)
        if iv.run is not None:
            by_name[(iv.run, iv.name)] = iv
    for iv in kernels:
        iv.run = lookup.latest_before(iv.start)
        if iv.run is not None and iv.key is not None:
            iv.parent = by_name.get((iv.run, str(iv.key)))
    placed = [iv for iv in nodes + kernels if iv.run is not None]
    return _assemble(lookup.runs(), lookup.starts, placed)


# ------------------------------------------------------------------------------ tensorflow


def _xstat_value(stat: Any, plane: Any) -> AttrValue | None:
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":
        meta = plane.stat_metadata.get(stat.ref_value)
        return None if meta is None else str(meta.name)
    value = getattr(stat, kind)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value  # type: ignore[no-any-return]


def tf_runs_from_xspace(space: Any, library: bool = True) -> list[ProfiledRun]:
    """Turn TensorFlow's XSpace (``*.xplane.pb``, parsed) into runs.

    Markers are the ``mlms.query`` TraceMe events on the host plane (query index in the
    ``mlms_query`` stat). TensorFlow ops are the host events whose metadata name is
    ``<op name>:<op type>``; they run on the executor's threads and are assigned to the marker
    window that contains their start. With device tracing on (library level), events on
    ``/device:GPU:*`` planes are kernels and copies, placed under the op named in their
    ``tf_op`` stat. All lines of one XSpace share a time base: ``timestamp_ns`` of the line
    plus ``offset_ps`` of the event.
    """
    markers: list[tuple[int, int, int]] = []
    ops: list[_Interval] = []
    device: list[_Interval] = []
    for plane in space.planes:
        is_gpu = str(plane.name).startswith("/device:GPU")
        if is_gpu and not library:
            continue
        stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
        for line in plane.lines:
            base_ps = int(line.timestamp_ns) * 1000
            for ev in line.events:
                meta = plane.event_metadata.get(ev.metadata_id)
                if meta is None:
                    continue
                start = (base_ps + int(ev.offset_ps)) // 1000
                end = start + int(ev.duration_ps) // 1000
                stats = {stat_names.get(s.metadata_id, ""): s for s in ev.stats}
                name = str(meta.name)
                if is_gpu:
                    tf_op = stats.get("tf_op")
                    op_name = _xstat_value(tf_op, plane) if tf_op is not None else None
                    lowered = name.lower()
                    kind: OpKind = (
                        "memcpy"
                        if "memcpy" in lowered
                        else "memset"
                        if "memset" in lowered
                        else "kernel"
                    )
                    attrs: dict[str, AttrValue] = {"device": str(plane.name)}
                    device.append(_Interval(name, start, end, line.id, kind, attrs, op_name))
                elif name == TF_MARKER and TF_MARKER_STAT in stats:
                    value = _xstat_value(stats[TF_MARKER_STAT], plane)
                    if isinstance(value, int | float | str):
                        with contextlib.suppress(ValueError):
                            markers.append((start, end, int(value)))
                elif meta.display_name and name.endswith(":" + str(meta.display_name)):
                    full = name[: -len(str(meta.display_name)) - 1]
                    attrs = {"op_type": str(meta.display_name), "tf_op": name}
                    ops.append(_Interval(_short_tf_name(full), start, end, line.id, "layer", attrs))
    if not markers:
        return []
    windows = _Windows(markers)
    _nest(ops)
    by_name: dict[tuple[int, str], _Interval] = {}
    for iv in ops:
        iv.run = windows.containing(iv.start)
        if iv.run is not None:
            by_name[(iv.run, str(iv.attributes["tf_op"]))] = iv
    for iv in device:
        iv.run = windows.latest_before(iv.start)
        if iv.run is not None and iv.key is not None:
            iv.parent = by_name.get((iv.run, str(iv.key)))
    placed = [iv for iv in ops + device if iv.run is not None]
    return _assemble(windows.runs(), windows.starts, placed)


def _short_tf_name(full: str) -> str:
    """'StatefulPartitionedCall/sequential/conv2d/Conv2D' -> 'sequential/conv2d/Conv2D'."""
    parts = full.split("/")
    while len(parts) > 1 and parts[0] in ("StatefulPartitionedCall", "PartitionedCall"):
        parts = parts[1:]
    return "/".join(parts)


# -------------------------------------------------------------------------------- profilers

Predict = Callable[[Sequence[np.ndarray]], list[np.ndarray]]


class ProfilingUnavailableError(RuntimeError):
    """This level cannot be profiled here (e.g. library level without a GPU); says why."""


class FrameworkProfiler(ABC):
    """One profiling session over a short pass: ``start``, then ``predict`` for every query
    (wrapped in ``annotate(i)`` when traced), then ``stop`` returns the traced runs."""

    def __init__(self, predict: Predict, level: str) -> None:
        self._predict = predict
        self.level = level
        self.library = level == "library"

    @abstractmethod
    def start(self) -> None:
        """Begin profiling (may cost milliseconds to seconds: never inside a timed region)."""

    def annotate(self, index: int) -> contextlib.AbstractContextManager[None]:
        """Mark one traced predict call so its events can be found and anchored."""
        return contextlib.nullcontext()

    def predict(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The call to time while profiling (ONNX Runtime uses a separate profiling session)."""
        return self._predict(inputs)

    @abstractmethod
    def stop(self) -> list[ProfiledRun]:
        """End profiling and convert what it recorded."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what ``start`` created (also after a failure)."""


class TorchProfiler(FrameworkProfiler):
    """torch.profiler over CPU ops; at library level (CUDA only) also kernels and copies."""

    def __init__(self, predict: Predict, level: str, *, cuda: bool) -> None:
        super().__init__(predict, level)
        if self.library and not cuda:
            raise ProfilingUnavailableError("library level needs CUDA; this model runs on the CPU")
        self._cuda = cuda
        self._prof: Any = None
        self._dir: Path | None = None

    def start(self) -> None:
        # The autograd-level profiler (kineto, same Chrome trace): torch.profiler.profile's
        # start() imports torch._inductor, which crashes the process when TensorFlow is
        # loaded in it too (as in a multi-framework `mlms run`).
        import torch

        device = "cuda" if self.library else None
        self._prof = torch.autograd.profiler.profile(
            use_kineto=True, use_device=device, record_shapes=False
        )
        self._prof.__enter__()

    def annotate(self, index: int) -> contextlib.AbstractContextManager[None]:
        import torch

        cm: contextlib.AbstractContextManager[None] = torch.profiler.record_function(
            f"{MARKER_PREFIX}{index}"
        )
        return cm

    def stop(self) -> list[ProfiledRun]:
        if self._prof is None:
            return []
        self._prof.__exit__(None, None, None)
        self._dir = Path(tempfile.mkdtemp(prefix="mlms-torch-prof-"))
        path = self._dir / "trace.json"
        self._prof.export_chrome_trace(str(path))
        self._prof = None
        return torch_runs_from_chrome_trace(json.loads(path.read_text()), self.library)

    def close(self) -> None:
        if self._prof is not None:
            with contextlib.suppress(Exception):
                self._prof.__exit__(None, None, None)
            self._prof = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


class OrtProfiler(FrameworkProfiler):
    """A second InferenceSession with ``enable_profiling`` (profiling is a session option, so
    the measured session is never touched); its JSON profile is parsed at ``stop``.

    ``make_session(prefix)`` builds the profiling session (same model, options and providers,
    profile files under ``prefix``); ``feed(inputs)`` gives ``session.run``'s output names and
    feed dict."""

    def __init__(
        self,
        level: str,
        make_session: Callable[[str], Any],
        feed: Callable[[Sequence[np.ndarray]], tuple[Any, dict[str, np.ndarray]]],
        *,
        gpu: bool,
    ) -> None:
        super().__init__(self._run, level)
        if self.library and not gpu:
            raise ProfilingUnavailableError("library level needs a GPU execution provider")
        self._make_session = make_session
        self._feed = feed
        self._session: Any = None
        self._dir: Path | None = None
        self._calls: list[int | None] = []
        self._current: int | None = None

    def start(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="mlms-ort-prof-"))
        self._session = self._make_session(str(self._dir / "ort"))
        self._calls = []

    @contextlib.contextmanager
    def _annotated(self, index: int) -> Iterator[None]:
        self._current = index
        try:
            yield
        finally:
            self._current = None

    def annotate(self, index: int) -> contextlib.AbstractContextManager[None]:
        return self._annotated(index)

    def _run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        assert self._session is not None
        names, feed = self._feed(inputs)
        self._calls.append(self._current)
        out: list[np.ndarray] = self._session.run(names, feed)
        return out

    def stop(self) -> list[ProfiledRun]:
        if self._session is None:
            return []
        path = Path(self._session.end_profiling())
        self._session = None
        events = json.loads(path.read_text())
        return ort_runs_from_profile(events, self._calls, self.library)

    def close(self) -> None:
        self._session = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


class TfProfiler(FrameworkProfiler):
    """tf.profiler.experimental over a pass; the XSpace it writes is parsed directly (no
    TensorBoard plugin needed: the protobuf ships with TensorFlow). ``make_predict`` loads a
    fresh copy of the model at ``start``: TensorFlow skips tracing ops its cost model has
    learned are cheap, so a warm function would show only the expensive ones."""

    def __init__(self, make_predict: Callable[[], Predict], level: str, *, gpu: bool) -> None:
        super().__init__(self._run, level)
        if self.library and not gpu:
            raise ProfilingUnavailableError("library level needs a GPU; this model runs on the CPU")
        self._make_predict = make_predict
        self._fresh: Predict | None = None
        self._dir: Path | None = None
        self._running = False

    def _run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        assert self._fresh is not None
        return self._fresh(inputs)

    def start(self) -> None:
        before_tensorflow()
        import tensorflow as tf

        self._fresh = self._make_predict()

        self._dir = Path(tempfile.mkdtemp(prefix="mlms-tf-prof-"))
        options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=3, python_tracer_level=0, device_tracer_level=1 if self.library else 0
        )
        tf.profiler.experimental.start(str(self._dir), options=options)
        self._running = True

    def annotate(self, index: int) -> contextlib.AbstractContextManager[None]:
        before_tensorflow()
        import tensorflow as tf

        cm: contextlib.AbstractContextManager[None] = tf.profiler.experimental.Trace(
            TF_MARKER, **{TF_MARKER_STAT: index}
        )
        return cm

    def stop(self) -> list[ProfiledRun]:
        if not self._running or self._dir is None:
            return []
        before_tensorflow()
        import tensorflow as tf
        from tensorflow.tsl.profiler.protobuf import xplane_pb2

        tf.profiler.experimental.stop()
        self._running = False
        files = sorted(self._dir.rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
        if not files:
            return []
        space = xplane_pb2.XSpace()
        space.ParseFromString(files[-1].read_bytes())
        return tf_runs_from_xspace(space, self.library)

    def close(self) -> None:
        if self._running:
            before_tensorflow()
            import tensorflow as tf

            with contextlib.suppress(Exception):
                tf.profiler.experimental.stop()
            self._running = False
        self._fresh = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
