"""``pvc://<claim>/<path>`` URIs, parsed in one place, and the spec's fields that may hold one.

A ``pvc://`` URI in any field that names a file or folder (:func:`spec_files`: the model,
the dataset's files and folders, a labels file) names a PersistentVolumeClaim
the operator mounts into the Job and a path inside it. The operator reads the claim (to check
it against its policy and mount it), the agent reads both (to find the file under its mount
root). The spec's CEL rules (``_pvc_rules`` in :mod:`.evaluation`) refuse the same malformed
URIs in the API server, where Python cannot run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Final

from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import DATASET_FILE_FIELDS, EvaluationSpec

PVC_SCHEME: Final = "pvc://"


@dataclass(frozen=True)
class PvcUri:
    """A parsed ``pvc://<claim>/<path>``: the claim's name and the path inside the volume."""

    claim: str
    path: PurePosixPath
    """Relative to the volume's root (``.`` for the root itself), never holding ``..``: an
    extra slash (``pvc://c//etc/x``) stays inside the claim (``etc/x``)."""


def parse_pvc_uri(uri: str, field: str = "spec.model.uri") -> PvcUri:
    """The claim and path of ``uri``; raises :class:`SpecError` naming ``field`` for a URI
    with no claim or a path that climbs out of the volume with ``..``."""
    claim, _, sub = uri.removeprefix(PVC_SCHEME).partition("/")
    if not uri.startswith(PVC_SCHEME) or not claim:
        raise SpecError(field, f"{uri!r} names no claim; write pvc://<claim>/<path>")
    parts = PurePosixPath(sub).parts
    if ".." in parts:
        raise SpecError(field, f"{uri!r} must not contain '..'; give a path inside the claim")
    return PvcUri(claim, PurePosixPath(*(p for p in parts if p != "/")))


@dataclass(frozen=True)
class SpecFile:
    """A file or folder the spec names: the field (``spec.dataset.path``) and its value."""

    field: str
    value: str


def spec_files(spec: EvaluationSpec) -> list[SpecFile]:
    """Every file or folder ``spec`` names, in spec order: ``model.uri``, the dataset's
    :data:`~.evaluation.DATASET_FILE_FIELDS`, each labels file. (A sweep entry's or a Model's
    exports become a child's ``model.uri``.)"""
    found = [SpecFile("spec.model.uri", spec.model.uri)]
    for name in DATASET_FILE_FIELDS:
        value = getattr(spec.dataset, name)
        if value is not None:
            found.append(SpecFile(f"spec.dataset.{name}", value))
    for i, step in enumerate(spec.postprocessing or []):
        if step.labels is not None and step.labels.uri is not None:
            found.append(SpecFile(f"spec.postprocessing[{i}].labels.uri", step.labels.uri))
    return found


def pvc_fields(spec: EvaluationSpec) -> dict[str, list[str]]:
    """The claims that the spec's files name (:func:`spec_files`), in spec order, each with
    the fields that name it (URIs of other schemes name none)."""
    found: dict[str, list[str]] = {}
    for named in spec_files(spec):
        if named.value.startswith(PVC_SCHEME):
            claim = parse_pvc_uri(named.value, named.field).claim
            found.setdefault(claim, []).append(named.field)
    return found


def pvc_claims(spec: EvaluationSpec) -> list[str]:
    """The claims the spec's files name, each once, in spec order: what the Job mounts."""
    return list(pvc_fields(spec))
