"""The operator's API client keeps a connection open per thread that may call at once
(contract/kube.py POOL_SIZE), in a pod and from a kubeconfig alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes.config import kube_config

from mlmodelscope.contract.kube import POOL_SIZE, Kube, configmap_path, request_kind
from mlmodelscope.devcluster.cluster import Cluster

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def pool_size(kube: Kube) -> int:
    return int(kube.api_client.rest_client.pool_manager.connection_pool_kw["maxsize"])


def test_a_client_from_a_kubeconfig_keeps_a_connection_per_operator_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    # The client reads $KUBECONFIG once, when it is first imported.
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(config))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kube = Kube.from_environment()
    assert kube.api_client.configuration.host == "https://127.0.0.1:6443"
    assert pool_size(kube) == POOL_SIZE > 10  # the client's default on two cores is 10


def test_a_client_in_a_pod_keeps_a_connection_per_operator_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_text("not parsed until the first request")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    kube = Kube.in_cluster(str(tmp_path / "token"), str(tmp_path / "ca.crt"))
    assert kube.api_client.configuration.host == "https://10.0.0.1:443"
    assert pool_size(kube) == POOL_SIZE


@pytest.mark.parametrize(
    ("method", "path", "kind"),
    [
        ("GET", "/api/v1/namespaces/a/configmaps/x", ("get", "configmaps")),
        ("GET", "/api/v1/namespaces/a/pods", ("list", "pods")),
        ("GET", "/apis/mlmodelscope.io/v1alpha1/modelevaluations", ("list", "modelevaluations")),
        (
            "PATCH",
            "/apis/mlmodelscope.io/v1alpha1/namespaces/a/modelevaluations/e/status",
            ("patch", "modelevaluations/status"),
        ),
        ("POST", "/apis/batch/v1/namespaces/a/jobs", ("create", "jobs")),
        ("DELETE", "/apis/batch/v1/namespaces/a/jobs/e-g1", ("delete", "jobs")),
        ("GET", "/api/v1/namespaces/a", ("get", "namespaces")),
        ("GET", "/api/v1/namespaces", ("list", "namespaces")),
        ("GET", "/api/v1/nodes/n1", ("get", "nodes")),
    ],
)
def test_requests_are_named_by_verb_and_resource(
    method: str, path: str, kind: tuple[str, str]
) -> None:
    assert request_kind(method, path) == kind


@pytest.mark.cluster
def test_the_observer_hears_every_request_with_its_status(cluster: Cluster, namespace: str) -> None:
    heard: list[tuple[str, str, int]] = []
    kube = Kube(cluster.api_client(), observer=lambda *request: heard.append(request))
    assert kube.get_or_none(configmap_path(namespace, "missing")) is None
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "heard"}}
    kube.create(configmap_path(namespace), body)
    kube.list(configmap_path(namespace))
    assert heard == [
        ("get", "configmaps", 404),
        ("create", "configmaps", 201),
        ("list", "configmaps", 200),
    ]
