"""ModelEvaluation documents for the operator tests (shared by unit and cluster tests)."""

from __future__ import annotations

import copy
from typing import Any

BASE_SPEC: dict[str, Any] = {
    "model": {
        "name": "digits",
        "uri": "file:///models/digits.onnx",
        "format": "onnx",
        "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
        "outputs": [{"name": "logits", "shape": [-1, 10]}],
    },
    "preprocessing": [{"scale": {"factor": 0.0625}}, {"layout": {"from": "HWC", "to": "CHW"}}],
    "framework": {"name": "onnxruntime"},
    "dataset": {"type": "digits"},
}


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Deep merge of nested dicts (``extra`` wins)."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def evaluation_doc(
    name: str = "digits-cpu",
    namespace: str = "team-a",
    generation: int = 1,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A stored-looking ModelEvaluation body (uid, generation, creationTimestamp set)."""
    return {
        "apiVersion": "mlmodelscope.io/v1alpha1",
        "kind": "ModelEvaluation",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": "0f5e1c4a-1111-2222-3333-444455556666",
            "generation": generation,
            "creationTimestamp": "2026-11-22T08:00:00Z",
            "labels": labels or {},
        },
        "spec": merge(BASE_SPEC, spec),
    }
