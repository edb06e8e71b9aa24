"""Per-layer micro-benchmarks in PyTorch, on the GPU or (dry run) the CPU: Benanza's and
DLBricks' measurements without ONNX Runtime, which the GPU machine has only as a CPU build.

A model's layers are the ATen operators one forward calls, recorded with a
``TorchDispatchMode`` under ``torch.inference_mode`` (there they arrive as the framework's
layer-level operators: ``aten.conv2d``, ``aten.batch_norm``, ``aten.linear``, ...); operators
that only make a view are left out (no kernel). Calls with the same signature (operator,
argument shapes, dtype class and constants) are one brick, replayed alone on the arguments the
forward gave it. Each brick and each whole model is timed two ways:

- **device time** (Benanza's layer time): CUDA events around each call, the stream filled
  first with ``torch.cuda._sleep`` so that the host's launch cost is not in it;
- **wall time** (DLBricks' brick time): ``time.perf_counter_ns`` around the call and
  ``torch.cuda.synchronize()``, as a framework-level benchmark of the layer alone sees it.

Without CUDA both are the wall time. Numbers are medians of ``runs`` calls after ``warmup``.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mlmodelscope.devtools.gpukit.bare import gc_paused

_cuda: Any = torch.cuda  # untyped in some torch releases
PRECISIONS = ("fp32", "tf32", "fp16")
FILL_CYCLES = 400_000
"""GPU clock cycles of ``torch.cuda._sleep`` queued before each timed brick call (about
0.2 ms at 2 GHz: more than the host needs to launch one operator)."""
MODEL_FILL_CYCLES = 40_000_000
"""The same before each whole-model call (about 20 ms: more than the host needs to launch a
whole forward), so the model's device time is the GPU's, not the launch rate's."""


@dataclass(frozen=True)
class Variant:
    """How a brick or model runs: precision and whether cuDNN searches for algorithms."""

    precision: str
    search: bool

    @property
    def label(self) -> str:
        return f"{self.precision}, cudnn search {'on' if self.search else 'off'}"


VARIANTS = tuple(Variant(p, s) for p in PRECISIONS for s in (False, True))


@dataclass
class Brick:
    """One signature: the operator, the arguments its first call had, how many calls share it."""

    signature: str
    op: str
    description: str
    func: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    calls: int = 1


@dataclass
class Recording:
    """One forward's layers in call order (by signature) and its bricks; views left out."""

    layers: list[str] = field(default_factory=list)
    bricks: dict[str, Brick] = field(default_factory=dict)
    views: int = 0


def _shape(t: torch.Tensor) -> str:
    kind = "f" if t.is_floating_point() else str(t.dtype).removeprefix("torch.")
    layout = "" if t.is_contiguous() else ",strided"
    return f"{kind}[{','.join(str(d) for d in t.shape)}{layout}]"


def _describe(value: Any) -> str:
    """An argument in a signature: a tensor by dtype class and shape (so FP16 and FP32 calls
    of the same layer share it), a weight too, anything else by its value."""
    if isinstance(value, torch.Tensor):
        return _shape(value)
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(_describe(v) for v in value) + ")"
    if isinstance(value, torch.dtype):
        return "float" if value.is_floating_point else str(value)
    return repr(value)


def signature(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
    parts = [_describe(a) for a in args] + [f"{k}={_describe(v)}" for k, v in kwargs.items()]
    return f"{func}({', '.join(parts)})"


def description(func: Any, args: Sequence[Any]) -> str:
    """A layer as a reader names it: the operator and its first tensors' shapes."""
    shapes = ["x".join(str(d) for d in a.shape) for a in args if isinstance(a, torch.Tensor)][:2]
    name = str(func).removeprefix("aten.").split(".")[0]
    return f"{name} [{'; '.join(shapes)}]" if shapes else name


LAYER_RANGE = "mlms-layer-{}"
"""The NVTX range around layer ``i``'s kernels when recording with ``nvtx`` (Nsight Compute
names it in each kernel's row)."""


class _Recorder(TorchDispatchMode):
    def __init__(self, recording: Recording, nvtx: bool = False) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.recording = recording
        self.nvtx = nvtx

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "is_view", False):
            self.recording.views += 1
            return func(*args, **kwargs)
        if self.nvtx:
            _cuda.nvtx.range_push(LAYER_RANGE.format(len(self.recording.layers)))
            try:
                out = func(*args, **kwargs)
            finally:
                _cuda.nvtx.range_pop()
        else:
            out = func(*args, **kwargs)
        key = signature(func, args, kwargs)
        self.recording.layers.append(key)
        brick = self.recording.bricks.get(key)
        if brick is None:
            self.recording.bricks[key] = Brick(
                key, str(func), description(func, args), func, tuple(args), dict(kwargs)
            )
        else:
            brick.calls += 1
        return out


