"""The Helm chart installed into the real control plane (mlmodelscope.devcluster).

One namespaced release runs the operator as a pod on the CPU exec node (the exec kubelet runs
its container command, `mlms operator`, for real) in a namespace that enforces Pod Security
`restricted`; a ModelEvaluation applied with kubectl runs there and must reach Succeeded.
`kubectl auth can-i` then proves what each ServiceAccount may and may not do. A second,
cluster-wide release with zero replicas checks the ClusterRole the same way without an
operator that would act on other tests' namespaces.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import CHART, render

from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

EXEC_CPU = {"mlmodelscope.io/simulation": "exec", "mlmodelscope.io/pool": "cpu"}
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Release:
    cluster: Cluster
    helm: Path
    name: str
    namespace: str
    install_output: str
    health_port: int

    @property
    def fullname(self) -> str:
        return f"{self.name}-mlmodelscope"

    @property
    def operator_sa(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.fullname}-operator"

    @property
    def job_sa_name(self) -> str:
        return f"{self.fullname}-evaluation"

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.cluster.kubectl(*args, "-o", "json").stdout)

    def operator_restarts(self) -> int:
        """Restarts of the operator container: it crashed (bad settings, no credentials)."""
        pods = self.kubectl_json(
            "get", "pods", "-n", self.namespace, "-l", "app.kubernetes.io/component=operator"
        )["items"]
        statuses = [c for p in pods for c in (p.get("status") or {}).get("containerStatuses") or []]
        return sum(int(c.get("restartCount") or 0) for c in statuses)

    def check_operator(self) -> None:
        """Fail at once, with its log, when the operator is crash-looping."""
        if self.operator_restarts():
            pytest.fail(f"the operator container restarted:\n{self.operator_logs()}")

    def operator_logs(self) -> str:
        """The operator container's log (exec nodes keep it under the run dir)."""
        logs = sorted(self.cluster.pods_dir.glob(f"{self.namespace}_{self.fullname}-operator-*"))
        out = []
        for pod_dir in logs:
            for log in pod_dir.glob("*.log"):
                out.append(f"--- {log}\n" + "\n".join(log.read_text().splitlines()[-40:]))
        return "\n".join(out) or "(no operator pod log)"


def helm_cmd(cluster: Cluster, helm: Path, *args: str) -> list[str]:
    return [str(helm), f"--kubeconfig={cluster.kubeconfig}", *args]


def create_namespace(cluster: Cluster, name: str, labels: dict[str, str]) -> None:
    manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    manifest["metadata"]["labels"] = labels
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    wait_for(
        f"ServiceAccount default in {name}",
        lambda: cluster.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
        30,
        lambda: "",
    )


