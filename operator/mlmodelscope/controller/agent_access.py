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
from typing import Any, Final

from mlmodelscope.contract.kube import namespaced
from mlmodelscope.controller import builders
from mlmodelscope.spec import ModelEvaluation

RBAC_GROUP: Final = builders.RBAC_API

Builder = Callable[[ModelEvaluation], dict[str, Any]]
OBJECTS: Final[tuple[tuple[Builder, str, str], ...]] = (
    (builders.build_agent_service_account, "serviceaccounts", ""),
    (builders.build_results_writer_role, "roles", RBAC_GROUP),
    (builders.build_results_writer_binding, "rolebindings", RBAC_GROUP),
)


def api_path(namespace: str, plural: str, group: str, name: str = "") -> str:
    return namespaced(namespace, plural, name, group=group)
