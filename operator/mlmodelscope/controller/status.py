"""Status transitions of a ModelEvaluation, as pure functions of the current status.

Each function returns a :class:`StatusChange`: a JSON merge patch for ``.status`` plus the
Kubernetes Event that announces the transition (None when nothing changed, so a repeated
watch event or a retried handler neither rewrites status nor repeats events).

``status.record`` (whether the run is in the results store, :mod:`.recording`) has its own
transitions at the end: Recorded, Pending, NotRecorded, each only while the status still
describes that run.

Phases: Pending (Job created) -> Queued (held back by a concurrency limit) -> Running ->
Succeeded | Failed. An evaluation submitted to Kueue is Queued *with* its (suspended) Job until
Kueue admits it, then Pending -> Running as usual (and Queued again if Kueue evicts it); while
it waits, :func:`kueue_waiting` puts Kueue's own reason (from the Job's Workload) in it.
Conditions follow metav1.Condition; ``Succeeded`` and ``Failed`` appear
only when a run ends and are removed when a new generation starts, so
``kubectl wait --for=condition=Succeeded`` always waits for the current spec's run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal

from pydantic import ValidationError

from mlmodelscope.contract.redact import redact_text, redact_tree
from mlmodelscope.controller.results import Outcome
from mlmodelscope.spec.status import (
    Condition,
    EvaluationStatus,
    Phase,
    RecordState,
    RunRecord,
    Summary,
)

MESSAGE_LIMIT: Final = 4096
HISTORY_LIMIT: Final = 10
TERMINAL: Final = (Phase.SUCCEEDED, Phase.FAILED)
UNFINISHED: Final = (Phase.QUEUED, Phase.PENDING, Phase.RUNNING)
"""Phases of a run that has not ended."""
PHASES: Final = tuple(p.value for p in Phase)


class ConditionType:
    VALID = "Valid"
    QUEUED = "Queued"
    SCHEDULED = "Scheduled"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class Reason:
    SPEC_VALID = "SpecValid"
    INVALID_SPEC = "InvalidSpec"
    POLICY_DENIED = "PolicyDenied"
    CONCURRENCY_LIMIT = "ConcurrencyLimit"
    WAITING_FOR_KUEUE = "WaitingForKueue"
    JOB_SUSPENDED = "JobSuspended"
    ADMITTED = "Admitted"
    JOB_CREATED = "JobCreated"
    SCHEDULED = "Scheduled"
    UNSCHEDULABLE = "Unschedulable"
    POD_RUNNING = "PodRunning"
    POD_DISRUPTED = "PodDisrupted"
    SUCCEEDED = "Succeeded"
    RESULTS_MISSING = "ResultsMissing"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    EVALUATION_FAILED = "EvaluationFailed"
    OOM_KILLED = "OOMKilled"
    JOB_DELETED = "JobDeleted"
    JOB_REJECTED = "JobRejected"
    RECORDED = "Recorded"
    RECORD_PENDING = "RecordPending"
    NOT_RECORDED = "NotRecorded"


RUN_CONDITIONS: Final = (
    ConditionType.QUEUED,
    ConditionType.SCHEDULED,
    ConditionType.RUNNING,
    ConditionType.SUCCEEDED,
    ConditionType.FAILED,
)
"""Conditions that describe one run; dropped when a new generation starts."""


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event about the evaluation (its message redacted, as status is)."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", redact_text(self.message))


@dataclass(frozen=True)
class StatusChange:
    """A status patch and its Event. Every string in the patch is redacted when the change is
    made, so no writer (evaluations, sweeps, the resync) can put a URI's credentials into
    status, whichever message (an agent's error, the API server's) carried them."""

    patch: dict[str, Any] = field(default_factory=dict)
    """JSON merge patch for .status (None values delete fields)."""
    event: Event | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "patch", redact_tree(self.patch))

    def __bool__(self) -> bool:
        return bool(self.patch) or self.event is not None


NO_CHANGE: Final = StatusChange()


def now() -> str:
    """RFC 3339 UTC with seconds, as Kubernetes writes timestamps."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _clip(message: str) -> str:
    return message if len(message) <= MESSAGE_LIMIT else message[: MESSAGE_LIMIT - 3] + "..."


