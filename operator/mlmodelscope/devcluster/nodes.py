"""The simulated node pools, declared in this one place.

Two kinds of node: `kwok` nodes are driven by kwok (pods go Running, then Succeeded, without
running anything) and `exec` nodes are driven by our exec kubelet (pods run for real on this
machine). GPU nodes advertise `nvidia.com/gpu` and carry the labels GPU Feature Discovery sets
and the taint the NVIDIA GPU operator documents, so scheduling behaves as on a real GPU cluster.
kwok nodes are also tainted `mlmodelscope.io/simulation=kwok:NoSchedule`: a pod meant to run
never lands where nothing runs; only pods that tolerate the taint (tests of scheduling and
of simulated outcomes) go there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

Mode = Literal["kwok", "exec"]

GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_TAINT: Final = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
SIMULATION_LABEL: Final = "mlmodelscope.io/simulation"
"""`kwok` or `exec`; kwok is started with a label selector on `kwok` so it never sees exec nodes."""
POOL_LABEL: Final = "mlmodelscope.io/pool"
KWOK_SELECTOR: Final = f"{SIMULATION_LABEL}=kwok"
SIMULATED_TAINT: Final = {"key": SIMULATION_LABEL, "value": "kwok", "effect": "NoSchedule"}
"""On every kwok node, so that pods which must really run never land on one."""
SIMULATED_TOLERATION: Final = {"operator": "Equal", **SIMULATED_TAINT}
"""What a pod (or `spec.hardware.tolerations`) adds to be allowed onto kwok nodes."""


@dataclass(frozen=True)
class GPU:
    """What GPU Feature Discovery would report for one node's GPUs."""

    product: str
    memory_mib: int
    count: int
    family: str

    def labels(self) -> dict[str, str]:
        return {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": self.product,
            "nvidia.com/gpu.memory": str(self.memory_mib),
            "nvidia.com/gpu.count": str(self.count),
            "nvidia.com/gpu.family": self.family,
            "nvidia.com/gpu.machine": "DGX",
        }


A100_80GB: Final = GPU("NVIDIA-A100-SXM4-80GB", 81920, 8, "ampere")
H100_80GB: Final = GPU("NVIDIA-H100-80GB-HBM3", 81920, 8, "hopper")


@dataclass(frozen=True)
class NodePool:
    """A group of identical nodes; `modes` gives each node's simulation mode, in order."""

    name: str
    prefix: str
    modes: tuple[Mode, ...]
    cpu: str
    memory: str
    pods: int = 110
    gpu: GPU | None = None


POOLS: Final[tuple[NodePool, ...]] = (
    NodePool("cpu", "cpu", ("kwok", "exec"), cpu="16", memory="64Gi"),
    NodePool("gpu-a100", "a100", ("kwok", "exec"), cpu="96", memory="1Ti", gpu=A100_80GB),
    NodePool("gpu-h100", "h100", ("kwok",), cpu="112", memory="2Ti", gpu=H100_80GB),
)
"""CPU: one kwok + one exec node. A100: 2 nodes of 8 GPUs (one exec, so a GPU-requesting pod
can really run, on CPU). H100: 1 node of 8 GPUs."""


@dataclass(frozen=True)
class SimNode:
    """One node to register: its name, mode and the pool it comes from."""

    name: str
    mode: Mode
    pool: NodePool

    def labels(self) -> dict[str, str]:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": f"sim-{self.pool.name}",
            SIMULATION_LABEL: self.mode,
            POOL_LABEL: self.pool.name,
        }
        if self.pool.gpu is not None:
            labels.update(self.pool.gpu.labels())
        return labels

    def resources(self) -> dict[str, str]:
        res = {
            "cpu": self.pool.cpu,
            "memory": self.pool.memory,
            "pods": str(self.pool.pods),
            "ephemeral-storage": "500Gi",
        }
        if self.pool.gpu is not None:
            res[GPU_RESOURCE] = str(self.pool.gpu.count)
        return res

    def manifest(self) -> dict[str, Any]:
        """The Node object; status is accepted on create, as when a kubelet registers."""
        taints = [dict(GPU_TAINT)] if self.pool.gpu is not None else []
        if self.mode == "kwok":
            taints.append(dict(SIMULATED_TAINT))
        spec: dict[str, Any] = {"taints": taints} if taints else {}
        annotations = {"node.alpha.kubernetes.io/ttl": "0"}
        if self.mode == "kwok":
            annotations["kwok.x-k8s.io/node"] = "fake"
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": self.labels(), "annotations": annotations},
            "spec": spec,
            "status": {
                "capacity": self.resources(),
                "allocatable": self.resources(),
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "kubeletVersion": f"mlms-{self.mode}",
                    "containerRuntimeVersion": f"mlms-{self.mode}://0",
                    "kernelVersion": "",
                    "kubeProxyVersion": "",
                    "osImage": "",
                    "machineID": "",
                    "systemUUID": "",
                    "bootID": "",
                },
            },
        }


def all_nodes(pools: tuple[NodePool, ...] = POOLS) -> list[SimNode]:
    """Every node of every pool, named `<prefix>-<mode>-<index within mode>`."""
    nodes: list[SimNode] = []
    for pool in pools:
        seen: dict[str, int] = {}
        for mode in pool.modes:
            index = seen.get(mode, 0)
            seen[mode] = index + 1
            nodes.append(SimNode(f"{pool.prefix}-{mode}-{index}", mode, pool))
    return nodes


def exec_nodes(pools: tuple[NodePool, ...] = POOLS) -> list[SimNode]:
    return [n for n in all_nodes(pools) if n.mode == "exec"]
