"""ONNX Runtime adapter: one InferenceSession, providers and session options from the spec.

onnxruntime is imported in ``load`` only; the session's inputs are checked against
``model.inputs`` at load time so a wrong spec fails before any measurement starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlmodelscope.agent.backends.base import (
    Backend,
    BackendInfo,
    MissingExtraError,
    ModelLoadError,
    UnloadableModelError,
)
from mlmodelscope.spec.evaluation import Device, EvaluationSpec, ModelFormat

if TYPE_CHECKING:
    from mlmodelscope.agent.profilers import FrameworkProfiler

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
GPU_PROVIDERS = frozenset({CUDA_PROVIDER, "TensorrtExecutionProvider"})

_ORT_TYPES = {
    "float32": "tensor(float)",
    "float16": "tensor(float16)",
    "bfloat16": "tensor(bfloat16)",
    "float64": "tensor(double)",
    "int64": "tensor(int64)",
    "int32": "tensor(int32)",
    "uint8": "tensor(uint8)",
    "bool": "tensor(bool)",
}
"""Spec dtype -> ONNX Runtime's type string for a tensor input."""

_OPT_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


def _describe(args: Sequence[Any]) -> str:
    """'input [batch, 1, 8, 8] tensor(float), ...': what the model actually declares."""
    return ", ".join(f"{a.name} [{', '.join(str(d) for d in a.shape)}] {a.type}" for a in args)


