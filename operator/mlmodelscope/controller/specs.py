"""A stored ModelEvaluation read as a validated spec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from mlmodelscope.contract.kube import Kube
from mlmodelscope.controller import model_refs
from mlmodelscope.spec import ModelEvaluation, parse_evaluation
from mlmodelscope.spec.document import API_VERSION_FULL, KIND

KEPT_METADATA: Final = ("name", "namespace", "uid", "generation", "creationTimestamp", "labels")


def parse_body(body: Mapping[str, Any], kube: Kube) -> ModelEvaluation:
    """Validate a stored object with the same rules as `mlms validate` (pydantic plus the
    semantic checks the CRD schema cannot express), its modelRef resolved (once per run:
    see :mod:`..model_refs`); raises SpecValidationError."""
    meta = body.get("metadata") or {}
    document = {
        "apiVersion": body.get("apiVersion", API_VERSION_FULL),
        "kind": body.get("kind", KIND),
        "metadata": {k: meta[k] for k in KEPT_METADATA if k in meta},
        "spec": body.get("spec"),
    }
    source = f"{meta.get('namespace')}/{meta.get('name')}"
    return parse_evaluation(model_refs.resolve(kube, document, source), source=source)
