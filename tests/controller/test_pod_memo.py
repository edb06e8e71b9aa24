"""A pod's repeated scheduling state costs no read of its evaluation (controller/pod_memo.py),
and the memory never hides a state the status does not show yet."""

from __future__ import annotations

from typing import Any

import pytest

from fakes import FakeApiServer, FakeKube
from mlmodelscope.contract.kube import evaluation_path
from mlmodelscope.controller import names, runs, status
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.handlers import handle_pod
from mlmodelscope.controller.pod_memo import PodMemo
from mlmodelscope.controller.settings import OperatorSettings
from mlmodelscope.devcluster.pytest_plugin import wait_for

PATH = evaluation_path("a", "e")
GETS = ("get", "modelevaluations")
PATCHES = ("patch", "modelevaluations/status")


def world(job_name: str | None = "e-g1") -> tuple[Context, FakeKube]:
    """One evaluation on a fake API server; the operator's client counts its requests."""
    server = FakeApiServer()
    server.add_namespace("a")
    server.seed(
        evaluation_path("a"),
        {
            "metadata": {"name": "e"},
            "status": {"observedGeneration": 1, "phase": "Pending", "jobName": job_name},
        },
    )
    kube = FakeKube(server)
    ctx = Context(settings=OperatorSettings(), kube=kube, clock=lambda: "2026-11-24T00:00:00Z")
    return ctx, kube


def stored_status(kube: FakeKube) -> dict[str, Any]:
    """The evaluation's status as the API server has it (read apart from the operator's)."""
    found: dict[str, Any] = FakeKube(kube.server).get(PATH)["status"]
    return found


def pod(
    uid: str = "pod-1", node: str | None = "cpu-0", unschedulable: str = "", phase: str = "Pending"
) -> dict:
    if unschedulable:
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": unschedulable}  # fmt: skip
    else:
        cond = {"type": "PodScheduled", "status": "True"}
    labels = {**names.labels("e", 1), runs.JOB_NAME_LABEL: "e-g1"}
    return {
        "metadata": {
            "name": f"e-g1-{uid}",
            "namespace": "a",
            "uid": uid,
            "labels": labels,
            "ownerReferences": [{"kind": "Job", "name": "e-g1"}],
        },
        "spec": {"nodeName": node} if node and not unschedulable else {},
        "status": {"phase": phase, "conditions": [cond]},
    }


def test_a_running_pods_placement_is_left_to_the_running_transition() -> None:
    """The Running transition sets Scheduled too: a pod seen running costs no request, and
    the watch's event loop spends no thread on it."""
    ctx, kube = world()
    running = pod(phase="Running")
    assert handle_pod.pod_changed(running, ctx) == "scheduled, shown when it runs"
    assert handle_pod.repeats_what_is_shown(running, ctx.pod_memo)
    assert kube.requests == {} and ctx.retries.pending() == 0


def test_a_placed_pod_is_shown_after_the_grace_unless_it_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(handle_pod, "SCHEDULED_GRACE_SECONDS", 0.05)
    ctx, kube = world()
    ctx.watched.observe(FakeKube(kube.server).get(PATH))
    assert handle_pod.pod_changed(pod(), ctx) == "scheduled, written unless it runs soon"
    assert handle_pod.pod_changed(pod(), ctx) == "scheduled, written unless it runs soon"
    assert kube.requests == {}, "nothing is written within the grace"
    wait_for("the placement written", lambda: kube.requests[PATCHES] == 1)
    scheduled = [c for c in stored_status(kube)["conditions"] if c["type"] == "Scheduled"]
    assert scheduled[0]["status"] == "True" and "cpu-0" in scheduled[0]["message"]
    assert ctx.retries.pending() == 0 and kube.requests[PATCHES] == 1, "once for both events"
    for _ in range(3):  # the same state again reads nothing
        assert handle_pod.pod_changed(pod(), ctx) == "scheduled, already shown"
    assert kube.requests[PATCHES] == 1 and GETS not in kube.requests
    assert handle_pod.pod_changed(pod(), ctx, deleted=True) == "scheduled, already shown"
    assert len(ctx.pod_memo) == 0
    ctx.retries.stop()


def test_a_placement_the_run_shows_by_then_is_not_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(handle_pod, "SCHEDULED_GRACE_SECONDS", 0.05)
    ctx, kube = world()
    ctx.watched.observe(FakeKube(kube.server).get(PATH))
    handle_pod.pod_changed(pod(), ctx)
    ctx.update_status("a", "e", lambda st: status.running(st, 1, "e-g1", "2026-11-24T00:00:01Z"))
    wait_for("the grace", lambda: ctx.retries.pending() == 0)
    assert kube.requests[PATCHES] == 1, "only the Running transition wrote"
    ctx.retries.stop()


