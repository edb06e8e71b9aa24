"""Fixtures for the telemetry tests: the digits models and a quick ModelEvaluation builder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

MODELS = {
    "onnxruntime": ("onnx", "digits.onnx"),
    "pytorch": ("torchscript", "digits.torchscript.pt"),
    "tensorflow": ("savedmodel", "digits_savedmodel"),
}
QUICK = {"warmup": 3, "minQueryCount": 20, "minDuration": "20ms", "stability": {"maxWindows": 2}}


@pytest.fixture(scope="session")
def digits_models() -> Path:
    """The example CNN in every format (built once per machine into the model cache)."""
    from mlmodelscope.agent.digits import ensure_digits_models

    return ensure_digits_models()


@pytest.fixture(scope="session")
def make_evaluation() -> Any:
    """``make_evaluation(tmp_path, models, framework, name, **sections)`` -> YAML path."""
    return evaluation_file


def evaluation_file(
    tmp_path: Path, models: Path, framework: str, name: str, **sections: Any
) -> Path:
    """A quick digits ModelEvaluation YAML for ``framework``; ``sections`` merge into spec."""
    fmt, file = MODELS[framework]
    spec: dict[str, Any] = {
        "model": {
            "name": "digits-cnn",
            "uri": str(models / file),
            "format": fmt,
            "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
            "outputs": [{"name": "logits", "shape": [-1, 10]}],
        },
        "preprocessing": [{"scale": {"factor": 0.0625}}, {"layout": {"from": "HWC", "to": "CHW"}}],
        "postprocessing": [{"softmax": {}}, {"topk": {"k": 5}}],
        "framework": {"name": framework},
        "dataset": {"type": "digits"},
        "scenario": {"batchSizes": [1, 8], **QUICK},
    }
    for key, value in sections.items():
        spec[key] = {**spec.get(key, {}), **value} if isinstance(value, dict) else value
    doc = {
        "apiVersion": "mlmodelscope.io/v1alpha1",
        "kind": "ModelEvaluation",
        "metadata": {"name": name, "namespace": "telemetry-test"},
        "spec": spec,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path
