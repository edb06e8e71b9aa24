"""A Job that completed on a simulated (kwok) node: the status names the node, best effort."""

from __future__ import annotations

from typing import Any

from mlmodelscope.contract.kube import KubeError
from mlmodelscope.controller import simulated

KWOK_NODE = {"metadata": {"name": "h100-kwok-0", "annotations": {"kwok.x-k8s.io/node": "fake"}}}
LABELLED_NODE = {"metadata": {"name": "n", "labels": {"mlmodelscope.io/simulation": "kwok"}}}
REAL_NODE = {"metadata": {"name": "cpu-exec-0", "labels": {"mlmodelscope.io/simulation": "exec"}}}


class FakeKube:
    """The two reads the helper makes: the Job's pods, then each pod's Node."""

    def __init__(self, pods: list[dict[str, Any]], nodes: dict[str, Any]) -> None:
        self.pods = pods
        self.nodes = nodes
        self.calls: list[str] = []

    def list(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        self.calls.append(f"list {path}?{label_selector}")
        return self.pods

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        self.calls.append(f"get {path}")
        node = self.nodes.get(path.rsplit("/", 1)[1])
        if isinstance(node, Exception):
            raise node
        return node


def pod(node: str | None) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"nodeName": node} if node else {}}


def test_kwok_and_dev_cluster_nodes_are_simulated_others_are_not() -> None:
    assert simulated.is_simulated(KWOK_NODE)
    assert simulated.is_simulated(LABELLED_NODE)
    assert not simulated.is_simulated(REAL_NODE)
    assert not simulated.is_simulated({"metadata": {}})


def test_a_pod_on_a_kwok_node_gives_simulated_node_naming_it() -> None:
    kube = FakeKube([pod("h100-kwok-0")], {"h100-kwok-0": KWOK_NODE})
    reason, message = simulated.missing_results(kube, "team-a", "e-g1")
    assert reason == "SimulatedNode"
    assert "h100-kwok-0" in message and "does not run containers" in message
    assert "e-g1" in message
    assert kube.calls == [
        "list /api/v1/namespaces/team-a/pods?batch.kubernetes.io/job-name=e-g1",
        "get /api/v1/nodes/h100-kwok-0",
    ]


def test_real_nodes_unscheduled_pods_and_gone_nodes_keep_results_missing() -> None:
    nodes = {"cpu-exec-0": REAL_NODE}
    for pods in ([], [pod(None)], [pod("cpu-exec-0")], [pod("deleted-node")]):
        kube = FakeKube(pods, nodes)
        assert simulated.missing_results(kube, "ns", "e-g1") is None


def test_forbidden_nodes_in_a_namespaced_install_are_no_error() -> None:
    forbidden = KubeError(403, "GET", "/api/v1/nodes/n", '{"reason": "Forbidden"}')
    kube = FakeKube([pod("n")], {"n": forbidden})
    assert simulated.missing_results(kube, "ns", "e-g1") is None
