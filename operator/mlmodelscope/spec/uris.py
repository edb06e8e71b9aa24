"""``pvc://<claim>/<path>`` URIs, parsed in one place.

A ``pvc://`` URI in ``spec.model.uri`` or ``spec.dataset.uri`` names a PersistentVolumeClaim
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
from mlmodelscope.spec.evaluation import EvaluationSpec

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


def pvc_claims(spec: EvaluationSpec) -> list[str]:
    """The claims that ``spec.model.uri`` and ``spec.dataset.uri`` name, each once, in that
    order (URIs of other schemes name none)."""
    found: list[str] = []
    for field, uri in (("spec.model.uri", spec.model.uri), ("spec.dataset.uri", spec.dataset.uri)):
        if uri is not None and uri.startswith(PVC_SCHEME):
            claim = parse_pvc_uri(uri, field).claim
            if claim not in found:
                found.append(claim)
    return found