def test_unschedulable_then_scheduled_both_reach_the_status() -> None:
    ctx, kube = world()
    waiting = pod(unschedulable="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    assert handle_pod.pod_changed(waiting, ctx) == "unschedulable"
    handle_pod.pod_changed(waiting, ctx)
    assert kube.requests == {GETS: 1, PATCHES: 1}
    assert handle_pod.pod_changed(pod(), ctx) == "scheduled"  # at once: clears the refusal
    assert kube.requests[PATCHES] == 2
    scheduled = [c for c in stored_status(kube)["conditions"] if c["type"] == "Scheduled"]
    assert scheduled[0]["status"] == "True"


def test_the_memory_is_bounded_oldest_out_first() -> None:
    memo = PodMemo(limit=2)
    for uid in ("a", "b", "c"):
        memo.remember(uid, ("scheduled", "n"))
    assert len(memo) == 2
    assert not memo.shown("a", ("scheduled", "n")) and memo.shown("c", ("scheduled", "n"))
    assert not memo.shown("c", ("scheduled", "other-node"))


def test_the_event_loop_skips_a_pod_event_only_when_it_repeats_what_is_shown() -> None:
    """handle_pod.repeats_what_is_shown decides in the watch's event loop, without a request,
    which pod events need no thread (controller/object_events.py)."""
    ctx, _ = world()
    waiting = pod(unschedulable="0/3 nodes are available")
    assert not handle_pod.repeats_what_is_shown(waiting, ctx.pod_memo)  # not yet shown
    handle_pod.pod_changed(waiting, ctx)
    assert handle_pod.repeats_what_is_shown(waiting, ctx.pod_memo)
    assert not handle_pod.repeats_what_is_shown(pod(), ctx.pod_memo)  # now placed
    disrupted = pod(phase="Running")
    disrupted["status"]["conditions"].append(
        {"type": runs.DISRUPTION_TARGET, "status": "True", "reason": "DeletionByPodGC"}
    )
    assert not handle_pod.repeats_what_is_shown(disrupted, ctx.pod_memo)


def test_a_state_the_run_ignored_is_not_remembered() -> None:
    """The pod's event can come before the status names its Job: nothing is written then,
    so the next event must read again."""
    ctx, kube = world(job_name=None)
    waiting = pod(unschedulable="0/3 nodes are available")
    handle_pod.pod_changed(waiting, ctx)
    assert kube.requests[PATCHES] == 0 and len(ctx.pod_memo) == 0
    FakeKube(kube.server).merge_patch(PATH + "/status", {"status": {"jobName": "e-g1"}})
    assert handle_pod.pod_changed(waiting, ctx) == "unschedulable"
    assert kube.requests[PATCHES] == 1 and len(ctx.pod_memo) == 1
    assert kube.requests[GETS] == 2, "nothing was remembered: the second event read again"


@pytest.mark.parametrize(
    ("event", "shown", "refused", "deleted", "action"),
    [
        (pod(unschedulable="0/3 nodes"), False, False, False, "WRITE_UNSCHEDULABLE"),
        (pod(), False, False, False, "SCHEDULED_LATER"),
        (pod(), False, True, False, "WRITE_SCHEDULED"),
        (pod(), True, False, False, "ALREADY_SHOWN"),
        (pod(), False, False, True, "NOTHING"),
        (pod(phase="Running"), False, True, False, "SHOWN_WHEN_IT_RUNS"),
        (pod(node=None), False, False, False, "NOTHING"),
    ],
    ids=["refused", "placed", "placed after a refusal", "shown", "deleted", "running", "pending"],
)
def test_what_a_pod_event_needs_is_decided_without_a_request(
    event: dict[str, Any], shown: bool, refused: bool, deleted: bool, action: str
) -> None:
    decision = handle_pod.decide(event, shown=shown, refused=refused, deleted=deleted)
    assert decision.action is handle_pod.PodAction[action]


def test_a_refusal_seen_before_the_status_names_the_job_is_offered_again() -> None:
    """The scheduler can refuse the pod before the reconcile that created its Job has written
    the Job's name into the status, and it need not change the pod again: the refusal is
    offered again (1 s, doubling) until the status names the Job, then written once."""
    ctx, kube = world(job_name=None)
    waiting = pod(unschedulable="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    outcome = handle_pod.pod_changed(waiting, ctx)
    assert outcome == "unschedulable, offered again once the run's status names its Job"
    assert PATCHES not in kube.requests and ctx.retries.pending() == 1
    FakeKube(kube.server).merge_patch(f"{PATH}/status", {"status": {"jobName": "e-g1"}})
    wait_for("the refusal written", lambda: kube.requests.get(PATCHES) == 1, 10)
    scheduled = [c for c in stored_status(kube)["conditions"] if c["type"] == "Scheduled"]
    assert (scheduled[0]["status"], scheduled[0]["reason"]) == ("False", "Unschedulable")
    assert "Insufficient nvidia.com/gpu" in scheduled[0]["message"]
    assert ctx.retries.pending() == 0
    ctx.retries.stop()


def test_a_refusal_of_an_older_generations_pod_is_not_offered_again() -> None:
    ctx, kube = world(job_name=None)
    edited = FakeKube(kube.server).merge_patch(PATH, {"spec": {"edited": True}})
    assert edited["metadata"]["generation"] == 2
    waiting = pod(unschedulable="0/3 nodes are available")
    assert handle_pod.pod_changed(waiting, ctx) == "unschedulable"
    assert PATCHES not in kube.requests and ctx.retries.pending() == 0
