"""A synthetic-data ModelEvaluation loaded as `mlms run` loads it, for agent tests whose
stages never load the model (shared by test_document.py and test_stages.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlmodelscope.spec import load_evaluations


def load_synthetic(
    tmp_path: Path,
    name: str,
    uri: str,
    metadata: dict[str, Any] | None = None,
    **spec: Any,
) -> Any:
    """The evaluation ``name`` of a model at ``uri`` (one input ``x`` of 4 values) on eight
    synthetic samples, written to ``tmp_path/spec.yaml`` and loaded; ``spec`` adds fields."""
    document = {
        "apiVersion": "mlmodelscope.io/v1alpha1",
        "kind": "ModelEvaluation",
        "metadata": {"name": name, **(metadata or {})},
        "spec": {
            "model": {
                "name": "m",
                "uri": uri,
                "format": "onnx",
                "inputs": [{"name": "x", "shape": [-1, 4]}],
            },
            "framework": {"name": "onnxruntime"},
            "dataset": {"type": "synthetic", "shape": [4], "size": 8, "layout": "CHW"},
            **spec,
        },
    }
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(document))
    [loaded] = load_evaluations(path)
    return loaded
