"""Faults the operator must survive on the real control plane (issue 15, defects 1-5, 7 and 9).

Each test runs its own `mlms operator --standalone` subprocess on the test's namespace (the
fixtures of conftest.py); evaluations that produce results run on the exec node, where the
agent really runs. docs/reliability.md lists which defect each test covers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster_evaluations import (
    apply,
    condition,
    evaluation,
    events,
    events_with,
    get,
    gone,
    jobs,
    wait_phase,
)
from operator_process import OperatorProcess
from result_docs import row, summary

from mlmodelscope.contract.kube import Kube, configmap_path, job_path, pod_path
from mlmodelscope.contract.wire import CONTAINER_NAME, SUMMARY_KEY
from mlmodelscope.controller import names, runs
from mlmodelscope.controller.runs import JOB_NAME_LABEL
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

FAST = {"MLMS_OPERATOR_RESYNC_SECONDS": "1", "MLMS_OPERATOR_START_TIMEOUT_SECONDS": "3"}
"""Resync and start timeout short enough for a test (the defaults are 30 s and 300 s)."""


@pytest.fixture
def operator(start_operator: Callable[..., OperatorProcess], agent_rbac: str) -> OperatorProcess:
    """An operator whose Jobs run as the agent ServiceAccount, resyncing every second."""
    return start_operator(MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac, **FAST)


def reasons(kube: Kube, namespace: str, name: str) -> list[str]:
    return [e["reason"] for e in events(kube, namespace, name)]


def patch_status(cluster: Cluster, namespace: str, name: str, patch: dict[str, Any]) -> None:
    cluster.kubectl(
        "patch", "meval", name, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": patch}),
    )  # fmt: skip


# ------------------------------------------------------------------ defect 1: Job rejected


def test_a_job_the_api_server_rejects_ends_failed_with_its_message(
    cluster: Cluster, namespace: str, kube: Kube, operator: OperatorProcess, digits_onnx: Path
) -> None:
    """A spec the CRD accepts but whose Job the API server refuses (a CPU request above the CPU
    limit): Failed/JobRejected with the server's words, never Pending/JobCreated."""
    resources = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}
    manifest = evaluation("rejected", digits_onnx, hardware={"resources": resources})
    apply(cluster, namespace, manifest)
    ev = wait_phase(kube, namespace, "rejected", ("Failed", "Succeeded"), 60)
    failed = condition(ev, "Failed")
    assert failed["reason"] == "JobRejected", failed
    assert "resources.requests" in failed["message"] and "cpu limit" in failed["message"], failed
    assert "jobName" not in ev["status"]
    assert "JobCreated" not in reasons(kube, namespace, "rejected")
    assert events_with(kube, namespace, "rejected", "JobRejected")
    assert jobs(kube, namespace) == []


# ------------------------------------------------- defect 2: children matched by owner UID


def test_a_recreated_evaluation_does_not_adopt_children_it_does_not_own(
    cluster: Cluster, namespace: str, kube: Kube, operator: OperatorProcess, digits_onnx: Path
) -> None:
    """A Job and results ConfigMap with the evaluation's names and labels but another owner
    (as an earlier evaluation of the same name leaves them until the garbage collector runs)
    are not adopted: the operator waits for them to go, then runs its own Job."""
    owner = kube.create(
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "earlier-owner"}},
    )
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "earlier-owner",
        "uid": owner["metadata"]["uid"],
    }
    labels = names.labels("twin", 1)
    metadata = {"labels": labels, "ownerReferences": [reference]}
    kube.create(
        configmap_path(namespace),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "twin-results", **metadata}},
    )
    kube.create(
        job_path(namespace),
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "twin-g1", **metadata},
            "spec": {
                "suspend": True,  # never runs: only its name and labels matter
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
                    },
                },
            },
        },
    )
    apply(cluster, namespace, evaluation("twin", digits_onnx))
    wait_for(
        "the operator to report the foreign children",
        lambda: "waiting for it to be garbage-collected" in operator.tail(200),
        60,
    )
    status = get(kube, namespace, "twin").get("status") or {}
    assert status.get("jobName") is None and status.get("phase") is None, status
    # The garbage collector removes them once their owner is gone; then the run is ours.
    cluster.kubectl("delete", "configmap", "earlier-owner", "-n", namespace)
    ev = wait_phase(kube, namespace, "twin", ("Succeeded", "Failed"), 180)
    assert ev["status"]["phase"] == "Succeeded", ev["status"].get("message")
    uid = ev["metadata"]["uid"]
    for path in (job_path(namespace, "twin-g1"), configmap_path(namespace, "twin-results")):
        child = kube.get(path)
        assert [r["uid"] for r in child["metadata"]["ownerReferences"]] == [uid], path


