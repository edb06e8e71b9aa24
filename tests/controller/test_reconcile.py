"""The operator's core reconcile on the fake API server, one row per situation: what the
evaluation's status, its Jobs and its Events end as (docs/reliability.md names the rows of
its operator defects table these cover). The same paths on the real API server, scheduler,
kubelet and agent: test_operator_cluster.py, test_operator_faults_cluster.py and
test_operator_chaos_cluster.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from operator_loop import NAMESPACE, OperatorLoop

from mlmodelscope.contract.kube import job_path, pod_path
from mlmodelscope.controller import names
from mlmodelscope.controller.handlers.handle_pod import SCHEDULED_GRACE_SECONDS
from mlmodelscope.controller.settings import OperatorSettings
from mlmodelscope.controller.status import ConditionType, Reason

Steps = Callable[[OperatorLoop], OperatorLoop]


@dataclass(frozen=True)
class Row:
    """A situation (``steps`` on a fresh loop) and how evaluation ``e`` ends up."""

    steps: Steps
    phase: str
    reason: str | None = None
    """The reason of the condition the phase names (Failed's, Queued's, Running's, ...)."""
    jobs: tuple[str, ...] = ("e-g1",)
    events: tuple[str, ...] = ()
    """Event reasons on ``e``, in order, when given."""
    message: str = ""
    """A part of ``status.message``."""
    settings: OperatorSettings = field(default_factory=OperatorSettings)


def created(loop: OperatorLoop) -> OperatorLoop:
    loop.apply()
    loop.settle()
    return loop


def running(loop: OperatorLoop) -> OperatorLoop:
    created(loop)
    loop.start("e-g1")
    loop.settle()
    loop.pass_time(SCHEDULED_GRACE_SECONDS)  # the placement's delayed write finds it shown
    return loop


def succeeded(loop: OperatorLoop) -> OperatorLoop:
    running(loop)
    loop.publish()
    loop.complete("e-g1")
    loop.settle()
    return loop


def edited_mid_run(loop: OperatorLoop) -> OperatorLoop:
    running(loop)
    loop.edit("e", {"timeout": "5m"})
    loop.settle()
    return loop


def policy_denied(loop: OperatorLoop) -> OperatorLoop:
    loop.apply(framework={"name": "onnxruntime", "image": "evil.example/agent:1"})
    loop.settle()
    return loop


def job_rejected(loop: OperatorLoop) -> OperatorLoop:
    loop.server.reject("jobs", lambda job: "spec.template.spec.containers[0].resources: bad")
    return created(loop)


def agent_failed(loop: OperatorLoop) -> OperatorLoop:
    running(loop)
    error = {"type": "SpecError", "message": "model.uri: no such file", "field": "model.uri"}
    loop.publish(status="Failed", error=error)
    loop.fail("e-g1")
    loop.settle()
    return loop


def completed_without_results(loop: OperatorLoop) -> OperatorLoop:
    running(loop)
    loop.complete("e-g1")
    loop.settle()
    return loop


def job_deleted_mid_run(loop: OperatorLoop) -> OperatorLoop:
    running(loop)
    loop.kube.delete(job_path(NAMESPACE, "e-g1"))
    loop.settle()
    return loop


def job_deleted_after_publishing(loop: OperatorLoop) -> OperatorLoop:
    running(loop)
    loop.publish()
    loop.kube.delete(job_path(NAMESPACE, "e-g1"))
    loop.settle()
    return loop


def pod_lost(loop: OperatorLoop) -> OperatorLoop:
    running(loop)
    loop.disrupt("e-g1-0")
    loop.settle()
    return loop


def oom_killed(loop: OperatorLoop) -> OperatorLoop:
    """The kernel kills the agent for memory; the Job gives up (row 7)."""
    running(loop)
    pod = "e-g1-0"
    killed = {"terminated": {"reason": "OOMKilled", "exitCode": 137, "finishedAt": "x"}}
    loop.kube.merge_patch(
        pod_path(NAMESPACE, pod) + "/status",
        {
            "status": {
                "phase": "Failed",
                "containerStatuses": [{"name": "agent", "ready": False, "state": killed}],
            }
        },
    )
    loop.fail("e-g1")
    loop.settle()
    return loop


def never_starts(loop: OperatorLoop) -> OperatorLoop:
    created(loop)
    pod = loop.start("e-g1")
    waiting = {
        "waiting": {"reason": "CreateContainerConfigError", "message": 'secret "hf" not found'}
    }
    loop.kube.merge_patch(
        pod_path(NAMESPACE, pod) + "/status",
        {
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "agent", "ready": False, "state": waiting}],
            }
        },
    )
    loop.kube.merge_patch(
        job_path(NAMESPACE, "e-g1") + "/status", {"status": {"ready": 0, "active": 1}}
    )
    loop.settle()
    return loop


