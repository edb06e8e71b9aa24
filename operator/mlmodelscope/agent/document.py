"""The result document as one evaluation builds it: typed sections, laid out once at the end.

Each stage of :func:`~mlmodelscope.agent.runner.evaluate` gives its section as the contract
types it (:mod:`mlmodelscope.contract.result`) and :class:`ResultDraft` holds them. Only the
sections a run reached are laid out, so a failed run's document shows how far it got and
never looks complete.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from mlmodelscope import __version__
from mlmodelscope.contract.redact import redact_tree
from mlmodelscope.contract.result import (
    RESULT_API_VERSION,
    RESULT_KIND,
    AccuracyResult,
    BackendInfo,
    ContractModel,
    CostInfo,
    DatasetInfo,
    EvaluationRef,
    ModelInfo,
    ModelManifestRef,
    ResultDocument,
    ResultError,
    StartupInfo,
    TaskResult,
)
from mlmodelscope.spec import LoadedEvaluation
from mlmodelscope.spec.manifest import ANNOTATION_MANIFEST
from mlmodelscope.spec.status import BatchResult

log = logging.getLogger(__name__)


def now() -> str:
    """UTC now as the document writes times, to the millisecond."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class ResultDraft:
    """One run's result document while it runs: each section typed as the contract types it,
    None until the stage that gives it has run."""

    run_id: str
    evaluation: EvaluationRef
    started_at: str
    spec: dict[str, Any]
    """The spec as run, its URIs' credentials redacted (the submitted spec keeps them)."""
    spec_sha256: str | None = None
    model: ModelInfo | None = None
    dataset: DatasetInfo | None = None
    backend: BackendInfo | None = None
    stack: dict[str, Any] | None = None
    """As :func:`~mlmodelscope.agent.provenance.collect_stack` collects it."""
    accuracy: AccuracyResult | None = None
    task: TaskResult | None = None
    accuracy_skipped: str | None = None
    startup: StartupInfo | None = None
    measurements: list[dict[str, Any]] | None = None
    """As the load generator reports each batch size (see ``Measurement`` in the contract)."""
    cost: CostInfo | None = None
    results: list[BatchResult] | None = None

    @classmethod
    def begin(cls, loaded: LoadedEvaluation) -> ResultDraft:
        """A new run of ``loaded``: its id, what it evaluates and when it started."""
        evaluation = loaded.evaluation
        metadata = evaluation.metadata
        ref = EvaluationRef(
            name=metadata.name,
            namespace=metadata.namespace,
            generation=metadata.generation,
            source=loaded.source,
        )
        if metadata.labels:
            ref.labels = dict(metadata.labels)
        if (manifest := model_manifest(metadata.annotations)) is not None:
            ref.model_manifest = manifest
        return cls(
            run_id=str(uuid.uuid4()),
            evaluation=ref,
            started_at=now(),
            spec=redact_tree(
                evaluation.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
            ),
        )

    def document(self, error: ResultError | None = None) -> dict[str, Any]:
        """The JSON document of the sections reached: Succeeded, or Failed with ``error``.
        From the stack on, ``accuracy`` is present (null until the accuracy pass gives it)."""
        document: dict[str, Any] = {
            "api_version": RESULT_API_VERSION,
            "kind": RESULT_KIND,
            "run_id": self.run_id,
            "status": "Succeeded" if error is None else "Failed",
            "evaluation": section(self.evaluation),
            "agent_version": __version__,
            "started_at": self.started_at,
            "spec": self.spec,
        }
        reached: dict[str, Any] = {
            "spec_sha256": self.spec_sha256,
            "model": section(self.model),
            "dataset": section(self.dataset),
            "backend": section(self.backend),
            "stack": self.stack,
        }
        document.update((k, v) for k, v in reached.items() if v is not None)
        if self.stack is not None:
            document["accuracy"] = section(self.accuracy)
        later: dict[str, Any] = {
            "task": section(self.task),
            "accuracy_skipped": self.accuracy_skipped,
            "startup": section(self.startup),
            "measurements": self.measurements,
            "cost": section(self.cost),
            "results": None
            if self.results is None
            else [row.model_dump(mode="json") for row in self.results],
            "error": section(error),
        }
        document.update((k, v) for k, v in later.items() if v is not None)
        return document


def section(model: ContractModel | None) -> dict[str, Any] | None:
    """A section as the document holds it: the fields it was given, values as they are."""
    return None if model is None else model.model_dump(exclude_unset=True)


def model_manifest(annotations: dict[str, str]) -> ModelManifestRef | None:
    """The Model manifest a modelRef resolved to, as the resolver recorded it (unreadable
    records are dropped, not fatal: the spec itself already holds the resolved model)."""
    text = annotations.get(ANNOTATION_MANIFEST)
    if not text:
        return None
    try:
        return ModelManifestRef.model_validate_json(text)
    except ValueError:
        log.warning("ignoring an unreadable %s annotation", ANNOTATION_MANIFEST)
        return None


def finish(document: dict[str, Any], timings: dict[str, float], started: float) -> None:
    """When the run ended, how long it and each stage took, and the image it ran in."""
    document["finished_at"] = now()
    document["duration_s"] = time.monotonic() - started
    document["stage_durations_s"] = timings
    if image := os.environ.get("MLMS_IMAGE"):
        document.setdefault("image", image)


def redact(document: dict[str, Any]) -> None:
    """Every string of the document redacted, in place: a library's text anywhere in it (an
    error, a warning, a telemetry failure) may quote a credential of the run."""
    document.update(redact_tree(document))


def check_contract(document: dict[str, Any]) -> None:
    """Hold the document to :class:`~mlmodelscope.contract.result.ResultDocument` before it is
    written: telemetry adds sections of its own and redaction rewrites strings. A violation is
    this program's bug, not the user's: it is logged and recorded in the document
    (``contract_error``) rather than losing what was measured."""
    try:
        ResultDocument.model_validate(document)
    except ValidationError as exc:
        log.error("result document does not match the contract: %s", exc)
        document["contract_error"] = str(exc)[:2000]