# --------------------------------------------------- defect 3: a pod that never starts


def test_pods_that_never_start_fail_within_the_start_timeout_naming_the_reason(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    agent_rbac: str,
    digits_onnx: Path,
) -> None:
    start_operator(
        MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac, MLMS_OPERATOR_ALLOW_SECRET_REFS="true", **FAST
    )
    no_secret = evaluation(
        "no-secret", digits_onnx, model={"credentialsSecretRef": {"name": "no-such-secret"}}
    )
    apply(cluster, namespace, no_secret)
    ev = wait_phase(kube, namespace, "no-secret", ("Failed", "Succeeded"), 120)
    # The exec node's kubelet fails such a pod at once (BackoffLimitExceeded); a real kubelet
    # keeps it waiting in CreateContainerConfigError, which the next case shows.
    assert 'secret "no-such-secret" not found' in condition(ev, "Failed")["message"]
    # A pod that waits for good: the kubelet's report ends the run after the start timeout.
    # Here the pod (which no node takes) is bound by hand to a node that has no kubelet, and
    # its report is written into the pod's status as a kubelet would write it. Bound, because
    # a pod whose status shows it waiting for a node is not a start failure (and is not
    # checked for one).
    apply(
        cluster,
        namespace,
        evaluation("no-image", digits_onnx, hardware={"nodeSelector": {"no-such-node": "x"}}),
    )
    pod = wait_for(
        "the evaluation pod",
        lambda: next(iter(kube.list(pod_path(namespace), f"{JOB_NAME_LABEL}=no-image-g1")), None),
        60,
    )
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod["metadata"]["name"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-without-kubelet"},
    }
    kube.create(f"{pod_path(namespace)}/{pod['metadata']['name']}/binding", binding)
    waiting = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "nope:1"'}
    container = {
        "name": CONTAINER_NAME,
        "image": "nope:1",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {"waiting": waiting},
    }
    cluster.kubectl(
        "patch", "pod", pod["metadata"]["name"], "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": {"containerStatuses": [container]}}),
    )  # fmt: skip
    ev = wait_phase(kube, namespace, "no-image", ("Failed", "Succeeded"), 120)
    failed = condition(ev, "Failed")
    assert failed["reason"] == "ImagePullBackOff", failed
    assert 'ImagePullBackOff: Back-off pulling image "nope:1"' in failed["message"], failed
    assert "did not start within 3s" in failed["message"]
    wait_for(
        "the stuck Job to be deleted", lambda: gone(kube, job_path(namespace, "no-image-g1")), 60
    )


def test_a_missing_service_account_fails_naming_it(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    digits_onnx: Path,
) -> None:
    start_operator(MLMS_OPERATOR_JOB_SERVICE_ACCOUNT="nobody", **FAST)
    apply(cluster, namespace, evaluation("no-account", digits_onnx))
    ev = wait_phase(kube, namespace, "no-account", ("Failed", "Succeeded"), 120)
    failed = condition(ev, "Failed")
    assert failed["reason"] == "FailedCreate", failed
    assert "nobody" in failed["message"] and "not found" in failed["message"], failed


# ------------------------------------- defect 4: deleted after completion; lost Job events


