"""PyTorch adapter: TorchScript (``torch.jit.load``) and torch.export programs (``.pt2``).

torch is imported in ``load`` only, so choosing another framework never pays for it, and a
missing install becomes a MissingExtraError that names the pip extra.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from mlmodelscope.agent.backends.base import (
    Backend,
    BackendInfo,
    MissingExtraError,
    ModelLoadError,
    UnloadableModelError,
)
from mlmodelscope.spec.evaluation import (
    FORMATS_BY_FRAMEWORK,
    Device,
    EvaluationSpec,
    FrameworkName,
    ModelFormat,
)

if TYPE_CHECKING:
    from mlmodelscope.agent.profilers import FrameworkProfiler

log = logging.getLogger(__name__)


def _shape_str(shape: Sequence[Any]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


class PyTorchBackend(Backend):
    """Runs a TorchScript module or an exported program under ``torch.inference_mode``."""

    name = "pytorch"

    def __init__(self) -> None:
        self._torch: Any = None
        self._module: Any = None
        self._device = "cpu"
        self._cuda = False
        self._format = ""
        self._output_names: list[str] = []

    def import_framework(self) -> None:
        """Import PyTorch (what ``load`` would import first)."""
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise MissingExtraError("PyTorch", "torch", exc) from exc

    def load(self, model_path: Path, spec: EvaluationSpec) -> None:
        """Load onto cpu or cuda:0, applying the spec's thread counts and checking its inputs."""
        try:
            import torch
        except ImportError as exc:
            raise MissingExtraError("PyTorch", "torch", exc) from exc
        fmt = spec.model.format
        if fmt not in FORMATS_BY_FRAMEWORK[FrameworkName.PYTORCH]:
            raise ModelLoadError(
                f"model.format is {fmt.value!r}, but framework pytorch loads only "
                "torchscript or torch-export models; fix model.format or framework.name"
            )
        if not model_path.is_file():
            raise ModelLoadError(f"model file not found: {model_path}")
        self._torch = torch
        self._format = fmt.value
        self._configure_threads(spec)
        if spec.hardware.device == Device.GPU:
            if not torch.cuda.is_available():
                raise ModelLoadError(
                    "hardware.device is gpu but PyTorch sees no CUDA device "
                    f"(torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none'}); "
                    "check the GPU runtime or use hardware.device: cpu"
                )
            self._device, self._cuda = "cuda:0", True
        else:
            self._device, self._cuda = "cpu", False
        try:
            if fmt == ModelFormat.TORCHSCRIPT:
                jit: Any = torch.jit  # untyped in some torch releases
                with warnings.catch_warnings():
                    # TorchScript is deprecated upstream but is what this format means.
                    warnings.simplefilter("ignore", DeprecationWarning)
                    module = jit.load(str(model_path), map_location=self._device)
                module.eval()
            else:
                program = torch.export.load(str(model_path))
                self._check_exported_inputs(program, spec)
                if self._cuda:
                    from torch.export.passes import move_to_device_pass

                    program = move_to_device_pass(program, self._device)
                module = program.module()
        except ModelLoadError:
            raise
        except Exception as exc:
            raise UnloadableModelError(
                f"cannot load {fmt.value} model {model_path}: {exc}"
            ) from exc
        self._module = module
        self._output_names = [o.name for o in spec.model.outputs]
        if fmt == ModelFormat.TORCHSCRIPT:
            self._check_torchscript_inputs(spec)

    def _configure_threads(self, spec: EvaluationSpec) -> None:
        """Apply thread counts; inter-op threads can be set only once per process."""
        torch = self._torch
        intra, inter = spec.framework.intra_op_threads, spec.framework.inter_op_threads
        if intra:
            torch.set_num_threads(intra)
        if inter and torch.get_num_interop_threads() != inter:
            try:
                torch.set_num_interop_threads(inter)
            except RuntimeError as exc:
                log.warning("framework.interOpThreads=%d not applied: %s", inter, exc)

    def _check_exported_inputs(self, program: Any, spec: EvaluationSpec) -> None:
        """Compare model.inputs with the program's placeholders (count, rank, static dims)."""
        user_inputs = list(program.graph_signature.user_inputs)
        specs = spec.model.inputs
        if len(specs) != len(user_inputs):
            raise ModelLoadError(
                f"model.inputs lists {len(specs)} input(s) but the program takes "
                f"{len(user_inputs)}: {user_inputs}"
            )
        values = {
            node.name: node.meta.get("val")
            for node in program.graph.nodes
            if node.op == "placeholder" and node.name in user_inputs
        }
        for i, (tensor, name) in enumerate(zip(specs, user_inputs, strict=True)):
            val = values.get(name)
            if val is None or not hasattr(val, "shape"):
                continue
            actual = [d if isinstance(d, int) else -1 for d in val.shape]
            fits = len(actual) == len(tensor.shape) and all(
                a == -1 or s == -1 or a == s for a, s in zip(actual, tensor.shape, strict=True)
            )
            if not fits:
                raise ModelLoadError(
                    f"model.inputs[{i}].shape is {_shape_str(tensor.shape)} but the program's "
                    f"input {i} ({name}) has shape {_shape_str(actual)} (-1: dynamic)"
                )
            if str(val.dtype) != f"torch.{tensor.dtype.value}":
                raise ModelLoadError(
                    f"model.inputs[{i}].dtype is {tensor.dtype.value} but the program's "
                    f"input {i} ({name}) is {val.dtype}"
                )

    def _check_torchscript_inputs(self, spec: EvaluationSpec) -> None:
        """TorchScript keeps no input shapes, so check the count, then run one zero batch."""
        torch = self._torch
        specs = spec.model.inputs
        try:
            arguments = self._module.forward.schema.arguments[1:]
        except AttributeError:
            arguments = None
        if arguments is not None:
            required = sum(1 for a in arguments if not a.has_default_value())
            if not required <= len(specs) <= len(arguments):
                names = [a.name for a in arguments]
                raise ModelLoadError(
                    f"model.inputs lists {len(specs)} input(s) but the TorchScript forward "
                    f"takes {names}"
                )
        probe = [
            torch.zeros(
                [1 if d == -1 else d for d in t.shape],
                dtype=getattr(torch, t.dtype.value),
                device=self._device,
            )
            for t in specs
        ]
        try:
            with torch.inference_mode():
                self._module(*probe)
        except Exception as exc:
            shapes = ", ".join(f"{t.name} {_shape_str(t.shape)}" for t in specs)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelLoadError(
                f"model.inputs ({shapes}) do not fit the TorchScript model: a zero batch "
                f"shaped like them fails with: {first}"
            ) from exc

    def measuring(self) -> AbstractContextManager[object]:
        """Inference mode for the whole measurement (thread-local, so held by the issuing
        thread), instead of entering it in every ``predict``."""
        return cast(AbstractContextManager[object], self._torch.inference_mode())

    def predict(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run one batch; on CPU the inputs are shared with torch, not copied."""
        torch = self._torch
        if torch.is_inference_mode_enabled():
            return self._run(inputs)
        with torch.inference_mode():
            return self._run(inputs)

    def _run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        torch = self._torch
        if self._cuda:
            out = self._module(*[torch.from_numpy(a).to(self._device) for a in inputs])
        else:
            out = self._module(*[torch.from_numpy(a) for a in inputs])
        # one tensor is the common case: skip _flatten's checks for it
        outputs = [out] if isinstance(out, torch.Tensor) else self._flatten(out)
        if self._cuda:
            torch.cuda.synchronize()
            return [o.cpu().numpy() for o in outputs]
        return [o.numpy() for o in outputs]

    def _flatten(self, out: Any) -> list[Any]:
        """A tensor, a tuple/list of tensors, or a dict (read in model.outputs order)."""
        if isinstance(out, self._torch.Tensor):
            return [out]
        if isinstance(out, dict):
            return [out[k] for k in (self._output_names or sorted(out))]
        return list(out)

    def info(self) -> BackendInfo:
        """torch version, device, CUDA/cuDNN versions and thread counts."""
        torch = self._torch
        if torch is None:
            raise RuntimeError("PyTorchBackend.info() needs load() first")
        details = {
            "format": self._format,
            "cuda": str(torch.version.cuda or "none"),
            "cudnn": str(torch.backends.cudnn.version() or "none"),
            "intra_op_threads": str(torch.get_num_threads()),
            "inter_op_threads": str(torch.get_num_interop_threads()),
        }
        if self._cuda:
            details["gpu"] = torch.cuda.get_device_name(0)
        return BackendInfo(
            framework="pytorch",
            framework_version=torch.__version__,
            device=self._device,
            details=details,
        )

    def profiler(self, level: str) -> FrameworkProfiler:
        """torch.profiler: aten ops (framework), plus CUDA kernels and copies (library)."""
        from mlmodelscope.agent.profilers import TorchProfiler

        return TorchProfiler(self.predict, level, cuda=self._cuda)

    def close(self) -> None:
        """Drop the module and give cached CUDA memory back."""
        self._module = None
        if self._cuda and self._torch is not None:
            self._torch.cuda.empty_cache()