@dataclass(frozen=True)
class Cond:
    """A condition to set: type, status, reason, message."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""


def merge_conditions(
    current: list[Mapping[str, Any]],
    updates: list[Cond],
    generation: int,
    timestamp: str,
    drop: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """metav1.Condition semantics: lastTransitionTime moves only when status changes; other
    conditions are kept in order, updated ones replaced in place, new ones appended."""
    by_type = {u.type: u for u in updates}
    out: list[dict[str, Any]] = []
    seen = set()
    for old in current:
        kind = str(old.get("type"))
        if kind in drop and kind not in by_type:
            continue
        if kind in by_type:
            out.append(_condition(by_type[kind], old, generation, timestamp))
            seen.add(kind)
        else:
            out.append(dict(old))
    out.extend(_condition(u, None, generation, timestamp) for u in updates if u.type not in seen)
    return out


def _condition(
    update: Cond, old: Mapping[str, Any] | None, generation: int, timestamp: str
) -> dict[str, Any]:
    unchanged = old is not None and old.get("status") == update.status
    return {
        "type": update.type,
        "status": update.status,
        "reason": update.reason,
        "message": _clip(update.message),
        "lastTransitionTime": (old or {}).get("lastTransitionTime", timestamp)
        if unchanged
        else timestamp,
        "observedGeneration": generation,
    }


def _conditions_of(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(status.get("conditions") or [])


def condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in _conditions_of(status) if c.get("type") == kind), None)


def is_current(status: Mapping[str, Any], generation: int) -> bool:
    return status.get("observedGeneration") == generation


def waits_for_a_node(status: Mapping[str, Any], generation: int, job_name: str) -> bool:
    """The status shows the scheduler's "unschedulable" for this run's pod (the pod handler
    keeps it current: it turns True when the pod is bound)."""
    found = condition(status, ConditionType.SCHEDULED)
    return (
        is_current(status, generation)
        and status.get("jobName") == job_name
        and found is not None
        and found.get("status") == "False"
        and found.get("reason") == Reason.UNSCHEDULABLE
    )


def is_terminal(status: Mapping[str, Any], generation: int) -> bool:
    """The run of ``generation`` has ended (Succeeded or Failed)."""
    return is_current(status, generation) and status.get("phase") in TERMINAL


# ------------------------------------------------------------------------------ typed reads


def read_status(raw: Mapping[str, Any]) -> EvaluationStatus:
    """``.status`` read into :class:`EvaluationStatus`, for decisions on the typed model. A
    status that does not validate as a whole (edited by hand, or written by another version of
    the operator) keeps each field that validates on its own and leaves the rest at their
    defaults, so a run is still handled by what its status does say."""
    try:
        return EvaluationStatus.model_validate(dict(raw))
    except ValidationError:
        pass
    kept: dict[str, Any] = {}
    for name, info in EvaluationStatus.model_fields.items():
        key = info.alias or name
        if key not in raw:
            continue
        try:
            part = EvaluationStatus.model_validate({key: raw[key]})
        except ValidationError:
            continue
        if name in part.model_fields_set:
            kept[name] = getattr(part, name)
    return EvaluationStatus.model_construct(**kept)


def phase_named(st: EvaluationStatus) -> Phase | None:
    """The phase the status names; None when it names none (the model's default, Pending, is
    not something such a status says)."""
    return st.phase if "phase" in st.model_fields_set else None


def typed_condition(st: EvaluationStatus, kind: str) -> Condition | None:
    """The typed status's condition of type ``kind``, if it has one."""
    return next((c for c in st.conditions if c.type == kind), None)