def install(cluster: Cluster, helm: Path, name: str, namespace: str, values: dict[str, Any]) -> str:
    proc = subprocess.run(
        helm_cmd(cluster, helm, "install", name, str(CHART), "-n", namespace, "-f", "-"),
        input=yaml.safe_dump(values),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"helm install failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def uninstall(cluster: Cluster, helm: Path, name: str, namespace: str) -> None:
    subprocess.run(
        helm_cmd(cluster, helm, "uninstall", name, "--namespace", namespace, "--wait"),
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.fixture(scope="module")
def release(cluster: Cluster, helm: Path) -> Iterator[Release]:
    """A namespaced release whose operator pod runs on the CPU exec node, in a namespace that
    enforces Pod Security `restricted`; evaluations run in the same namespace."""
    suffix = uuid.uuid4().hex[:5]
    name, namespace = f"pk{suffix}", f"packaging-{suffix}"
    create_namespace(cluster, namespace, RESTRICTED)
    port = free_port()
    values = {
        "watchNamespaces": [namespace],
        "nodeSelector": EXEC_CPU,
        # Exec pods share the host's loopback: a free port for Kopf's /healthz.
        "operator": {"healthPort": port},
        "metrics": {"enabled": False},
    }
    try:
        output = install(cluster, helm, name, namespace, values)
        yield Release(cluster, helm, name, namespace, output, port)
    finally:
        uninstall(cluster, helm, name, namespace)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def can_i(cluster: Cluster, who: str, verb: str, resource: str, *scope: str) -> bool:
    proc = cluster.kubectl("auth", "can-i", verb, resource, f"--as={who}", *scope, check=False)
    answer = proc.stdout.strip()
    assert answer in ("yes", "no"), proc.stdout + proc.stderr
    return answer == "yes"


def evaluation(name: str, model: Path) -> dict[str, Any]:
    """A digits ModelEvaluation that runs for real on the CPU exec node in seconds."""
    return {
        "apiVersion": "mlmodelscope.io/v1alpha1",
        "kind": "ModelEvaluation",
        "metadata": {"name": name},
        "spec": {
            "model": {
                "name": "digits-cnn",
                "uri": f"file://{model}",
                "format": "onnx",
                "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
                "outputs": [{"name": "logits", "shape": [-1, 10]}],
            },
            "preprocessing": [
                {"scale": {"factor": 0.0625}},
                {"layout": {"from": "HWC", "to": "CHW"}},
            ],
            "framework": {"name": "onnxruntime", "intraOpThreads": 1},
            "dataset": {"type": "digits", "split": "test"},
            "scenario": {
                "batchSizes": [1],
                "warmup": 2,
                "minQueryCount": 20,
                "minDuration": "20ms",
                "stability": {"maxWindows": 2},
            },
            "hardware": {"nodeSelector": EXEC_CPU},
            "timeout": "5m",
        },
    }


# ------------------------------------------------------------------------------------ tests


def test_install_prints_the_next_step(release: Release) -> None:
    assert "NOTES:" in release.install_output
    assert "get meval -w" in release.install_output


def test_operator_pod_is_admitted_under_restricted_and_becomes_ready(release: Release) -> None:
    deployment = f"{release.fullname}-operator"

    def ready() -> bool:
        release.check_operator()
        status = release.kubectl_json("get", "deployment", deployment, "-n", release.namespace)
        return int(status.get("status", {}).get("readyReplicas") or 0) == 1

    wait_for(f"deployment {deployment} ready", ready, 120, release.operator_logs)
    time.sleep(3)  # Kopf needs a moment: a crash at login shows up as a restart
    release.check_operator()

    def healthy() -> bool:
        """What the probes ask: Kopf's /healthz answers 200 (exec pods share the loopback)."""
        release.check_operator()
        url = f"http://127.0.0.1:{release.health_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    wait_for("the operator's /healthz", healthy, 120, release.operator_logs)
    pods = release.kubectl_json(
        "get", "pods", "-n", release.namespace, "-l", "app.kubernetes.io/component=operator"
    )["items"]
    (pod,) = pods
    assert pod["spec"]["nodeName"] == "cpu-exec-0"
    assert pod["spec"]["containers"][0]["args"][0] == "operator"


def test_namespace_enforces_restricted(release: Release) -> None:
    """The admission plugin is really on: a privileged pod is refused in the same namespace."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "privileged"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "securityContext": {"privileged": True}}]
        },
    }
    args = ("apply", "--dry-run=server", "-n", release.namespace, "-f", "-")
    proc = release.cluster.kubectl(*args, input=json.dumps(pod), check=False)
    assert proc.returncode != 0 and "violates PodSecurity" in proc.stderr, proc.stderr


def test_example_evaluation_succeeds_as_the_job_service_account(release: Release) -> None:
    from mlmodelscope.agent.digits import ensure_digits_models

    model = ensure_digits_models() / "digits.onnx"
    name = "digits-helm"
    manifest = yaml.safe_dump(evaluation(name, model))
    release.cluster.kubectl("apply", "-n", release.namespace, "-f", "-", input=manifest)

    def phase() -> str | None:
        release.check_operator()
        body = release.kubectl_json("get", "meval", name, "-n", release.namespace)
        value = (body.get("status") or {}).get("phase")
        return value if value in ("Succeeded", "Failed") else None

    final = wait_for(f"{name} to finish", phase, 240, release.operator_logs)
    body = release.kubectl_json("get", "meval", name, "-n", release.namespace)
    assert final == "Succeeded", json.dumps(body.get("status"), indent=1)
    assert body["status"]["results"], "no results reached the status"
    pods = release.kubectl_json(
        "get", "pods", "-n", release.namespace, "-l", f"mlmodelscope.io/evaluation={name}"
    )["items"]
    assert pods, "the evaluation pod is gone"
    for pod in pods:
        assert pod["spec"]["serviceAccountName"] == release.job_sa_name


def test_operator_service_account_can_do_its_job_and_nothing_broader(release: Release) -> None:
    cluster, who, ns = release.cluster, release.operator_sa, ("-n", release.namespace)
    allowed = [
        ("watch", "modelevaluations.mlmodelscope.io", *ns),
        ("patch", "modelevaluations.mlmodelscope.io", *ns),
        ("patch", "modelevaluations.mlmodelscope.io", "--subresource=status", *ns),
        ("create", "jobs.batch", *ns),
        ("delete", "jobs.batch", *ns),
        ("create", "configmaps", *ns),
        ("patch", "configmaps", *ns),
        ("list", "pods", *ns),
        ("create", "events", *ns),
        ("watch", "customresourcedefinitions.apiextensions.k8s.io"),
        ("get", "models.mlmodelscope.io", *ns),
        ("list", "events", *ns),
    ]
    denied = [
        ("patch", "models.mlmodelscope.io", *ns),
        ("get", "secrets", *ns),
        ("list", "secrets", "--all-namespaces"),
        ("create", "pods", "--subresource=exec", *ns),
        ("create", "pods", *ns),
        ("delete", "pods", *ns),
        ("list", "modelevaluations.mlmodelscope.io", "-n", "default"),
        ("create", "jobs.batch", "-n", "default"),
        ("create", "clusterroles.rbac.authorization.k8s.io"),
        ("create", "rolebindings.rbac.authorization.k8s.io", *ns),
        ("delete", "namespaces"),
    ]
    wrong = [c for c in allowed if not can_i(cluster, who, *c)]
    wrong += [("ALLOWED", *c) for c in denied if can_i(cluster, who, *c)]
    assert not wrong, wrong


def test_job_service_account_may_only_get_and_patch_configmaps(release: Release) -> None:
    cluster, ns = release.cluster, ("-n", release.namespace)
    who = f"system:serviceaccount:{release.namespace}:{release.job_sa_name}"
    allowed = [("get", "configmaps", *ns), ("patch", "configmaps", *ns)]
    denied = [
        ("list", "configmaps", *ns),
        ("create", "configmaps", *ns),
        ("delete", "configmaps", *ns),
        ("patch", "configmaps", "-n", "default"),
        ("get", "secrets", *ns),
        ("list", "secrets", "--all-namespaces"),
        ("create", "pods", "--subresource=exec", *ns),
        ("get", "pods", *ns),
        ("get", "modelevaluations.mlmodelscope.io", *ns),
        ("create", "jobs.batch", *ns),
    ]
    wrong = [c for c in allowed if not can_i(cluster, who, *c)]
    wrong += [("ALLOWED", *c) for c in denied if can_i(cluster, who, *c)]
    assert not wrong, wrong


def test_cluster_wide_release_grants_the_cluster_role_and_no_more(
    cluster: Cluster, helm: Path
) -> None:
    """Cluster-wide RBAC, checked with zero operator replicas (nothing runs)."""
    suffix = uuid.uuid4().hex[:5]
    name, namespace = f"pw{suffix}", f"packaging-wide-{suffix}"
    create_namespace(cluster, namespace, RESTRICTED)
    try:
        install(cluster, helm, name, namespace, {"replicaCount": 0})
        who = f"system:serviceaccount:{namespace}:{name}-mlmodelscope-operator"
        anywhere = ("--all-namespaces",)
        allowed = [
            ("watch", "modelevaluations.mlmodelscope.io", *anywhere),
            ("patch", "modelevaluations.mlmodelscope.io", "--subresource=status", "-n", "default"),
            ("create", "jobs.batch", "-n", "default"),
            ("list", "pods", *anywhere),
        ]
        denied = [
            ("get", "secrets", *anywhere),
            ("get", "secrets", "-n", namespace),
            ("create", "pods", "--subresource=exec", "-n", "default"),
            ("update", "modelevaluations.mlmodelscope.io", "-n", "default"),
            ("list", "namespaces"),
            ("patch", "nodes"),
        ]
        wrong = [c for c in allowed if not can_i(cluster, who, *c)]
        wrong += [("ALLOWED", *c) for c in denied if can_i(cluster, who, *c)]
        assert not wrong, wrong
        job_sa = f"system:serviceaccount:{namespace}:{name}-mlmodelscope-evaluation"
        assert can_i(cluster, job_sa, "patch", "configmaps", "-n", namespace)
        assert not can_i(cluster, job_sa, "patch", "configmaps", "-n", "default")
    finally:
        uninstall(cluster, helm, name, namespace)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_store_and_server_objects_pass_the_api_server_and_restricted(release: Release) -> None:
    """The bundled PostgreSQL, the store Secrets and the results server, applied with
    --dry-run=server in the release's `restricted` namespace: the API server validates them and
    Pod Security admission warns about any pod template it would refuse."""
    sets = [
        "postgresql.enabled=true",
        "server.enabled=true",
        "server.auth.existingSecret=results-tokens",
        f"fullnameOverride={release.fullname}-dry",
    ]
    wanted = {"Secret", "Service", "StatefulSet", "Deployment"}
    objects = [
        m
        for m in render(release.helm, sets=sets)
        if m["kind"] in wanted
        and ("-server" in m["metadata"]["name"] or m["kind"] != "Deployment")
        and not m["metadata"]["name"].endswith("-metrics")
    ]
    assert {m["kind"] for m in objects} == wanted
    for manifest in objects:
        manifest["metadata"]["namespace"] = release.namespace
    body = yaml.safe_dump_all(objects)
    args = ("apply", "--dry-run=server", "-n", release.namespace, "-f", "-")
    proc = release.cluster.kubectl(*args, input=body, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "PodSecurity" not in proc.stderr, proc.stderr