class OnnxRuntimeBackend(Backend):
    """Runs an ONNX model; feeds inputs by the spec's names and fetches its outputs."""

    name = "onnxruntime"

    def __init__(self) -> None:
        self._ort: Any = None
        self._session: Any = None
        self._input_names: list[str] = []
        self._output_names: list[str] | None = None
        self._requested: list[str] = []
        self._details: dict[str, str] = {}
        self._model_path: Path | None = None

    def import_framework(self) -> None:
        """Import ONNX Runtime (what ``load`` would import first)."""
        try:
            import onnxruntime  # noqa: F401
        except ImportError as exc:
            raise MissingExtraError("ONNX Runtime", "onnxruntime", exc) from exc

    def load(self, model_path: Path, spec: EvaluationSpec) -> None:
        """Create the session on the spec's device and check model.inputs/outputs against it."""
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise MissingExtraError("ONNX Runtime", "onnxruntime", exc) from exc
        if spec.model.format != ModelFormat.ONNX:
            raise ModelLoadError(
                f"model.format is {spec.model.format.value!r}, but framework onnxruntime loads "
                "only onnx models; fix model.format or framework.name"
            )
        if not model_path.is_file():
            raise ModelLoadError(f"model file not found: {model_path}")
        self._ort = ort
        providers = self._providers(spec)
        options = self._session_options(spec)
        try:
            session = ort.InferenceSession(str(model_path), options, providers=providers)
        except Exception as exc:
            raise UnloadableModelError(f"cannot load onnx model {model_path}: {exc}") from exc
        used = session.get_providers()
        if providers[0] not in used:
            # ONNX Runtime falls back to CPU silently when a GPU provider fails to initialize.
            raise ModelLoadError(
                f"{providers[0]} failed to initialize (session uses {used}); check the CUDA "
                "libraries and driver, or use hardware.device: cpu"
            )
        self._input_names = self._check_inputs(session, spec)
        self._output_names = self._check_outputs(session, spec)
        self._session = session
        self._model_path = model_path
        self._requested = providers
        self._details["providers"] = ",".join(used)

    def _providers(self, spec: EvaluationSpec) -> list[str]:
        """Requested provider first, CPU as the fallback for operators it lacks."""
        ort = self._ort
        available = ort.get_available_providers()
        requested = spec.framework.execution_provider
        if spec.hardware.device == Device.GPU:
            provider = requested or CUDA_PROVIDER
            if provider == CPU_PROVIDER:
                raise ModelLoadError(
                    "framework.executionProvider is CPUExecutionProvider but hardware.device "
                    "is gpu; use CUDAExecutionProvider or TensorrtExecutionProvider"
                )
            if provider not in available:
                raise ModelLoadError(
                    f"hardware.device is gpu but onnxruntime {ort.__version__} has no "
                    f"{provider} (available: {', '.join(available)}); install the GPU build "
                    "with: pip uninstall onnxruntime && pip install 'mlmodelscope[onnxruntime-gpu]'"
                )
            chain = [provider]
            if provider != CUDA_PROVIDER and CUDA_PROVIDER in available:
                chain.append(CUDA_PROVIDER)
            return [*chain, CPU_PROVIDER]
        if requested and requested != CPU_PROVIDER:
            raise ModelLoadError(
                f"framework.executionProvider is {requested} but hardware.device is cpu; "
                "set hardware.device: gpu or drop executionProvider"
            )
        return [CPU_PROVIDER]

    def _session_options(self, spec: EvaluationSpec) -> Any:
        """Threads, graph optimization level and deterministic kernels from spec.framework."""
        ort = self._ort
        fw = spec.framework
        options = ort.SessionOptions()
        if fw.intra_op_threads:
            options.intra_op_num_threads = fw.intra_op_threads
        if fw.inter_op_threads:
            options.inter_op_num_threads = fw.inter_op_threads
            if fw.inter_op_threads > 1:
                # Inter-op threads are used only by the parallel executor.
                options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        level = fw.graph_optimization_level or "all"
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _OPT_LEVELS[level])
        deterministic = hasattr(options, "use_deterministic_compute")
        if deterministic:
            options.use_deterministic_compute = True
        self._details = {
            "intra_op_threads": str(fw.intra_op_threads or 0),
            "inter_op_threads": str(fw.inter_op_threads or 0),
            "graph_optimization_level": level,
            "deterministic_compute": str(deterministic).lower(),
        }
        return options

    @staticmethod
    def _check_inputs(session: Any, spec: EvaluationSpec) -> list[str]:
        """Every model.inputs entry must name a session input of the same rank, dims, dtype."""
        actual = session.get_inputs()
        by_name = {a.name: a for a in actual}
        specs = spec.model.inputs
        if len(specs) != len(actual):
            raise ModelLoadError(
                f"model.inputs lists {len(specs)} input(s) but the model has {len(actual)}: "
                f"{_describe(actual)}"
            )
        for i, tensor in enumerate(specs):
            arg = by_name.get(tensor.name)
            if arg is None:
                raise ModelLoadError(
                    f"model.inputs[{i}].name is {tensor.name!r} but the model's inputs are: "
                    f"{_describe(actual)}"
                )
            dims = list(arg.shape)
            fits = len(dims) == len(tensor.shape) and all(
                not isinstance(d, int) or d < 0 or s == -1 or d == s
                for d, s in zip(dims, tensor.shape, strict=True)
            )
            if not fits:
                raise ModelLoadError(
                    f"model.inputs[{i}].shape is {tensor.shape} but the model's input "
                    f"{_describe([arg])}"
                )
            if arg.type != _ORT_TYPES[tensor.dtype.value]:
                raise ModelLoadError(
                    f"model.inputs[{i}].dtype is {tensor.dtype.value} but the model's input "
                    f"{_describe([arg])}"
                )
        return [t.name for t in specs]

    @staticmethod
    def _check_outputs(session: Any, spec: EvaluationSpec) -> list[str] | None:
        """model.outputs names to fetch, in order; None fetches all the model's outputs."""
        if not spec.model.outputs:
            return None
        actual = session.get_outputs()
        names = {a.name for a in actual}
        for i, tensor in enumerate(spec.model.outputs):
            if tensor.name not in names:
                raise ModelLoadError(
                    f"model.outputs[{i}].name is {tensor.name!r} but the model's outputs are: "
                    f"{_describe(actual)}"
                )
        return [t.name for t in spec.model.outputs]

    def predict(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """One ``session.run``; it copies outputs to the host, so GPU work has finished."""
        outputs: list[np.ndarray] = self._session.run(
            self._output_names, dict(zip(self._input_names, inputs, strict=False))
        )
        return outputs

    def info(self) -> BackendInfo:
        """Version, device and the providers the session actually uses."""
        if self._session is None:
            raise RuntimeError("OnnxRuntimeBackend.info() needs load() first")
        gpu = bool(GPU_PROVIDERS & set(self._session.get_providers()))
        return BackendInfo(
            framework="onnxruntime",
            framework_version=self._ort.__version__,
            device="cuda:0" if gpu else "cpu",
            details={**self._details, "requested_providers": ",".join(self._requested)},
        )

    def profiler(self, level: str) -> FrameworkProfiler:
        """A second session with ONNX Runtime's profiling on (the measured one is untouched):
        node timings (framework), plus GPU kernels where the provider records them (library)."""
        from mlmodelscope.agent.profilers import OrtProfiler

        session = self._session
        if session is None:
            raise RuntimeError("OnnxRuntimeBackend.profiler() needs load() first")
        ort, path, providers = self._ort, self._model_path, session.get_providers()

        def make_session(prefix: str) -> Any:
            options = session.get_session_options()
            options.enable_profiling = True
            options.profile_file_prefix = prefix
            return ort.InferenceSession(str(path), options, providers=providers)

        def feed(inputs: Sequence[np.ndarray]) -> tuple[Any, dict[str, np.ndarray]]:
            return self._output_names, dict(zip(self._input_names, inputs, strict=False))

        gpu = bool(GPU_PROVIDERS & set(providers))
        return OrtProfiler(level, make_session, feed, gpu=gpu)

    def close(self) -> None:
        """Drop the session (and the device memory it holds)."""
        self._session = None
