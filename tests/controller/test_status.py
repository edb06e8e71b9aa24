"""Status transitions: phases, metav1 conditions, history, idempotence, events."""

from __future__ import annotations

from typing import Any

from result_docs import row

from mlmodelscope.controller import status
from mlmodelscope.controller.results import Outcome
from mlmodelscope.controller.status import ConditionType, Observed, Reason
from mlmodelscope.spec.status import EvaluationStatus, LatencySummary

T0, T1, T2 = "2026-11-22T08:00:00Z", "2026-11-22T08:01:00Z", "2026-11-22T08:02:00Z"


def apply(current: dict[str, Any], change: status.StatusChange) -> dict[str, Any]:
    """JSON merge patch semantics (RFC 7386), as the API server applies them."""
    out = dict(current)
    for key, value in change.patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    EvaluationStatus.model_validate(out)  # every status we write fits the CRD's schema
    return out


def cond(st: dict[str, Any], kind: str) -> dict[str, Any]:
    found = status.condition(st, kind)
    assert found is not None, f"no {kind} condition in {st.get('conditions')}"
    return dict(found)


def outcome(run_id: str = "run-1") -> Outcome:
    return Outcome(
        status="Succeeded",
        run_id=run_id,
        generation=1,
        rows=[row(1, latency_ms=LatencySummary(p50=0.2), throughput=5000.0, top1=0.97)],
        stack={"framework": "onnxruntime"},
        trace_id="ab" * 16,
    )


def run_to_success(st: dict[str, Any], generation: int, job: str) -> dict[str, Any]:
    st = apply(st, status.job_created(Observed.of(st), generation, job, "e-results", None, T0))
    st = apply(st, status.running(Observed.of(st), generation, job, T1))
    return apply(
        st, status.succeeded(Observed.of(st), generation, job, outcome(f"run-{generation}"), T2)
    )


def test_happy_path_phases_conditions_and_events() -> None:
    st: dict[str, Any] = {}
    created = status.job_created(Observed.of(st), 1, "e-g1", "e-results", None, T0)
    assert created.event == status.Event("Normal", "JobCreated", "created Job e-g1")
    st = apply(st, created)
    assert st["phase"] == "Pending" and st["jobName"] == "e-g1" and st["observedGeneration"] == 1
    assert st["resultsConfigMap"] == "e-results"
    running = status.running(Observed.of(st), 1, "e-g1", T1)
    assert running.event is None  # the phase says it; the pod's Events say when it started
    st = apply(st, running)
    assert st["phase"] == "Running" and st["startTime"] == T1
    done = status.succeeded(Observed.of(st), 1, "e-g1", outcome(), T2)
    assert done.event is not None and done.event.type == "Normal"
    assert "p50 0.2 ms" in done.event.message and "top-1 0.9700" in done.event.message
    st = apply(st, done)
    assert st["phase"] == "Succeeded"
    assert st["summary"]["top1"] == 0.97 and st["runId"] == "run-1"
    assert st["traceID"] == "ab" * 16 and st["completionTime"] == T2
    assert cond(st, ConditionType.SUCCEEDED)["status"] == "True"
    assert cond(st, ConditionType.FAILED)["status"] == "False"
    assert cond(st, ConditionType.RUNNING)["status"] == "False"
    assert all(c["observedGeneration"] == 1 for c in st["conditions"])


def test_repeated_events_change_nothing() -> None:
    st = run_to_success({}, 1, "e-g1")
    assert not status.succeeded(Observed.of(st), 1, "e-g1", outcome(), T2)
    assert not status.running(Observed.of(st), 1, "e-g1", T2)
    assert not status.failed(Observed.of(st), 1, "e-g1", Reason.RESULTS_MISSING, "x", T2)
    assert not status.job_created(Observed.of(st), 1, "e-g1", "e-results", None, T2)
    assert not status.queued(Observed.of(st), 1, "waiting", T2)
    pending = apply({}, status.job_created(Observed.of({}), 1, "e-g1", "e-results", None, T0))
    assert not status.job_created(Observed.of(pending), 1, "e-g1", "e-results", None, T1)


def test_last_transition_time_moves_only_when_the_status_does() -> None:
    st = apply({}, status.queued(Observed.of({}), 1, "2 of 2 running; 1 queued ahead", T0))
    assert cond(st, ConditionType.QUEUED)["lastTransitionTime"] == T0
    again = status.queued(Observed.of(st), 1, "2 of 2 running; 0 queued ahead", T1)
    assert again.event is None  # still queued: new message, no new event
    st = apply(st, again)
    assert cond(st, ConditionType.QUEUED)["lastTransitionTime"] == T0
    assert not status.queued(Observed.of(st), 1, "2 of 2 running; 0 queued ahead", T2)
    st = apply(st, status.job_created(Observed.of(st), 1, "e-g1", "e-results", None, T2))
    queued_cond = cond(st, ConditionType.QUEUED)
    assert queued_cond["status"] == "False" and queued_cond["lastTransitionTime"] == T2
    assert cond(st, ConditionType.VALID)["lastTransitionTime"] == T0


