"""The operator's API client keeps a connection open per thread that may call at once
(contract/kube.py POOL_SIZE), in a pod and from a kubeconfig alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import Configuration
from kubernetes.config import incluster_config, kube_config

from mlmodelscope.contract.kube import (
    POOL_SIZE,
    Kube,
    KubeError,
    configmap_path,
    request_kind,
    throttle_credential_refresh,
)
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


def in_a_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A service account's token and CA in ``tmp_path``, the API server's address in the
    environment, as a pod has them."""
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_text("not parsed until the first request")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")


def test_a_client_in_a_pod_keeps_a_connection_per_operator_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_a_pod(tmp_path, monkeypatch)
    kube = Kube.in_cluster(str(tmp_path / "token"), str(tmp_path / "ca.crt"))
    assert kube.api_client.configuration.host == "https://10.0.0.1:443"
    assert pool_size(kube) == POOL_SIZE


def test_a_client_in_a_pod_checks_its_token_every_few_seconds_not_every_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_a_pod(tmp_path, monkeypatch)
    applied: list[str] = []
    real = incluster_config.InClusterConfigLoader._set_config

    def counted(loader: Any, configuration: Any) -> None:
        applied.append(loader.token)
        real(loader, configuration)

    monkeypatch.setattr(incluster_config.InClusterConfigLoader, "_set_config", counted)
    kube = Kube.in_cluster(str(tmp_path / "token"), str(tmp_path / "ca.crt"))
    applied.clear()
    for _ in range(100):  # what each request asks before it is sent
        settings = kube.api_client.configuration.auth_settings()
    assert settings["BearerToken"]["value"] == "bearer t"
    assert len(applied) == 1  # the loader's hook once, not per request


def test_the_credential_hook_runs_again_after_its_interval_and_stays_throttled() -> None:
    now = [0.0]
    runs: list[float] = []
    configuration = Configuration()

    def loaders_hook(config: Any) -> None:  # as the official loaders do: reinstall itself
        runs.append(now[0])
        config.refresh_api_key_hook = loaders_hook

    configuration.refresh_api_key_hook = loaders_hook
    throttle_credential_refresh(configuration, every_s=5.0, clock=lambda: now[0])
    for t in (0.0, 1.0, 4.9, 5.0, 6.0, 10.5):
        now[0] = t
        configuration.refresh_api_key_hook(configuration)
    assert runs == [0.0, 5.0, 10.5]
    assert configuration.refresh_api_key_hook is not loaders_hook


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


class _Answer:
    def __init__(self, status: int, data: bytes) -> None:
        self.status = status
        self.data = data

    def read(self) -> None:
        pass


class _Client:
    """What :class:`Kube` uses of ``kubernetes.client.ApiClient``, answering ``data``."""

    def __init__(self, data: bytes, status: int = 200) -> None:
        self.answer = _Answer(status, data)
        self.sent: list[tuple[str, str, dict[str, str]]] = []

    def param_serialize(
        self, *, method: str, resource_path: str, header_params: dict[str, str], **_: object
    ) -> tuple[str, str, dict[str, str], None, None]:
        return method, resource_path, header_params, None, None

    def call_api(
        self, method: str, url: str, headers: dict[str, str], *_: object, **__: object
    ) -> _Answer:
        self.sent.append((method, url, headers))
        return self.answer


def test_a_text_read_asks_for_text_and_answers_it_undecoded() -> None:
    """``pods/NAME/log`` answers plain text, which ``request`` would try to decode as JSON."""
    client = _Client(b"line 1\n{not json\n")
    text = Kube(client).text("/api/v1/namespaces/a/pods/p/log", {"tailLines": "2"})
    assert text == "line 1\n{not json\n"
    [(method, url, headers)] = client.sent
    assert (method, url) == ("GET", "/api/v1/namespaces/a/pods/p/log?tailLines=2")
    assert headers["Accept"].startswith("text/plain")
    assert Kube(_Client(b'{"a": 1}')).request("GET", "/api/v1/namespaces/a/pods/p") == {"a": 1}
    with pytest.raises(KubeError) as refused:
        Kube(_Client(b'{"message": "waiting to start"}', 400)).text("/api/v1/x")
    assert (refused.value.status, refused.value.message) == (400, "waiting to start")
