"""TensorFlow adapter: a SavedModel's ``serving_default`` signature.

TensorFlow is imported in ``load`` only (it costs seconds), with its C++ logging quietened
first (``import_tensorflow``). Device visibility and thread pools can change only before
TensorFlow's runtime starts, so ``load`` sets them before anything else touches TensorFlow, and
reports what took effect.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
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
from mlmodelscope.tensorflow_import import before_tensorflow

if TYPE_CHECKING:
    from mlmodelscope.agent.profilers import FrameworkProfiler

log = logging.getLogger(__name__)

SIGNATURE = "serving_default"

LOG_LEVEL_VAR = "TF_CPP_MIN_LOG_LEVEL"
QUIET_LEVEL = "1"
"""TensorFlow's C++ log level unless the user set one: 1 hides INFO, keeps warnings."""
NOTICES = (
    b"oneDNN custom operations are on",
    b"All log messages before absl::InitializeLog() is called",
    b"This TensorFlow binary is optimized to use available CPU instructions",
    b"To enable the following instructions:",
)
"""TensorFlow's start-up notices, dropped from what its import writes to stderr. The level does
not hide the first two: TensorFlow 2.21 logs them through absl before it applies the level."""


def import_tensorflow() -> Any:
    """Import TensorFlow, its C++ INFO logging and start-up NOTICES quietened, unless the user
    set TF_CPP_MIN_LOG_LEVEL=0 (debug: everything stays). A level the user set wins."""
    if "tensorflow" in sys.modules:
        import tensorflow

        return tensorflow
    before_tensorflow()
    debug = os.environ.setdefault(LOG_LEVEL_VAR, QUIET_LEVEL).strip() == "0"
    with contextlib.nullcontext() if debug else _stderr_without(NOTICES):
        import tensorflow

    return tensorflow


@contextlib.contextmanager
def _stderr_without(notices: Sequence[bytes]) -> Iterator[None]:
    """Send file descriptor 2 to a temporary file during the block (TensorFlow's C++ code writes
    there, not to ``sys.stderr``), then write what it got to the real stderr, less the lines
    holding one of ``notices``. Without a usable descriptor 2 the block runs as it is."""
    _flush_stderr()
    try:
        saved = os.dup(2)
    except OSError:
        saved = -1
    if saved < 0:
        yield
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            _flush_stderr()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = b"".join(
                line
                for line in captured.read().splitlines(keepends=True)
                if not any(notice in line for notice in notices)
            )
            while kept:
                kept = kept[os.write(2, kept) :]


def _flush_stderr() -> None:
    """What Python buffered for stderr goes out before descriptor 2 changes."""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        sys.stderr.flush()


def _describe(specs: dict[str, Any]) -> str:
    """'input [None, 1, 8, 8] float32, ...': what the signature actually declares."""
    return ", ".join(
        f"{key} {s.shape.as_list() if s.shape.rank is not None else '[?]'} {s.dtype.name}"
        for key, s in sorted(specs.items())
    )