def restarted_mid_run(loop: OperatorLoop) -> OperatorLoop:
    running(loop)
    again = loop.restart()
    again.settle()
    again.publish()
    again.complete("e-g1")
    again.settle()
    return again


def finished_while_away(loop: OperatorLoop) -> OperatorLoop:
    """The run ends and its Job is TTL-deleted while no operator runs (row 5)."""
    running(loop)
    loop.publish()
    loop.complete("e-g1")
    loop.kube.delete(job_path(NAMESPACE, "e-g1"))
    again = loop.restart()
    again.settle()
    return again


def foreign_job(loop: OperatorLoop) -> OperatorLoop:
    """A Job of the same name left by an earlier evaluation of the same name (row 2)."""
    stale = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "e-g1",
            "labels": names.labels("e", 1),
            "ownerReferences": [
                {
                    "uid": "an-earlier-uid",
                    "kind": "ModelEvaluation",
                    "apiVersion": "mlmodelscope.io/v1alpha1",
                    "name": "e",
                }
            ],
        },
        "spec": {"template": {"metadata": {}, "spec": {}}},
    }
    loop.kube.create(job_path(NAMESPACE), stale)
    return created(loop)


def invalid_spec(loop: OperatorLoop) -> OperatorLoop:
    loop.apply(model={"format": "keras"})
    loop.settle()
    return loop


ROWS: dict[str, Row] = {
    "create": Row(created, "Pending", Reason.JOB_CREATED, events=("JobCreated",)),
    "run to success": Row(
        succeeded, "Succeeded", Reason.SUCCEEDED, events=("JobCreated", "Succeeded")
    ),
    "edit mid-run": Row(edited_mid_run, "Pending", Reason.JOB_CREATED, jobs=("e-g2",)),
    "policy denial (row 9)": Row(
        policy_denied,
        "Failed",
        Reason.POLICY_DENIED,
        jobs=(),
        events=("PolicyDenied",),
        message="evil.example/agent:1",
    ),
    "Job rejected (row 1)": Row(
        job_rejected, "Failed", Reason.JOB_REJECTED, jobs=(), message="resources: bad"
    ),
    "agent failed on its spec": Row(
        agent_failed, "Failed", Reason.INVALID_SPEC, message="model.uri: no such file"
    ),
    "Job complete, no result": Row(completed_without_results, "Failed", Reason.RESULTS_MISSING),
    "Job deleted mid-run (row 4)": Row(job_deleted_mid_run, "Failed", Reason.JOB_DELETED, jobs=()),
    "Job deleted, result published (row 4)": Row(
        job_deleted_after_publishing, "Succeeded", Reason.SUCCEEDED, jobs=()
    ),
    "pod lost": Row(pod_lost, "Pending", Reason.POD_DISRUPTED, message="e-g1-0 on node node-a"),
    "OOM-killed (row 7)": Row(
        oom_killed, "Failed", Reason.OOM_KILLED, message="without a memory limit"
    ),
    "never starts (row 3)": Row(
        never_starts,
        "Failed",
        "CreateContainerConfigError",
        jobs=(),
        message='secret "hf" not found',
        settings=OperatorSettings(start_timeout_seconds=0),
    ),
    "restart mid-run": Row(restarted_mid_run, "Succeeded", Reason.SUCCEEDED),
    "finished while away (row 5)": Row(finished_while_away, "Succeeded", Reason.SUCCEEDED, jobs=()),
    "foreign Job (row 2)": Row(foreign_job, "", None, events=("ReconcileRetrying",)),
    "invalid spec": Row(invalid_spec, "Failed", Reason.INVALID_SPEC, jobs=()),
}


def _condition_reason(loop: OperatorLoop, phase: str) -> str | None:
    kind = {"Pending": ConditionType.RUNNING}.get(phase, phase)
    condition = loop.condition("e", kind)
    return None if condition is None else str(condition.get("reason"))


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_reconcile(row: Row) -> None:
    loop = row.steps(OperatorLoop(settings=row.settings))
    status = loop.status()
    assert status.get("phase", "") == row.phase, status
    if row.reason is not None:
        assert _condition_reason(loop, row.phase) == row.reason, status
    assert tuple(loop.jobs()) == row.jobs
    if row.events:
        assert tuple(loop.event_reasons()) == row.events
    assert row.message in status.get("message", "")


