"""A step's record on disk, rewritten after every stage, and the frameworks it blocks."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from mlmodelscope.devtools.gpukit.environment import environment
from mlmodelscope.devtools.gpukit.record import NO_GPU, StepRecord

BLOCKED = ("tensorflow", "keras")


class Writer:
    """A step's record, rewritten to ``<work>/<name>.json`` on every ``save``."""

    def __init__(self, work: Path, name: str, gpu: bool) -> None:
        self.path = work / f"{name}.json"
        self.started = time.monotonic()
        self.record = StepRecord(name, "ok" if gpu else "skipped", environment=environment())
        if not gpu:
            self.record.reason = NO_GPU
            self.record.data["variant"] = "cpu-tiny"

    def save(self, **data: Any) -> None:
        self.record.data.update(data)
        self.record.seconds = round(time.monotonic() - self.started, 2)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.record.to_dict(), indent=1, default=str) + "\n")
        tmp.replace(self.path)


def block_frameworks() -> None:
    """Make TensorFlow unimportable, as on the GPU machine (``import tensorflow`` fails)."""
    for name in BLOCKED:
        sys.modules[name] = None  # type: ignore[assignment]


def fail_if(errors: dict[str, str]) -> None:
    """End the step with a non-zero exit naming the first error (its data is saved)."""
    if errors:
        key, message = next(iter(errors.items()))
        raise SystemExit(f"{key}: {message}"[:500])
