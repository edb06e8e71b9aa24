"""The three framework adapters on the real digits CNN: accuracy, agreement, determinism, and
the errors a wrong spec or a missing install produces."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlmodelscope.agent.backends import (
    Backend,
    MissingExtraError,
    ModelLoadError,
    create_backend,
)
from mlmodelscope.agent.digits import MODEL_FILES as DIGITS_FILES
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import EvaluationSpec, FrameworkName

pytestmark = pytest.mark.frameworks

CASES = [
    ("onnxruntime", "onnx"),
    ("pytorch", "torchscript"),
    ("pytorch", "torch-export"),
    ("tensorflow", "savedmodel"),
]
IDS = [fmt for _, fmt in CASES]
TOLERANCE = 1e-4

Loader = Callable[[str, str], Backend]
SpecFactory = Callable[..., EvaluationSpec]


def load(spec: EvaluationSpec, path: Path) -> Backend:
    """A fresh adapter for spec.framework, loaded."""
    backend = create_backend(FrameworkName(spec.framework.name))
    backend.load(path, spec)
    return backend


def run_batches(backend: Backend, x: np.ndarray, batch: int) -> np.ndarray:
    """Logits for every sample, predicted ``batch`` samples at a time."""
    return np.concatenate([backend.predict([x[i : i + batch]])[0] for i in range(0, len(x), batch)])


@pytest.fixture(scope="module")
def loaded(digits_models: Path, make_spec: SpecFactory) -> Iterator[Loader]:
    """One loaded adapter per format for the whole module (TensorFlow's import alone takes
    seconds), closed at the end."""
    cache: dict[str, Backend] = {}

    def get(framework: str, fmt: str) -> Backend:
        if fmt not in cache:
            path = digits_models / DIGITS_FILES[fmt]
            cache[fmt] = load(make_spec(framework, fmt, path), path)
        return cache[fmt]

    yield get
    for backend in cache.values():
        backend.close()


@pytest.fixture(scope="module")
def logits16(
    loaded: Loader, digits_test_nchw: tuple[np.ndarray, np.ndarray]
) -> Callable[[str, str], np.ndarray]:
    """Test-split logits per format at batch 16, computed once."""
    cache: dict[str, np.ndarray] = {}

    def get(framework: str, fmt: str) -> np.ndarray:
        if fmt not in cache:
            cache[fmt] = run_batches(loaded(framework, fmt), digits_test_nchw[0], 16)
        return cache[fmt]

    return get


@pytest.mark.parametrize(("framework", "fmt"), CASES, ids=IDS)
def test_accuracy_at_batch_1_and_16(
    framework: str,
    fmt: str,
    loaded: Loader,
    logits16: Callable[[str, str], np.ndarray],
    digits_test_nchw: tuple[np.ndarray, np.ndarray],
) -> None:
    x, y = digits_test_nchw
    out = logits16(framework, fmt)
    assert out.shape == (len(y), 10)
    assert out.dtype == np.float32
    assert (out.argmax(1) == y).mean() >= 0.95
    single = run_batches(loaded(framework, fmt), x[:24], 1)
    assert np.abs(single - out[:24]).max() < TOLERANCE


def test_logits_agree_across_frameworks(logits16: Callable[[str, str], np.ndarray]) -> None:
    reference = logits16("onnxruntime", "onnx")
    for framework, fmt in CASES[1:]:
        diff = float(np.abs(logits16(framework, fmt) - reference).max())
        assert diff < TOLERANCE, f"{fmt} differs from onnx by {diff:.2e}"


@pytest.mark.parametrize(("framework", "fmt"), CASES, ids=IDS)
def test_two_loads_give_bit_identical_outputs(
    framework: str,
    fmt: str,
    loaded: Loader,
    digits_models: Path,
    make_spec: SpecFactory,
    digits_test_nchw: tuple[np.ndarray, np.ndarray],
) -> None:
    batch = digits_test_nchw[0][:16]
    path = digits_models / DIGITS_FILES[fmt]
    second = load(make_spec(framework, fmt, path), path)
    try:
        np.testing.assert_array_equal(
            second.predict([batch])[0], loaded(framework, fmt).predict([batch])[0]
        )
    finally:
        second.close()


@pytest.mark.parametrize(("framework", "fmt"), CASES, ids=IDS)
def test_predict_inside_and_outside_measuring_agree(
    framework: str,
    fmt: str,
    loaded: Loader,
    digits_test_nchw: tuple[np.ndarray, np.ndarray],
) -> None:
    """The runner holds ``measuring()`` around timed work (PyTorch: inference mode once per
    run, not per call); the outputs must not depend on it, and it must not leak out."""
    backend = loaded(framework, fmt)
    batch = digits_test_nchw[0][:8]
    outside = backend.predict([batch])[0]
    with backend.measuring():
        inside = backend.predict([batch])[0]
    np.testing.assert_array_equal(inside, outside)
    if framework == "pytorch":
        import torch

        assert not torch.is_inference_mode_enabled()


@pytest.mark.parametrize(("framework", "fmt"), CASES, ids=IDS)
def test_info_names_framework_and_device(framework: str, fmt: str, loaded: Loader) -> None:
    info = loaded(framework, fmt).info()
    assert info.framework == framework
    assert info.device == "cpu"
    assert re.match(r"\d+\.\d+", info.framework_version)
    assert "intra_op_threads" in info.details
    if framework == "onnxruntime":
        assert info.details["providers"] == "CPUExecutionProvider"


def test_onnxruntime_session_options(
    digits_models: Path,
    make_spec: SpecFactory,
    logits16: Callable[[str, str], np.ndarray],
    digits_test_nchw: tuple[np.ndarray, np.ndarray],
) -> None:
    path = digits_models / DIGITS_FILES["onnx"]
    settings = {"intraOpThreads": 1, "interOpThreads": 2, "graphOptimizationLevel": "basic"}
    backend = load(make_spec("onnxruntime", "onnx", path, settings=settings), path)
    details = backend.info().details
    assert details["intra_op_threads"] == "1"
    assert details["inter_op_threads"] == "2"
    assert details["graph_optimization_level"] == "basic"
    out = backend.predict([digits_test_nchw[0][:16]])[0]
    assert np.abs(out - logits16("onnxruntime", "onnx")[:16]).max() < TOLERANCE


@pytest.mark.parametrize(
    ("framework", "fmt", "file_fmt"),
    [
        ("pytorch", "onnx", "onnx"),
        ("tensorflow", "torchscript", "torchscript"),
        ("onnxruntime", "savedmodel", "savedmodel"),
    ],
)
def test_wrong_format_for_framework(
    framework: str, fmt: str, file_fmt: str, digits_models: Path, make_spec: SpecFactory
) -> None:
    path = digits_models / DIGITS_FILES[file_fmt]
    with pytest.raises(ModelLoadError, match=r"model\.format"):
        load(make_spec(framework, fmt, path), path)


@pytest.mark.parametrize(("framework", "fmt"), CASES, ids=IDS)
def test_missing_model_names_the_path(
    framework: str, fmt: str, tmp_path: Path, make_spec: SpecFactory
) -> None:
    path = tmp_path / "absent" / DIGITS_FILES[fmt]
    with pytest.raises(ModelLoadError, match=re.escape(str(path))):
        load(make_spec(framework, fmt, path), path)


def test_a_file_that_is_no_model_names_the_uri_field(
    tmp_path: Path, make_spec: SpecFactory
) -> None:
    """Regression (hostile input): file:///etc/passwd as an ONNX model ended Failed with
    ONNX Runtime's words and no field, and as retryable."""
    path = tmp_path / "passwd"
    path.write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(ModelLoadError) as info:
        load(make_spec("onnxruntime", "onnx", path), path)
    assert isinstance(info.value, SpecError) and info.value.field == "spec.model.uri"
    assert str(info.value).startswith(f"spec.model.uri: cannot load onnx model {path}")


