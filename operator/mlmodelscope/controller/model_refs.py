"""Resolving ``modelRef`` in the cluster: Models are read from the API server, once per run.

An evaluation resolves its Model when it starts: the resolved spec goes into the spec
ConfigMap of that generation, and from then on that ConfigMap, not the Model, is the
evaluation's spec. So a restarted operator, a requeue or an edited Model never change what a
started run evaluates, and the result records exactly which Model versions it used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from mlmodelscope.contract.kube import Kube, configmap_path, model_path
from mlmodelscope.contract.wire import SPEC_KEY
from mlmodelscope.controller import names
from mlmodelscope.spec.document import Problem, SpecValidationError
from mlmodelscope.spec.manifest import (
    ANNOTATION_MANIFEST,
    ModelLookup,
    ModelManifest,
    UnresolvedModelError,
    parse_model,
    resolve_evaluation,
)


def api_lookup(kube: Kube, namespace: str, field: str = "spec.modelRef.name") -> ModelLookup:
    """Models of ``namespace`` as the API server has them (each read at most once)."""
    cache: dict[str, ModelManifest | None] = {}

    def lookup(name: str) -> ModelManifest | None:
        if name not in cache:
            body = kube.get_or_none(model_path(namespace, name))
            cache[name] = None if body is None else _parse(body, namespace, name, field)
        return cache[name]

    return lookup


def _parse(body: Mapping[str, Any], namespace: str, name: str, field: str) -> ModelManifest:
    document = {k: body.get(k) for k in ("apiVersion", "kind", "metadata", "spec")}
    try:
        return parse_model(document, f"{namespace}/{name}")
    except SpecValidationError as exc:
        found = "; ".join(str(p) for p in exc.problems)
        raise UnresolvedModelError(
            Problem(field, f"Model {name!r} is not valid ({found}); fix the Model")
        ) from None


def not_found_in(namespace: str) -> str:
    return f"not found in namespace {namespace!r}"


def _started_spec(kube: Kube, namespace: str, name: str, generation: int) -> dict[str, Any] | None:
    """The resolved document in this generation's spec ConfigMap, if the run has started."""
    body = kube.get_or_none(configmap_path(namespace, names.spec_configmap_name(name)))
    if body is None:
        return None
    labels = body["metadata"].get("labels") or {}
    if labels.get(names.LABEL_GENERATION) != str(generation):
        return None
    document = yaml.safe_load((body.get("data") or {}).get(SPEC_KEY) or "null")
    return document if isinstance(document, dict) else None


def resolve(kube: Kube, document: dict[str, Any], source: str) -> dict[str, Any]:
    """``document`` (a stored ModelEvaluation) with its modelRef resolved: from the spec
    ConfigMap when this generation already started, else from the Models in the API server.
    Documents without a modelRef come back unchanged. Raises SpecValidationError."""
    spec = document.get("spec")
    if not isinstance(spec, dict) or "modelRef" not in spec:
        return document
    meta = document["metadata"]
    namespace = str(meta.get("namespace") or "default")
    generation = int(meta.get("generation") or 1)
    started = _started_spec(kube, namespace, str(meta["name"]), generation)
    if started is not None and isinstance(started.get("spec"), dict):
        annotations = (started.get("metadata") or {}).get("annotations") or {}
        kept = dict(meta)
        if ANNOTATION_MANIFEST in annotations:
            kept["annotations"] = {
                **(meta.get("annotations") or {}),
                ANNOTATION_MANIFEST: annotations[ANNOTATION_MANIFEST],
            }
        return {**document, "metadata": kept, "spec": started["spec"]}
    resolved: dict[str, Any] = resolve_evaluation(
        document, api_lookup(kube, namespace), source, not_found_in(namespace)
    )
    return resolved