class TensorFlowBackend(Backend):
    """Calls the SavedModel's serving signature with inputs keyed by model.inputs names."""

    name = "tensorflow"

    def __init__(self) -> None:
        self._tf: Any = None
        self._loaded: Any = None  # keeps the signature's variables alive
        self._fn: Any = None
        self._input_names: list[str] = []
        self._output_names: list[str] = []
        self._device = "/CPU:0"
        self._pin_device = False
        self._gpu = False
        self._model_path: Path | None = None

    def import_framework(self) -> None:
        """Import TensorFlow (what ``load`` would import first)."""
        try:
            import_tensorflow()
        except ImportError as exc:
            raise MissingExtraError("TensorFlow", "tensorflow", exc) from exc

    def load(self, model_path: Path, spec: EvaluationSpec) -> None:
        """Configure devices and threads, load the signature, check model.inputs against it."""
        try:
            tf = import_tensorflow()
        except ImportError as exc:
            raise MissingExtraError("TensorFlow", "tensorflow", exc) from exc
        if spec.model.format != ModelFormat.SAVEDMODEL:
            raise ModelLoadError(
                f"model.format is {spec.model.format.value!r}, but framework tensorflow loads "
                "only savedmodel models; fix model.format or framework.name"
            )
        if not model_path.is_dir():
            raise ModelLoadError(f"SavedModel folder not found: {model_path}")
        if not any(
            (model_path / name).is_file() for name in ("saved_model.pb", "saved_model.pbtxt")
        ):
            raise ModelLoadError(f"no saved_model.pb in {model_path}: not a SavedModel folder")
        self._tf = tf
        self._configure_devices(spec)
        self._configure_threads(spec)
        try:
            with tf.device(self._device):
                loaded = tf.saved_model.load(str(model_path))
        except Exception as exc:
            raise UnloadableModelError(f"cannot load savedmodel {model_path}: {exc}") from exc
        signatures = dict(loaded.signatures)
        if SIGNATURE not in signatures:
            raise ModelLoadError(
                f"SavedModel {model_path} has no {SIGNATURE!r} signature "
                f"(it has: {sorted(signatures) or 'none'})"
            )
        fn = signatures[SIGNATURE]
        self._input_names = self._check_inputs(fn, spec)
        self._output_names = self._check_outputs(fn, spec)
        self._loaded, self._fn = loaded, fn
        self._model_path = model_path

    def _configure_devices(self, spec: EvaluationSpec) -> None:
        """Place on /GPU:0 for device gpu (error if none); hide GPUs for device cpu."""
        tf = self._tf
        gpus = tf.config.list_physical_devices("GPU")
        if spec.hardware.device == Device.GPU:
            if not gpus:
                raise ModelLoadError(
                    f"hardware.device is gpu but TensorFlow {tf.__version__} sees no GPU; "
                    "install the CUDA build with: pip install 'mlmodelscope[tensorflow-gpu]', "
                    "or use hardware.device: cpu"
                )
            try:
                # Grow memory on demand rather than reserving the whole GPU up front.
                tf.config.experimental.set_memory_growth(gpus[0], True)
            except RuntimeError as exc:
                log.debug("GPU memory growth unchanged: %s", exc)
            self._device, self._pin_device, self._gpu = "/GPU:0", True, True
            return
        self._device, self._gpu = "/CPU:0", False
        self._pin_device = False
        if gpus:
            try:
                tf.config.set_visible_devices([], "GPU")
            except RuntimeError as exc:
                # The runtime started already: GPUs stay visible, so pin every call to the CPU.
                log.debug("GPUs stay visible: %s", exc)
                self._pin_device = True

    def _configure_threads(self, spec: EvaluationSpec) -> None:
        """Thread pools can be sized only before TensorFlow's runtime starts."""
        threading = self._tf.config.threading
        for value, getter, setter, field in (
            (
                spec.framework.intra_op_threads,
                threading.get_intra_op_parallelism_threads,
                threading.set_intra_op_parallelism_threads,
                "intraOpThreads",
            ),
            (
                spec.framework.inter_op_threads,
                threading.get_inter_op_parallelism_threads,
                threading.set_inter_op_parallelism_threads,
                "interOpThreads",
            ),
        ):
            if not value or getter() == value:
                continue
            try:
                setter(value)
            except RuntimeError as exc:
                log.warning("framework.%s=%d not applied: %s", field, value, exc)

    @staticmethod
    def _check_inputs(fn: Any, spec: EvaluationSpec) -> list[str]:
        """model.inputs names must be signature input keys with matching rank, dims, dtype."""
        actual: dict[str, Any] = dict(fn.structured_input_signature[1])
        specs = spec.model.inputs
        if len(specs) != len(actual):
            raise ModelLoadError(
                f"model.inputs lists {len(specs)} input(s) but signature {SIGNATURE!r} takes "
                f"{len(actual)}: {_describe(actual)}"
            )
        for i, tensor in enumerate(specs):
            arg = actual.get(tensor.name)
            if arg is None:
                raise ModelLoadError(
                    f"model.inputs[{i}].name is {tensor.name!r} but signature {SIGNATURE!r} "
                    f"takes: {_describe(actual)}"
                )
            if arg.shape.rank is not None:
                dims = arg.shape.as_list()
                fits = len(dims) == len(tensor.shape) and all(
                    d is None or s == -1 or d == s for d, s in zip(dims, tensor.shape, strict=True)
                )
                if not fits:
                    raise ModelLoadError(
                        f"model.inputs[{i}].shape is {tensor.shape} but signature input "
                        f"{_describe({tensor.name: arg})}"
                    )
            if arg.dtype.name != tensor.dtype.value:
                raise ModelLoadError(
                    f"model.inputs[{i}].dtype is {tensor.dtype.value} but signature input "
                    f"{_describe({tensor.name: arg})}"
                )
        return [t.name for t in specs]

    @staticmethod
    def _check_outputs(fn: Any, spec: EvaluationSpec) -> list[str]:
        """Output keys in model.outputs order, else sorted (signatures return dicts)."""
        actual = fn.structured_outputs
        if not isinstance(actual, dict):
            raise ModelLoadError(f"signature {SIGNATURE!r} does not return a dict of tensors")
        for i, tensor in enumerate(spec.model.outputs):
            if tensor.name not in actual:
                raise ModelLoadError(
                    f"model.outputs[{i}].name is {tensor.name!r} but signature {SIGNATURE!r} "
                    f"returns: {_describe(actual)}"
                )
        return [t.name for t in spec.model.outputs] or sorted(actual)

    def predict(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Call the signature; ``.numpy()`` copies to the host, so GPU work has finished."""
        feed = dict(zip(self._input_names, inputs, strict=False))
        if self._pin_device:
            with self._tf.device(self._device):
                out = self._fn(**feed)
        else:
            out = self._fn(**feed)
        return [out[name].numpy() for name in self._output_names]

    def info(self) -> BackendInfo:
        """Version, device, CUDA/cuDNN the build targets, and the thread pools in effect."""
        tf = self._tf
        if self._fn is None:
            raise RuntimeError("TensorFlowBackend.info() needs load() first")
        build = tf.sysconfig.get_build_info()
        threading = tf.config.threading
        details = {
            "signature": SIGNATURE,
            "cuda": str(build.get("cuda_version", "none")),
            "cudnn": str(build.get("cudnn_version", "none")),
            "intra_op_threads": str(threading.get_intra_op_parallelism_threads()),
            "inter_op_threads": str(threading.get_inter_op_parallelism_threads()),
        }
        return BackendInfo(
            framework="tensorflow",
            framework_version=tf.__version__,
            device="cuda:0" if self._gpu else "cpu",
            details=details,
        )

    def profiler(self, level: str) -> FrameworkProfiler:
        """tf.profiler: TensorFlow ops (framework), plus GPU kernels and copies (library).

        The profiled pass runs a freshly loaded copy of the SavedModel: TensorFlow stops
        tracing ops its cost model has learned are cheap, so on the measured (warm) function
        only the expensive ops would appear; a fresh copy shows every op."""
        from mlmodelscope.agent.profilers import TfProfiler

        tf, path, device = self._tf, self._model_path, self._device
        if tf is None or path is None:
            raise RuntimeError("TensorFlowBackend.profiler() needs load() first")
        input_names, output_names, pin = self._input_names, self._output_names, self._pin_device

        def fresh() -> Callable[[Sequence[np.ndarray]], list[np.ndarray]]:
            with tf.device(device):
                loaded = tf.saved_model.load(str(path))
            fn = loaded.signatures[SIGNATURE]

            def predict(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
                feed = dict(zip(input_names, inputs, strict=False))
                if pin:
                    with tf.device(device):
                        out = fn(**feed)
                else:
                    out = fn(**feed)
                _ = loaded  # keeps the signature's variables alive
                return [out[name].numpy() for name in output_names]

            return predict

        return TfProfiler(fresh, level, gpu=self._gpu)

    def close(self) -> None:
        """Drop the loaded SavedModel."""
        self._loaded = self._fn = None
