"""The Job handler's decision, one row per situation, with no API server: what a Job event
(or the resync, for a Job that vanished) shows of its run, the reads the decision asks for in
order, what they find, and what it decides (how the event is reported, the actions, the
Failed reason). What the actions then write is the reconcile table's (test_reconcile.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from result_docs import row

from mlmodelscope.controller import names, status
from mlmodelscope.controller.handlers.handle_job import (
    NOTHING_FOUND,
    Found,
    JobAction,
    JobDecision,
    Need,
    Seen,
    admits_next,
    decide,
)
from mlmodelscope.controller.job_state import JobState, Stage
from mlmodelscope.controller.results import Outcome
from mlmodelscope.controller.runs import Handled
from mlmodelscope.controller.simulated import SIMULATED_NODE
from mlmodelscope.controller.status import ConditionType, Reason
from mlmodelscope.spec.status import Phase

T0 = "2026-11-22T08:00:00Z"
RESULT = Outcome(status="Succeeded", run_id="run-1", generation=1, rows=[row()])
NO_ROWS = Outcome(status="Succeeded", run_id="run-1", generation=1)
AGENT_FAILED = Outcome(status="Failed", run_id="run-2", generation=1, error="CUDA out of memory")
SPEC_ERROR = Outcome(
    status="Failed", generation=1, error="model.uri: no such file", error_field="model.uri"
)
OOM = (Reason.OOM_KILLED, "the agent was killed for exceeding its memory limit of 1Gi")
ON_KWOK = (SIMULATED_NODE, "the pod of Job e-g1 ran on kwok-0, a simulated node")


def run_status(
    phase: Phase | None = Phase.RUNNING,
    generation: int = 1,
    job_name: str | None = "e-g1",
    conditions: tuple[tuple[str, str, str], ...] = (),
    **fields: Any,
) -> dict[str, Any]:
    """A status as the operator writes it; ``conditions``: (type, status, reason)."""
    raw: dict[str, Any] = {"observedGeneration": generation, **fields}
    if phase is not None:
        raw["phase"] = phase.value
    if job_name is not None:
        raw["jobName"] = job_name
    raw["conditions"] = [
        {"type": kind, "status": value, "reason": reason, "lastTransitionTime": T0}
        for kind, value, reason in conditions
    ]
    return raw


DISRUPTED = ((ConditionType.RUNNING, "False", Reason.POD_DISRUPTED),)
UNSCHEDULABLE = ((ConditionType.SCHEDULED, "False", Reason.UNSCHEDULABLE),)
RECORDED = {"state": "Recorded", "runId": "run-1", "attempts": 1}


def seen(
    stage: Stage | None = Stage.ACTIVE,
    st: dict[str, Any] | None = None,
    ready: int = 0,
    failed: str | None = None,
    **fields: Any,
) -> Seen:
    """The Job e-g1 of evaluation a/e, generation 1, in ``stage`` (None: vanished), its run's
    status ``st`` (Running by default); ``failed``: the Job's Failed reason."""
    job = None
    if stage is not None:
        condition = {"type": "Failed", "status": "True", "reason": failed, "message": "limit"}
        job = JobState("e-g1", stage, ready=ready, failed=condition if failed else None)
    typed = status.read_status(run_status() if st is None else st)
    job_name = "e-g1" if job is not None else typed.job_name or ""
    return Seen("a", "e", 1, job_name, job, status=typed, **fields)


@dataclass(frozen=True)
class Row:
    """What a Job event shows (``seen``), what the reads it asks for find (``facts``), and
    what is decided."""

    seen: Seen
    handled: Handled
    actions: tuple[JobAction, ...] = ()
    reads: tuple[Need, ...] = ()
    """What decide asks for, round by round."""
    facts: Found = field(default=NOTHING_FOUND)
    reason: str = ""
    message: str = ""
    """A part of the decision's message."""
    unchanged: Handled | None = None
    run_id: str | None = None


FAIL_AND_RECORD = (JobAction.FAIL, JobAction.RECORD)
FAILED_READS = (Need.SPEC | Need.OUTCOME, Need.OOM)

