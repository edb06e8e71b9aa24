"""Per-evaluation results access on the real control plane (issue 15, defect 9, second half).

The operator runs with its defaults: each evaluation's pods run as the evaluation's own
ServiceAccount, whose Role may patch that evaluation's results ConfigMap and nothing else. The
agents really run on the exec node with their pod's service-account token (the exec kubelet
requests it from the API server for the pod's ServiceAccount), and the API server's authorizer
decides what each account may do.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster_evaluations import apply, evaluation, events_with, get, gone, wait_phase
from operator_process import OperatorProcess

from mlmodelscope.contract.kube import Kube, KubeError, configmap_path, namespaced, pod_path
from mlmodelscope.contract.wire import RESULT_KEY, SUMMARY_KEY
from mlmodelscope.controller import names
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

RBAC = "rbac.authorization.k8s.io"


def access_paths(namespace: str, name: str) -> list[str]:
    """The evaluation's ServiceAccount, Role and RoleBinding."""
    writer = names.results_writer_name(name)
    return [
        namespaced(namespace, "serviceaccounts", names.agent_service_account_name(name)),
        namespaced(namespace, "roles", writer, group=RBAC),
        namespaced(namespace, "rolebindings", writer, group=RBAC),
    ]


def can_i(
    cluster: Cluster, namespace: str, account: str, *args: str, where: str | None = None
) -> bool:
    """`kubectl auth can-i` as the ServiceAccount (in its namespace, or ``where``): the API
    server's authorizer answers."""
    who = f"--as=system:serviceaccount:{namespace}:{account}"
    proc = cluster.kubectl("auth", "can-i", *args, "-n", where or namespace, who, check=False)
    answer = proc.stdout.strip()
    assert answer in ("yes", "no"), proc.stdout + proc.stderr
    return answer == "yes"


def kube_as(cluster: Cluster, namespace: str, account: str) -> Kube:
    """The same client the agent uses, authenticated with a fresh token of the ServiceAccount
    (what the kubelet mounts into its pods)."""
    from kubernetes import client

    token = cluster.kubectl("create", "token", account, "-n", namespace).stdout.strip()
    configuration = client.Configuration()
    configuration.host = cluster.server
    configuration.ssl_ca_cert = str(cluster.ca_cert)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return Kube(client.ApiClient(configuration))


def pods_of(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    return kube.list(pod_path(namespace), f"{names.LABEL_EVALUATION}={name}")


def test_each_evaluation_publishes_its_own_results_and_may_write_no_others(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    digits_onnx: Path,
) -> None:
    """Two evaluations in one namespace both succeed with their full result in their results
    ConfigMap, each pod running as its own evaluation's ServiceAccount; the first's account may
    patch its own results ConfigMap and no other (the authorizer, and a real patch with its
    token refused with 403); deleting the evaluation garbage-collects its account."""
    operator = start_operator()
    for name in ("first", "second"):
        apply(cluster, namespace, evaluation(name, digits_onnx))
    uids = {}
    for name in ("first", "second"):
        ev = wait_phase(kube, namespace, name, ("Succeeded", "Failed"), 180)
        assert ev["status"]["phase"] == "Succeeded", ev["status"].get("message")
        uids[name] = ev["metadata"]["uid"]
        results = kube.get(configmap_path(namespace, f"{name}-results"))
        assert set(results.get("data") or {}) >= {RESULT_KEY, SUMMARY_KEY}, "the agent's patch"
        for pod in pods_of(kube, namespace, name):
            assert pod["spec"]["serviceAccountName"] == f"{name}-agent"
        for path in access_paths(namespace, name):
            owners = kube.get(path)["metadata"]["ownerReferences"]
            assert [o["uid"] for o in owners] == [uids[name]], path

    account = "first-agent"
    assert can_i(cluster, namespace, account, "patch", "configmap/first-results")
    assert not can_i(cluster, namespace, account, "patch", "configmap/second-results")
    assert not can_i(cluster, namespace, account, "patch", "configmaps")
    for verb in ("get", "update", "delete"):
        assert not can_i(cluster, namespace, account, verb, "configmap/first-results"), verb
    assert not can_i(cluster, namespace, account, "create", "configmaps")
    assert not can_i(
        cluster, namespace, account, "patch", "configmap/first-results", where="default"
    )

    as_first = kube_as(cluster, namespace, account)
    probe = {"metadata": {"labels": {"probe": "first-agent"}}}
    as_first.merge_patch(configmap_path(namespace, "first-results"), probe)  # the token works
    with pytest.raises(KubeError) as refused:
        as_first.merge_patch(configmap_path(namespace, "second-results"), probe)
    assert refused.value.status == 403, refused.value
    second = kube.get(configmap_path(namespace, "second-results"))
    assert "probe" not in (second["metadata"].get("labels") or {})
    assert "forbidden" not in operator.tail(400).lower()

    cluster.kubectl("delete", "meval", "first", "-n", namespace)
    for path in access_paths(namespace, "first"):
        wait_for(f"{path} to be garbage-collected", lambda p=path: gone(kube, p), 60)
    assert all(kube.get(path) for path in access_paths(namespace, "second"))


def test_a_recreated_evaluation_does_not_adopt_an_account_it_does_not_own(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    digits_onnx: Path,
) -> None:
    """A ServiceAccount with the evaluation's account name but another owner (an earlier
    evaluation of the same name, not yet garbage-collected) is not adopted: no Job runs as it;
    the operator waits for the garbage collector, then creates and uses its own."""
    operator = start_operator(MLMS_OPERATOR_RESYNC_SECONDS="1")
    owner = kube.create(
        configmap_path(namespace),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "earlier-owner"}},
    )
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "earlier-owner",
        "uid": owner["metadata"]["uid"],
    }
    kube.create(
        namespaced(namespace, "serviceaccounts"),
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "twin-agent", "ownerReferences": [reference]},
        },
    )
    apply(cluster, namespace, evaluation("twin", digits_onnx))
    wait_for(
        "the operator to report the foreign ServiceAccount",
        lambda: "ServiceAccount twin-agent belongs to another object" in operator.tail(200),
        60,
    )
    status = get(kube, namespace, "twin").get("status") or {}
    assert status.get("jobName") is None and status.get("phase") is None, status
    [retrying, *_] = [  # `kubectl describe` says why it waits
        e for e in events_with(kube, namespace, "twin", "ReconcileRetrying")
        if e["reason"] == "ReconcileRetrying"
    ]  # fmt: skip
    assert retrying["type"] == "Warning"
    assert "ServiceAccount twin-agent belongs to another object" in retrying["message"]
    cluster.kubectl("delete", "configmap", "earlier-owner", "-n", namespace)
    ev = wait_phase(kube, namespace, "twin", ("Succeeded", "Failed"), 180)
    assert ev["status"]["phase"] == "Succeeded", ev["status"].get("message")
    for path in access_paths(namespace, "twin"):
        owners = kube.get(path)["metadata"]["ownerReferences"]
        assert [o["uid"] for o in owners] == [ev["metadata"]["uid"]], path
