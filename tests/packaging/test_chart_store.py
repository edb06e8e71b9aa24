"""The chart's results store and results server: where the store's URL comes from (an
existing Secret, a URL in values, the bundled trial PostgreSQL), the operator pointed at it,
`mlms serve` as an optional Deployment that refuses to render without a read token. Rendered
with `helm template`, validated against the Kubernetes schemas, no cluster."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from chart_helpers import CHART, NAMESPACE, Manifest, find, one, render

from mlmodelscope.controller.settings import OperatorSettings
from mlmodelscope.devcluster import versions

EXTERNAL = ("store.existingSecret=results-db", "store.secretKey=dsn")
BUNDLED = ("postgresql.enabled=true",)
SERVER = ("server.enabled=true", "server.auth.existingSecret=results-tokens")
CASES = {
    "external-secret": EXTERNAL,
    "url-in-values": ("store.url=postgresql://mlms:pw@db.example.com:5432/results",),
    "bundled-postgresql": BUNDLED,
    "server-external": EXTERNAL + SERVER + ("server.jaegerUrl=http://jaeger-query:16686",),
    "server-bundled-read-only": BUNDLED + SERVER + ("server.auth.writeToken=false",),
}
APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
KUBE_VERSIONS = sorted(
    {kubernetes_validate.utils.latest_version(), versions.KUBERNETES_VERSION.lstrip("v")}
)


def _operator(manifests: list[Manifest]) -> dict[str, Any]:
    deployment = one(manifests, "Deployment", "mlms-mlmodelscope-operator")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _secret_data(manifest: Manifest) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in manifest["data"].items()}


def _fails(helm: Path, *sets: str) -> str:
    args = [str(helm), "template", "mlms", str(CHART), "--namespace", NAMESPACE]
    for item in sets:
        args += ["--set", item]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0, "rendered, but should have failed"
    return proc.stderr


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("sets", CASES.values(), ids=CASES.keys())
def test_store_and_server_manifests_validate(
    helm: Path, sets: tuple[str, ...], kube_version: str
) -> None:
    manifests = render(helm, sets=sets, kube_version=f"v{kube_version}")
    for manifest in manifests:
        if manifest["kind"] in ("ServiceMonitor", "ClusterKopfPeering", "KopfPeering"):
            continue
        try:
            kubernetes_validate.validate(manifest, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{manifest['kind']}/{manifest['metadata']['name']}: {where}: {exc}")


def test_by_default_no_store_no_server_no_database(helm: Path) -> None:
    manifests = render(helm)
    assert not find(manifests, "Secret") and not find(manifests, "StatefulSet")
    assert [d["metadata"]["name"] for d in find(manifests, "Deployment")] == [
        "mlms-mlmodelscope-operator"
    ]
    env = _env(_operator(manifests))
    assert "MLMS_OPERATOR_STORE_URL" not in env
    assert "MLMS_OPERATOR_RECORD_RETRY_SECONDS" not in env


def test_operator_reads_the_store_url_from_an_existing_secret(helm: Path) -> None:
    manifests = render(helm, sets=(*EXTERNAL, "store.recordRetrySeconds=45"))
    assert not find(manifests, "Secret")  # the chart never copies the user's Secret
    env = _env(_operator(manifests))
    assert env["MLMS_OPERATOR_STORE_URL"] == {"secretKeyRef": {"name": "results-db", "key": "dsn"}}
    assert env["MLMS_OPERATOR_RECORD_RETRY_SECONDS"] == "45"
    # what the operator's own settings parser makes of it (the Secret's value filled in)
    config = one(manifests, "ConfigMap", "mlms-mlmodelscope-operator")["data"]
    variables = {
        **config,
        "MLMS_OPERATOR_STORE_URL": "postgresql://mlms:pw@db:5432/results",
        "MLMS_OPERATOR_RECORD_RETRY_SECONDS": env["MLMS_OPERATOR_RECORD_RETRY_SECONDS"],
    }
    settings = OperatorSettings.from_env(variables)
    assert settings.store_url == "postgresql://mlms:pw@db:5432/results"
    assert settings.record_retry_seconds == 45.0


def test_a_url_in_values_goes_into_a_secret(helm: Path) -> None:
    url = "postgresql://mlms:pw@db.example.com:5432/results"
    manifests = render(helm, sets=(f"store.url={url}",))
    secret = one(manifests, "Secret", "mlms-mlmodelscope-store")
    assert _secret_data(secret) == {"url": url}
    env = _env(_operator(manifests))
    assert env["MLMS_OPERATOR_STORE_URL"] == {
        "secretKeyRef": {"name": "mlms-mlmodelscope-store", "key": "url"}
    }
    assert env["MLMS_OPERATOR_RECORD_RETRY_SECONDS"] == "30"


def test_bundled_postgresql_for_trials(helm: Path) -> None:
    manifests = render(helm, sets=BUNDLED)
    name = "mlms-mlmodelscope-postgresql"
    stateful = one(manifests, "StatefulSet", name)
    pod = stateful["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == f"ghcr.io/mlmodelscope/postgresql:{APP_VERSION}"
    assert pod["securityContext"]["runAsNonRoot"] is True
    # the image's postgres user and group (images/postgresql.Dockerfile)
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (999, 999)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    # on the read-only root, the image writes PGDATA (in a subfolder of the data volume) and
    # the socket folder alone: both are volumes
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/var/lib/postgresql/data"] == "data"
    assert mounts["/var/run/postgresql"] == "run"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes["run"]
    assert pod["automountServiceAccountToken"] is False
    env = _env(container)
    assert env["POSTGRES_PASSWORD"] == {"secretKeyRef": {"name": name, "key": "password"}}
    assert env["POSTGRES_USER"] == env["POSTGRES_DB"] == "mlmodelscope"
    assert env["PGDATA"] == "/var/lib/postgresql/data/pgdata"
    (claim,) = stateful["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "8Gi"
    service = one(manifests, "Service", name)
    assert service["spec"]["ports"][0]["port"] == 5432
    assert stateful["spec"]["serviceName"] == name
    password = _secret_data(one(manifests, "Secret", name))["password"]
    assert len(password) == 32 and password.isalnum()  # generated
    url = _secret_data(one(manifests, "Secret", "mlms-mlmodelscope-store"))["url"]
    assert url == f"postgresql://mlmodelscope:{password}@{name}.{NAMESPACE}.svc:5432/mlmodelscope"
    assert _env(_operator(manifests))["MLMS_OPERATOR_STORE_URL"] == {
        "secretKeyRef": {"name": "mlms-mlmodelscope-store", "key": "url"}
    }
    given = render(
        helm,
        sets=(
            *BUNDLED,
            "postgresql.auth.password=trial-pw",
            "postgresql.persistence.enabled=false",
        ),
    )
    assert _secret_data(one(given, "Secret", name))["password"] == "trial-pw"
    assert "trial-pw@" in _secret_data(one(given, "Secret", "mlms-mlmodelscope-store"))["url"]
    stateful = one(given, "StatefulSet", name)
    assert "volumeClaimTemplates" not in stateful["spec"]
    volumes = {v["name"]: v for v in stateful["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes["data"]


def test_bundled_postgresql_image_is_this_projects_by_tag_or_digest(helm: Path) -> None:
    """The image of images/postgresql.Dockerfile, as the bake file tags it: the chart's
    appVersion by default, another tag, or a digest (which wins over the tag)."""
    bake = json.loads((CHART.parents[1] / "images" / "docker-bake.json").read_text())
    tag = bake["target"]["postgresql"]["tags"][0]
    tag = tag.replace("${REGISTRY}", bake["variable"]["REGISTRY"]["default"])
    assert (
        tag.replace("${VERSION}", APP_VERSION) == f"ghcr.io/mlmodelscope/postgresql:{APP_VERSION}"
    )

    def image(*sets: str) -> str:
        stateful = one(
            render(helm, sets=(*BUNDLED, *sets)), "StatefulSet", "mlms-mlmodelscope-postgresql"
        )
        return str(stateful["spec"]["template"]["spec"]["containers"][0]["image"])

    digest = "sha256:" + "ab" * 32
    assert image("postgresql.image.tag=0.2.0") == "ghcr.io/mlmodelscope/postgresql:0.2.0"
    assert image(f"postgresql.image.digest={digest}", "postgresql.image.tag=0.2.0") == (
        f"ghcr.io/mlmodelscope/postgresql@{digest}"
    )
    assert "values don't meet the specifications" in _fails(
        helm, *BUNDLED, "postgresql.image.digest=sha256:short"
    )


def test_server_runs_mlms_serve_with_tokens_from_the_secret(helm: Path) -> None:
    manifests = render(helm, sets=CASES["server-external"])
    deployment = one(manifests, "Deployment", "mlms-mlmodelscope-server")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == _operator(manifests)["image"]  # the operator image
    assert container["command"] == ["mlms"]
    assert container["args"] == [
        "serve",
        "--host=0.0.0.0",
        "--port=8080",
        "--read-token-file=/var/run/secrets/mlmodelscope/read-token",
        "--write-token-file=/var/run/secrets/mlmodelscope/write-token",
        "--jaeger-url=http://jaeger-query:16686",
    ]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert _env(container)["MLMS_STORE_URL"] == {
        "secretKeyRef": {"name": "results-db", "key": "dsn"}
    }
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tokens"]["secret"]["secretName"] == "results-tokens"
    assert [i["key"] for i in volumes["tokens"]["secret"]["items"]] == [
        "read-token",
        "write-token",
    ]
    # non-root and locked down, as the operator
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert container["securityContext"] == _operator(manifests)["securityContext"]
    assert pod["automountServiceAccountToken"] is False
    service = one(manifests, "Service", "mlms-mlmodelscope-server")
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}
    ]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    read_only = render(helm, sets=CASES["server-bundled-read-only"])
    (container,) = one(read_only, "Deployment", "mlms-mlmodelscope-server")["spec"]["template"][
        "spec"
    ]["containers"]
    assert not any(a.startswith("--write-token-file") for a in container["args"])
    assert not any(a.startswith("--jaeger-url") for a in container["args"])


def test_server_without_a_token_secret_or_a_store_does_not_render(helm: Path) -> None:
    error = _fails(helm, "server.enabled=true", *EXTERNAL)
    assert "server.auth.existingSecret" in error and "read token" in error
    error = _fails(helm, *SERVER)
    assert "server.enabled needs a results store" in error


def test_two_stores_at_once_do_not_render(helm: Path) -> None:
    error = _fails(helm, *EXTERNAL, *BUNDLED)
    assert "set only one of store.url, store.existingSecret and postgresql.enabled" in error


@pytest.mark.parametrize(
    "bad",
    [
        "store.url=mysql://db/x",
        "store.recordRetrySeconds=0",
        "postgresql.auth.password=p@ss/word",
        "server.auth.existingSecret=Not_A_Name",
        "server.jaegerUrl=jaeger:16686",
    ],
)
def test_schema_rejects_bad_store_and_server_values(helm: Path, bad: str) -> None:
    assert "values don't meet the specifications" in _fails(helm, bad)


def test_operator_may_list_configmaps_with_a_store(helm: Path) -> None:
    """It lists the results still waiting to be recorded, by label (and deletes each once
    recorded); without a store there are none, and no such verbs (test_chart.py)."""
    for values in ((), (CHART / "ci" / "namespaced-values.yaml",)):
        manifests = render(helm, values, EXTERNAL)
        seen = 0
        for role in find(manifests, "ClusterRole") + find(manifests, "Role"):
            if role["metadata"]["name"] != "mlms-mlmodelscope-operator":
                continue
            for rule in role["rules"]:
                if rule["resources"] == ["configmaps"]:
                    assert "list" in rule["verbs"]
                    seen += 1
        assert seen