def _history_record(status: Mapping[str, Any]) -> dict[str, Any] | None:
    """The run ``status`` describes, for history: one that had a Job, whether it ended or was
    replaced by a spec edit before it did (then with the phase it had, Pending, Queued or
    Running, and no completion time), so edits in quick succession leave a trace of each run
    they cut short."""
    generation = status.get("observedGeneration")
    phase = status.get("phase")
    if not isinstance(generation, int) or phase not in PHASES or not status.get("jobName"):
        return None
    try:
        summary = Summary.model_validate(status.get("summary") or {})
    except ValueError:
        summary = Summary()
    record = RunRecord(
        generation=generation,
        run_id=status.get("runId"),
        phase=Phase(phase),
        completion_time=status.get("completionTime"),
        summary=summary,
    )
    return record.model_dump(mode="json", by_alias=True, exclude_none=True)


def _begin_run(
    status: Mapping[str, Any], generation: int
) -> tuple[dict[str, Any], list[Mapping[str, Any]]]:
    """When ``generation`` is new: move the previous run into history (newest first, at most
    10) and clear the run fields. Returns the patch part and the conditions to start from."""
    if is_current(status, generation):
        return {}, _conditions_of(status)
    patch: dict[str, Any] = {
        "results": None,
        "summary": None,
        "stack": None,
        "runId": None,
        "traceID": None,
        "startTime": None,
        "completionTime": None,
        "jobName": None,
        "record": None,
        "startup": None,
    }
    record = _history_record(status)
    if record is not None:
        history = [
            h for h in status.get("history") or [] if h.get("generation") != record["generation"]
        ]
        patch["history"] = [record, *history][:HISTORY_LIMIT]
    conditions = [c for c in _conditions_of(status) if c.get("type") not in RUN_CONDITIONS]
    return patch, conditions


# ------------------------------------------------------------------------------- transitions


def invalid_spec(
    status: Mapping[str, Any], generation: int, message: str, timestamp: str
) -> StatusChange:
    """Failed/InvalidSpec: the spec cannot be run as written; ``message`` names the fields."""
    return _refused(status, generation, Reason.INVALID_SPEC, message, timestamp)


def policy_denied(
    status: Mapping[str, Any], generation: int, message: str, timestamp: str
) -> StatusChange:
    """Failed/PolicyDenied: the operator's policy refuses what the spec asks for (an image, a
    Secret, a claim, a toleration); ``message`` names the field, the value and the setting."""
    return _refused(status, generation, Reason.POLICY_DENIED, message, timestamp)


def _refused(
    status: Mapping[str, Any], generation: int, reason: str, message: str, timestamp: str
) -> StatusChange:
    """Failed before any Job, Valid=False, for ``reason``; nothing to write when this
    generation already ended so (the handler sees the same spec again)."""
    failed = condition(status, ConditionType.FAILED)
    if is_terminal(status, generation) and failed is not None and failed.get("reason") == reason:
        return NO_CHANGE
    return _failed_before_start(status, generation, reason, ConditionType.VALID, message, timestamp)


def job_rejected(
    status: Mapping[str, Any], generation: int, job_name: str, message: str, timestamp: str
) -> StatusChange:
    """Failed/JobRejected: the API server refused to create the Job (``message`` is its own
    answer). The run never started, so nothing but the status records it."""
    if is_terminal(status, generation):
        return NO_CHANGE
    text = f"the API server rejected Job {job_name}: {message}"
    return _failed_before_start(
        status, generation, Reason.JOB_REJECTED, ConditionType.RUNNING, text, timestamp
    )