def test_lost_job_events_are_resynced_and_a_deleted_finished_job_keeps_its_result(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    agent_rbac: str,
    digits_onnx: Path,
) -> None:
    start_operator(MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac, **FAST)
    apply(cluster, namespace, evaluation("lost", digits_onnx))
    done = wait_phase(kube, namespace, "lost", ("Succeeded", "Failed"), 120)
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    run_id = done["status"]["runId"]
    # The Job's Complete event was never applied (as when its retries ran out): the status
    # still says Running while the Job has completed; no Job event will come again.
    patch_status(cluster, namespace, "lost", {"phase": "Running"})
    ev = wait_phase(kube, namespace, "lost", ("Succeeded", "Failed"), 60)
    assert ev["status"]["phase"] == "Succeeded" and ev["status"]["runId"] == run_id
    # Again, and now the completed Job is deleted as well: its result still stands.
    patch_status(cluster, namespace, "lost", {"phase": "Running"})
    cluster.kubectl("delete", "job", "lost-g1", "-n", namespace, "--wait=false")
    wait_for("the Job to go", lambda: gone(kube, job_path(namespace, "lost-g1")), 60)
    ev = wait_phase(kube, namespace, "lost", ("Succeeded", "Failed"), 60)
    assert ev["status"]["phase"] == "Succeeded", ev["status"].get("message")
    assert ev["status"]["runId"] == run_id
    assert "JobDeleted" not in reasons(kube, namespace, "lost")


# ----------------------------------------------- defect 5: a run never executes twice


def test_a_run_finished_and_ttl_deleted_while_the_operator_was_down_is_not_run_again(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    agent_rbac: str,
    digits_onnx: Path,
) -> None:
    first = start_operator(MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac)
    apply(cluster, namespace, evaluation("once", digits_onnx, ttlAfterFinished="1s"))
    wait_phase(kube, namespace, "once", ("Pending", "Running"), 60)
    # Kopf posts Events from a queue after the status patch: let the first operator post its
    # JobCreated before it dies, so the count below counts Jobs, not a lost Event.
    wait_for("the JobCreated event", lambda: "JobCreated" in reasons(kube, namespace, "once"), 30)
    first.kill()
    # While the operator is down the run finishes and the TTL controller deletes its Job.
    results = configmap_path(namespace, "once-results")

    def published() -> bool:
        data = (kube.get_or_none(results) or {}).get("data") or {}
        return "summary.json" in data

    wait_for("the agent's result", published, 120)
    wait_for("the TTL to delete the Job", lambda: gone(kube, job_path(namespace, "once-g1")), 60)
    run_id = json.loads(kube.get(results)["data"]["summary.json"])["run_id"]
    start_operator(MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac)
    ev = wait_phase(kube, namespace, "once", ("Succeeded", "Failed"), 120)
    assert ev["status"]["phase"] == "Succeeded", ev["status"].get("message")
    assert ev["status"]["runId"] == run_id  # the first run's result, not a second run's
    assert reasons(kube, namespace, "once").count("JobCreated") == 1
    assert json.loads(kube.get(results)["data"]["summary.json"])["run_id"] == run_id
    assert jobs(kube, namespace) == []


# ------------------------------------------- defect 7: OOMKilled, naming the memory limit


def end_pod_as_the_kubelet_would(
    cluster: Cluster, namespace: str, pod: dict[str, Any], reason: str, exit_code: int
) -> None:
    """Write the status a kubelet writes when the agent's container ends (Failed, the
    container terminated with ``reason``): the log tail as its termination message."""
    stamp = "2026-11-22T08:00:00Z"
    terminated = {
        "exitCode": exit_code,
        "reason": reason,
        "message": "loading model digits\nrunning batch size 64\n",
        "startedAt": stamp,
        "finishedAt": stamp,
    }
    container = {
        "name": CONTAINER_NAME,
        "image": pod["spec"]["containers"][0]["image"],
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {"terminated": terminated},
    }
    patch = {"status": {"phase": "Failed", "containerStatuses": [container]}}
    cluster.kubectl(
        "patch", "pod", pod["metadata"]["name"], "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps(patch),
    )  # fmt: skip