def test_a_queued_evaluation_starts_when_the_slot_frees_row_6() -> None:
    loop = OperatorLoop(settings=OperatorSettings(max_running=1))
    loop.apply("a")
    loop.apply("b")
    loop.settle()
    assert loop.jobs() == ["a-g1"]
    assert loop.status("b")["phase"] == "Queued"
    assert (loop.condition("b", ConditionType.QUEUED) or {}).get("reason") == "ConcurrencyLimit"
    loop.start("a-g1")
    loop.publish("a")
    loop.complete("a-g1")
    loop.settle()
    assert loop.status("a")["phase"] == "Succeeded"
    assert loop.jobs() == ["a-g1", "b-g1"] and loop.status("b")["phase"] == "Pending"


def test_a_deleted_evaluation_takes_its_children_and_is_forgotten() -> None:
    loop = running(OperatorLoop())
    loop.ctx.lock(NAMESPACE, "e")
    loop.delete("e")
    handled = loop.settle()
    assert loop.jobs() == []
    for kind in ("configmaps", "pods", "serviceaccounts", "roles", "rolebindings"):
        assert loop.server.of(kind, NAMESPACE) == [], kind
    assert ("modelevaluations", "e", "forgotten") in [
        (h.resource, h.name, h.outcome) for h in handled
    ]
    assert (NAMESPACE, "e") not in loop.ctx._locks


def test_a_replaced_run_is_not_a_failure() -> None:
    loop = edited_mid_run(OperatorLoop())
    outcomes = [h.outcome for h in loop.handled if (h.resource, h.name) == ("jobs", "e-g1")]
    assert outcomes[-1] in ("replaced", "other generation")
    assert "JobDeleted" not in loop.event_reasons()
    assert loop.condition("e", ConditionType.FAILED) is None
    assert loop.status()["observedGeneration"] == 2


FIRST_TIME_SUCCESS = {
    ("create", "configmaps"): 2,  # spec and results
    ("create", "serviceaccounts"): 1,  # the agent's own account, Role and RoleBinding
    ("create", "roles"): 1,
    ("create", "rolebindings"): 1,
    ("create", "jobs"): 1,
    ("get", "namespaces"): 1,  # its policy annotations (cached for 10 s per namespace)
    ("patch", "modelevaluations/status"): 3,  # Pending, Running (and Scheduled), Succeeded
    ("create", "events"): 2,  # JobCreated, Succeeded
    ("get", "configmaps"): 1,  # the agent's result
}


def test_a_first_time_success_makes_only_the_requests_it_needs() -> None:
    """The operator's own requests for one evaluation that succeeds first time, by verb and
    resource (issue 30 asks for at most 12 at scale, where the namespace read is shared)."""
    loop = succeeded(OperatorLoop())
    made = dict(loop.operator_kube.requests)
    assert made == FIRST_TIME_SUCCESS, made


def test_a_run_that_ended_without_results_lists_its_pods_once() -> None:
    """The termination messages and the nodes the pods ran on come from one listing."""
    loop = running(OperatorLoop())
    before = loop.operator_kube.requests[("list", "pods")]
    loop.complete("e-g1")
    loop.settle()
    assert _condition_reason(loop, "Failed") == Reason.RESULTS_MISSING
    assert loop.operator_kube.requests[("list", "pods")] - before == 1


def test_job_events_after_the_run_ended_read_nothing_more() -> None:
    """The Job controller updates a finished Job's status again (its completion time, the
    pods it stops tracking): the operator answers each from the evaluation it saw end, not
    with a GET."""
    for end in (OperatorLoop.complete, OperatorLoop.fail):
        loop = running(OperatorLoop())
        loop.publish()
        end(loop, "e-g1")
        loop.settle()
        assert loop.status()["phase"] in ("Succeeded", "Failed")
        before = dict(loop.operator_kube.requests)
        for second in range(3):
            loop._job_status("e-g1", {"completionTime": f"2026-11-24T00:01:0{second}Z"})
            loop.settle()
        assert dict(loop.operator_kube.requests) == before, end


def test_a_pod_that_waits_for_its_image_shows_its_node_before_it_runs() -> None:
    """Placed but not running after the grace (a large image being pulled): the Scheduled
    condition names the node then, one patch more than a pod that starts at once."""
    loop = created(OperatorLoop())
    pod = loop.start("e-g1", node="gpu-3", run=False)
    loop.settle()
    assert loop.condition("e", ConditionType.SCHEDULED) is None
    loop.pass_time(SCHEDULED_GRACE_SECONDS)
    scheduled = loop.condition("e", ConditionType.SCHEDULED)
    assert scheduled is not None and scheduled["status"] == "True"
    assert "gpu-3" in scheduled["message"] and loop.status()["phase"] == "Pending"
    loop.run("e-g1", pod)
    loop.publish()
    loop.complete("e-g1")
    loop.settle()
    assert loop.status()["phase"] == "Succeeded"
    assert loop.operator_kube.requests[("patch", "modelevaluations/status")] == 4