def _failed_before_start(
    status: Mapping[str, Any],
    generation: int,
    reason: str,
    first: str,
    message: str,
    timestamp: str,
) -> StatusChange:
    """Failed with ``reason`` before any pod ran: ``first`` (Valid or Running) False, then
    Succeeded False and Failed True, all with ``message``, and a Warning Event."""
    patch, conditions = _begin_run(status, generation)
    patch.update(
        phase=Phase.FAILED.value,
        observedGeneration=generation,
        completionTime=timestamp,
        message=_clip(message),
        conditions=merge_conditions(
            conditions,
            [
                Cond(first, "False", reason, message),
                Cond(ConditionType.SUCCEEDED, "False", reason, message),
                Cond(ConditionType.FAILED, "True", reason, message),
            ],
            generation,
            timestamp,
            drop=RUN_CONDITIONS,
        ),
    )
    return StatusChange(patch, Event("Warning", reason, _clip(message)))


def queued(
    status: Mapping[str, Any], generation: int, message: str, timestamp: str
) -> StatusChange:
    """Queued: valid, but a concurrency limit holds it back (message says which)."""
    if is_current(status, generation) and status.get("phase") != Phase.QUEUED.value:
        return NO_CHANGE  # already started or finished: never go back to Queued
    was_queued = is_current(status, generation) and status.get("phase") == Phase.QUEUED.value
    old = condition(status, ConditionType.QUEUED)
    if was_queued and old is not None and old.get("message") == message:
        return NO_CHANGE
    patch, conditions = _begin_run(status, generation)
    patch.update(
        phase=Phase.QUEUED.value,
        observedGeneration=generation,
        message=_clip(message),
        conditions=merge_conditions(
            conditions,
            [
                Cond(ConditionType.VALID, "True", Reason.SPEC_VALID),
                Cond(ConditionType.QUEUED, "True", Reason.CONCURRENCY_LIMIT, message),
            ],
            generation,
            timestamp,
        ),
    )
    event = None if was_queued else Event("Normal", Phase.QUEUED.value, _clip(message))
    return StatusChange(patch, event)


def job_created(
    status: Mapping[str, Any],
    generation: int,
    job_name: str,
    results_configmap: str,
    trace_id: str | None,
    timestamp: str,
) -> StatusChange:
    """Pending: admitted, the Job exists (written only after the API server created it, so a
    rejected Job never shows as created), the pod is not running yet."""
    if is_current(status, generation) and status.get("phase") not in (
        Phase.QUEUED.value,
        Phase.PENDING.value,
        None,
    ):
        return NO_CHANGE
    if (
        is_current(status, generation)
        and status.get("phase") == Phase.PENDING.value
        and status.get("jobName") == job_name
    ):
        return NO_CHANGE
    patch, conditions = _begin_run(status, generation)
    message = f"created Job {job_name}"
    patch.update(
        phase=Phase.PENDING.value,
        observedGeneration=generation,
        jobName=job_name,
        resultsConfigMap=results_configmap,
        message=message,
        conditions=merge_conditions(
            conditions,
            [
                Cond(ConditionType.VALID, "True", Reason.SPEC_VALID),
                Cond(ConditionType.QUEUED, "False", Reason.ADMITTED),
                Cond(ConditionType.RUNNING, "False", Reason.JOB_CREATED, message),
            ],
            generation,
            timestamp,
        ),
    )
    if trace_id:
        patch["traceID"] = trace_id
    return StatusChange(patch, Event("Normal", Reason.JOB_CREATED, message))


def _active(status: Mapping[str, Any], generation: int, job_name: str) -> bool:
    """The status describes the not-yet-finished run of this Job (Queued only when the Job
    exists and waits for Kueue)."""
    return (
        is_current(status, generation)
        and status.get("jobName") == job_name
        and status.get("phase") in (Phase.QUEUED.value, Phase.PENDING.value, Phase.RUNNING.value)
    )


def suspended_message(job_name: str, queue: str | None) -> str:
    if queue:
        return f"waiting for Kueue admission in queue {queue} (Job {job_name} is suspended)"
    return f"Job {job_name} is suspended"


