"""The one interface every framework adapter implements (MLPerf's backend.py pattern).

The load generator (scenarios) only ever sees this interface, so the system under test and the
harness stay separate, and a ``NullBackend`` lets the harness measure its own overhead.
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import EvaluationSpec

if TYPE_CHECKING:
    from mlmodelscope.agent.profilers import FrameworkProfiler


class MissingExtraError(RuntimeError):
    """A framework is not installed; the message names the pip extra that installs it."""

    def __init__(self, framework: str, extra: str, cause: BaseException | None = None) -> None:
        super().__init__(
            f"{framework} is not installed in this environment; "
            f"install it with: pip install 'mlmodelscope[{extra}]'"
            + (f" ({cause})" if cause else "")
        )
        self.framework = framework
        self.extra = extra


class ModelLoadError(RuntimeError):
    """The model could not be loaded or does not match the spec (shape, names, format)."""


class UnloadableModelError(ModelLoadError, SpecError):
    """The file at spec.model.uri is no model the framework can load (a corrupt download,
    the wrong file, ``file:///etc/passwd``): the spec must change, retrying cannot help."""

    def __init__(self, message: str, field: str = "spec.model.uri") -> None:
        SpecError.__init__(self, field, message)


@dataclass(frozen=True)
class BackendInfo:
    """What ran the model: recorded in every result document."""

    framework: str
    framework_version: str
    device: str
    """'cpu' or 'cuda:0' and so on."""
    details: dict[str, str] = field(default_factory=dict)
    """Adapter-specific facts: execution providers, thread counts, CUDA/cuDNN versions."""


class Backend(ABC):
    """Loads one model and runs batches through it, synchronously.

    ``predict`` takes host arrays (batch first, one per model input, in spec order) and returns
    host arrays (one per model output). Returning host arrays means GPU work has finished when
    it returns, so timers stopped after it are honest.
    """

    name: str = "base"

    def import_framework(self) -> None:  # noqa: B027 - optional hook
        """Import the framework now (seconds for TensorFlow and PyTorch), so the start-up
        timeline can tell importing it from loading the model; ``load`` works without it.
        Raises :class:`MissingExtraError` when the framework is not installed."""

    @abstractmethod
    def load(self, model_path: Path, spec: EvaluationSpec) -> None:
        """Load the model at ``model_path`` as ``spec`` describes, on ``spec.hardware.device``."""

    @abstractmethod
    def predict(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run one batch and return the outputs on the host."""

    @abstractmethod
    def info(self) -> BackendInfo:
        """Framework, version and device actually used (after load)."""

    def warmup(self, inputs: Sequence[np.ndarray], iterations: int) -> list[float]:
        """Run ``iterations`` batches, returning each one's latency in seconds (reported, never
        mixed into measured results)."""
        latencies = []
        for _ in range(iterations):
            start = time.perf_counter_ns()
            self.predict(inputs)
            latencies.append((time.perf_counter_ns() - start) / 1e9)
        return latencies

    def measuring(self) -> AbstractContextManager[object]:
        """Held by the runner around the accuracy pass and each measurement, on the thread that
        issues the queries: per-run framework state (PyTorch's inference mode) is entered once
        here instead of once per ``predict``, where it costs ~12 µs a call (docs/benchmarks.md).
        ``predict`` stays correct without it."""
        return contextlib.nullcontext()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the session and device memory."""

    def profiler(self, level: str) -> FrameworkProfiler | None:
        """A profiling session for tracing level 'framework' or 'library' (telemetry's leveled
        passes call it after the measurement; ``predict`` is never changed by it). None: this
        backend cannot profile; raises ProfilingUnavailableError when the level cannot run
        here (e.g. library level without a GPU)."""
        return None


class NullBackend(Backend):
    """Returns zeros instantly: measures the harness itself (its per-query overhead)."""

    name = "null"

    def __init__(self, num_classes: int = 10) -> None:
        self._num_classes = num_classes

    def load(self, model_path: Path, spec: EvaluationSpec) -> None:
        return None

    def predict(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.zeros((inputs[0].shape[0], self._num_classes), dtype=np.float32)]

    def info(self) -> BackendInfo:
        return BackendInfo(framework="null", framework_version="0", device="cpu")
