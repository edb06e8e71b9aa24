"""Kueue on the real control plane: first with the test playing Kueue, then a real one.

The first test checks what the operator creates for Kueue (a suspended Job with the queue
label), what the evaluation says while it waits, that a waiting Job takes no slot of the
operator's own limit, and that unsuspending the Job (what Kueue does on admission) runs the
evaluation to the end. It must run before the real Kueue starts (this module's order), which
would suspend that Job again for want of a LocalQueue.

The second runs Kueue (built from its pinned Go module, as the control plane is) as a process
against the dev cluster: its CRDs from the module, its own certificate management with the
Secret copied into its cert dir (what a kubelet's Secret volume would do), webhook
configurations with no webhooks (the API server cannot reach a Service here), and a
ClusterQueue whose CPU quota fits one evaluation at a time.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_evaluations import (
    EXEC_CPU,
    apply,
    condition,
    evaluation,
    events_with,
    phase_of,
    wait_phase,
)
from operator_process import OperatorProcess

from mlmodelscope.contract.kube import Kube, evaluation_path, job_path, pod_path
from mlmodelscope.controller import names
from mlmodelscope.devcluster import build
from mlmodelscope.devcluster import versions as v
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

KUEUE_NS = "kueue-system"
KUEUE_SERVICE = "kueue-webhook-service"
KUEUE_SECRET = "kueue-webhook-server-cert"
KUEUE_API = "kueue.x-k8s.io/v1beta2"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def kueue_manifests(module: Path) -> list[dict[str, Any]]:
    """Kueue's CRDs (with the conversion webhooks its kustomization patches in, which its
    certificate management insists on injecting), its namespace and Secret, and empty webhook
    configurations for the same reason."""
    config = module / "config" / "components" / "crd"
    converted = {p.name.removeprefix("webhook_in_") for p in config.glob("patches/webhook_in_*")}
    docs: list[dict[str, Any]] = []
    for path in sorted((config / "bases").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if f"{crd['spec']['names']['plural']}.yaml" in converted:
            service = {"namespace": KUEUE_NS, "name": KUEUE_SERVICE, "path": "/convert"}
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"service": service},
                    "conversionReviewVersions": ["v1"],
                },
            }
        docs.append(crd)
    admission = "admissionregistration.k8s.io/v1"
    return [
        *docs,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NS}},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": KUEUE_SECRET, "namespace": KUEUE_NS},
        },
        {
            "apiVersion": admission,
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "kueue-validating-webhook-configuration"},
            "webhooks": [],
        },
        {
            "apiVersion": admission,
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "kueue-mutating-webhook-configuration"},
            "webhooks": [],
        },
    ]


@pytest.fixture(scope="module")
def kueue(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real Kueue controller for this module's remaining tests; yields its log."""
    if shutil.which("go") is None and not build.is_built("kueue"):
        pytest.skip("Kueue is built from its Go module: needs Go >= 1.26 (or a prebuilt cache)")
    binary = build.build(["kueue"]).bin_dir / "kueue"
    module = build.go_mod_cache() / "sigs.k8s.io" / f"kueue@{v.KUEUE_VERSION}"
    work = tmp_path_factory.mktemp("kueue")
    manifest = work / "setup.yaml"
    manifest.write_text(yaml.safe_dump_all(kueue_manifests(module)))
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(manifest))
    certs = work / "certs"
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NS,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{free_port()}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": free_port(), "certDir": str(certs)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": KUEUE_SERVICE,
            "webhookSecretName": KUEUE_SECRET,
        },
        "integrations": {"frameworks": ["batch/job"]},
    }
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    log = work / "kueue.log"
    cmd = [
        str(binary),
        f"--config={work / 'config.yaml'}",
        # The visibility API server wants in-cluster delegated authentication.
        "--feature-gates=VisibilityOnDemand=false",
        f"--visibility-server-port={free_port()}",
    ]
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        kube = Kube(cluster.api_client())
        secret = f"/api/v1/namespaces/{KUEUE_NS}/secrets/{KUEUE_SECRET}"
        data = wait_for(
            "Kueue to write its webhook certificate",
            lambda: (kube.get_or_none(secret) or {}).get("data"),
            60,
            lambda: log.read_text(errors="replace")[-3000:],
        )
        certs.mkdir(exist_ok=True)
        for key, value in data.items():
            (certs / key).write_bytes(base64.b64decode(value))
        yield log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_queued_for_kueue_takes_no_slot_and_runs_once_unsuspended(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    agent_rbac: str,
    digits_onnx: Path,
) -> None:
    start_operator(MLMS_OPERATOR_MAX_RUNNING="1", MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac)
    queue_label = {names.LABEL_KUEUE_QUEUE: "team-queue"}
    apply(cluster, namespace, evaluation("kueued", digits_onnx, labels=queue_label))

    job = wait_for("the Job", lambda: kube.get_or_none(job_path(namespace, "kueued-g1")), 60)
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"][names.LABEL_KUEUE_QUEUE] == "team-queue"
    ev = wait_phase(kube, namespace, "kueued", ("Queued",), 60)
    queued = condition(ev, "Queued")
    assert queued["status"] == "True" and queued["reason"] == "WaitingForKueue"
    assert queued["message"].startswith("waiting for Kueue admission in queue team-queue")
    assert ev["status"]["jobName"] == "kueued-g1"

    # The only slot of MAX_RUNNING=1 is free: an evaluation without a queue runs meanwhile.
    apply(cluster, namespace, evaluation("plain", digits_onnx))
    plain = wait_phase(kube, namespace, "plain", ("Succeeded", "Failed"), 120)
    assert plain["status"]["phase"] == "Succeeded", plain["status"].get("message")
    # Job events of the suspended Job were not taken for Running or Failed.
    assert phase_of(kube, namespace, "kueued") == "Queued"
    selector = "batch.kubernetes.io/job-name=kueued-g1"
    assert not kube.list(pod_path(namespace), selector), "a suspended Job has no pods"

    # Admission, as Kueue does it: unsuspend the Job.
    cluster.kubectl(
        "patch",
        "job",
        "kueued-g1",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"suspend": False}}),
    )
    ev = wait_phase(kube, namespace, "kueued", ("Succeeded", "Failed"), 120)
    assert ev["status"]["phase"] == "Succeeded", ev["status"].get("message")
    assert ev["status"]["results"][0]["top1"] > 0.85
    assert condition(ev, "Queued")["reason"] == "Admitted"
    reasons = {e["reason"] for e in events_with(kube, namespace, "kueued", "Succeeded")}
    assert {"Queued", "Admitted", "Succeeded"} <= reasons
    assert "JobCreated" not in reasons