def waiting_for_kueue(
    status: Mapping[str, Any],
    generation: int,
    job_name: str,
    results_configmap: str,
    queue: str | None,
    timestamp: str,
    trace_id: str | None = None,
) -> StatusChange:
    """Queued with a Job: the Job is suspended until Kueue admits it from ``queue`` (or, after
    running, Kueue evicted it and will admit it again). Not a slot of the operator's limits."""
    if is_current(status, generation) and (
        status.get("phase") in TERMINAL
        or (status.get("jobName") not in (None, job_name) and status.get("phase") is not None)
    ):
        return NO_CHANGE
    message = suspended_message(job_name, queue)
    reason = Reason.WAITING_FOR_KUEUE if queue else Reason.JOB_SUSPENDED
    was_queued = (
        is_current(status, generation)
        and status.get("phase") == Phase.QUEUED.value
        and status.get("jobName") == job_name
    )
    old = condition(status, ConditionType.QUEUED)
    if was_queued and old is not None and old.get("status") == "True":
        return NO_CHANGE  # keeps Kueue's reason (kueue_waiting) across repeated Job events
    patch, conditions = _begin_run(status, generation)
    patch.update(
        phase=Phase.QUEUED.value,
        observedGeneration=generation,
        jobName=job_name,
        resultsConfigMap=results_configmap,
        message=message,
        conditions=merge_conditions(
            conditions,
            [
                Cond(ConditionType.VALID, "True", Reason.SPEC_VALID),
                Cond(ConditionType.QUEUED, "True", reason, message),
                Cond(ConditionType.RUNNING, "False", reason, message),
            ],
            generation,
            timestamp,
        ),
    )
    if trace_id:
        patch["traceID"] = trace_id
    event = None if was_queued else Event("Normal", Phase.QUEUED.value, message)
    return StatusChange(patch, event)


_CONDITION_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")


def kueue_message(queue: str | None, detail: str, evicted: bool = False) -> str:
    """The evaluation's message while Kueue holds its Job, with Kueue's own words."""
    where = f" in queue {queue}" if queue else ""
    if evicted:
        return f"evicted by Kueue, waiting for readmission{where}: {detail}"
    return f"waiting for Kueue admission{where}: {detail}"


def kueue_waiting(
    status: Mapping[str, Any],
    generation: int,
    job_name: str,
    queue: str | None,
    reason: str,
    detail: str,
    timestamp: str,
    evicted: bool = False,
) -> StatusChange:
    """Still Queued, now with Kueue's reason: ``reason`` and ``detail`` are the Workload's
    (e.g. ``Pending``, "couldn't assign flavors to pod set main: insufficient unused quota for
    cpu ..."; ``evicted``: an Evicted reason such as ``Preempted``). They become the ``Queued``
    and ``Running`` conditions' reason and the message. Only while the status shows this Job
    waiting; an Event (a Warning for an eviction) only when the reason changes."""
    if not _active(status, generation, job_name) or status.get("phase") != Phase.QUEUED.value:
        return NO_CHANGE
    old = condition(status, ConditionType.QUEUED)
    if old is None or old.get("status") != "True":
        return NO_CHANGE
    if len(reason) > 1024 or not _CONDITION_REASON.match(reason):
        reason = Reason.WAITING_FOR_KUEUE
    message = _clip(kueue_message(queue, detail, evicted))
    if old.get("reason") == reason and old.get("message") == message:
        return NO_CHANGE
    patch = {
        "message": message,
        "conditions": merge_conditions(
            _conditions_of(status),
            [
                Cond(ConditionType.QUEUED, "True", reason, message),
                Cond(ConditionType.RUNNING, "False", reason, message),
            ],
            generation,
            timestamp,
        ),
    }
    event = None
    if old.get("reason") != reason:
        event = Event("Warning" if evicted else "Normal", reason, message)
    return StatusChange(patch, event)


