"""Files that hold any of the project's kinds (ModelEvaluation, EvaluationSweep), validated
document by document: what `mlms validate` reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlmodelscope.spec.document import (
    API_VERSION_FULL,
    KIND,
    ModelEvaluation,
    Problem,
    SpecValidationError,
    parse_evaluation,
    read_documents,
)
from mlmodelscope.spec.sweep import SWEEP_KIND, EvaluationSweep, expand, parse_sweep

KINDS = (KIND, SWEEP_KIND)


@dataclass(frozen=True)
class CheckedDocument:
    """One document of a file: its resource when valid, otherwise the error naming every
    problem. ``children`` counts the ModelEvaluations a valid sweep creates."""

    source: str
    resource: ModelEvaluation | EvaluationSweep | None
    error: SpecValidationError | None
    children: int = 0


def parse_resource(document: Any, source: str) -> ModelEvaluation | EvaluationSweep:
    """Validate one document of either kind, by its ``kind``."""
    kind = document.get("kind") if isinstance(document, dict) else None
    if kind == SWEEP_KIND:
        return parse_sweep(document, source)
    if kind == KIND or not isinstance(document, dict):
        return parse_evaluation(document, source)
    raise SpecValidationError(
        source,
        [
            Problem(
                "kind",
                f"expected kind {' or '.join(KINDS)} (apiVersion {API_VERSION_FULL}), got {kind}",
            )
        ],
        " or ".join(KINDS),
    )


def check_file(path: Path | str) -> list[CheckedDocument]:
    """Every document of a YAML file, each validated on its own; raises SpecValidationError
    only when the file as a whole is unusable (unreadable, not YAML, empty)."""
    file = Path(path)
    documents = read_documents(file, " or ".join(KINDS))
    checked = []
    for index, document in enumerate(documents):
        metadata = document.get("metadata") if isinstance(document, dict) else None
        name = metadata.get("name") if isinstance(metadata, dict) else None
        where = f"{file} (document {index + 1}{f', {name}' if name else ''})"
        try:
            resource = parse_resource(document, where)
        except SpecValidationError as exc:
            checked.append(CheckedDocument(where, None, exc))
            continue
        children = len(expand(resource)) if isinstance(resource, EvaluationSweep) else 0
        checked.append(CheckedDocument(where, resource, None, children))
    return checked