def test_real_kueue_admits_evaluations_within_its_quota(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    kueue: Path,
    start_operator: Callable[..., OperatorProcess],
    agent_rbac: str,
    digits_onnx: Path,
) -> None:
    """CPU quota 1, two evaluations requesting 600m each: Kueue admits one at a time, the
    operator's own limits are off, both succeed."""
    cluster_queue = f"cq-{namespace}"[:63]
    objects = [
        {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": KUEUE_API,
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": "default",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "1"},
                                    {"name": "memory", "nominalQuota": "4Gi"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": KUEUE_API,
            "kind": "LocalQueue",
            "metadata": {"name": "team-queue", "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue},
        },
    ]
    for obj in objects:  # the CRDs may still be settling in discovery
        wait_for(
            f"Kueue {obj['kind']} to be accepted",
            lambda o=obj: (
                cluster.kubectl("apply", "-f", "-", input=json.dumps(o), check=False).returncode
                == 0
            ),
            60,
        )
    start_operator(MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac)
    hardware = {
        "nodeSelector": EXEC_CPU,
        "resources": {"requests": {"cpu": "600m", "memory": "256Mi"}},
    }
    label = {names.LABEL_KUEUE_QUEUE: "team-queue"}
    peak = 0
    for name in ("first", "second"):
        apply(cluster, namespace, evaluation(name, digits_onnx, labels=label, hardware=hardware))
    wait_for(
        "both Jobs",
        lambda: all(kube.get_or_none(job_path(namespace, f"{n}-g1")) for n in ("first", "second")),
        60,
    )

    def both_done() -> bool:
        nonlocal peak
        running = [
            n
            for n in ("first", "second")
            if not kube.get(job_path(namespace, f"{n}-g1"))["spec"].get("suspend")
            and phase_of(kube, namespace, n) not in ("Succeeded", "Failed")
        ]
        peak = max(peak, len(running))
        return all(
            phase_of(kube, namespace, n) in ("Succeeded", "Failed") for n in ("first", "second")
        )

    wait_for("both evaluations to end", both_done, 180, lambda: kueue.read_text()[-3000:])
    assert peak <= 1, "the quota fits one evaluation at a time"
    for name in ("first", "second"):
        ev = wait_phase(kube, namespace, name, ("Succeeded",), 10)
        assert ev["status"]["results"][0]["top1"] > 0.85
        assert condition(ev, "Queued")["reason"] == "Admitted"
        assert ev["status"]["jobName"] == f"{name}-g1"
        reasons = {e["reason"] for e in events_with(kube, namespace, name, "Succeeded")}
        assert {"Queued", "Admitted", "Succeeded"} <= reasons
    workloads = kube.list(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads")
    owners = sorted(w["metadata"]["ownerReferences"][0]["name"] for w in workloads)
    assert owners == ["first-g1", "second-g1"]
    for workload in workloads:
        kinds = {c["type"] for c in workload["status"]["conditions"] if c["status"] == "True"}
        assert {"QuotaReserved", "Admitted"} <= kinds or "Finished" in kinds, workload["status"]
    cluster.kubectl("delete", "clusterqueue", cluster_queue, "--wait=false")


def cluster_queue(name: str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "default",
                            "resources": [
                                {"name": "cpu", "nominalQuota": cpu},
                                {"name": "memory", "nominalQuota": "4Gi"},
                            ],
                        }
                    ],
                }
            ],
        },
    }