ROWS: dict[str, Row] = {
    # Not this run's: nothing is read beyond the evaluation.
    "evaluation gone": Row(seen(gone=True), Handled.EVALUATION_GONE),
    "foreign Job (an earlier evaluation's)": Row(seen(owned=False), Handled.NOT_OURS),
    "stale generation": Row(seen(st=run_status(generation=2)), Handled.OTHER_GENERATION),
    "another Job of the generation": Row(
        seen(st=run_status(job_name="e-g1-x")), Handled.OTHER_GENERATION
    ),
    # The run ended already: only an unrecorded ended run does anything.
    "already final": Row(seen(Stage.COMPLETE, run_status(Phase.SUCCEEDED)), Handled.ALREADY_FINAL),
    "already final, unrecorded": Row(
        seen(Stage.COMPLETE, run_status(Phase.SUCCEEDED, runId="run-1"), recorder=True),
        Handled.ALREADY_FINAL,
        (JobAction.RECORD,),
        run_id="run-1",
    ),
    "already final, recorded": Row(
        seen(
            Stage.COMPLETE,
            run_status(Phase.SUCCEEDED, runId="run-1", record=RECORDED),
            recorder=True,
        ),
        Handled.ALREADY_FINAL,
    ),
    "already final, its Job not ended": Row(
        seen(st=run_status(Phase.FAILED), recorder=True), Handled.ALREADY_FINAL
    ),
    "status names no phase": Row(seen(st=run_status(None)), Handled.ALREADY_FINAL),
    # Deleted before it said it ended.
    "deleted, the spec edited": Row(seen(deleted=True, latest_generation=2), Handled.REPLACED),
    "deleted, nothing published": Row(
        seen(deleted=True),
        Handled.FAILED,
        (JobAction.FAIL,),
        reads=(Need.PUBLISHED,),
        reason=Reason.JOB_DELETED,
        message="Job e-g1 was deleted before it finished",
    ),
    "deleted, result published": Row(
        seen(deleted=True),
        Handled.SUCCEEDED,
        (JobAction.FINISH,),
        reads=(Need.PUBLISHED,),
        facts=Found(outcome=RESULT),
    ),
    "deleted, failure published": Row(
        seen(deleted=True),
        Handled.FAILED,
        (JobAction.FINISH,),
        reads=(Need.PUBLISHED,),
        facts=Found(outcome=AGENT_FAILED),
    ),
    "deleted after it completed": Row(
        seen(Stage.COMPLETE, deleted=True),
        Handled.SUCCEEDED,
        (JobAction.SUCCEED, JobAction.RECORD),
        reads=(Need.OUTCOME,),
        facts=Found(outcome=RESULT),
        run_id="run-1",
    ),
    # Complete.
    "succeeded with a result": Row(
        seen(Stage.COMPLETE),
        Handled.SUCCEEDED,
        (JobAction.SUCCEED, JobAction.RECORD),
        reads=(Need.OUTCOME,),
        facts=Found(outcome=RESULT),
        run_id="run-1",
    ),
    "succeeded, the agent says Failed": Row(
        seen(Stage.COMPLETE),
        Handled.FAILED,
        FAIL_AND_RECORD,
        reads=(Need.OUTCOME,),
        facts=Found(outcome=AGENT_FAILED),
        reason=Reason.EVALUATION_FAILED,
        message="CUDA out of memory",
        run_id="run-2",
    ),
    "succeeded without a result": Row(
        seen(Stage.COMPLETE),
        Handled.FAILED,
        FAIL_AND_RECORD,
        reads=(Need.OUTCOME, Need.NODES),
        reason=Reason.RESULTS_MISSING,
        message="ConfigMap e-results is empty",
    ),
    "succeeded, a result without rows": Row(
        seen(Stage.COMPLETE),
        Handled.FAILED,
        FAIL_AND_RECORD,
        reads=(Need.OUTCOME, Need.NODES),
        facts=Found(outcome=NO_ROWS),
        reason=Reason.RESULTS_MISSING,
        run_id="run-1",
    ),
    "succeeded on a simulated node": Row(
        seen(Stage.COMPLETE),
        Handled.FAILED,
        FAIL_AND_RECORD,
        reads=(Need.OUTCOME, Need.NODES),
        facts=Found(simulated=ON_KWOK),
        reason=SIMULATED_NODE,
        message="kwok-0",
    ),
    # Failed.
    "failed: backoff limit": Row(
        seen(Stage.FAILED, failed="BackoffLimitExceeded"),
        Handled.FAILED,
        FAIL_AND_RECORD,
        reads=FAILED_READS,
        reason="BackoffLimitExceeded",
        message="limit",
    ),
    "failed: backoff limit, the agent's error": Row(
        seen(Stage.FAILED, failed="BackoffLimitExceeded"),
        Handled.FAILED,
        FAIL_AND_RECORD,
        reads=FAILED_READS,
        facts=Found(outcome=AGENT_FAILED),
        reason="BackoffLimitExceeded",
        message="CUDA out of memory",
        run_id="run-2",
    ),
    "failed: the agent names a spec field": Row(
        seen(Stage.FAILED, failed="PodFailurePolicy"),
        Handled.FAILED,
        FAIL_AND_RECORD,
        reads=FAILED_READS,
        facts=Found(outcome=SPEC_ERROR),
        reason=Reason.INVALID_SPEC,
        message="model.uri: no such file",
    ),
    "failed: OOM-killed": Row(
        seen(Stage.FAILED, failed="BackoffLimitExceeded"),
        Handled.FAILED,
        FAIL_AND_RECORD,
        reads=FAILED_READS,
        facts=Found(oom=OOM),
        reason=Reason.OOM_KILLED,
        message="memory limit of 1Gi",
    ),
    "failed: deadline (no OOM read)": Row(
        seen(Stage.FAILED, failed="DeadlineExceeded"),
        Handled.FAILED,
        FAIL_AND_RECORD,
        reads=(Need.SPEC | Need.OUTCOME,),
        facts=Found(timeout="5m", oom=OOM),
        reason=Reason.DEADLINE_EXCEEDED,
        message="(spec.timeout 5m)",
    ),
    # Suspended: Kueue holds it.
    "suspended by Kueue": Row(seen(Stage.SUSPENDED), Handled.SUSPENDED, (JobAction.QUEUE,)),
    "suspended again (evicted)": Row(
        seen(Stage.SUSPENDED, run_status(Phase.QUEUED)), Handled.SUSPENDED, (JobAction.QUEUE,)
    ),
    # Active.
    "pod on its way": Row(
        seen(st=run_status(Phase.PENDING)), Handled.WAITING, (JobAction.CHECK_START,)
    ),
    "pod ready": Row(seen(ready=1), Handled.RUNNING, (JobAction.RUN,)),
    "admitted by Kueue": Row(
        seen(st=run_status(Phase.QUEUED)),
        Handled.WAITING,
        (JobAction.UNSUSPEND, JobAction.CHECK_START),
    ),
    "admitted by Kueue, pod ready": Row(
        seen(st=run_status(Phase.QUEUED), ready=1),
        Handled.RUNNING,
        (JobAction.UNSUSPEND, JobAction.RUN),
    ),
    "waits for a node (no start check)": Row(
        seen(st=run_status(Phase.PENDING, conditions=UNSCHEDULABLE)), Handled.WAITING_FOR_A_NODE
    ),
    "admitted by Kueue, waits for a node": Row(
        seen(st=run_status(Phase.QUEUED, conditions=UNSCHEDULABLE)),
        Handled.WAITING_FOR_A_NODE,
        (JobAction.UNSUSPEND,),
    ),
    "ready count of a lost pod": Row(
        seen(st=run_status(Phase.PENDING, conditions=DISRUPTED), ready=1),
        Handled.WAITING,
        (JobAction.CHECK_START,),
        reads=(Need.LIVE_PODS,),
    ),
    "ready replacement of a lost pod": Row(
        seen(st=run_status(Phase.PENDING, conditions=DISRUPTED), ready=1),
        Handled.RUNNING,
        (JobAction.RUN,),
        reads=(Need.LIVE_PODS,),
        facts=Found(live_pod=True),
    ),
    # Vanished: the resync finds the status naming a Job that no longer exists.
    "vanished, result published": Row(
        seen(None, run_status(Phase.RUNNING)),
        Handled.SUCCEEDED,
        (JobAction.FINISH,),
        reads=(Need.PUBLISHED,),
        facts=Found(outcome=RESULT),
    ),
    "vanished, nothing published": Row(
        seen(None, run_status(Phase.RUNNING)),
        Handled.FAILED,
        (JobAction.FAIL,),
        reads=(Need.PUBLISHED,),
        reason=Reason.JOB_DELETED,
        unchanged=Handled.ALREADY_FINAL,
    ),
    "vanished, no Job named": Row(seen(None, run_status(job_name=None)), Handled.NOTHING_TO_DO),
    "vanished, another generation's status": Row(
        seen(None, run_status(generation=2)), Handled.NOTHING_TO_DO
    ),
}