def test_queued_announces_itself_once_and_never_goes_back() -> None:
    first = status.queued(Observed.of({}), 1, "waiting", T0)
    assert first.event is not None and first.event.reason == "Queued"
    st = apply({}, first)
    assert st["phase"] == "Queued"
    st = apply(st, status.job_created(Observed.of(st), 1, "e-g1", "e-results", None, T1))
    assert not status.queued(Observed.of(st), 1, "waiting", T2)


def test_failures_name_the_reason() -> None:
    st = apply({}, status.job_created(Observed.of({}), 1, "e-g1", "e-results", None, T0))
    change = status.failed(
        Observed.of(st), 1, "e-g1", Reason.DEADLINE_EXCEEDED, "ran longer than 90s", T1
    )
    assert change.event == status.Event("Warning", "DeadlineExceeded", "ran longer than 90s")
    st = apply(st, change)
    assert st["phase"] == "Failed"
    failed = cond(st, ConditionType.FAILED)
    assert (failed["status"], failed["reason"]) == ("True", "DeadlineExceeded")
    assert cond(st, ConditionType.SUCCEEDED)["status"] == "False"


def test_invalid_spec_is_final_and_named() -> None:
    msg = "spec.model.format: 'torchscript' cannot be loaded by framework 'onnxruntime'"
    change = status.invalid_spec(Observed.of({}), 1, msg, T0)
    assert change.event == status.Event("Warning", "InvalidSpec", msg)
    st = apply({}, change)
    assert st["phase"] == "Failed" and st["message"] == msg
    assert cond(st, ConditionType.VALID)["status"] == "False"
    assert cond(st, ConditionType.FAILED)["reason"] == "InvalidSpec"
    assert not status.invalid_spec(Observed.of(st), 1, msg, T1)


def test_unschedulable_keeps_the_schedulers_message_once() -> None:
    st = apply({}, status.job_created(Observed.of({}), 1, "e-g1", "e-results", None, T0))
    msg = "0/6 nodes are available: 3 Insufficient nvidia.com/gpu."
    change = status.unschedulable(Observed.of(st), 1, "e-g1", msg, T1)
    assert change.event == status.Event("Warning", "Unschedulable", msg)
    st = apply(st, change)
    assert st["phase"] == "Pending" and st["message"] == msg
    scheduled = cond(st, ConditionType.SCHEDULED)
    assert (scheduled["status"], scheduled["reason"], scheduled["message"]) == (
        "False",
        "Unschedulable",
        msg,
    )
    assert not status.unschedulable(Observed.of(st), 1, "e-g1", msg, T2)
    st = apply(st, status.scheduled(Observed.of(st), 1, "e-g1", "a100-kwok-0", T2))
    assert cond(st, ConditionType.SCHEDULED)["status"] == "True"
    assert st["message"] == "pod assigned to node a100-kwok-0"


def test_a_new_generation_moves_the_run_to_history_newest_first() -> None:
    st = run_to_success({}, 1, "e-g1")
    st = apply(st, status.job_created(Observed.of(st), 2, "e-g2", "e-results", None, T0))
    assert st["phase"] == "Pending" and st["observedGeneration"] == 2
    for gone in ("results", "summary", "runId", "completionTime", "traceID"):
        assert gone not in st
    assert status.condition(st, ConditionType.SUCCEEDED) is None  # kubectl wait waits again
    assert st["history"] == [
        {
            "generation": 1,
            "runId": "run-1",
            "phase": "Succeeded",
            "completionTime": T2,
            "summary": {"batchSize": 1, "p50Ms": 0.2, "throughput": 5000.0, "top1": 0.97},
        }
    ]
    st = run_to_success(st, 2, "e-g2")
    st = apply(st, status.queued(Observed.of(st), 3, "waiting", T0))
    assert [h["generation"] for h in st["history"]] == [2, 1]
    assert st["phase"] == "Queued"


def test_history_is_bounded() -> None:
    st: dict[str, Any] = {}
    for generation in range(1, 14):
        st = run_to_success(st, generation, f"e-g{generation}")
    assert [h["generation"] for h in st["history"]] == list(range(12, 2, -1))


def test_a_stale_jobs_events_are_ignored() -> None:
    st = apply({}, status.job_created(Observed.of({}), 2, "e-g2", "e-results", None, T0))
    assert not status.running(Observed.of(st), 1, "e-g1", T1)
    assert not status.succeeded(Observed.of(st), 1, "e-g1", outcome(), T1)
    assert not status.unschedulable(Observed.of(st), 1, "e-g1", "no", T1)


