"""Per-evaluation results access: each evaluation's pods may write its own results, no others'.

The agent publishes its result by patching the evaluation's results ConfigMap. A ServiceAccount
shared by every evaluation of a namespace would need ``patch`` on all of its ConfigMaps, so one
evaluation could overwrite another's results (issue 15, defect 9). Instead each evaluation gets
a ServiceAccount of its own and a Role naming its results ConfigMap alone (``resourceNames``),
all three owned by the evaluation, so the garbage collector removes them with it.

The operator may grant that Role without ``escalate`` or ``bind``: its own Role in the namespace
already holds ``configmaps`` ``patch``, and the API server lets anyone create a Role or
RoleBinding for permissions they hold themselves. They are made with the evaluation's other
children before its Job (:mod:`.children`); with a shared job ServiceAccount (``service-account``
results access) there are none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from mlmodelscope.contract.kube import namespaced
from mlmodelscope.controller import builders
from mlmodelscope.spec import ModelEvaluation

RBAC_GROUP: Final = builders.RBAC_API

Builder = Callable[[ModelEvaluation], dict[str, Any]]


@dataclass(frozen=True)
class AccessObject:
    """One of the objects of an evaluation's results access: how it is built and where."""

    build: Builder
    plural: str
    group: str
    after: str | None = None
    """The ``plural`` of the object it must be created after. A RoleBinding waits for its
    Role: the API server checks a binding against the Role it names, and to an operator
    without ``bind`` a Role not yet created answers 404."""


OBJECTS: Final[tuple[AccessObject, ...]] = (
    AccessObject(builders.build_agent_service_account, "serviceaccounts", ""),
    AccessObject(builders.build_results_writer_role, "roles", RBAC_GROUP),
    AccessObject(builders.build_results_writer_binding, "rolebindings", RBAC_GROUP, after="roles"),
)


def api_path(namespace: str, plural: str, group: str, name: str = "") -> str:
    return namespaced(namespace, plural, name, group=group)
