"""Conflicts on the real control plane (issue 15): two operator replicas with Kopf peering,
spec edits in a burst during a run, and a concurrent writer of the evaluation's status.

Each test runs `mlms operator` subprocesses on the test's namespace (conftest.py); the
evaluations run for real on the exec node. docs/reliability.md ("Conflicts") lists them.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_evaluations import (
    REPO,
    apply,
    condition,
    evaluation,
    events_with,
    get,
    jobs,
    wait_phase,
)
from operator_process import OperatorProcess

from mlmodelscope.contract.kube import Kube, KubeError, configmap_path, evaluation_path, pod_path
from mlmodelscope.controller import names
from mlmodelscope.controller.runs import JOB_NAME_LABEL
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

LIFETIME = 8
"""Seconds a replica's peering keep-alive counts (MLMS_OPERATOR_PEERING_LIFETIME_SECONDS;
60 by default): how long a SIGKILLed replica blocks its standby at most."""
ACTS = re.compile(r"this replica \((.+?)\) acts")
STANDBY = "is on standby for"


def finished(job: dict[str, Any]) -> bool:
    return any(
        c["type"] in ("Complete", "Failed") and c["status"] == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def active_jobs(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    """Jobs still running that nobody has asked to delete."""
    return [
        j
        for j in jobs(kube, namespace)
        if not finished(j) and not j["metadata"].get("deletionTimestamp")
    ]


def text(op: OperatorProcess) -> str:
    return op.log.read_text(errors="replace")


# ---------------------------------------------------------------- two replicas, peering


@pytest.fixture
def kopf_peering(cluster: Cluster, kube: Kube, namespace: str) -> str:
    """Kopf's peering CRDs as the chart ships them, and the KopfPeering the chart creates in
    each watched namespace (here the test's)."""
    cluster.kubectl("apply", "-f", str(REPO / "helm/mlmodelscope/crds/kopf.dev_peerings.yaml"))
    body = {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfPeering",
        "metadata": {"name": "mlmodelscope"},
    }

    def created() -> bool:
        try:
            kube.create(f"/apis/kopf.dev/v1/namespaces/{namespace}/kopfpeerings", body)
        except KubeError as exc:
            if exc.status == 404:  # the CRD is not served yet
                return False
            raise
        return True

    wait_for("the KopfPeering to be created", created, 60)
    return "mlmodelscope"


@pytest.fixture
def replica(
    start_operator: Callable[..., OperatorProcess], agent_rbac: str, kopf_peering: str
) -> Callable[[str], OperatorProcess]:
    """Start one replica as the chart runs them: peering on, no explicit priority."""

    def start(log: str) -> OperatorProcess:
        return start_operator(
            standalone=False,
            log=log,
            MLMS_OPERATOR_PEERING=kopf_peering,
            MLMS_OPERATOR_PEERING_LIFETIME_SECONDS=str(LIFETIME),
            MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac,
            MLMS_OPERATOR_RESYNC_SECONDS="1",
        )

    return start


def handled(op: OperatorProcess) -> list[str]:
    """The handler runs in an operator's log (none while it is paused): Kopf's, and the
    evaluation reconciles of the work queue."""
    return [
        kopf or queued
        for kopf, queued in re.findall(
            r"Handler '([\w-]+)' succeeded|reconcile ([\w-]+) of \S+ succeeded", text(op)
        )
    ]


def test_two_replicas_one_acts_and_the_standby_takes_over_when_it_is_killed(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    replica: Callable[[str], OperatorProcess],
    digits_onnx: Path,
) -> None:
    first = replica("first.log")
    wait_for("the first replica to act", lambda: ACTS.search(text(first)), 60)
    second = replica("second.log")
    # Kopf starts a peering operator paused and stays so, silently, while a peer outranks it.
    wait_for("the second replica to stand by", lambda: STANDBY in text(second), 60)

    calm = [f"calm-{i}" for i in range(3)]
    for name in calm:
        apply(cluster, namespace, evaluation(name, digits_onnx))
    for name in calm:
        ev = wait_phase(kube, namespace, name, ("Succeeded", "Failed"), 120)
        assert ev["status"]["phase"] == "Succeeded", ev["status"].get("message")
        assert ev["status"]["results"][0]["top1"] > 0.85
    assert sorted(j["metadata"]["name"] for j in jobs(kube, namespace)) == [f"{n}-g1" for n in calm]
    assert "created" in handled(first)
    assert handled(second) == [], "the standby ran handlers"
    assert not ACTS.search(text(second))
    assert "Possibly conflicting operators" not in text(first) + text(second)

    # The active replica dies without a word (SIGKILL) while two runs are in flight.
    busy = [f"handover-{i}" for i in range(2)]
    for name in busy:
        apply(cluster, namespace, evaluation(name, digits_onnx, scenario={"minDuration": "5s"}))
    for name in busy:
        wait_phase(kube, namespace, name, ("Running",), 90)
    first.kill()
    killed = time.monotonic()
    wait_for("the standby to take over", lambda: ACTS.search(text(second)), LIFETIME + 30)
    took = time.monotonic() - killed
    assert "Resuming operations after the pause" in text(second)
    for name in busy:
        ev = wait_phase(kube, namespace, name, ("Succeeded", "Failed"), 120)
        assert ev["status"]["phase"] == "Succeeded", ev["status"].get("message")
        assert ev["status"]["jobName"] == f"{name}-g1"
        assert len(kube.list(pod_path(namespace), f"{JOB_NAME_LABEL}={name}-g1")) == 1
    assert sorted(j["metadata"]["name"] for j in jobs(kube, namespace)) == sorted(
        f"{n}-g1" for n in calm + busy
    )
    assert handled(second), "the replica that took over ran no handler"
    apply(cluster, namespace, evaluation("late", digits_onnx))
    ev = wait_phase(kube, namespace, "late", ("Succeeded", "Failed"), 120)
    assert ev["status"]["phase"] == "Succeeded"
    print(f"standby took over {took:.1f} s after the SIGKILL (lifetime {LIFETIME} s)")


# ------------------------------------------------------------- spec edits during a run


def test_spec_edits_in_a_burst_during_a_run_leave_one_job_for_the_last_generation(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    agent_rbac: str,
    digits_onnx: Path,
) -> None:
    """Three edits within milliseconds while generation 1 runs: never two live Jobs at once,
    the run of the last generation alone finishes, with its spec; the runs cut short are in
    history with the phase they had."""
    start_operator(MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac, MLMS_OPERATOR_RESYNC_SECONDS="1")
    apply(cluster, namespace, evaluation("burst", digits_onnx, scenario={"minDuration": "3s"}))
    peak = {"live": 0}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak["live"] = max(peak["live"], len(active_jobs(kube, namespace)))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        wait_phase(kube, namespace, "burst", ("Running",), 90)
        path = evaluation_path(namespace, "burst")
        for sizes in ([2], [3], [2, 4]):
            kube.merge_patch(path, {"spec": {"scenario": {"batchSizes": sizes}}})
        assert get(kube, namespace, "burst")["metadata"]["generation"] == 4
        wait_for(
            "generation 4 to finish",
            lambda: (
                (get(kube, namespace, "burst").get("status") or {}).get("observedGeneration") == 4
                and (
                    get(kube, namespace, "burst")["status"].get("phase") in ("Succeeded", "Failed")
                )
            ),
            180,
        )
    finally:
        stop.set()
        watcher.join(timeout=5)
    st = get(kube, namespace, "burst")["status"]
    assert st["phase"] == "Succeeded", st.get("message")
    assert st["jobName"] == "burst-g4"
    assert [r["batchSize"] for r in st["results"]] == [2, 4]
    assert condition({"status": st}, "Succeeded")["observedGeneration"] == 4
    history = st["history"]
    generations = [h["generation"] for h in history]
    assert generations[-1] == 1 and generations == sorted(set(generations), reverse=True)
    assert set(generations) <= {1, 2, 3}
    assert all(h["phase"] in ("Pending", "Queued", "Running") for h in history), history
    assert history[-1]["phase"] == "Running"  # generation 1 was running when replaced
    assert peak["live"] == 1, peak
    leftover = [j for j in jobs(kube, namespace) if j["metadata"]["name"] != "burst-g4"]
    assert all(finished(j) or j["metadata"].get("deletionTimestamp") for j in leftover)
    [final] = [j for j in jobs(kube, namespace) if j["metadata"]["name"] == "burst-g4"]
    assert finished(final)

    def old_pods_stopped() -> bool:
        pods = kube.list(pod_path(namespace), names.MANAGED_SELECTOR)
        return all(
            p["status"].get("phase") not in ("Pending", "Running")
            for p in pods
            if p["metadata"]["labels"].get(JOB_NAME_LABEL) != "burst-g4"
        )

    wait_for("the replaced runs' pods to stop", old_pods_stopped, 60)
    spec_cm = kube.get(configmap_path(namespace, "burst-spec"))
    assert yaml.safe_load(spec_cm["data"]["evaluation.yaml"])["spec"]["scenario"]["batchSizes"] == [
        2,
        4,
    ]
    reasons = [e["reason"] for e in events_with(kube, namespace, "burst", "Succeeded")]
    assert "JobDeleted" not in reasons and "Failed" not in reasons, reasons


# ------------------------------------------------------ a concurrent writer of the status


class Writer:
    """A well-behaved concurrent writer of an evaluation's status (another controller, say):
    it keeps setting its own condition ``ExternalCheck`` (a counter in the message) by
    resourceVersion-guarded read-modify-write, like the operator's, as fast as it can. Each
    read checks that its previous write is still there: ``lost`` counts the times someone
    replaced the conditions with a list computed before that write."""

    def __init__(self, kube: Kube, path: str) -> None:
        self.kube = kube
        self.path = path
        self.written = self.conflicts = self.lost = 0
        self.last = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            ev = self.kube.get_or_none(self.path)
            if ev is None:
                time.sleep(0.05)
                continue
            conditions = (ev.get("status") or {}).get("conditions") or []
            theirs = [c for c in conditions if c["type"] != "ExternalCheck"]
            mine = [c["message"] for c in conditions if c["type"] == "ExternalCheck"]
            if self.last and mine != [self.last]:
                self.lost += 1
            n += 1
            condition = {
                "type": "ExternalCheck",
                "status": "True",
                "reason": "Checked",
                "message": str(n),
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
            body = {
                "metadata": {"resourceVersion": ev["metadata"]["resourceVersion"]},
                "status": {"conditions": [*theirs, condition]},
            }
            try:
                self.kube.merge_patch(self.path + "/status", body)
            except KubeError as exc:
                if exc.status != 409:
                    raise
                self.conflicts += 1
                continue
            self.written += 1
            self.last = str(n)
            time.sleep(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@pytest.fixture
def writer(kube: Kube, namespace: str) -> Iterator[Callable[[str], Writer]]:
    started: list[Writer] = []

    def start(name: str) -> Writer:
        started.append(Writer(kube, evaluation_path(namespace, name)))
        return started[-1]

    yield start
    for w in started:
        w.stop()


def test_a_concurrent_status_writer_loses_nothing_and_the_run_status_is_complete(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    agent_rbac: str,
    digits_onnx: Path,
    writer: Callable[[str], Writer],
) -> None:
    """While the operator moves an evaluation through Pending, Running and Succeeded, another
    writer sets its own condition about 30 times a second. None of its writes is ever
    replaced by the operator (which would write conditions computed before it), and the
    operator's run status is complete: every condition, field and Event."""
    op = start_operator("--verbose", MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac)
    other = writer("contended")
    apply(cluster, namespace, evaluation("contended", digits_onnx, scenario={"minDuration": "2s"}))
    wait_phase(kube, namespace, "contended", ("Succeeded", "Failed"), 120)
    events_with(kube, namespace, "contended", "JobCreated", "Succeeded")
    time.sleep(1)
    other.stop()
    st = get(kube, namespace, "contended")["status"]
    assert other.lost == 0, f"{other.lost} writes of the other writer were overwritten"
    assert other.written > 20, vars(other)
    assert st["phase"] == "Succeeded", st.get("message")
    assert st["observedGeneration"] == 1 and st["jobName"] == "contended-g1"
    assert st["results"][0]["top1"] > 0.85 and st["runId"]
    kinds = {c["type"]: c for c in st["conditions"]}
    assert {"Valid", "Queued", "Scheduled", "Running", "Succeeded"} <= set(kinds), kinds
    assert kinds["Succeeded"]["status"] == "True" and kinds["Valid"]["status"] == "True"
    assert kinds["ExternalCheck"]["message"] == other.last
    retried = text(op).count("changed meanwhile (409)")
    print(f"operator status writes retried after a 409: {retried}; writer: {vars(other)}")
