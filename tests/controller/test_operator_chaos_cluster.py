"""Fault injection (issue 15): the operator SIGKILLed at each phase of a run, the API server
stopped for 10 s, etcd restarted, and the node of a running evaluation pod deleted.

Each test runs its own `mlms operator --standalone` subprocess on the test's namespace; the
evaluations really run on the exec node. After every fault: exactly one Job per run generation,
the evaluation pod ran once, a final status that says what happened and, when the run
completed, its results in the status (and, with a store, recorded there exactly once).
docs/reliability.md ("Fault injection") lists what each test proves.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_evaluations import (
    apply,
    condition,
    evaluation,
    events,
    events_with,
    free_port,
    get,
    jobs,
    wait_phase,
)
from operator_process import OperatorProcess

from mlmodelscope.contract.kube import Kube, configmap_path, job_path, pod_path
from mlmodelscope.controller.runs import JOB_NAME_LABEL
from mlmodelscope.devcluster import nodes
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

FAST = {"MLMS_OPERATOR_RESYNC_SECONDS": "1"}
"""Resync every second (default 30 s), so a lost Job event is picked up at once."""
EXEC_NODE = "cpu-exec-0"
"""The exec node `evaluation` selects (the CPU pool's only node that runs pods)."""


def job_condition(kube: Kube, namespace: str, job: str, kind: str) -> bool:
    conditions = ((kube.get_or_none(job_path(namespace, job)) or {}).get("status") or {}).get(
        "conditions"
    ) or []
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


def job_pods(kube: Kube, namespace: str, job: str) -> list[dict[str, Any]]:
    return kube.list(pod_path(namespace), f"{JOB_NAME_LABEL}={job}")


def reasons(kube: Kube, namespace: str, name: str, *expected: str) -> list[str]:
    return [e["reason"] for e in events_with(kube, namespace, name, *expected)]


def assert_succeeded_once(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """The invariants every fault must leave: one Job (generation 1) whose pod ran once, the
    evaluation Succeeded with the agent's real results, the status naming the run the results
    ConfigMap holds."""
    ev = wait_phase(kube, namespace, name, ("Succeeded", "Failed"), 120)
    status = ev["status"]
    assert status["phase"] == "Succeeded", status.get("message")
    assert [j["metadata"]["name"] for j in jobs(kube, namespace)] == [f"{name}-g1"]
    [pod] = job_pods(kube, namespace, f"{name}-g1")  # never run a second time
    assert pod["status"]["phase"] == "Succeeded"
    assert status["jobName"] == f"{name}-g1" and status["observedGeneration"] == 1
    assert status["results"][0]["top1"] > 0.85
    published = kube.get(configmap_path(namespace, f"{name}-results"))["data"]["result.json"]
    assert json.loads(published)["run_id"] == status["runId"]
    return ev


# ----------------------------------------------------- the operator SIGKILLed at each phase


def kill_before_the_job(kube: Kube, namespace: str, name: str, op: OperatorProcess) -> None:
    """The moment the evaluation is applied: the operator may or may not have created the Job
    (and its ConfigMaps), it has posted nothing after that."""
    op.kill()


def kill_when_pending(kube: Kube, namespace: str, name: str, op: OperatorProcess) -> None:
    wait_for("the Job", lambda: kube.get_or_none(job_path(namespace, f"{name}-g1")), 60)
    events_with(kube, namespace, name, "JobCreated")
    op.kill()


def kill_when_running(kube: Kube, namespace: str, name: str, op: OperatorProcess) -> None:
    wait_phase(kube, namespace, name, ("Running",), 90)
    op.kill()


def kill_then_the_job_completes(kube: Kube, namespace: str, name: str, op: OperatorProcess) -> None:
    """Killed while Running; the Job completes while no operator runs, so its Complete event
    is never seen and the status still says Running at restart."""
    wait_phase(kube, namespace, name, ("Running",), 90)
    op.kill()
    wait_for(
        "the Job to complete without the operator",
        lambda: job_condition(kube, namespace, f"{name}-g1", "Complete"),
        120,
    )
    assert get(kube, namespace, name)["status"]["phase"] == "Running"


def kill_as_the_job_completes(kube: Kube, namespace: str, name: str, op: OperatorProcess) -> None:
    """Killed the moment the Job says Complete (polled every 20 ms): the operator is reading
    the results, writing the status or recording the run in the store."""
    wait_for(
        "the Job to complete",
        lambda: job_condition(kube, namespace, f"{name}-g1", "Complete"),
        120,
        interval=0.02,
    )
    op.kill()


KILLS = {
    "just-after-apply": kill_before_the_job,
    "pending": kill_when_pending,
    "running": kill_when_running,
    "job-completed-while-down": kill_then_the_job_completes,
    "while-recording-the-result": kill_as_the_job_completes,
}


@pytest.mark.parametrize("phase", list(KILLS))
def test_an_operator_killed_at_any_phase_and_restarted_finishes_the_run_once(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    agent_rbac: str,
    digits_onnx: Path,
    tmp_path: Path,
    phase: str,
) -> None:
    """SIGKILL (no graceful shutdown) at ``phase``, then a new operator: one Job, its pod run
    once, Succeeded with the real results, the run recorded once in the store."""
    from mlmodelscope.store import open_store

    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    settings = {
        "MLMS_OPERATOR_JOB_SERVICE_ACCOUNT": agent_rbac,
        "MLMS_OPERATOR_STORE_URL": store_url,
        **FAST,
    }
    first = start_operator(**settings)
    name = "killed"
    apply(cluster, namespace, evaluation(name, digits_onnx, scenario={"minDuration": "3s"}))
    KILLS[phase](kube, namespace, name, first)
    start_operator(**settings)
    ev = assert_succeeded_once(kube, namespace, name)
    run_id = ev["status"]["runId"]
    wait_for(
        "the run to be recorded",
        lambda: (
            ((get(kube, namespace, name)["status"].get("record") or {}).get("state")) == "Recorded"
        ),
        60,
    )
    with open_store(store_url) as store:
        assert [r.run_id for r in store.list_runs(namespace=namespace)] == [run_id]
    assert condition(ev, "Succeeded")["status"] == "True"
    # Events are posted after the status change they describe, at most once: a kill between
    # the two loses the event (the status keeps the truth), never duplicates it.
    if phase == "while-recording-the-result":
        found = [e["reason"] for e in events(kube, namespace, name)]
        assert found.count("Succeeded") <= 1, found
    else:
        found = reasons(kube, namespace, name, "Succeeded")
        assert found.count("Succeeded") == 1, found
    assert found.count("JobCreated") <= 1, found
    if phase != "just-after-apply":  # the first operator posted it before the kill
        assert found.count("JobCreated") == 1, found


# ------------------------------------------------------- control-plane processes restarted


@pytest.fixture
def restores_components(cluster: Cluster) -> Iterator[None]:
    """Whatever a test stopped runs again afterwards, so the session's other tests see the
    whole cluster."""
    wanted = set(cluster.alive_components())
    yield
    for name in [n for n in wanted if n not in cluster.alive_components()]:
        cluster.start_component(name)


def probe(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as answer:
        return int(answer.status)


@pytest.mark.parametrize(("component", "down_seconds"), [("kube-apiserver", 10.0), ("etcd", 5.0)])
def test_a_control_plane_restart_mid_run_keeps_the_operator_alive_and_the_run_whole(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    agent_rbac: str,
    digits_onnx: Path,
    restores_components: None,
    component: str,
    down_seconds: float,
) -> None:
    """The API server (10 s) or etcd stopped while the agent runs, then started again with its
    data: the same operator process reconnects its watches and finishes the run, one Job,
    Succeeded with the results; its liveness endpoint answers throughout the recovery."""
    port = free_port()
    op = start_operator(
        f"--liveness=http://127.0.0.1:{port}/healthz",
        MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac,
        **FAST,
    )
    name = "outage"
    manifest = evaluation(name, digits_onnx, scenario={"minDuration": "15s"})
    apply(cluster, namespace, manifest)
    wait_phase(kube, namespace, name, ("Running",), 90)
    cluster.stop_component(component)
    time.sleep(down_seconds)
    assert op.proc is not None and op.proc.poll() is None, op.tail()
    cluster.start_component(component)
    assert_succeeded_once(kube, namespace, name)
    assert op.proc.poll() is None, op.tail()  # never restarted: the same process
    assert probe(port) == 200
    # A spec edit after the outage is still seen: the watch is live again.
    apply(cluster, namespace, evaluation(name, digits_onnx, scenario={"warmup": 3}))
    wait_for(
        "generation 2 to run",
        lambda: (get(kube, namespace, name).get("status") or {}).get("jobName") == f"{name}-g2",
        60,
    )
    ev = wait_phase(kube, namespace, name, ("Succeeded", "Failed"), 120)
    assert ev["status"]["phase"] == "Succeeded", ev["status"].get("message")
    assert sorted(j["metadata"]["name"] for j in jobs(kube, namespace)) == [
        f"{name}-g1",
        f"{name}-g2",
    ]


# ------------------------------------------------------------------ a node that disappears


@pytest.fixture
def exec_node_restored(cluster: Cluster, kube: Kube) -> Iterator[dict[str, Any]]:
    """The exec node's Node object as registered; registered again (and Ready) after the test,
    as a replacement node joins under the same name."""
    [sim] = [n for n in nodes.exec_nodes() if n.name == EXEC_NODE]
    yield sim.manifest()
    if kube.get_or_none(f"/api/v1/nodes/{EXEC_NODE}") is None:
        kube.create("/api/v1/nodes", sim.manifest())
    wait_for(f"node {EXEC_NODE} to be Ready", lambda: node_ready(kube, EXEC_NODE), 60)


def node_ready(kube: Kube, name: str) -> bool:
    node = kube.get_or_none(f"/api/v1/nodes/{name}")
    if node is None:
        return False
    ready = any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )
    taints = {t["key"] for t in (node.get("spec") or {}).get("taints") or []}
    return ready and not taints & {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}


def running_condition(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    for cond in (get(kube, namespace, name).get("status") or {}).get("conditions") or []:
        if cond["type"] == "Running":
            return dict(cond)
    return None


@pytest.mark.timeout(300)
def test_an_evaluation_whose_node_disappears_says_so_and_reruns_when_a_node_returns(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    agent_rbac: str,
    digits_onnx: Path,
    exec_node_restored: dict[str, Any],
) -> None:
    """The Node object of the exec node deleted while the agent runs (as a cloud provider
    deletes the Node of a machine that is gone). After its 40 s quarantine the pod garbage
    collector marks the pod DisruptionTarget/DeletionByPodGC and deletes it (the exec kubelet
    kills the agent); the Job's podFailurePolicy ignores that failure and creates a
    replacement, which no node can take. The evaluation goes back to Pending with a
    PodDisrupted Warning naming the pod, the node and the reason, then Unschedulable; when a
    node joins under the same name the replacement runs and the run succeeds: one Job,
    ``spec.retries`` (0) untouched. The agent measures two 40 s windows, so that it outlives
    the quarantine and the pod GC's 20 s period."""
    start_operator(MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac, **FAST)
    name = "orphan"
    apply(cluster, namespace, evaluation(name, digits_onnx, scenario={"minDuration": "40s"}))
    wait_phase(kube, namespace, name, ("Running",), 90)
    [first] = job_pods(kube, namespace, f"{name}-g1")
    assert first["spec"]["nodeName"] == EXEC_NODE
    cluster.kubectl("delete", "node", EXEC_NODE, "--wait=false")
    lost = wait_for(
        "the disruption to be reported",
        lambda: (
            cond
            if (cond := running_condition(kube, namespace, name))
            and cond["reason"] == "PodDisrupted"
            else None
        ),
        120,
    )
    message = lost["message"]
    assert f"evaluation pod {first['metadata']['name']} on node {EXEC_NODE}" in message, message
    assert "(DeletionByPodGC: PodGC: node no longer exists)" in message, message
    assert "without counting it against spec.retries" in message, message
    assert lost["status"] == "False"
    disrupted = [
        e
        for e in events_with(kube, namespace, name, "PodDisrupted")
        if e["reason"] == "PodDisrupted"
    ]
    assert len(disrupted) == 1 and disrupted[0]["type"] == "Warning"
    assert disrupted[0]["message"] == message

    def unschedulable() -> dict[str, Any] | None:
        ev = get(kube, namespace, name)
        scheduled = next(c for c in ev["status"]["conditions"] if c["type"] == "Scheduled")
        return ev if scheduled["reason"] == "Unschedulable" else None

    waiting = wait_for("the replacement to wait for a node", unschedulable, 60)
    assert waiting["status"]["phase"] == "Pending"
    # A node joins again under the same name (a replacement machine).
    kube.create("/api/v1/nodes", exec_node_restored)
    ev = wait_phase(kube, namespace, name, ("Succeeded", "Failed"), 150)
    assert ev["status"]["phase"] == "Succeeded", ev["status"].get("message")
    assert [j["metadata"]["name"] for j in jobs(kube, namespace)] == [f"{name}-g1"]
    job = kube.get(job_path(namespace, f"{name}-g1"))
    assert job["status"].get("failed", 0) == 0  # the disruption used none of spec.retries
    [second] = job_pods(kube, namespace, f"{name}-g1")  # the lost pod was deleted
    assert second["metadata"]["name"] != first["metadata"]["name"]
    assert ev["status"]["results"][0]["top1"] > 0.85
    assert ev["status"]["stack"]["node"] == EXEC_NODE
