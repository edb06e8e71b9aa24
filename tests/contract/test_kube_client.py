"""The operator's API client keeps a connection open per thread that may call at once
(contract/kube.py POOL_SIZE), in a pod and from a kubeconfig alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes.config import kube_config

from mlmodelscope.contract.kube import POOL_SIZE, Kube

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
