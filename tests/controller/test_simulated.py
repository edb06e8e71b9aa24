"""A Job that completed on a simulated (kwok) node: the status names the node, best effort."""

from __future__ import annotations

from typing import Any

from fakes import FakeApiServer, FakeKube, Request
from mlmodelscope.contract.kube import KubeError, pod_path
from mlmodelscope.controller import simulated

KWOK_NODE = {"metadata": {"name": "h100-kwok-0", "annotations": {"kwok.x-k8s.io/node": "fake"}}}
LABELLED_NODE = {"metadata": {"name": "n", "labels": {"mlmodelscope.io/simulation": "kwok"}}}
REAL_NODE = {"metadata": {"name": "cpu-exec-0", "labels": {"mlmodelscope.io/simulation": "exec"}}}


def cluster(namespace: str, pods: list[dict[str, Any]], *nodes: dict[str, Any]) -> FakeKube:
    """An API server holding the Job e-g1's ``pods``, another Job's pod on the kwok node
    (which the helper must not read), and the ``nodes``; the operator's client on it."""
    server = FakeApiServer()
    server.add_namespace(namespace)
    for index, body in enumerate([*pods, pod("h100-kwok-0")]):
        job_name = "e-g1" if index < len(pods) else "f-g1"
        meta = {"name": f"{job_name}-{index}", "labels": {simulated.JOB_NAME_LABEL: job_name}}
        server.seed(pod_path(namespace), {**body, "metadata": meta})
    for node in nodes:
        server.seed("/api/v1/nodes", node)
    return FakeKube(server)


def pod(node: str | None) -> dict[str, Any]:
    return {"spec": {"nodeName": node} if node else {}}


def test_kwok_and_dev_cluster_nodes_are_simulated_others_are_not() -> None:
    assert simulated.is_simulated(KWOK_NODE)
    assert simulated.is_simulated(LABELLED_NODE)
    assert not simulated.is_simulated(REAL_NODE)
    assert not simulated.is_simulated({"metadata": {}})


def test_a_pod_on_a_kwok_node_gives_simulated_node_naming_it() -> None:
    kube = cluster("team-a", [pod("h100-kwok-0")], KWOK_NODE, REAL_NODE)
    reason, message = simulated.missing_results(kube, "team-a", "e-g1")
    assert reason == "SimulatedNode"
    assert "h100-kwok-0" in message and "does not run containers" in message
    assert "e-g1" in message
    assert kube.requests == {("list", "pods"): 1, ("get", "nodes"): 1}


def test_real_nodes_unscheduled_pods_and_gone_nodes_keep_results_missing() -> None:
    for pods in ([], [pod(None)], [pod("cpu-exec-0")], [pod("deleted-node")]):
        kube = cluster("ns", pods, REAL_NODE, KWOK_NODE)
        assert simulated.missing_results(kube, "ns", "e-g1") is None


def test_forbidden_nodes_in_a_namespaced_install_are_no_error() -> None:
    kube = cluster("ns", [pod("n")], LABELLED_NODE)

    def forbid_nodes(request: Request) -> None:
        if request.target.resource == "nodes":
            raise KubeError(403, "GET", request.path, '{"reason": "Forbidden"}')

    kube.server.before = forbid_nodes
    assert simulated.missing_results(kube, "ns", "e-g1") is None
    assert kube.requests[("get", "nodes")] == 1


def test_pods_the_caller_listed_are_not_listed_again() -> None:
    kube = cluster("team-a", [pod("h100-kwok-0")], KWOK_NODE)
    listed = [pod("h100-kwok-0")]
    reason, _ = simulated.missing_results(kube, "team-a", "e-g1", pods=listed) or ("", "")
    assert reason == "SimulatedNode"
    assert kube.requests == {("get", "nodes"): 1}


def test_a_node_is_read_once_while_what_it_said_is_believed() -> None:
    kube = cluster("team-a", [pod("h100-kwok-0")], KWOK_NODE)
    now = [0.0]
    nodes = simulated.SimulatedNodes(clock=lambda: now[0])
    for t in (0.0, 10.0, simulated.NODE_KEPT_S - 1):
        now[0] = t
        assert simulated.simulated_node(kube, "team-a", "e-g1", nodes=nodes) == "h100-kwok-0"
    assert kube.requests[("get", "nodes")] == 1
    now[0] = simulated.NODE_KEPT_S + 1  # then read again: a new node may carry the name
    assert simulated.simulated_node(kube, "team-a", "e-g1", nodes=nodes) == "h100-kwok-0"
    assert kube.requests[("get", "nodes")] == 2
    assert kube.requests[("list", "pods")] == 4