FILLS = {
    Need.PUBLISHED: "outcome",
    Need.OUTCOME: "outcome",
    Need.NODES: "simulated",
    Need.SPEC: "timeout",
    Need.OOM: "oom",
    Need.LIVE_PODS: "live_pod",
}
"""The field of :class:`Found` each read fills."""


def decided(row: Row) -> tuple[JobDecision, list[Need]]:
    """Decide as the handler does, each round revealing only what the reads asked for so far
    found (``row.facts``): a decision that looked at a fact it did not ask for sees nothing."""
    found, asked = NOTHING_FOUND, []
    decision = decide(row.seen, found)
    while isinstance(decision, Need):
        assert not decision & found.read, f"asked again for {decision}"
        asked.append(decision)
        read = found.read | decision
        shown = {name: getattr(row.facts, name) for need, name in FILLS.items() if need in read}
        found = Found(read=read, **shown)
        decision = decide(row.seen, found)
        assert len(asked) <= len(FILLS)
    return decision, asked


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_decide(row: Row) -> None:
    decision, asked = decided(row)
    assert tuple(asked) == row.reads
    assert decision.handled is row.handled
    assert decision.actions == row.actions
    assert decision.reason == row.reason
    assert row.message in decision.message
    assert decision.unchanged is row.unchanged
    if JobAction.RECORD in decision.actions:
        assert decision.run_id == row.run_id
    if {JobAction.SUCCEED, JobAction.FINISH} & set(decision.actions):
        assert decision.outcome is row.facts.outcome


