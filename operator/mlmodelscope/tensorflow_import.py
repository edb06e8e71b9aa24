"""Import TensorFlow so that PyTorch's compiler stack still loads afterwards in the same process.

``torch.export``, ``torch.compile`` and the dynamo ONNX exporter import Triton, and Triton loaded
after TensorFlow ends the process with a segmentation fault (``import tensorflow; import
triton``: TensorFlow 2.21, Triton 3.7); the other order works. Where Triton is installed it is
therefore imported first, so one process can evaluate or build models in both frameworks.
"""

from __future__ import annotations

import importlib.util
import sys


def before_tensorflow() -> None:
    """Import Triton when it is installed and neither it nor TensorFlow is loaded yet."""
    if "tensorflow" in sys.modules or "triton" in sys.modules:
        return
    if importlib.util.find_spec("triton") is None:
        return
    importlib.import_module("triton")