def test_queued_shows_kueues_own_reason_until_the_quota_fits(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    kueue: Path,
    start_operator: Callable[..., OperatorProcess],
    agent_rbac: str,
    digits_onnx: Path,
) -> None:
    """A ClusterQueue of 500m CPU, an evaluation requesting 600m: Queued with Kueue's reason
    (Pending, "insufficient ... quota for cpu"); a deactivated Workload is an eviction (a Warning,
    reason Deactivated); once reactivated and the quota raised, admitted and Succeeded."""
    name = f"cq-small-{namespace}"[:63]
    objects = [
        {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        cluster_queue(name, "500m"),
        {
            "apiVersion": KUEUE_API,
            "kind": "LocalQueue",
            "metadata": {"name": "small-queue", "namespace": namespace},
            "spec": {"clusterQueue": name},
        },
    ]
    for obj in objects:
        wait_for(
            f"Kueue {obj['kind']} to be accepted",
            lambda o=obj: (
                cluster.kubectl("apply", "-f", "-", input=json.dumps(o), check=False).returncode
                == 0
            ),
            60,
        )
    start_operator(
        MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac, MLMS_OPERATOR_KUEUE_POLL_SECONDS="1"
    )
    hardware = {
        "nodeSelector": EXEC_CPU,
        "resources": {"requests": {"cpu": "600m", "memory": "256Mi"}},
    }
    label = {names.LABEL_KUEUE_QUEUE: "small-queue"}
    apply(cluster, namespace, evaluation("tight", digits_onnx, labels=label, hardware=hardware))

    def queued_reason(reason: str) -> dict[str, Any] | None:
        ev = kube.get(evaluation_path(namespace, "tight"))
        st = ev.get("status") or {}
        queued = next((c for c in st.get("conditions") or [] if c["type"] == "Queued"), {})
        if st.get("phase") == "Queued" and queued.get("reason") == reason:
            return ev
        return None

    log_tail = lambda: kueue.read_text(errors="replace")[-3000:]  # noqa: E731
    ev = wait_for("Kueue's reason in the status", lambda: queued_reason("Pending"), 60, log_tail)
    queued = condition(ev, "Queued")
    sys.stderr.write(f"Kueue's reason: {queued['reason']}: {queued['message']}\n")
    assert queued["status"] == "True"
    assert queued["message"].startswith("waiting for Kueue admission in queue small-queue: ")
    assert "couldn't assign flavors to pod set main: insufficient" in queued["message"]
    assert "for cpu in flavor default" in queued["message"]
    assert ev["status"]["message"] == queued["message"]
    assert condition(ev, "Running")["reason"] == "Pending"
    assert ev["status"]["jobName"] == "tight-g1"
    assert kube.get(job_path(namespace, "tight-g1"))["spec"]["suspend"] is True

    # Deactivating the Workload is an eviction in Kueue's terms: said as a Warning.
    (workload,) = kube.list(f"/apis/{KUEUE_API}/namespaces/{namespace}/workloads")
    path = f"/apis/{KUEUE_API}/namespaces/{namespace}/workloads/{workload['metadata']['name']}"
    kube.merge_patch(path, {"spec": {"active": False}})
    ev = wait_for("the eviction in the status", lambda: queued_reason("Deactivated"), 60, log_tail)
    message = condition(ev, "Queued")["message"]
    sys.stderr.write(f"Kueue's eviction: Deactivated: {message}\n")
    assert message.startswith("evicted by Kueue, waiting for readmission in queue small-queue: ")
    assert "The workload is deactivated" in message
    kube.merge_patch(path, {"spec": {"active": True}})

    # Room for it: Kueue admits it and it runs as any other.
    patch = {"spec": cluster_queue(name, "1")["spec"]}
    cluster.kubectl("patch", "clusterqueue", name, "--type=merge", "-p", json.dumps(patch))
    ev = wait_phase(kube, namespace, "tight", ("Succeeded", "Failed"), 120)
    assert ev["status"]["phase"] == "Succeeded", ev["status"].get("message")
    assert condition(ev, "Queued")["reason"] == "Admitted"
    seen = events_with(kube, namespace, "tight", "Succeeded")
    reasons = [e["reason"] for e in seen]
    assert {"Queued", "Pending", "Deactivated", "Admitted", "Succeeded"} <= set(reasons)
    assert reasons.count("Pending") == 1, "an Event only when Kueue's reason changes"
    (evicted,) = [e for e in seen if e["reason"] == "Deactivated"]
    assert evicted["type"] == "Warning"
    cluster.kubectl("delete", "clusterqueue", name, "--wait=false")
