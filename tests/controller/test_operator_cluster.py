"""The operator against the real control plane (mlmodelscope.devcluster).

Each test runs its own `mlms operator --standalone` subprocess, watching only the test's
namespace, so tests cannot see each other's evaluations and the operator can be killed and
restarted like a pod. Evaluations that must produce results run on the exec node, where the
pod's command, `mlms agent ...`, really runs from this venv on the digits model.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_evaluations import (
    EXEC_CPU,
    SIMULATED_TOLERATION,
    apply,
    condition,
    evaluation,
    events,
    events_with,
    free_port,
    get,
    gone,
    jobs,
    phase_of,
    wait_phase,
)
from meval_docs import merge
from operator_process import OperatorProcess

from mlmodelscope.contract.kube import (
    Kube,
    KubeError,
    configmap_path,
    job_path,
    pod_path,
)
from mlmodelscope.controller import names
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


@pytest.fixture
def operator(start_operator: Callable[..., OperatorProcess], agent_rbac: str) -> OperatorProcess:
    """An operator whose Jobs run as the agent ServiceAccount."""
    return start_operator(MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac)


# ---------------------------------------------------------------------------------- tests


def test_digits_evaluation_succeeds_with_real_results_then_is_garbage_collected(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    operator: OperatorProcess,
    agent_rbac: str,
    digits_onnx: Path,
) -> None:
    cluster.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )
    manifest = evaluation(
        "digits",
        digits_onnx,
        hardware={
            "nodeSelector": EXEC_CPU,
            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
        },
    )
    apply(cluster, namespace, manifest)
    job = wait_for("the Job", lambda: kube.get_or_none(job_path(namespace, "digits-g1")), 60)
    ev = get(kube, namespace, "digits")
    assert job["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "mlmodelscope.io/v1alpha1",
            "kind": "ModelEvaluation",
            "name": "digits",
            "uid": ev["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert "suspend" not in job["spec"] or job["spec"]["suspend"] is False
    assert job["metadata"]["labels"][names.LABEL_EVALUATION] == "digits"
    pod_spec = job["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    assert container["image"].startswith("ghcr.io/mlmodelscope/agent-onnxruntime:")
    assert container["image"].endswith("-cpu")
    assert container["command"][:2] == ["mlms", "agent"]
    assert container["resources"] == {  # the operator's default memory limit (4Gi)
        "requests": {"cpu": "500m", "memory": "512Mi"},
        "limits": {"memory": "4Gi"},
    }
    assert pod_spec["serviceAccountName"] == agent_rbac  # the agent ServiceAccount
    # `kubectl wait` works on the Succeeded condition.
    cluster.kubectl(
        "wait", "-n", namespace, "--for=condition=Succeeded", "--timeout=120s", "meval/digits"
    )
    ev = get(kube, namespace, "digits")
    status = ev["status"]
    assert status["phase"] == "Succeeded" and status["observedGeneration"] == 1
    [row] = status["results"]
    assert row["batchSize"] == 1 and row["scenario"] == "SingleStream"
    assert 0.85 < row["top1"] <= 1.0
    assert 0 < row["latencyMs"]["p50"] <= row["latencyMs"]["p99"]
    assert row["throughput"] > 0
    assert status["summary"]["top1"] == row["top1"]
    assert status["stack"]["framework"] == "onnxruntime"
    assert status["stack"]["node"] == "cpu-exec-0"
    assert len(status["runId"]) == 36
    results_cm = kube.get(configmap_path(namespace, "digits-results"))
    document = json.loads(results_cm["data"]["result.json"])
    assert document["run_id"] == status["runId"]
    assert document["evaluation"]["generation"] == 1
    assert kube.get(configmap_path(namespace, "digits-spec"))["data"]["evaluation.yaml"]
    table = cluster.kubectl("get", "meval", "-n", namespace).stdout
    header, line = table.splitlines()[:2]
    assert "P50(MS)" in header and "METRIC" in header and "VALUE" in header
    assert "Succeeded" in line and f"{row['top1']:.4f}"[:4] in line
    reasons = [e["reason"] for e in events_with(kube, namespace, "digits", "Succeeded")]
    assert "JobCreated" in reasons and "Succeeded" in reasons
    assert not ev["metadata"].get("finalizers")

    cluster.kubectl("delete", "meval", "digits", "-n", namespace, "--wait=false")
    for path in (
        job_path(namespace, "digits-g1"),
        configmap_path(namespace, "digits-spec"),
        configmap_path(namespace, "digits-results"),
    ):
        wait_for(f"{path} to be garbage-collected", lambda p=path: gone(kube, p), 60)


def test_gpu_evaluation_lands_on_the_requested_product(
    cluster: Cluster, namespace: str, kube: Kube, operator: OperatorProcess, digits_onnx: Path
) -> None:
    """On a kwok GPU node (only pods that tolerate simulation go there) the pod 'succeeds'
    without running: no results, and the status says the node is simulated."""
    manifest = evaluation(
        "on-h100",
        digits_onnx,
        hardware={
            "device": "gpu",
            "gpus": 2,
            "gpuProduct": "NVIDIA-H100-80GB-HBM3",
            "nodeSelector": {"mlmodelscope.io/simulation": "kwok"},
            "tolerations": [SIMULATED_TOLERATION],
        },
    )
    apply(cluster, namespace, manifest)
    ev = wait_phase(kube, namespace, "on-h100", ("Succeeded", "Failed"))
    job = kube.get(job_path(namespace, "on-h100-g1"))
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod_spec[
        "tolerations"
    ]
    assert pod_spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert pod_spec["containers"][0]["image"].endswith("-gpu")
    [pod] = kube.list(pod_path(namespace), "batch.kubernetes.io/job-name=on-h100-g1")
    assert pod["spec"]["nodeName"] == "h100-kwok-0"
    assert ev["status"]["phase"] == "Failed"
    failed = condition(ev, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "SimulatedNode")
    assert "h100-kwok-0" in failed["message"] and "does not run containers" in failed["message"]
    assert condition(ev, "Scheduled")["status"] == "True"


def test_too_many_gpus_reports_unschedulable_with_the_schedulers_reason(
    namespace: str, cluster: Cluster, kube: Kube, operator: OperatorProcess, digits_onnx: Path
) -> None:
    manifest = evaluation("greedy", digits_onnx, hardware={"device": "gpu", "gpus": 16})
    apply(cluster, namespace, manifest)

    def unschedulable() -> dict[str, Any] | None:
        conds = (get(kube, namespace, "greedy").get("status") or {}).get("conditions") or []
        found = [c for c in conds if c["type"] == "Scheduled" and c["reason"] == "Unschedulable"]
        return found[0] if found else None

    cond = wait_for("the Unschedulable condition", unschedulable, 60)
    assert cond["status"] == "False"
    assert "Insufficient nvidia.com/gpu" in cond["message"]
    ev = get(kube, namespace, "greedy")
    assert ev["status"]["phase"] == "Pending"
    assert "Insufficient nvidia.com/gpu" in ev["status"]["message"]
    warnings = [
        e
        for e in events_with(kube, namespace, "greedy", "Unschedulable")
        if e["reason"] == "Unschedulable"
    ]
    assert warnings and warnings[0]["type"] == "Warning"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"scenario": {"type": "Server"}}, "spec.scenario.targetQPS"),
        ({"scenario": {"batchSizes": [1, 1]}}, "spec.scenario.batchSizes"),
        ({"hardware": {"gpus": 2}}, "spec.hardware.gpus"),
        ({"model": {"format": "pickle"}}, "spec.model.format"),
    ],
)
def test_invalid_resources_are_rejected_by_the_api_server_naming_the_field(
    cluster: Cluster, namespace: str, crds: None, change: dict[str, Any], field: str
) -> None:
    manifest = evaluation("bad", Path("/models/digits.onnx"), **change)
    proc = cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest), check=False
    )
    assert proc.returncode != 0
    assert field in proc.stderr, proc.stderr


def test_semantically_invalid_spec_ends_failed_invalid_spec_with_an_event(
    cluster: Cluster, namespace: str, kube: Kube, operator: OperatorProcess, digits_onnx: Path
) -> None:
    manifest = evaluation("mismatch", digits_onnx, model={"format": "torchscript"})
    apply(cluster, namespace, manifest)
    ev = wait_phase(kube, namespace, "mismatch", ("Failed",), 60)
    failed = condition(ev, "Failed")
    assert failed["reason"] == "InvalidSpec" and "spec.model.format" in failed["message"]
    assert condition(ev, "Valid")["status"] == "False"
    warnings = [
        e
        for e in events_with(kube, namespace, "mismatch", "InvalidSpec")
        if e["reason"] == "InvalidSpec"
    ]
    assert warnings and "spec.model.format" in warnings[0]["message"]
    assert jobs(kube, namespace) == []


def test_agent_errors_and_deadlines_end_failed_with_the_agents_message(
    cluster: Cluster, namespace: str, kube: Kube, operator: OperatorProcess, digits_onnx: Path
) -> None:
    missing = evaluation("no-model", digits_onnx, model={"uri": "file:///nonexistent/m.onnx"})
    slow = evaluation(
        "too-slow",
        digits_onnx,
        timeout="3s",
        scenario={"minDuration": "60s", "minQueryCount": 10_000_000},
    )
    apply(cluster, namespace, missing)
    apply(cluster, namespace, slow)
    ev = wait_phase(kube, namespace, "no-model", ("Failed", "Succeeded"))
    failed = condition(ev, "Failed")
    assert failed["reason"] == "InvalidSpec", failed
    assert failed["message"].startswith("spec.model.uri: ")
    ev = wait_phase(kube, namespace, "too-slow", ("Failed", "Succeeded"))
    failed = condition(ev, "Failed")
    assert failed["reason"] == "DeadlineExceeded", failed
    assert "spec.timeout 3s" in failed["message"]


def test_killing_the_operator_mid_run_leaves_one_job_and_the_right_status(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    agent_rbac: str,
    digits_onnx: Path,
) -> None:
    first = start_operator(MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac)
    manifest = evaluation("survivor", digits_onnx, scenario={"minDuration": "4s"})
    apply(cluster, namespace, manifest)
    wait_phase(kube, namespace, "survivor", ("Running",), 90)
    first.kill()
    port = free_port()
    second = start_operator(
        f"--liveness=http://127.0.0.1:{port}/healthz",
        MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac,
    )
    ev = wait_phase(kube, namespace, "survivor", ("Succeeded", "Failed"), 120)
    assert ev["status"]["phase"] == "Succeeded", ev["status"].get("message")
    assert [j["metadata"]["name"] for j in jobs(kube, namespace)] == ["survivor-g1"]
    assert ev["status"]["results"][0]["top1"] > 0.85
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as probe:
        assert probe.status == 200
    second.stop()  # SIGTERM: Kopf finishes what runs and exits cleanly
    assert second.proc is not None and second.proc.returncode == 0, second.tail()


def test_spec_edits_start_new_runs_with_history_and_reapplying_does_nothing(
    cluster: Cluster, namespace: str, kube: Kube, operator: OperatorProcess, digits_onnx: Path
) -> None:
    manifest = evaluation("edited", digits_onnx)
    apply(cluster, namespace, manifest)
    first = wait_phase(kube, namespace, "edited", ("Succeeded", "Failed"))
    assert first["status"]["phase"] == "Succeeded"
    # GitOps sync: the same spec again changes nothing.
    apply(cluster, namespace, manifest)
    time.sleep(3)
    assert get(kube, namespace, "edited")["metadata"]["generation"] == 1
    assert [j["metadata"]["name"] for j in jobs(kube, namespace)] == ["edited-g1"]
    assert get(kube, namespace, "edited")["status"]["runId"] == first["status"]["runId"]

    run_ids = [first["status"]["runId"]]
    for generation, warmup in ((2, 3), (3, 4)):
        apply(cluster, namespace, merge(manifest, {"spec": {"scenario": {"warmup": warmup}}}))
        wait_for(
            f"generation {generation} to be observed",
            lambda g=generation: (
                (get(kube, namespace, "edited").get("status") or {}).get("observedGeneration") == g
            ),
            60,
        )
        ev = wait_phase(kube, namespace, "edited", ("Succeeded", "Failed"))
        assert ev["status"]["phase"] == "Succeeded"
        assert ev["status"]["jobName"] == f"edited-g{generation}"
        run_ids.append(ev["status"]["runId"])
    history = ev["status"]["history"]
    assert [h["generation"] for h in history] == [2, 1]
    assert [h["runId"] for h in history] == run_ids[1::-1]
    assert all(h["phase"] == "Succeeded" and h["summary"]["top1"] > 0.85 for h in history)
    assert len(set(run_ids)) == 3
    assert sorted(j["metadata"]["name"] for j in jobs(kube, namespace)) == [
        "edited-g1",
        "edited-g2",
        "edited-g3",
    ]
    config = kube.get(configmap_path(namespace, "edited-spec"))
    assert yaml.safe_load(config["data"]["evaluation.yaml"])["spec"]["scenario"]["warmup"] == 4


def test_concurrency_limit_holds_and_every_queued_evaluation_finishes(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    digits_onnx: Path,
) -> None:
    """Limit 2, five evaluations. Shared results access without a job ServiceAccount: the pods
    run as the namespace's default account, which may not write the results ConfigMap, so this
    also proves the termination-message fallback."""
    start_operator(MLMS_OPERATOR_MAX_RUNNING="2", MLMS_OPERATOR_RESULTS_ACCESS="service-account")
    peak = {"active": 0}
    stop = threading.Event()
    errors: list[BaseException] = []

    def watch() -> None:
        try:
            while not stop.is_set():
                active = [
                    j
                    for j in jobs(kube, namespace)
                    if not any(
                        c["type"] in ("Complete", "Failed") and c["status"] == "True"
                        for c in (j.get("status") or {}).get("conditions") or []
                    )
                ]
                peak["active"] = max(peak["active"], len(active))
                time.sleep(0.1)
        except (KubeError, OSError) as exc:  # pragma: no cover - reported below
            errors.append(exc)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        for index in range(5):
            apply(cluster, namespace, evaluation(f"batch-{index}", digits_onnx))
        wait_for(
            "some evaluations to be Queued",
            lambda: any(phase_of(kube, namespace, f"batch-{i}") == "Queued" for i in range(5)),
            60,
        )
        for index in range(5):
            ev = wait_phase(kube, namespace, f"batch-{index}", ("Succeeded", "Failed"), 180)
            assert ev["status"]["phase"] == "Succeeded", ev["status"].get("message")
            assert ev["status"]["results"][0]["top1"] > 0.85
    finally:
        stop.set()
        watcher.join(timeout=5)
    assert not errors, errors
    assert 1 <= peak["active"] <= 2, peak
    queued = [e for i in range(5) for e in events(kube, namespace, f"batch-{i}")]
    assert any(e["reason"] == "Queued" for e in queued)
    assert len(jobs(kube, namespace)) == 5
    cm = kube.get(configmap_path(namespace, "batch-0-results"))
    assert not cm.get("data"), "the default ServiceAccount cannot patch ConfigMaps"
