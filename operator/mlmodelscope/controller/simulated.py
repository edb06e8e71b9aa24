"""Say so plainly when an evaluation's pod ran on a simulated node, which fakes completion.

[kwok](https://kwok.sigs.k8s.io) nodes run no containers: a pod there goes Running and, when a
Job owns it, Succeeded, though nothing ran. kwok marks the nodes it manages with the annotation
``kwok.x-k8s.io/node: fake``; the dev cluster also labels them ``mlmodelscope.io/simulation=kwok``.
A Job that completes there has no results, and "ResultsMissing" would send a reader looking
for a bug in the agent; the Failed condition names the node instead (reason ``SimulatedNode``).

Reading the Node is best effort: a namespaced install may not read nodes (403), and any error
leaves the caller's own reason and message.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

from mlmodelscope.contract.kube import Kube, pod_path
from mlmodelscope.controller.names import JOB_NAME_LABEL

log = logging.getLogger(__name__)

SIMULATED_NODE: Final = "SimulatedNode"
"""The Failed condition's reason when the Job's pod ran on a simulated node."""
KWOK_ANNOTATION: Final = "kwok.x-k8s.io/node"
SIMULATION_LABEL: Final = "mlmodelscope.io/simulation"


def is_simulated(node: Mapping[str, Any]) -> bool:
    """Whether a Node object is one kwok fakes (its annotation, or the dev cluster's label)."""
    meta = node.get("metadata") or {}
    return (meta.get("annotations") or {}).get(KWOK_ANNOTATION) == "fake" or (
        meta.get("labels") or {}
    ).get(SIMULATION_LABEL) == "kwok"


def simulated_node(kube: Kube, namespace: str, job_name: str) -> str | None:
    """The simulated node a pod of the Job ran on; None when none did or it cannot be told."""
    try:
        pods = kube.list(pod_path(namespace), f"{JOB_NAME_LABEL}={job_name}")
        for name in sorted({str((p.get("spec") or {}).get("nodeName") or "") for p in pods} - {""}):
            node = kube.get_or_none(f"/api/v1/nodes/{quote(name)}")
            if node is not None and is_simulated(node):
                return name
    except Exception as exc:  # best effort: e.g. 403 on nodes in a namespaced install
        log.debug("job %s/%s: cannot read its pods' nodes: %s", namespace, job_name, exc)
    return None


def missing_results(kube: Kube, namespace: str, job_name: str) -> tuple[str, str] | None:
    """(reason, message) for a Job that completed without results because its pod ran on a
    simulated node; None otherwise (the caller keeps ResultsMissing)."""
    node = simulated_node(kube, namespace, job_name)
    if node is None:
        return None
    return SIMULATED_NODE, (
        f"the pod of Job {job_name} ran on {node}, a simulated node that does not run "
        "containers (kwok): the Job completed but nothing was evaluated. Run it on a node that "
        "runs containers (on the dev cluster: no toleration of mlmodelscope.io/simulation=kwok)"
    )
