"""An evaluation pod could not be scheduled (or finally was): say so in the evaluation's status.

The scheduler's own message ("0/6 nodes are available: 3 Insufficient nvidia.com/gpu, ...")
is the most useful thing a user can see when a GPU evaluation waits, so it goes verbatim into
the Scheduled condition, status.message and a Warning event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlmodelscope.controller import status
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.handlers.handle_job import JOB_NAME_LABEL, owner_of


def scheduling_state(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """("unschedulable", scheduler message) or ("scheduled", node), or None if undecided."""
    node = (pod.get("spec") or {}).get("nodeName")
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") != "PodScheduled":
            continue
        if cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
            return "unschedulable", str(cond.get("message") or "the pod cannot be scheduled")
        if cond.get("status") == "True" and node:
            return "scheduled", str(node)
    return None


def pod_changed(pod: Mapping[str, Any], ctx: Context) -> str:
    """React to one evaluation pod event; returns what it did (for logs)."""
    owner = owner_of(pod)
    state = scheduling_state(pod)
    job_name = ((pod.get("metadata") or {}).get("labels") or {}).get(JOB_NAME_LABEL)
    if owner is None or state is None or not job_name:
        return "nothing to do"
    namespace, name, generation = owner
    kind, detail = state
    if kind == "unschedulable":
        ctx.update_status(
            namespace,
            name,
            lambda st: status.unschedulable(st, generation, job_name, detail, ctx.clock()),
        )
    else:
        ctx.update_status(
            namespace,
            name,
            lambda st: status.scheduled(st, generation, job_name, detail, ctx.clock()),
        )
    return kind
