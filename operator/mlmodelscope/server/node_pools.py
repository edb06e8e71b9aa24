"""The cluster's node pools, for the Launch form's hardware choice (`mlms serve
--launch-namespace`).

:func:`group_pools` (pure) groups Nodes by the first pool label they carry
(:data:`POOL_LABELS`: the project's own ``mlmodelscope.io/pool``, then the managed clouds'),
and sums up each pool: its nodes, their ``nvidia.com/gpu`` capacity and GPU products, and the
taints they carry. A pool is what a launch's ``hardware`` needs to land there: the
``nodeSelector`` of its label and a toleration per taint (:meth:`NodePool.hardware`).
:class:`NodePools` does the I/O: one LIST of the Nodes, kept :data:`CACHE_S` seconds, as the
server's own identity, which needs ``nodes`` ``list`` cluster-wide (the chart's ClusterRole
``<fullname>-server-nodes``); a refusal (403) or an API server away answers no pools and the
reason, never an error, and the form then asks for the selector and tolerations itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from mlmodelscope.contract.kube import Kube, KubeError

NODES_PATH: Final = "/api/v1/nodes"
POOL_LABELS: Final = (
    "mlmodelscope.io/pool",
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool",
    "kubernetes.azure.com/agentpool",
)
"""Labels that name a node's pool, in the order they are looked for: a node is in the pool
of the first one it carries (the project's own first, as the dev cluster labels its nodes)."""
GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
"""What GPU Feature Discovery labels a GPU node with (docs/gpu-node-pools.md)."""
CONDITION_TAINTS: Final = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")
"""Prefixes of the taints Kubernetes itself puts on nodes for their state (not ready,
unreachable, cordoned, not yet initialised): passing, and never to be tolerated by a form."""
CACHE_S: Final = 30.0
"""How long one listing of the Nodes serves the Launch form."""
MAX_TEXT: Final = 253


@dataclass(frozen=True, order=True)
class Taint:
    """A taint some node of a pool carries."""

    key: str
    value: str
    effect: str

    def toleration(self) -> dict[str, str]:
        """The toleration of exactly this taint (``Exists`` for one without a value)."""
        found = {"key": self.key, "operator": "Equal" if self.value else "Exists"}
        if self.value:
            found["value"] = self.value
        if self.effect:
            found["effect"] = self.effect
        return found

    def text(self) -> str:
        """As `kubectl taint` writes it: ``key=value:Effect``, ``key:Effect`` without value."""
        value = f"={self.value}" if self.value else ""
        effect = f":{self.effect}" if self.effect else ""
        return f"{self.key}{value}{effect}"


@dataclass(frozen=True)
class NodePool:
    """Nodes that carry the same value of a pool label."""

    label: str
    """The pool label, e.g. ``mlmodelscope.io/pool``."""
    name: str
    """Its value on these nodes."""
    nodes: int
    gpus: int
    """Sum of the nodes' ``nvidia.com/gpu`` capacity (0: no GPUs)."""
    gpu_products: tuple[str, ...]
    """The nodes' ``nvidia.com/gpu.product`` labels, sorted."""
    taints: tuple[Taint, ...]
    """Every taint any of its nodes carries (Kubernetes' own node-state taints left out),
    sorted."""

    @property
    def node_selector(self) -> dict[str, str]:
        return {self.label: self.name}

    @property
    def tolerations(self) -> list[dict[str, str]]:
        return [taint.toleration() for taint in self.taints]

    def hardware(self) -> dict[str, Any]:
        """``spec.hardware`` that lands a launch on this pool: its selector, and a toleration
        for each of its taints."""
        found: dict[str, Any] = {"nodeSelector": self.node_selector}
        if self.taints:
            found["tolerations"] = self.tolerations
        return found


@dataclass(frozen=True)
class PoolListing:
    """What the form offers: the pools, how many nodes carry no pool label, and why there
    are none when the Nodes could not be read."""

    pools: tuple[NodePool, ...] = ()
    unpooled: int = 0
    """Nodes with none of :data:`POOL_LABELS` (no pool to choose them by)."""
    problem: str | None = None
    """Why the Nodes were not read (the API server's refusal, or no answer); None: read."""
    status: int | None = None
    """The API server's HTTP status for that refusal (403: this identity may not list
    Nodes); None when it did not answer or the Nodes were read."""


def pool_of(labels: Mapping[str, str]) -> tuple[str, str] | None:
    """(label, value) of the node's pool: the first of :data:`POOL_LABELS` it carries."""
    for label in POOL_LABELS:
        value = labels.get(label)
        if value:
            return label, value
    return None


def _gpus(node: Mapping[str, Any]) -> int:
    capacity = (node.get("status") or {}).get("capacity") or {}
    try:
        return max(int(str(capacity.get(GPU_RESOURCE, 0))), 0)
    except ValueError:  # not a whole number: not a GPU count this form shows
        return 0


def _taints(node: Mapping[str, Any]) -> set[Taint]:
    found = set()
    for taint in (node.get("spec") or {}).get("taints") or []:
        key = str(taint.get("key") or "")[:MAX_TEXT]
        if not key or key.startswith(CONDITION_TAINTS):
            continue
        value = str(taint.get("value") or "")[:MAX_TEXT]
        found.add(Taint(key, value, str(taint.get("effect") or "")[:32]))
    return found


def group_pools(nodes: Iterable[Mapping[str, Any]]) -> PoolListing:
    """The Nodes grouped into pools, sorted by label then name."""
    members: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    unpooled = 0
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        key = pool_of(labels)
        if key is None:
            unpooled += 1
        else:
            members.setdefault(key, []).append(node)
    pools = []
    for (label, name), group in sorted(members.items()):
        products = {
            str(((n.get("metadata") or {}).get("labels") or {}).get(GPU_PRODUCT_LABEL) or "")
            for n in group
        }
        pools.append(
            NodePool(
                label=label,
                name=name,
                nodes=len(group),
                gpus=sum(_gpus(n) for n in group),
                gpu_products=tuple(sorted(p for p in products if p)),
                taints=tuple(sorted(set().union(*(_taints(n) for n in group)))),
            )
        )
    return PoolListing(tuple(pools), unpooled)


class NodePools:
    """The cluster's pools, read with ``kube`` at most every ``cache_s`` seconds (a refusal
    too, so a form that cannot list Nodes does not ask again on every load)."""

    def __init__(
        self,
        kube: Kube,
        cache_s: float = CACHE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.cache_s = cache_s
        self.clock = clock
        self._lock = threading.Lock()
        self._kept: tuple[float, PoolListing] | None = None

    def read(self) -> PoolListing:
        with self._lock:
            now = self.clock()
            if self._kept is not None and now - self._kept[0] < self.cache_s:
                return self._kept[1]
            listing = self._list()
            self._kept = (now, listing)
            return listing

    def _list(self) -> PoolListing:
        try:
            return group_pools(self.kube.list(NODES_PATH))
        except KubeError as exc:
            return PoolListing(problem=exc.message[:1000], status=exc.status)
        except Exception as exc:  # the API server away: the form still works, without pools
            return PoolListing(problem=f"the Kubernetes API did not answer: {exc}"[:1000])
