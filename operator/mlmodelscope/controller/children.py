"""The objects an evaluation's Job needs, made before it: the spec ConfigMap (the agent's
spec, mounted), the results ConfigMap (where the agent publishes), and with per-evaluation
results access the agent's ServiceAccount, Role and RoleBinding (:mod:`.agent_access`).

They are created at once (:class:`.runtime.fanout.Fanout`), except one that waits for the
object its ``after`` names, as declared beside the objects (the RoleBinding for its Role:
:attr:`.agent_access.AccessObject.after`). The Job waits for all of them, since a pod whose
ServiceAccount is missing is refused. An object that already exists is read: one that belongs
to another object (an earlier evaluation of the same name, not yet garbage-collected) is never
adopted, and a ConfigMap of another generation is made current.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from mlmodelscope.contract.kube import configmap_path
from mlmodelscope.controller import agent_access, builders, names
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.runs import ForeignChildError
from mlmodelscope.controller.settings import PER_EVALUATION
from mlmodelscope.spec import ModelEvaluation


class Refresh(Enum):
    """What a child found from another generation needs."""

    NONE = "none"
    """Serves every generation (the access objects)."""
    DATA = "data"
    """Holds this generation's data (the spec)."""
    EMPTY = "empty"
    """Holds nothing from another generation (the results)."""


@dataclass(frozen=True)
class Child:
    collection: str
    """The API path it is created in."""
    body: dict[str, Any]
    refresh: Refresh
    after: str | None = None
    """The :attr:`resource` of another child it is created after."""

    @property
    def path(self) -> str:
        return f"{self.collection}/{self.body['metadata']['name']}"

    @property
    def resource(self) -> str:
        """Its collection's resource (plural): ``configmaps``, ``roles``, ..."""
        return self.collection.rsplit("/", 1)[-1]


def wanted(ctx: Context, evaluation: ModelEvaluation) -> list[Child]:
    """The children this evaluation's Job needs, as built for its current generation."""
    namespace = evaluation.metadata.namespace or "default"
    children = [
        Child(configmap_path(namespace), builders.build_spec_configmap(evaluation), Refresh.DATA),
        Child(
            configmap_path(namespace),
            builders.build_results_configmap(evaluation),
            Refresh.EMPTY,
        ),
    ]
    if ctx.settings.results_access == PER_EVALUATION:
        children += [
            Child(
                agent_access.api_path(namespace, access.plural, access.group),
                access.build(evaluation),
                Refresh.NONE,
                after=access.after,
            )
            for access in agent_access.OBJECTS
        ]
    return children


def waves(children: Sequence[Child]) -> list[list[Child]]:
    """``children`` in the order they can be created: each wave holds those whose ``after``
    an earlier wave created. Raises ValueError for one that waits for no child there."""
    ordered: list[list[Child]] = []
    created: set[str] = set()
    left = list(children)
    while left:
        wave: list[Child] = []
        later: list[Child] = []
        for child in left:
            (wave if child.after is None or child.after in created else later).append(child)
        if not wave:
            waiting = ", ".join(f"{c.resource} after {c.after}" for c in later)
            raise ValueError(f"children that wait for none of the others: {waiting}")
        ordered.append(wave)
        created.update(c.resource for c in wave)
        left = later
    return ordered


def ensure(ctx: Context, evaluation: ModelEvaluation) -> dict[str, Any] | None:
    """Create the children that are missing, at once wave by wave (:func:`waves`), and make
    the existing ones current. Returns the results ConfigMap as it now is, or None when it was
    created just now (empty). Raises ForeignChildError while one of them belongs to another
    object."""
    results: dict[str, Any] | None = None
    for batch in waves(wanted(ctx, evaluation)):
        created = ctx.fanout.map(lambda c: ctx.kube.create_if_absent(c.collection, c.body), batch)
        for child, was_created in zip(batch, created, strict=True):
            if was_created:
                continue
            existing = _make_current(ctx, evaluation, child)
            if child.refresh is Refresh.EMPTY:
                results = existing
    return results


def _make_current(ctx: Context, evaluation: ModelEvaluation, child: Child) -> dict[str, Any]:
    """Read an existing child; refuse one owned by another object, and bring a ConfigMap of
    another generation to this one (the operator also checks the generation when reading)."""
    existing: dict[str, Any] = ctx.kube.get(child.path)
    name = child.body["metadata"]["name"]
    if not names.owned_by(existing, evaluation.metadata.uid):
        raise ForeignChildError(
            f"{child.body['kind']} {name} belongs to another object (an earlier evaluation of "
            "the same name?); waiting for it to be garbage-collected"
        )
    if child.refresh is Refresh.NONE:
        return existing
    labels = existing["metadata"].get("labels") or {}
    if labels.get(names.LABEL_GENERATION) == str(builders.generation_of(evaluation)):
        return existing
    patch: dict[str, Any] = {"metadata": {"labels": child.body["metadata"]["labels"]}}
    patch["data"] = child.body["data"] if child.refresh is Refresh.DATA else None
    patched: dict[str, Any] = ctx.kube.merge_patch(child.path, patch)
    return patched
