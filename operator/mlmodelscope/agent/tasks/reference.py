"""The reference task models of examples/tasks, built once per machine into the cache by
examples/tasks/train_tasks.py (a text classifier with its tokenizer, a shapes segmenter and
detector, a denoiser, and their evaluation data), as the digits CNN is."""

from __future__ import annotations

import contextlib
import hashlib
import sys
from importlib import metadata
from pathlib import Path

from mlmodelscope.agent import digits
from mlmodelscope.agent.sources import default_cache_dir
from mlmodelscope.agent.tasks import shapes

SCRIPT = Path("tasks") / "train_tasks.py"
BUILD_TIMEOUT_S = 900.0


def find_script() -> Path:
    """examples/tasks/train_tasks.py, found as the digits training script is."""
    return digits.find_training_script().parent.parent / SCRIPT


def task_models_key(script: Path) -> str:
    """The script, the shapes renderer it trains on, and the versions that shape the models."""
    digest = hashlib.sha256(script.read_bytes())
    digest.update(Path(shapes.__file__).read_bytes())
    for dist in ("torch", "onnx", "tokenizers", "tensorflow", "tensorflow-cpu"):
        version = "none"
        with contextlib.suppress(metadata.PackageNotFoundError):
            version = metadata.version(dist)
        digest.update(f"\0{dist}={version}".encode())
    return digest.hexdigest()[:16]


def ensure_task_models(cache_dir: Path | None = None) -> Path:
    """The folder of the reference task models and data, built on first use under
    ``<cache>/models/tasks/<key>`` (docs/tasks.md says how long that takes)."""
    script = find_script()
    base = (cache_dir if cache_dir is not None else default_cache_dir()) / "models" / "tasks"
    final = base / task_models_key(script)
    command = [sys.executable, str(script)]
    return digits.build_once(final, command, f"the task models with {script}", BUILD_TIMEOUT_S)