def test_an_oom_killed_agent_ends_oomkilled_naming_the_default_memory_limit(
    cluster: Cluster, namespace: str, kube: Kube, operator: OperatorProcess, digits_onnx: Path
) -> None:
    """No node here OOM-kills (the exec kubelet runs processes unconfined, kwok runs nothing),
    so the pods' statuses are written as a kubelet writes them, on pods no node takes; the Job
    controller, the API server and the operator are real. The spec sets no memory limit: the
    Job carries the operator's default (4Gi), and the message names it. The first attempt
    fails plainly, the retry is OOM-killed: the last attempt decides. The partial result the
    agent published before it was killed stays in the status."""
    no_node = {"nodeSelector": {"no-such-node": "x"}}
    apply(cluster, namespace, evaluation("oom", digits_onnx, hardware=no_node, retries=1))

    def attempt(before: tuple[str, ...] = ()) -> dict[str, Any] | None:
        """A pod of the Job other than those ``before`` (names are random: no order)."""
        pods = kube.list(pod_path(namespace), f"{JOB_NAME_LABEL}=oom-g1")
        return next((p for p in pods if p["metadata"]["name"] not in before), None)

    first = wait_for("the first attempt's pod", attempt, 60)
    assert first["spec"]["containers"][0]["resources"]["limits"] == {"memory": "4Gi"}
    partial = summary(generation=1, status="Failed", results=[row(1)])
    kube.merge_patch(
        configmap_path(namespace, "oom-results"), {"data": {SUMMARY_KEY: partial.model_dump_json()}}
    )
    end_pod_as_the_kubelet_would(cluster, namespace, first, "Error", 1)
    second = wait_for(  # after the Job controller's backoff, 10 s
        "the retry's pod", lambda: attempt((first["metadata"]["name"],)), 60
    )
    end_pod_as_the_kubelet_would(cluster, namespace, second, "OOMKilled", 137)
    ev = wait_phase(kube, namespace, "oom", ("Failed", "Succeeded"), 120)
    failed = condition(ev, "Failed")
    assert failed["reason"] == "OOMKilled", failed
    kill = runs.OOMKill(second["metadata"]["name"], CONTAINER_NAME, 137, "4Gi")
    assert failed["message"] == runs.oom_message(kill, limit_from_spec=False)
    assert ev["status"]["message"] == failed["message"]
    assert events_with(kube, namespace, "oom", "OOMKilled")
    assert [r["batchSize"] for r in ev["status"]["results"]] == [1]
    job = kube.get(job_path(namespace, "oom-g1"))
    job_failed = [c for c in job["status"]["conditions"] if c["type"] == "Failed"]
    assert job_failed[0]["reason"] == "BackoffLimitExceeded"  # all the Job itself says


# ------------------------------------------------------------ defect 9: operator policy


def test_a_spec_the_policy_refuses_ends_policy_denied_without_a_job(
    cluster: Cluster, namespace: str, kube: Kube, operator: OperatorProcess, digits_onnx: Path
) -> None:
    """An image outside the allowed prefixes and a Secret reference (both refused by default):
    Failed/PolicyDenied naming each field, value and setting, a Warning Event, no Job and no
    ConfigMap; an evaluation the policy allows still runs beside it."""
    manifest = evaluation(
        "denied",
        digits_onnx,
        framework={"name": "onnxruntime", "intraOpThreads": 1, "image": "evil.io/miner:1"},
    )
    manifest["spec"]["model"]["credentialsSecretRef"] = {"name": "db-password"}
    apply(cluster, namespace, manifest)
    apply(cluster, namespace, evaluation("allowed", digits_onnx))
    ev = wait_phase(kube, namespace, "denied", ("Failed", "Succeeded"), 60)
    failed = condition(ev, "Failed")
    assert failed["reason"] == "PolicyDenied", failed
    message = failed["message"]
    assert "spec.framework.image 'evil.io/miner:1'" in message, message
    assert "MLMS_OPERATOR_ALLOWED_IMAGE_PREFIXES" in message
    assert "spec.model.credentialsSecretRef 'db-password'" in message
    assert "MLMS_OPERATOR_ALLOW_SECRET_REFS=false" in message
    assert events_with(kube, namespace, "denied", "PolicyDenied")
    assert "jobName" not in ev["status"]
    assert (
        wait_phase(kube, namespace, "allowed", ("Failed", "Succeeded"), 120)["status"]["phase"]
        == "Succeeded"
    )
    assert [j["metadata"]["name"] for j in jobs(kube, namespace)] == ["allowed-g1"]
    assert kube.get_or_none(configmap_path(namespace, "denied-results")) is None
