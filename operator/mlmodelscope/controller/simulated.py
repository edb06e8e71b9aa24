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
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote

from mlmodelscope.contract.kube import Kube, pod_path
from mlmodelscope.controller.names import JOB_NAME_LABEL

log = logging.getLogger(__name__)

SIMULATED_NODE: Final = "SimulatedNode"
"""The Failed condition's reason when the Job's pod ran on a simulated node."""
KWOK_ANNOTATION: Final = "kwok.x-k8s.io/node"
SIMULATION_LABEL: Final = "mlmodelscope.io/simulation"
NODE_KEPT_S: Final = 300.0
"""How long what a Node read said is believed (a node's name is reused by a new node rarely,
and a wrong belief costs only the reason's wording)."""
NODES_KEPT: Final = 1024


def is_simulated(node: Mapping[str, Any]) -> bool:
    """Whether a Node object is one kwok fakes (its annotation, or the dev cluster's label)."""
    meta = node.get("metadata") or {}
    return (meta.get("annotations") or {}).get(KWOK_ANNOTATION) == "fake" or (
        meta.get("labels") or {}
    ).get(SIMULATION_LABEL) == "kwok"


class SimulatedNodes:
    """Whether each node read lately is simulated, so a burst of Jobs completing on the same
    few nodes reads each Node once per :data:`NODE_KEPT_S` instead of once per Job. Thread-safe;
    at most :data:`NODES_KEPT` nodes, the oldest read dropped first."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._read: dict[str, tuple[float, bool]] = {}

    def is_simulated(self, kube: Kube, name: str) -> bool:
        """Whether node ``name`` is simulated (a gone node is not); reads it when not known.
        Raises what the read raises (e.g. 403 in a namespaced install)."""
        now = self._clock()
        with self._lock:
            known = self._read.get(name)
        if known is not None and now - known[0] < NODE_KEPT_S:
            return known[1]
        node = kube.get_or_none(f"/api/v1/nodes/{quote(name)}")
        simulated = node is not None and is_simulated(node)
        with self._lock:
            self._read.pop(name, None)
            self._read[name] = (now, simulated)
            while len(self._read) > NODES_KEPT:
                del self._read[next(iter(self._read))]
        return simulated


def simulated_node(
    kube: Kube,
    namespace: str,
    job_name: str,
    pods: Sequence[Mapping[str, Any]] | None = None,
    nodes: SimulatedNodes | None = None,
) -> str | None:
    """The simulated node a pod of the Job ran on; None when none did or it cannot be told.
    ``pods``: the Job's pods when the caller has listed them; ``nodes``: what is known of
    nodes read before."""
    known = nodes or SimulatedNodes()
    try:
        if pods is None:
            pods = kube.list(pod_path(namespace), f"{JOB_NAME_LABEL}={job_name}")
        for name in sorted({str((p.get("spec") or {}).get("nodeName") or "") for p in pods} - {""}):
            if known.is_simulated(kube, name):
                return name
    except Exception as exc:  # best effort: e.g. 403 on nodes in a namespaced install
        log.debug("job %s/%s: cannot read its pods' nodes: %s", namespace, job_name, exc)
    return None


def missing_results(
    kube: Kube,
    namespace: str,
    job_name: str,
    pods: Sequence[Mapping[str, Any]] | None = None,
    nodes: SimulatedNodes | None = None,
) -> tuple[str, str] | None:
    """(reason, message) for a Job that completed without results because its pod ran on a
    simulated node; None otherwise (the caller keeps ResultsMissing). ``pods`` and ``nodes``
    as for :func:`simulated_node`."""
    node = simulated_node(kube, namespace, job_name, pods, nodes)
    if node is None:
        return None
    return SIMULATED_NODE, (
        f"the pod of Job {job_name} ran on {node}, a simulated node that does not run "
        "containers (kwok): the Job completed but nothing was evaluated. Run it on a node that "
        "runs containers (on the dev cluster: no toleration of mlmodelscope.io/simulation=kwok)"
    )
