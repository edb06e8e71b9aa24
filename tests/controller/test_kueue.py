"""Kueue with no cluster: the Job shape, the operator's limits, the status transitions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlmodelscope.controller import builders, names, queue, status
from mlmodelscope.controller.settings import OperatorSettings
from mlmodelscope.controller.status import ConditionType, Reason
from mlmodelscope.spec import ModelEvaluation
from mlmodelscope.spec.status import EvaluationStatus

Make = Callable[..., ModelEvaluation]
T0, T1, T2 = "2026-11-22T08:00:00Z", "2026-11-22T08:01:00Z", "2026-11-22T08:02:00Z"
QUEUE = {names.LABEL_KUEUE_QUEUE: "team-queue"}


def apply(current: dict[str, Any], change: status.StatusChange) -> dict[str, Any]:
    out = dict(current)
    for key, value in change.patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    EvaluationStatus.model_validate(out)
    return out


def cond(st: dict[str, Any], kind: str) -> dict[str, Any]:
    found = status.condition(st, kind)
    assert found is not None, f"no {kind} condition in {st.get('conditions')}"
    return dict(found)


def job(namespace: str = "a", *, suspend: bool | None = None, ended: str = "") -> dict[str, Any]:
    spec = {} if suspend is None else {"suspend": suspend}
    conditions = [{"type": ended, "status": "True"}] if ended else []
    return {
        "metadata": {"namespace": namespace, "name": "j"},
        "spec": spec,
        "status": {"conditions": conditions},
    }


# --------------------------------------------------------------------------- the Job shape


def test_a_queue_label_makes_a_suspended_job_with_the_label(make_evaluation: Make) -> None:
    built = builders.build_job(make_evaluation(labels=QUEUE), OperatorSettings())
    assert built["spec"]["suspend"] is True
    assert built["metadata"]["labels"][names.LABEL_KUEUE_QUEUE] == "team-queue"
    # The pod template does not carry it: Kueue manages the Job, not its pods.
    assert names.LABEL_KUEUE_QUEUE not in built["spec"]["template"]["metadata"]["labels"]


def test_without_a_queue_label_the_job_starts_at_once(make_evaluation: Make) -> None:
    built = builders.build_job(make_evaluation(), OperatorSettings())
    assert "suspend" not in built["spec"]
    assert names.LABEL_KUEUE_QUEUE not in built["metadata"]["labels"]
    empty = builders.build_job(
        make_evaluation(labels={names.LABEL_KUEUE_QUEUE: ""}), OperatorSettings()
    )
    assert "suspend" not in empty["spec"]


# ------------------------------------------------------------------------ the operator's limits


def test_a_suspended_job_holds_no_slot_but_is_still_active() -> None:
    assert queue.holds_slot(job())
    assert queue.holds_slot(job(suspend=False))
    assert not queue.holds_slot(job(suspend=True))
    assert queue.is_active_job(job(suspend=True)), "an edited spec still replaces it"
    assert not queue.holds_slot(job(ended="Complete"))
    jobs = [job("a", suspend=True), job("a", suspend=True), job("a"), job("b", suspend=False)]
    assert queue.running_per_namespace(jobs) == {"a": 1, "b": 1}


def test_suspended_jobs_do_not_fill_the_limit() -> None:
    running = queue.running_per_namespace([job("a", suspend=True)] * 3)
    entry = queue.QueueEntry(T0, "a", "plain")
    assert queue.decide(entry, [], running, queue.Limits(max_running=1)).admitted


# ------------------------------------------------------------------------------- the status


def test_waiting_for_kueue_is_queued_with_the_job() -> None:
    change = status.waiting_for_kueue({}, 1, "e-g1", "e-results", "team-queue", T0, "ab" * 16)
    st = apply({}, change)
    assert st["phase"] == "Queued" and st["jobName"] == "e-g1"
    assert st["resultsConfigMap"] == "e-results" and st["traceID"] == "ab" * 16
    queued = cond(st, ConditionType.QUEUED)
    assert queued["status"] == "True" and queued["reason"] == Reason.WAITING_FOR_KUEUE
    assert queued["message"].startswith("waiting for Kueue admission in queue team-queue")
    assert change.event is not None and change.event.reason == "Queued"
    # The same Job event again changes nothing and posts nothing.
    assert not status.waiting_for_kueue(st, 1, "e-g1", "e-results", "team-queue", T1)


def test_a_suspended_job_without_a_queue_says_so() -> None:
    st = apply({}, status.waiting_for_kueue({}, 1, "e-g1", "e-results", None, T0))
    assert cond(st, ConditionType.QUEUED)["reason"] == Reason.JOB_SUSPENDED
    assert st["message"] == "Job e-g1 is suspended"


def test_admission_then_running_then_success() -> None:
    st = apply({}, status.waiting_for_kueue({}, 1, "e-g1", "e-results", "q", T0))
    assert not status.running({}, 1, "e-g1", T1), "no status of another run is touched"
    admitted = status.unsuspended(st, 1, "e-g1", T1)
    st = apply(st, admitted)
    assert st["phase"] == "Pending" and st["message"] == "Kueue admitted Job e-g1"
    assert cond(st, ConditionType.QUEUED)["status"] == "False"
    assert admitted.event is not None and admitted.event.reason == Reason.ADMITTED
    assert not status.unsuspended(st, 1, "e-g1", T1)
    st = apply(st, status.running(st, 1, "e-g1", T2))
    assert st["phase"] == "Running"


def test_eviction_queues_a_running_evaluation_again_and_final_ones_stay() -> None:
    st = apply({}, status.waiting_for_kueue({}, 1, "e-g1", "e-results", "q", T0))
    st = apply(st, status.unsuspended(st, 1, "e-g1", T1))
    st = apply(st, status.running(st, 1, "e-g1", T1))
    st = apply(st, status.waiting_for_kueue(st, 1, "e-g1", "e-results", "q", T2))
    assert st["phase"] == "Queued" and st["startTime"] == T1
    failed = apply(st, status.failed(st, 1, "e-g1", Reason.JOB_DELETED, "gone", T2))
    assert failed["phase"] == "Failed", "a Job deleted while it waits ends the run"
    assert not status.waiting_for_kueue(failed, 1, "e-g1", "e-results", "q", T2)


def test_a_new_generation_waits_afresh() -> None:
    st = apply({}, status.waiting_for_kueue({}, 1, "e-g1", "e-results", "q", T0))
    st = apply(st, status.failed(st, 1, "e-g1", Reason.JOB_DELETED, "gone", T1))
    st = apply(st, status.waiting_for_kueue(st, 2, "e-g2", "e-results", "q", T2))
    assert st["phase"] == "Queued" and st["observedGeneration"] == 2
    assert status.condition(st, ConditionType.FAILED) is None