def test_uri_credentials_never_reach_status_conditions_or_events() -> None:
    # Whatever carries them (an agent's error, the API server's message, a sweep's row), every
    # StatusChange and Event is redacted when it is made.
    secret = "https://alice:s3cret@models.example/m.onnx?X-Amz-Signature=sig123&v=1"
    shown = "https://REDACTED@models.example/m.onnx?X-Amz-Signature=REDACTED&v=1"
    st = apply({}, status.job_created(Observed.of({}), 1, "e-g1", "e-results", None, T0))
    failure = Outcome(status="Failed", run_id="r", generation=1, error=f"GET {secret} failed")
    changes = [
        status.failed(
            Observed.of(st), 1, "e-g1", Reason.EVALUATION_FAILED, f"GET {secret}: 403", T1, failure
        ),
        status.invalid_spec(Observed.of({}), 1, f"spec.model.uri: {secret!r} is not allowed", T0),
        status.StatusChange({"nested": [{"message": secret}]}, status.Event("Normal", "X", secret)),
    ]
    for change in changes:
        assert "s3cret" not in repr(change) and "sig123" not in repr(change)
        assert change.event is not None and shown in change.event.message
    st = apply(st, changes[0])
    assert st["message"] == f"GET {shown}: 403"
    assert cond(st, ConditionType.FAILED)["message"] == f"GET {shown}: 403"


def test_a_disrupted_pod_sends_the_run_back_to_pending_once_until_its_replacement_runs() -> None:
    st = apply({}, status.job_created(Observed.of({}), 1, "e-g1", "e-results", None, T0))
    st = apply(st, status.running(Observed.of(st), 1, "e-g1", T0))
    msg = "evaluation pod e-g1-abcde on node n was disrupted (DeletionByPodGC: PodGC: gone)"
    change = status.pod_disrupted(Observed.of(st), 1, "e-g1", msg, T1)
    assert change.event == status.Event("Warning", "PodDisrupted", msg)
    st = apply(st, change)
    assert st["phase"] == "Pending" and st["message"] == msg and st["startTime"] == T0
    running = cond(st, ConditionType.RUNNING)
    assert (running["status"], running["reason"], running["message"]) == (
        "False",
        "PodDisrupted",
        msg,
    )
    assert not status.pod_disrupted(
        Observed.of(st), 1, "e-g1", msg, T2
    )  # the same pod's next event
    again = apply(st, status.running(Observed.of(st), 1, "e-g1", T2))  # the replacement runs
    assert again["phase"] == "Running" and cond(again, ConditionType.RUNNING)["status"] == "True"
    done = run_to_success({}, 1, "e-g1")
    assert not status.pod_disrupted(
        Observed.of(done), 1, "e-g1", msg, T2
    )  # a finished run stays finished
    assert not status.pod_disrupted(Observed.of(st), 1, "e-g0", msg, T2)  # another Job's pod


def test_a_run_replaced_before_it_ended_is_kept_in_history_with_the_phase_it_had() -> None:
    """Spec edits in quick succession: generation 1 was Running, generation 2 only Pending
    when each was replaced; both stay in history, newest first, without a completion time.
    A generation that never had a Job leaves nothing (it never ran)."""
    st = apply({}, status.job_created(Observed.of({}), 1, "e-g1", "e-results", None, T0))
    st = apply(st, status.running(Observed.of(st), 1, "e-g1", T1))
    assert st["phase"] == "Running"
    st = apply(st, status.job_created(Observed.of(st), 2, "e-g2", "e-results", None, T1))
    st = apply(st, status.queued(Observed.of(st), 3, "waiting", T2))
    st = apply(st, status.job_created(Observed.of(st), 4, "e-g4", "e-results", None, T2))
    assert [(h["generation"], h["phase"]) for h in st["history"]] == [
        (2, "Pending"),
        (1, "Running"),
    ]
    assert all("completionTime" not in h for h in st["history"])


def test_a_failure_after_the_job_completed_says_the_pod_was_placed() -> None:
    """A pod may end before its run was shown Running (a simulated node, a fast crash): the
    Job's completion says it was on a node."""
    st = apply({}, status.job_created(Observed.of({}), 1, "e-g1", "e-results", None, T0))
    change = status.failed(
        Observed.of(st), 1, "e-g1", "ResultsMissing", "no results", T1, placed=True
    )
    kinds = {c["type"]: c for c in apply(st, change)["conditions"]}
    assert kinds["Scheduled"]["status"] == "True" and kinds["Failed"]["status"] == "True"
    unplaced = apply(st, status.failed(Observed.of(st), 1, "e-g1", "JobDeleted", "gone", T1))
    assert "Scheduled" not in {c["type"] for c in unplaced["conditions"]}