def unsuspended(
    status: Mapping[str, Any], generation: int, job_name: str, timestamp: str
) -> StatusChange:
    """Pending again: the suspended Job was let go (Kueue admitted it); its pod comes next."""
    if not _active(status, generation, job_name) or status.get("phase") != Phase.QUEUED.value:
        return NO_CHANGE
    queued_cond = condition(status, ConditionType.QUEUED) or {}
    # Any reason but JobSuspended (no queue label) is Kueue's: WaitingForKueue or its own.
    by_kueue = queued_cond.get("reason") not in (None, Reason.JOB_SUSPENDED)
    message = f"{'Kueue admitted' if by_kueue else 'unsuspended'} Job {job_name}"
    patch = {
        "phase": Phase.PENDING.value,
        "message": message,
        "conditions": merge_conditions(
            _conditions_of(status),
            [
                Cond(ConditionType.QUEUED, "False", Reason.ADMITTED, message),
                Cond(ConditionType.RUNNING, "False", Reason.ADMITTED, message),
            ],
            generation,
            timestamp,
        ),
    }
    return StatusChange(patch, Event("Normal", Reason.ADMITTED, message))


def unschedulable(
    status: Mapping[str, Any], generation: int, job_name: str, message: str, timestamp: str
) -> StatusChange:
    """The scheduler cannot place the pod; keep its message (it says which resource is short)."""
    old = condition(status, ConditionType.SCHEDULED)
    if not _active(status, generation, job_name):
        return NO_CHANGE
    if (
        old is not None
        and old.get("reason") == Reason.UNSCHEDULABLE
        and old.get("message") == message
    ):
        return NO_CHANGE
    patch = {
        "message": _clip(message),
        "conditions": merge_conditions(
            _conditions_of(status),
            [Cond(ConditionType.SCHEDULED, "False", Reason.UNSCHEDULABLE, message)],
            generation,
            timestamp,
        ),
    }
    return StatusChange(patch, Event("Warning", Reason.UNSCHEDULABLE, _clip(message)))


def scheduled(
    status: Mapping[str, Any], generation: int, job_name: str, node: str, timestamp: str
) -> StatusChange:
    old = condition(status, ConditionType.SCHEDULED)
    if not _active(status, generation, job_name) or (old and old.get("status") == "True"):
        return NO_CHANGE
    message = f"pod assigned to node {node}"
    patch: dict[str, Any] = {
        "conditions": merge_conditions(
            _conditions_of(status),
            [Cond(ConditionType.SCHEDULED, "True", Reason.SCHEDULED, message)],
            generation,
            timestamp,
        )
    }
    if old is not None and old.get("reason") == Reason.UNSCHEDULABLE:
        patch["message"] = message
    return StatusChange(patch)


def shows_pod_state(
    status: Mapping[str, Any], generation: int, job_name: str, kind: str, detail: str
) -> bool:
    """The active run of ``job_name`` already says what :func:`scheduled` (``kind``
    "scheduled") or :func:`unschedulable` (the scheduler's message ``detail``) would write,
    so the same state again changes nothing."""
    if not _active(status, generation, job_name):
        return False
    old = condition(status, ConditionType.SCHEDULED) or {}
    if kind == "scheduled":
        return old.get("status") == "True"
    return old.get("reason") == Reason.UNSCHEDULABLE and old.get("message") == detail


def pod_disrupted(
    status: Mapping[str, Any], generation: int, job_name: str, message: str, timestamp: str
) -> StatusChange:
    """Kubernetes took the run's pod away (its node deleted, an eviction): no agent runs, so
    back to Pending until the Job's replacement pod runs, saying why; once per message."""
    old = condition(status, ConditionType.RUNNING)
    if not _active(status, generation, job_name):
        return NO_CHANGE
    if old is not None and (old.get("reason"), old.get("message")) == (
        Reason.POD_DISRUPTED,
        message,
    ):
        return NO_CHANGE
    patch = {
        "phase": Phase.PENDING.value,
        "message": _clip(message),
        "conditions": merge_conditions(
            _conditions_of(status),
            [Cond(ConditionType.RUNNING, "False", Reason.POD_DISRUPTED, message)],
            generation,
            timestamp,
        ),
    }
    return StatusChange(patch, Event("Warning", Reason.POD_DISRUPTED, _clip(message)))


