"""The Launch form's hardware choice (issue 32): the cluster's Nodes grouped into node pools
(pure), read once and kept a while, offered on the form of a server that launches into the
cluster (choosing one fills the node selector and tolerations), a form that says why there
are none when the server may not list Nodes (403) or runs launches itself, and a launch that
carries the chosen nodeSelector and tolerations into the ModelEvaluations it creates, its
problems on the hardware fields."""

from __future__ import annotations

import json
from typing import Any, Final

import pytest
import yaml
from launch_fixtures import DIGITS, NS, WRITE, cluster_client, launch_client, launch_in, node

from fakes import FakeApiServer, FakeKube, Request
from mlmodelscope.contract.kube import KubeError
from mlmodelscope.server.node_pools import (
    NODES_PATH,
    NodePool,
    NodePools,
    PoolListing,
    Taint,
    group_pools,
)

POOL: Final = "mlmodelscope.io/pool"
GKE: Final = "cloud.google.com/gke-nodepool"
A100: Final = "NVIDIA-A100-SXM4-80GB"
GPU_TAINT: Final = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
KWOK_TAINT: Final = {"key": "mlmodelscope.io/simulation", "value": "kwok", "effect": "NoSchedule"}
CORDONED: Final = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
NODES: Final = [
    node("cpu-1", {POOL: "cpu"}),
    node("cpu-2", {POOL: "cpu"}, taints=[KWOK_TAINT, CORDONED]),
    node("a100-1", {POOL: "gpu-a100", "nvidia.com/gpu.product": A100}, gpus=8,
         taints=[GPU_TAINT]),
    node("a100-2", {POOL: "gpu-a100", "nvidia.com/gpu.product": A100}, gpus=8,
         taints=[GPU_TAINT, {"key": "dedicated", "effect": "NoExecute"}]),
    node("gke-1", {POOL: "", GKE: "h100-pool"}, gpus="8"),  # an empty label: the next one
    node("gke-2", {GKE: "h100-pool"}, gpus="lots"),  # no whole number: no GPUs counted
    node("both", {GKE: "default-pool", POOL: "cpu"}),  # the project's own label first
    node("bare"),
]  # fmt: skip
A100_POOL: Final = NodePool(
    label=POOL,
    name="gpu-a100",
    nodes=2,
    gpus=16,
    gpu_products=(A100,),
    taints=(Taint("dedicated", "", "NoExecute"), Taint("nvidia.com/gpu", "present", "NoSchedule")),
)
A100_HARDWARE: Final[dict[str, Any]] = {
    "nodeSelector": {POOL: "gpu-a100"},
    "tolerations": [
        {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
    ],
}


def test_nodes_are_grouped_by_their_first_pool_label() -> None:
    assert group_pools(NODES) == PoolListing(
        pools=(
            NodePool(GKE, "h100-pool", nodes=2, gpus=8, gpu_products=(), taints=()),
            NodePool(POOL, "cpu", nodes=3, gpus=0, gpu_products=(),
                     taints=(Taint("mlmodelscope.io/simulation", "kwok", "NoSchedule"),)),
            A100_POOL,
        ),
        unpooled=1,
    )  # fmt: skip
    assert group_pools([]) == PoolListing()


def test_a_pool_lands_a_launch_on_its_nodes_and_tolerates_their_taints() -> None:
    assert A100_POOL.hardware() == A100_HARDWARE
    cpu = NodePool(POOL, "cpu", 1, 0, (), ())
    assert cpu.hardware() == {"nodeSelector": {POOL: "cpu"}}  # no taints: no tolerations
    assert [t.text() for t in A100_POOL.taints] == [
        "dedicated:NoExecute",
        "nvidia.com/gpu=present:NoSchedule",
    ]


def _refuse_nodes(status: int, message: str) -> Any:
    """A ``before`` hook: the API server refuses every LIST of Nodes with ``status``."""

    def refuse(request: Request) -> None:
        if request.key == ("list", "nodes"):
            body = {"kind": "Status", "code": status, "reason": "Forbidden", "message": message}
            raise KubeError(status, request.method, request.path, json.dumps(body))

    return refuse


FORBIDDEN: Final = (
    'nodes is forbidden: User "system:serviceaccount:mlmodelscope-system:mlms-mlmodelscope-'
    'server" cannot list resource "nodes" in API group "" at the cluster scope'
)


def _api(*nodes: dict[str, Any]) -> FakeApiServer:
    api = FakeApiServer()
    api.add_namespace(NS)
    for each in nodes:
        api.seed(NODES_PATH, each)
    return api


def test_the_nodes_are_listed_once_for_a_while_and_a_refusal_is_kept_too() -> None:
    api = _api(*NODES)
    now = [100.0]
    pools = NodePools(FakeKube(api), cache_s=30, clock=lambda: now[0])
    assert pools.read() == group_pools(NODES)
    now[0] += 29
    pools.read()
    assert api.requests[("list", "nodes")] == 1
    now[0] += 2
    api.before = _refuse_nodes(403, FORBIDDEN)
    refused = pools.read()
    assert (refused.pools, refused.status, refused.problem) == ((), 403, FORBIDDEN)
    pools.read()
    assert api.requests[("list", "nodes")] == 2  # the refusal is kept as long

    def away(request: Request) -> None:
        raise OSError("connection refused")

    api.before = away
    now[0] += 31
    gone = pools.read()
    assert gone.status is None and gone.problem is not None
    assert "did not answer: connection refused" in gone.problem


def test_the_form_offers_the_clusters_node_pools(sqlite_url: str) -> None:
    with cluster_client(sqlite_url, _api(*NODES)) as client:
        text = client.get("/launch").text
        assert '<select name="pool"><option value="">any node (no selector)</option>' in text
        assert (
            f'<option value="{POOL}=gpu-a100" data-gpus="16" '
            f'data-node-selector="{POOL}=gpu-a100" '
            'data-tolerations="dedicated:NoExecute\nnvidia.com/gpu=present:NoSchedule">'
            f"gpu-a100: 2 nodes, 16 GPUs ({A100})</option>"
        ) in text
        assert f'data-tolerations="">{"h100-pool: 2 nodes, 8 GPUs"}</option>' in text
        assert "cpu: 3 nodes</option>" in text
        assert text.count("<tr><td>") == 3  # the pools' table
        assert "1 node without a pool label cannot be chosen here" in text
        assert 'name="node_selector"' in text and 'name="tolerations"' in text
        for field in ("hardware.nodeSelector", "hardware.tolerations", "hardware"):
            assert f'data-errors-for="{field}"' in text
        client.get("/launch")
        api = client.app.state.node_pools.kube.server  # type: ignore[attr-defined]
        assert api.requests[("list", "nodes")] == 1  # one LIST serves page loads a while


def test_a_server_that_may_not_list_nodes_asks_for_the_selector_itself(sqlite_url: str) -> None:
    api = _api(*NODES)
    api.before = _refuse_nodes(403, FORBIDDEN)
    with cluster_client(sqlite_url, api) as client:
        page = client.get("/launch")
        assert page.status_code == 200
        text = page.text
        assert "may not list the cluster&#x27;s Nodes (HTTP 403: nodes is forbidden" in text
        assert "ClusterRole &lt;release&gt;-mlmodelscope-server-nodes) unless " in text
        assert "server.launch.nodePools is false" in text
        assert 'name="pool"' not in text and 'id="node-pools"' not in text
        assert 'name="node_selector"' in text and 'name="tolerations"' in text
    with cluster_client(sqlite_url, _api(node("bare"))) as client:
        text = client.get("/launch").text
        assert "No node carries a pool label" in text and "1 node without one" in text
        assert 'name="pool"' not in text and 'name="node_selector"' in text


def test_a_local_server_offers_no_hardware_fields(sqlite_url: str) -> None:
    with launch_client(sqlite_url, workers=0) as client:
        text = client.get("/launch").text
        assert "node selectors and tolerations choose Kubernetes nodes" in text
        assert 'name="node_selector"' not in text and 'name="pool"' not in text
        assert client.app.state.node_pools is None  # type: ignore[attr-defined]


def test_a_launch_carries_the_pools_selector_and_tolerations_into_its_evaluations(
    sqlite_url: str,
) -> None:
    api = _api(*NODES)
    form = {**DIGITS, "frameworks": ["onnxruntime", "pytorch"], "hardware": A100_HARDWARE}
    with cluster_client(sqlite_url, api) as client:
        preview = client.post("/api/v1/launches?dry_run=true", json=form, headers=WRITE)
        assert preview.status_code == 200, preview.text
        documents = list(yaml.safe_load_all(preview.json()["yaml"]))
        assert [d["spec"]["hardware"] for d in documents] == [A100_HARDWARE] * 2
        assert f"nodeSelector: {{{POOL}: gpu-a100}}" in preview.json()["yaml"]
        items = launch_in(client, form)
        created = {o["metadata"]["name"]: o for o in api.of("modelevaluations", NS)}
        assert sorted(created) == sorted(i["evaluation"] for i in items)
        for obj in created.values():
            assert obj["spec"]["hardware"] == A100_HARDWARE

        sweep = client.post(
            "/api/v1/launches?dry_run=true", json={**form, "kind": "sweep"}, headers=WRITE
        )
        assert sweep.status_code == 200, sweep.text
        [document] = yaml.safe_load_all(sweep.json()["yaml"])
        assert document["spec"]["template"]["hardware"] == A100_HARDWARE


@pytest.mark.parametrize("kind", ["evaluation", "sweep"])
@pytest.mark.parametrize(
    ("hardware", "loc", "says"),
    [
        ({"tolerations": [{"key": "dedicated", "effect": "Sometimes"}]},
         ["body", "hardware", "tolerations", 0, "effect"], "Input should be 'NoSchedule'"),
        ({"tolerations": [{"key": "dedicated", "operator": "Exists", "value": "x"}]},
         ["body", "hardware", "tolerations", 0, "value"], "leave value empty"),
        ({"nodeSelector": {POOL: 7}}, ["body", "hardware", "nodeSelector"], "valid string"),
        ({"nodeSelector": {"Bad Key!": "gpu"}}, ["body", "hardware", "nodeSelector"],
         "key 'Bad Key!' is not a label key"),
    ],
)  # fmt: skip
def test_a_wrong_hardware_field_is_refused_on_that_field(
    sqlite_url: str, kind: str, hardware: dict[str, Any], loc: list[Any], says: str
) -> None:
    """The spec's own checks, located on the form's hardware field (a sweep's template
    too): the page shows each next to the node selector or the tolerations."""
    with launch_client(sqlite_url, workers=0) as client:
        form = {**DIGITS, "kind": kind, "hardware": hardware}
        answer = client.post("/api/v1/launches?dry_run=true", json=form, headers=WRITE)
        assert answer.status_code == 422, answer.text
        [problem] = answer.json()["detail"]
        assert problem["loc"][: len(loc)] == loc  # the page shows it by loc[1:3]
        assert says in problem["msg"]
