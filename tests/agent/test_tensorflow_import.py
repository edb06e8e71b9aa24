"""TensorFlow and PyTorch's compiler stack in one process: Triton after TensorFlow crashes,
so the project imports Triton first (``mlmodelscope.tensorflow_import``)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

pytestmark = pytest.mark.frameworks


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )


def test_triton_after_tensorflow_crashes_the_process() -> None:
    """The reason for the helper: if this starts passing, the helper can go."""
    pytest.importorskip("triton")
    done = _run("import tensorflow, triton")
    assert done.returncode == -signal.SIGSEGV, done.stderr[-2000:]


def test_the_agents_tensorflow_import_lets_torch_export_load_afterwards() -> None:
    pytest.importorskip("triton")
    done = _run(
        "from mlmodelscope.agent.backends.tensorflow import import_tensorflow\n"
        "tf = import_tensorflow()\n"
        "import torch.export, triton\n"
        "print(tf.__version__, 'torch.export' in __import__('sys').modules)"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("True")


def test_before_tensorflow_is_a_no_op_once_tensorflow_is_loaded() -> None:
    done = _run(
        "import sys, tensorflow\n"
        "from mlmodelscope.tensorflow_import import before_tensorflow\n"
        "before_tensorflow()\n"
        "print('triton' in sys.modules)"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