NHWC = [{"name": "input", "shape": [-1, 8, 8, 1]}]
RENAMED = [{"name": "x", "shape": [-1, 1, 8, 8]}]
PROBS = [{"name": "probs", "shape": [-1, 10]}]
MISMATCHES: list[tuple[str, str, dict[str, Any], str]] = [
    ("onnxruntime", "onnx", {"inputs": RENAMED}, "inputs[0].name"),
    ("onnxruntime", "onnx", {"inputs": NHWC}, "inputs[0].shape"),
    (
        "onnxruntime",
        "onnx",
        {"inputs": [{"name": "input", "shape": [-1, 1, 8, 8], "dtype": "float16"}]},
        "inputs[0].dtype",
    ),
    (
        "onnxruntime",
        "onnx",
        {"inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}, {"name": "b", "shape": [1]}]},
        "inputs lists 2",
    ),
    ("onnxruntime", "onnx", {"outputs": PROBS}, "outputs[0].name"),
    ("tensorflow", "savedmodel", {"inputs": RENAMED}, "inputs[0].name"),
    ("tensorflow", "savedmodel", {"inputs": NHWC}, "inputs[0].shape"),
    ("tensorflow", "savedmodel", {"outputs": PROBS}, "outputs[0].name"),
    ("pytorch", "torch-export", {"inputs": NHWC}, "inputs[0].shape"),
    ("pytorch", "torchscript", {"inputs": NHWC}, "inputs ("),
]


@pytest.mark.parametrize(("framework", "fmt", "override", "field"), MISMATCHES)
def test_spec_mismatch_names_the_field(
    framework: str,
    fmt: str,
    override: dict[str, Any],
    field: str,
    digits_models: Path,
    make_spec: SpecFactory,
) -> None:
    path = digits_models / DIGITS_FILES[fmt]
    with pytest.raises(ModelLoadError, match=re.escape(f"model.{field}")):
        load(make_spec(framework, fmt, path, **override), path)


@pytest.mark.parametrize(
    ("module", "framework", "fmt", "extra"),
    [
        ("onnxruntime", "onnxruntime", "onnx", "onnxruntime"),
        ("torch", "pytorch", "torchscript", "torch"),
        ("tensorflow", "tensorflow", "savedmodel", "tensorflow"),
    ],
)
def test_missing_framework_names_the_extra(
    module: str,
    framework: str,
    fmt: str,
    extra: str,
    tmp_path: Path,
    make_spec: SpecFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    path = tmp_path / DIGITS_FILES[fmt]
    with pytest.raises(MissingExtraError, match=re.escape(f"pip install 'mlmodelscope[{extra}]'")):
        load(make_spec(framework, fmt, path), path)


def _has_gpu(framework: str) -> bool:
    if framework == "onnxruntime":
        import onnxruntime

        return "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    if framework == "pytorch":
        import torch

        return bool(torch.cuda.is_available())
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


@pytest.mark.parametrize(
    ("framework", "fmt", "message"),
    [
        ("onnxruntime", "onnx", "pip install 'mlmodelscope[onnxruntime-gpu]'"),
        ("pytorch", "torchscript", "hardware.device is gpu"),
        ("tensorflow", "savedmodel", "pip install 'mlmodelscope[tensorflow-gpu]'"),
    ],
)
def test_gpu_requested_without_one(
    framework: str, fmt: str, message: str, digits_models: Path, make_spec: SpecFactory
) -> None:
    if _has_gpu(framework):
        pytest.skip(f"{framework} sees a GPU here")
    path = digits_models / DIGITS_FILES[fmt]
    spec = make_spec(framework, fmt, path, hardware={"device": "gpu"})
    with pytest.raises(ModelLoadError, match=re.escape(message)):
        load(spec, path)


def test_gpu_provider_on_cpu_device(digits_models: Path, make_spec: SpecFactory) -> None:
    path = digits_models / DIGITS_FILES["onnx"]
    spec = make_spec(
        "onnxruntime", "onnx", path, settings={"executionProvider": "CUDAExecutionProvider"}
    )
    with pytest.raises(ModelLoadError, match=r"framework\.executionProvider"):
        load(spec, path)


def test_adapter_modules_import_no_framework() -> None:
    code = (
        "import sys\n"
        "import mlmodelscope.agent.backends.pytorch, mlmodelscope.agent.backends.onnxruntime\n"
        "import mlmodelscope.agent.backends.tensorflow, mlmodelscope.agent.digits\n"
        "heavy = {'torch', 'tensorflow', 'onnxruntime', 'sklearn'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


TF_RUN = """
import sys
from pathlib import Path

import numpy as np

from mlmodelscope.agent.backends import create_backend
from mlmodelscope.agent.digits import digits_evaluation
from mlmodelscope.spec.document import parse_evaluation
from mlmodelscope.spec.evaluation import FrameworkName

document = digits_evaluation(Path(sys.argv[1]), "tensorflow", "quiet")
backend = create_backend(FrameworkName.TENSORFLOW)
backend.import_framework()
backend.load(Path(document["spec"]["model"]["uri"]), parse_evaluation(document).spec)
print(backend.predict([np.zeros((2, 1, 8, 8), np.float32)])[0].shape)
print("stderr still works", file=sys.stderr)
"""


@pytest.mark.parametrize(("level", "shown"), [(None, False), ("2", False), ("0", True)])
def test_tensorflow_start_up_notices_show_only_in_debug(
    level: str | None, shown: bool, digits_models: Path
) -> None:
    """Importing TensorFlow, loading and running a SavedModel writes no oneDNN or CPU-feature
    notice to stderr, unless TF_CPP_MIN_LOG_LEVEL=0 asks for TensorFlow's INFO lines. oneDNN
    is forced on so that TensorFlow writes its notice on any CPU."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env |= {"TF_ENABLE_ONEDNN_OPTS": "1", "CUDA_VISIBLE_DEVICES": ""}
    if level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = level
    proc = subprocess.run(
        [sys.executable, "-c", TF_RUN, str(digits_models)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "(2, 10)"
    assert "stderr still works" in proc.stderr
    notices = [line for line in proc.stderr.splitlines() if "oneDNN" in line]
    assert bool(notices) == shown, proc.stderr
    if not shown:
        assert "This TensorFlow binary is optimized" not in proc.stderr, proc.stderr