def running(
    status: Mapping[str, Any], generation: int, job_name: str, timestamp: str
) -> StatusChange:
    """Running: the agent's pod is up. No Event: the phase, ``startTime`` and the ``Running``
    condition say so, and the pod's own Events say when its container started, as a Job posts
    none when its pods run."""
    if not _active(status, generation, job_name) or status.get("phase") == Phase.RUNNING.value:
        return NO_CHANGE
    message = f"evaluation pod of Job {job_name} is running"
    patch = {
        "phase": Phase.RUNNING.value,
        "startTime": status.get("startTime") or timestamp,
        "message": message,
        "conditions": merge_conditions(
            _conditions_of(status),
            [
                Cond(ConditionType.SCHEDULED, "True", Reason.SCHEDULED),
                Cond(ConditionType.RUNNING, "True", Reason.POD_RUNNING, message),
            ],
            generation,
            timestamp,
        ),
    }
    return StatusChange(patch)


def _headline(outcome: Outcome) -> str:
    s = outcome.summary
    parts = []
    if s.p50_ms is not None:
        parts.append(f"p50 {s.p50_ms:.3g} ms")
    if s.throughput is not None:
        parts.append(f"{s.throughput:.4g} samples/s")
    if s.metric not in (None, "top1") and s.metric_value is not None:
        parts.append(f"{s.metric} {s.metric_value:.4f}")
    elif s.top1 is not None:
        parts.append(f"top-1 {s.top1:.4f}")
    where = f" at batch size {s.batch_size}" if s.batch_size is not None else ""
    return f"evaluation succeeded{where}: {', '.join(parts)}" if parts else "evaluation succeeded"


def _outcome_fields(outcome: Outcome | None) -> dict[str, Any]:
    if outcome is None:
        return {}
    patch: dict[str, Any] = {}
    if outcome.rows:
        patch["results"] = outcome.results
        patch["summary"] = outcome.summary.model_dump(mode="json", by_alias=True, exclude_none=True)
    if outcome.stack:
        patch["stack"] = outcome.stack
    if outcome.run_id:
        patch["runId"] = outcome.run_id
    if outcome.trace_id:
        patch["traceID"] = outcome.trace_id
    startup = outcome.startup_status
    if startup is not None:
        patch["startup"] = startup
    return patch


def succeeded(
    status: Mapping[str, Any], generation: int, job_name: str, outcome: Outcome, timestamp: str
) -> StatusChange:
    """Succeeded: the Job completed and the agent's results are in."""
    if not _active(status, generation, job_name):
        return NO_CHANGE
    message = _headline(outcome)
    patch = {
        "phase": Phase.SUCCEEDED.value,
        "startTime": status.get("startTime") or timestamp,
        "completionTime": timestamp,
        "message": message,
        **_outcome_fields(outcome),
        "conditions": merge_conditions(
            _conditions_of(status),
            [
                Cond(ConditionType.SCHEDULED, "True", Reason.SCHEDULED),
                Cond(ConditionType.RUNNING, "False", Reason.SUCCEEDED, "the evaluation finished"),
                Cond(ConditionType.SUCCEEDED, "True", Reason.SUCCEEDED, message),
                Cond(ConditionType.FAILED, "False", Reason.SUCCEEDED),
            ],
            generation,
            timestamp,
        ),
    }
    return StatusChange(patch, Event("Normal", Phase.SUCCEEDED.value, message))


