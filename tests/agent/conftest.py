"""Shared fixtures for the agent tests: spec builders (the digits models come from
tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlmodelscope.spec.evaluation import EvaluationSpec

SpecFactory = Callable[..., EvaluationSpec]


@pytest.fixture(scope="session")
def digits_test_nchw() -> tuple[np.ndarray, np.ndarray]:
    """The held-out split as the models take it: NCHW float32 raw/16, and the labels."""
    from mlmodelscope.agent.digits import digits_split

    images, labels = digits_split("test")
    x = np.ascontiguousarray(images.transpose(0, 3, 1, 2) / np.float32(16.0), dtype=np.float32)
    return x, labels


def digits_spec(
    framework: str,
    fmt: str,
    uri: Path | str,
    *,
    inputs: list[dict[str, Any]] | None = None,
    outputs: list[dict[str, Any]] | None = None,
    settings: dict[str, Any] | None = None,
    **sections: Any,
) -> EvaluationSpec:
    """An EvaluationSpec for the digits CNN: ``settings`` go into spec.framework, ``sections``
    (camelCase) are added at the top level, e.g. ``hardware={"device": "gpu"}``."""
    doc: dict[str, Any] = {
        "model": {
            "name": "digits",
            "uri": str(uri),
            "format": fmt,
            "inputs": inputs or [{"name": "input", "shape": [-1, 1, 8, 8]}],
            "outputs": [{"name": "logits", "shape": [-1, 10]}] if outputs is None else outputs,
        },
        "framework": {"name": framework, **(settings or {})},
        "dataset": {"type": "digits"},
        **sections,
    }
    return EvaluationSpec.model_validate(doc)


@pytest.fixture(scope="session")
def make_spec() -> SpecFactory:
    """Build a digits EvaluationSpec: ``make_spec("onnxruntime", "onnx", path, ...)``."""
    return digits_spec