def record(model: Callable[[Any], Any], example: Any, nvtx: bool = False) -> Recording:
    """The layers of one forward of ``model`` on ``example``, and their bricks; with ``nvtx``
    each layer's kernels inside an NVTX range named :data:`LAYER_RANGE` with its index."""
    recording = Recording()
    with torch.inference_mode(), _Recorder(recording, nvtx):
        model(example)
    return recording


@contextlib.contextmanager
def running(variant: Variant) -> Iterator[None]:
    """cuDNN's algorithm search and TF32 set for ``variant``, restored after."""
    saved = (
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cuda.matmul.allow_tf32,
    )
    tf32 = variant.precision == "tf32"
    torch.backends.cudnn.benchmark = variant.search
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        yield
    finally:
        (
            torch.backends.cudnn.benchmark,
            torch.backends.cudnn.allow_tf32,
            torch.backends.cuda.matmul.allow_tf32,
        ) = saved


def cast(value: Any, precision: str) -> Any:
    """A module or input in ``precision``: floating tensors to FP16 for ``fp16``."""
    if precision != "fp16":
        return value
    if isinstance(value, torch.nn.Module):
        return value.half()
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.half()
    return value


@dataclass(frozen=True)
class Timing:
    """Medians of one brick or model in one variant (ms), with the runs behind them."""

    device_ms: float
    wall_ms: float
    runs: int
    warmup: int
    device_min_ms: float
    wall_min_ms: float


def _device_ms(call: Callable[[], Any], runs: int, fill_cycles: int) -> list[float]:
    starts = [_cuda.Event(enable_timing=True) for _ in range(runs)]
    ends = [_cuda.Event(enable_timing=True) for _ in range(runs)]
    for start, end in zip(starts, ends, strict=True):
        _cuda._sleep(fill_cycles)
        start.record()
        call()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]


def _wall_ms(call: Callable[[], Any], runs: int, cuda: bool) -> list[float]:
    sync = _cuda.synchronize if cuda else (lambda: None)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        call()
        sync()
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return times


def time_call(
    call: Callable[[], Any], runs: int, warmup: int, cuda: bool, fill_cycles: int = FILL_CYCLES
) -> Timing:
    """Device and wall medians of ``call`` (see the module's docstring)."""
    with torch.inference_mode(), gc_paused():
        for _ in range(warmup):
            call()
        if cuda:
            torch.cuda.synchronize()
        wall = _wall_ms(call, runs, cuda)
        device = _device_ms(call, runs, fill_cycles) if cuda else wall
    return Timing(
        device_ms=statistics.median(device),
        wall_ms=statistics.median(wall),
        runs=runs,
        warmup=warmup,
        device_min_ms=min(device),
        wall_min_ms=min(wall),
    )


def time_brick(brick: Brick, runs: int, warmup: int, cuda: bool) -> Timing:
    return time_call(lambda: brick.func(*brick.args, **brick.kwargs), runs, warmup, cuda)


def sync_overhead_ms(runs: int, cuda: bool) -> float:
    """The wall time of timing nothing (the clock reads and the synchronize): what every
    brick's wall time carries once and a whole model's carries once too."""
    return time_call(lambda: None, runs, 0, cuda).wall_ms


def cuda_graph(model: Callable[[Any], Any], example: Any) -> Callable[[], Any]:
    """One forward captured as a CUDA graph (after three eager warm-up forwards on a side
    stream, as the CUDA-graph documentation does); calling the result replays it."""
    stream = _cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.inference_mode(), torch.cuda.stream(stream):
        for _ in range(3):
            model(example)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.inference_mode(), torch.cuda.graph(graph):
        model(example)
    return graph.replay