def test_the_job_state_is_read_from_the_job() -> None:
    """Complete wins over Failed; a suspended Job that ended has ended."""

    def job(*conditions: str, **spec: Any) -> dict[str, Any]:
        labels = {**names.labels("e", 1), names.LABEL_KUEUE_QUEUE: "team-a"}
        listed = [{"type": c, "status": "True", "reason": f"{c}Reason"} for c in conditions]
        return {
            "metadata": {"name": "e-g1", "labels": labels},
            "spec": spec,
            "status": {"ready": 1, "conditions": listed},
        }

    assert JobState.of(job()) == JobState("e-g1", Stage.ACTIVE, ready=1, queue="team-a")
    assert JobState.of(job(suspend=True)).stage is Stage.SUSPENDED
    assert JobState.of(job("Failed", suspend=True)).stage is Stage.FAILED
    assert JobState.of(job("Complete", "Failed")).stage is Stage.COMPLETE
    failed = JobState.of(job("Failed")).failed
    assert failed is not None and failed["reason"] == "FailedReason"
    assert [s.ended for s in Stage] == [False, False, True, True]


def test_a_status_that_does_not_validate_is_read_field_by_field() -> None:
    """A status edited by hand (or by another version) keeps what validates on its own; a
    phase that is none of ours is no phase, as the decision reads it."""
    odd = {**run_status(Phase.RUNNING), "somethingElse": 1}
    typed = status.read_status(odd)
    assert (typed.phase, typed.job_name, typed.observed_generation) == (Phase.RUNNING, "e-g1", 1)
    assert status.phase_named(typed) is Phase.RUNNING
    typed = status.read_status({**run_status(), "phase": "Paused"})
    assert status.phase_named(typed) is None and typed.job_name == "e-g1"
    assert decide(seen(st={**run_status(), "phase": "Paused"})) == JobDecision(
        Handled.ALREADY_FINAL
    )


ADMITS = [
    # (Job's state, deleted, handled, queued evaluations may take a slot)
    ({"status": {"active": 1}}, False, Handled.RUNNING, False),
    ({"status": {"active": 1}}, False, Handled.FAILED, False),  # still holds its slot
    ({"status": {"active": 1}}, True, Handled.REPLACED, True),
    ({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}, False,
     Handled.SUCCEEDED, True),
    ({"status": {"conditions": [{"type": "Failed", "status": "True"}]}}, False,
     Handled.ALREADY_FINAL, False),
    ({"spec": {"suspend": True}}, False, Handled.SUSPENDED, True),
    ({"status": {"active": 1}}, False, Handled.OTHER_GENERATION, False),
]  # fmt: skip


@pytest.mark.parametrize(("job", "deleted", "handled", "admits"), ADMITS)
def test_admitting_the_next_follows_a_freed_slot(
    job: dict[str, Any], deleted: bool, handled: Handled, admits: bool
) -> None:
    assert admits_next({"metadata": {"name": "e-g1"}, **job}, deleted, handled) is admits
