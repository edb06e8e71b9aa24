"""`mlms run --runtime docker`: each evaluation in turn in its framework's agent image.

Each result document lands in the output folder as a local run's does; the caller records
and reports each run. :mod:`mlmodelscope.agent.container` runs one container.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlmodelscope.agent.container import ContainerRuntimeError, Log, connect, run_in_container
from mlmodelscope.agent.runner import RunOutcome, write_document
from mlmodelscope.spec import LoadedEvaluation
from mlmodelscope.spec.evaluation import Device, EvaluationSpec, FrameworkName

DefaultImage = Callable[[FrameworkName, Device], str | None]
"""The image published for a framework and device; None where this install names none (an
agent image carries no operator, hence no image names)."""

NO_DEFAULT_IMAGE = "--runtime docker here needs --image (no default image names in this install)"


def image_for(spec: EvaluationSpec, override: str | None, default: DefaultImage) -> str:
    """The image to run ``spec`` in: ``--image``, else ``spec.framework.image``, else the
    published image for its framework and device."""
    if override:
        return override
    if spec.framework.image:
        return str(spec.framework.image)
    found = default(spec.framework.name, spec.hardware.device)
    if found is None:
        raise ContainerRuntimeError(NO_DEFAULT_IMAGE)
    return found


@dataclass(frozen=True)
class ContainerRun:
    """How one evaluation's container run ended."""

    name: str
    image: str
    document: dict[str, Any] | None
    """The result document it wrote (None: none), now also in the output folder."""
    outcome: RunOutcome | None = None
    """Set when the evaluation succeeded."""
    error: str | None = None
    """Why it failed, when it did."""


def run_in_images(
    loaded: Iterable[LoadedEvaluation],
    output: Path,
    *,
    image: str | None,
    default_image: DefaultImage,
    raw: bool,
    price: float | None,
    starting: Callable[[str, str], None],
    log: Log,
) -> Iterator[ContainerRun]:
    """Run each evaluation in its image (:func:`image_for`) and write its document to
    ``output/<name>.json``; ``starting(name, image)`` before each, ``log`` each line the
    container prints. A container that fails is a failed run; no engine, or an evaluation
    whose image cannot be named, raises ContainerRuntimeError and ends the loop."""
    client = connect()
    for item in loaded:
        name = item.evaluation.metadata.name
        ref = image_for(item.evaluation.spec, image, default_image)
        starting(name, ref)
        try:
            result = run_in_container(
                item.evaluation,
                item.base_dir,
                ref,
                raw=raw,
                client=client,
                price_per_node_hour=price,
                log=log,
            )
        except ContainerRuntimeError as exc:
            yield ContainerRun(name, ref, None, error=str(exc))
            continue
        path = output / f"{name}.json"
        if result.document is not None:
            write_document(result.document, path)
        if result.succeeded:
            assert result.document is not None
            outcome = RunOutcome(result.document, path, None)
            yield ContainerRun(name, ref, result.document, outcome=outcome)
        else:
            yield ContainerRun(name, ref, result.document, error=result.error())
