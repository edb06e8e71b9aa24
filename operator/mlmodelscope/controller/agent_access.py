"""Per-evaluation results access: each evaluation's pods may write its own results, no others'.

The agent publishes its result by patching the evaluation's results ConfigMap. A ServiceAccount
shared by every evaluation of a namespace would need ``patch`` on all of its ConfigMaps, so one
evaluation could overwrite another's results (issue 15, defect 9). Instead each evaluation gets
a ServiceAccount of its own and a Role naming its results ConfigMap alone (``resourceNames``),
all three owned by the evaluation, so the garbage collector removes them with it.

The operator may grant that Role without ``escalate`` or ``bind``: its own Role in the namespace
already holds ``configmaps`` ``patch``, and the API server lets anyone create a Role or
RoleBinding for permissions they hold themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from mlmodelscope.contract.kube import namespaced
from mlmodelscope.controller import builders, names
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.runs import ForeignChildError
from mlmodelscope.controller.settings import PER_EVALUATION
from mlmodelscope.spec import ModelEvaluation

RBAC_GROUP: Final = builders.RBAC_API

Builder = Callable[[ModelEvaluation], dict[str, Any]]
OBJECTS: Final[tuple[tuple[Builder, str, str], ...]] = (
    # The ServiceAccount first: the RoleBinding names it, and the Job's pods need it to exist.
    (builders.build_agent_service_account, "serviceaccounts", ""),
    (builders.build_results_writer_role, "roles", RBAC_GROUP),
    (builders.build_results_writer_binding, "rolebindings", RBAC_GROUP),
)


def api_path(namespace: str, plural: str, group: str, name: str = "") -> str:
    return namespaced(namespace, plural, name, group=group)


def ensure_agent_access(ctx: Context, evaluation: ModelEvaluation) -> None:
    """Create the evaluation's ServiceAccount, Role and RoleBinding unless they exist (before its
    Job: a pod whose ServiceAccount is missing is refused). One that exists but belongs to
    another object (an earlier evaluation of the same name, not yet garbage-collected) is never
    adopted: its RoleBinding could name someone else. Raises ForeignChildError to wait for it.
    Nothing to do with a shared job ServiceAccount (``service-account`` results access)."""
    if ctx.settings.results_access != PER_EVALUATION:
        return
    namespace = evaluation.metadata.namespace or "default"
    for build, plural, group in OBJECTS:
        body = build(evaluation)
        if ctx.kube.create_if_absent(api_path(namespace, plural, group), body):
            continue
        name = body["metadata"]["name"]
        existing = ctx.kube.get(api_path(namespace, plural, group, name))
        if not names.owned_by(existing, evaluation.metadata.uid):
            raise ForeignChildError(
                f"{body['kind']} {name} belongs to another object (an earlier evaluation of the "
                "same name?); waiting for it to be garbage-collected"
            )