def failed(
    status: Mapping[str, Any],
    generation: int,
    job_name: str,
    reason: str,
    message: str,
    timestamp: str,
    outcome: Outcome | None = None,
    placed: bool = False,
) -> StatusChange:
    """Failed with ``reason`` (DeadlineExceeded, BackoffLimitExceeded, ResultsMissing, ...).
    ``placed``: the run's pod was on a node (its Job completed), which the Scheduled condition
    says when no earlier transition did."""
    if not _active(status, generation, job_name):
        return NO_CHANGE
    ran = [Cond(ConditionType.SCHEDULED, "True", Reason.SCHEDULED)] if placed else []
    patch = {
        "phase": Phase.FAILED.value,
        "completionTime": timestamp,
        "message": _clip(message),
        **_outcome_fields(outcome),
        "conditions": merge_conditions(
            _conditions_of(status),
            [
                *ran,
                Cond(ConditionType.RUNNING, "False", reason, message),
                Cond(ConditionType.SUCCEEDED, "False", reason, message),
                Cond(ConditionType.FAILED, "True", reason, message),
            ],
            generation,
            timestamp,
        ),
    }
    return StatusChange(patch, Event("Warning", reason, _clip(message)))


# ------------------------------------------------------------------------ the results store


def _names_run(status: Mapping[str, Any], generation: int, run_id: str | None) -> bool:
    """The status still describes the finished run ``run_id`` of ``generation``."""
    return is_terminal(status, generation) and status.get("runId") == run_id


def _record_of(status: Mapping[str, Any], run_id: str | None) -> Mapping[str, Any]:
    """``status.record`` when it is about ``run_id`` (else empty)."""
    record = status.get("record") or {}
    return record if record.get("runId") == run_id else {}


def recorded(
    status: Mapping[str, Any], generation: int, run_id: str, timestamp: str
) -> StatusChange:
    """Recorded: the store holds the run (newly, or it already did). Announced by an Event only
    when it had been Pending: the common case says nothing beyond Succeeded."""
    old = _record_of(status, run_id)
    if not _names_run(status, generation, run_id) or old.get("state") == RecordState.RECORDED:
        return NO_CHANGE
    attempts = int(old.get("attempts") or 0) + 1
    patch = {
        "record": {
            "state": RecordState.RECORDED.value,
            "runId": run_id,
            "recordedAt": timestamp,
            "attempts": attempts,
            "message": "",
        }
    }
    event = None
    if old.get("state") == RecordState.PENDING:
        message = f"run {run_id} recorded in the results store after {attempts} attempts"
        event = Event("Normal", Reason.RECORDED, message)
    return StatusChange(patch, event)


def record_pending(
    status: Mapping[str, Any], generation: int, run_id: str, message: str
) -> StatusChange:
    """Pending: the store failed (``message`` says how); the result waits to be retried. A
    Warning Event when it becomes Pending, not on every retry."""
    old = _record_of(status, run_id)
    if not _names_run(status, generation, run_id) or old.get("state") == RecordState.RECORDED:
        return NO_CHANGE
    patch = {
        "record": {
            "state": RecordState.PENDING.value,
            "runId": run_id,
            "recordedAt": None,
            "attempts": int(old.get("attempts") or 0) + 1,
            "message": _clip(message),
        }
    }
    was_pending = old.get("state") == RecordState.PENDING
    event = None if was_pending else Event("Warning", Reason.RECORD_PENDING, _clip(message))
    return StatusChange(patch, event)


def not_recorded(
    status: Mapping[str, Any], generation: int, run_id: str | None, message: str
) -> StatusChange:
    """NotRecorded: there is nothing the store can take (no full result document for this run,
    or the store rejects it); ``message`` says which."""
    old = _record_of(status, run_id)
    if not _names_run(status, generation, run_id) or old.get("state") in (
        RecordState.RECORDED,
        RecordState.NOT_RECORDED,
    ):
        return NO_CHANGE
    record = {
        "state": RecordState.NOT_RECORDED.value,
        "runId": run_id,
        "recordedAt": None,
        "attempts": int(old.get("attempts") or 0),
        "message": _clip(message),
    }
    return StatusChange({"record": record}, Event("Warning", Reason.NOT_RECORDED, _clip(message)))
