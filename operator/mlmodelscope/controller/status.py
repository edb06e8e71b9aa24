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

Each transition reads the status it starts from as :class:`Observed`: its guards decide on the
typed :class:`EvaluationStatus`, parsed once per read, and its patch, keyed by the CRD's
camelCase names, carries over the raw conditions and history it does not change, exactly as
they were written (another writer's condition included).
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
    RecordStatus,
    RunRecord,
)

MESSAGE_LIMIT: Final = 4096
HISTORY_LIMIT: Final = 10
TERMINAL: Final = (Phase.SUCCEEDED, Phase.FAILED)
UNFINISHED: Final = (Phase.QUEUED, Phase.PENDING, Phase.RUNNING)
"""Phases of a run that has not ended."""


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


# -------------------------------------------------------------------------------- raw reads
# For callers that hold only the raw dict and decide on it without a reconcile: the watch's
# triage of every event, the listings' filters, a check of the answer to a write.


def condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in _conditions_of(status) if c.get("type") == kind), None)


def is_current(status: Mapping[str, Any], generation: int) -> bool:
    return status.get("observedGeneration") == generation


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


@dataclass(frozen=True)
class Observed:
    """An evaluation's ``.status`` as one read found it: ``typed`` for the transitions' guards,
    ``raw`` for what a patch carries over unchanged (conditions, history), so a write keeps
    them exactly as they were written."""

    raw: Mapping[str, Any]
    typed: EvaluationStatus

    @classmethod
    def of(cls, raw: Mapping[str, Any] | None) -> Observed:
        """``raw`` (None: no status yet) with its typed read (:func:`read_status`)."""
        raw = raw if raw is not None else {}
        return cls(raw, read_status(raw))

    def reads(self, raw: Mapping[str, Any] | None) -> bool:
        """This is the read of ``raw`` (the same object, or both empty): no need to parse it
        again."""
        return self.raw is raw or not (self.raw or raw)


def ended(st: EvaluationStatus, generation: int) -> bool:
    """The run of ``generation`` has ended (Succeeded or Failed)."""
    return st.observed_generation == generation and phase_named(st) in TERMINAL


def waits_for_a_node(st: EvaluationStatus, generation: int, job_name: str) -> bool:
    """The status shows the scheduler's "unschedulable" for this run's pod (the pod handler
    keeps it current: it turns True when the pod is bound)."""
    found = typed_condition(st, ConditionType.SCHEDULED)
    return (
        st.observed_generation == generation
        and st.job_name == job_name
        and found is not None
        and found.status == "False"
        and found.reason == Reason.UNSCHEDULABLE
    )


def _active(st: EvaluationStatus, generation: int, job_name: str) -> bool:
    """The status describes the not-yet-finished run of this Job (Queued only when the Job
    exists and waits for Kueue)."""
    return (
        st.observed_generation == generation
        and st.job_name == job_name
        and phase_named(st) in UNFINISHED
    )


def _history_record(st: EvaluationStatus) -> dict[str, Any] | None:
    """The run ``st`` describes, for history: one that had a Job, whether it ended or was
    replaced by a spec edit before it did (then with the phase it had, Pending, Queued or
    Running, and no completion time), so edits in quick succession leave a trace of each run
    they cut short."""
    phase = phase_named(st)
    if st.observed_generation is None or phase is None or not st.job_name:
        return None
    record = RunRecord(
        generation=st.observed_generation,
        run_id=st.run_id,
        phase=phase,
        completion_time=st.completion_time,
        summary=st.summary,
    )
    return record.model_dump(mode="json", by_alias=True, exclude_none=True)


def _begin_run(status: Observed, generation: int) -> tuple[dict[str, Any], list[Mapping[str, Any]]]:
    """When ``generation`` is new: move the previous run into history (newest first, at most
    10) and clear the run fields. Returns the patch part and the conditions to start from."""
    if status.typed.observed_generation == generation:
        return {}, _conditions_of(status.raw)
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
    record = _history_record(status.typed)
    if record is not None:
        history = [
            h
            for h in status.raw.get("history") or []
            if h.get("generation") != record["generation"]
        ]
        patch["history"] = [record, *history][:HISTORY_LIMIT]
    conditions = [c for c in _conditions_of(status.raw) if c.get("type") not in RUN_CONDITIONS]
    return patch, conditions


# ------------------------------------------------------------------------------- transitions


def invalid_spec(status: Observed, generation: int, message: str, timestamp: str) -> StatusChange:
    """Failed/InvalidSpec: the spec cannot be run as written; ``message`` names the fields."""
    return _refused(status, generation, Reason.INVALID_SPEC, message, timestamp)


def policy_denied(status: Observed, generation: int, message: str, timestamp: str) -> StatusChange:
    """Failed/PolicyDenied: the operator's policy refuses what the spec asks for (an image, a
    Secret, a claim, a toleration); ``message`` names the field, the value and the setting."""
    return _refused(status, generation, Reason.POLICY_DENIED, message, timestamp)


def _refused(
    status: Observed, generation: int, reason: str, message: str, timestamp: str
) -> StatusChange:
    """Failed before any Job, Valid=False, for ``reason``; nothing to write when this
    generation already ended so (the handler sees the same spec again)."""
    st = status.typed
    failed = typed_condition(st, ConditionType.FAILED)
    if ended(st, generation) and failed is not None and failed.reason == reason:
        return NO_CHANGE
    return _failed_before_start(status, generation, reason, ConditionType.VALID, message, timestamp)


def job_rejected(
    status: Observed, generation: int, job_name: str, message: str, timestamp: str
) -> StatusChange:
    """Failed/JobRejected: the API server refused to create the Job (``message`` is its own
    answer). The run never started, so nothing but the status records it."""
    if ended(status.typed, generation):
        return NO_CHANGE
    text = f"the API server rejected Job {job_name}: {message}"
    return _failed_before_start(
        status, generation, Reason.JOB_REJECTED, ConditionType.RUNNING, text, timestamp
    )


def _failed_before_start(
    status: Observed,
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


def queued(status: Observed, generation: int, message: str, timestamp: str) -> StatusChange:
    """Queued: valid, but a concurrency limit holds it back (message says which)."""
    st = status.typed
    current = st.observed_generation == generation
    was_queued = current and phase_named(st) is Phase.QUEUED
    if current and not was_queued:
        return NO_CHANGE  # already started or finished: never go back to Queued
    old = typed_condition(st, ConditionType.QUEUED)
    if was_queued and old is not None and old.message == message:
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
    status: Observed,
    generation: int,
    job_name: str,
    results_configmap: str,
    trace_id: str | None,
    timestamp: str,
) -> StatusChange:
    """Pending: admitted, the Job exists (written only after the API server created it, so a
    rejected Job never shows as created), the pod is not running yet."""
    st = status.typed
    if st.observed_generation == generation:
        phase = phase_named(st)
        if phase not in (Phase.QUEUED, Phase.PENDING, None):
            return NO_CHANGE
        if phase is Phase.PENDING and st.job_name == job_name:
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


def suspended_message(job_name: str, queue: str | None) -> str:
    if queue:
        return f"waiting for Kueue admission in queue {queue} (Job {job_name} is suspended)"
    return f"Job {job_name} is suspended"


def waiting_for_kueue(
    status: Observed,
    generation: int,
    job_name: str,
    results_configmap: str,
    queue: str | None,
    timestamp: str,
    trace_id: str | None = None,
) -> StatusChange:
    """Queued with a Job: the Job is suspended until Kueue admits it from ``queue`` (or, after
    running, Kueue evicted it and will admit it again). Not a slot of the operator's limits."""
    st = status.typed
    current = st.observed_generation == generation
    phase = phase_named(st)
    if current and (
        phase in TERMINAL or (st.job_name not in (None, job_name) and phase is not None)
    ):
        return NO_CHANGE
    message = suspended_message(job_name, queue)
    reason = Reason.WAITING_FOR_KUEUE if queue else Reason.JOB_SUSPENDED
    was_queued = current and phase is Phase.QUEUED and st.job_name == job_name
    old = typed_condition(st, ConditionType.QUEUED)
    if was_queued and old is not None and old.status == "True":
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
    status: Observed,
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
    st = status.typed
    if not _active(st, generation, job_name) or phase_named(st) is not Phase.QUEUED:
        return NO_CHANGE
    old = typed_condition(st, ConditionType.QUEUED)
    if old is None or old.status != "True":
        return NO_CHANGE
    if len(reason) > 1024 or not _CONDITION_REASON.match(reason):
        reason = Reason.WAITING_FOR_KUEUE
    message = _clip(kueue_message(queue, detail, evicted))
    if old.reason == reason and old.message == message:
        return NO_CHANGE
    patch = {
        "message": message,
        "conditions": merge_conditions(
            _conditions_of(status.raw),
            [
                Cond(ConditionType.QUEUED, "True", reason, message),
                Cond(ConditionType.RUNNING, "False", reason, message),
            ],
            generation,
            timestamp,
        ),
    }
    event = None
    if old.reason != reason:
        event = Event("Warning" if evicted else "Normal", reason, message)
    return StatusChange(patch, event)


def unsuspended(status: Observed, generation: int, job_name: str, timestamp: str) -> StatusChange:
    """Pending again: the suspended Job was let go (Kueue admitted it); its pod comes next."""
    st = status.typed
    if not _active(st, generation, job_name) or phase_named(st) is not Phase.QUEUED:
        return NO_CHANGE
    queued_cond = typed_condition(st, ConditionType.QUEUED)
    # Any reason but JobSuspended (no queue label) is Kueue's: WaitingForKueue or its own.
    by_kueue = queued_cond is not None and queued_cond.reason not in ("", Reason.JOB_SUSPENDED)
    message = f"{'Kueue admitted' if by_kueue else 'unsuspended'} Job {job_name}"
    patch = {
        "phase": Phase.PENDING.value,
        "message": message,
        "conditions": merge_conditions(
            _conditions_of(status.raw),
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
    status: Observed, generation: int, job_name: str, message: str, timestamp: str
) -> StatusChange:
    """The scheduler cannot place the pod; keep its message (it says which resource is short)."""
    st = status.typed
    if not _active(st, generation, job_name):
        return NO_CHANGE
    old = typed_condition(st, ConditionType.SCHEDULED)
    if old is not None and old.reason == Reason.UNSCHEDULABLE and old.message == message:
        return NO_CHANGE
    patch = {
        "message": _clip(message),
        "conditions": merge_conditions(
            _conditions_of(status.raw),
            [Cond(ConditionType.SCHEDULED, "False", Reason.UNSCHEDULABLE, message)],
            generation,
            timestamp,
        ),
    }
    return StatusChange(patch, Event("Warning", Reason.UNSCHEDULABLE, _clip(message)))


def scheduled(
    status: Observed, generation: int, job_name: str, node: str, timestamp: str
) -> StatusChange:
    st = status.typed
    old = typed_condition(st, ConditionType.SCHEDULED)
    if not _active(st, generation, job_name) or (old is not None and old.status == "True"):
        return NO_CHANGE
    message = f"pod assigned to node {node}"
    patch: dict[str, Any] = {
        "conditions": merge_conditions(
            _conditions_of(status.raw),
            [Cond(ConditionType.SCHEDULED, "True", Reason.SCHEDULED, message)],
            generation,
            timestamp,
        )
    }
    if old is not None and old.reason == Reason.UNSCHEDULABLE:
        patch["message"] = message
    return StatusChange(patch)


def shows_pod_state(
    status: Mapping[str, Any], generation: int, job_name: str, kind: str, detail: str
) -> bool:
    """The active run of ``job_name`` already says what :func:`scheduled` (``kind``
    "scheduled") or :func:`unschedulable` (the scheduler's message ``detail``) would write,
    so the same state again changes nothing. On the raw status: the pod handler asks it of
    the answer to its write."""
    if not (
        is_current(status, generation)
        and status.get("jobName") == job_name
        and status.get("phase") in UNFINISHED
    ):
        return False
    old = condition(status, ConditionType.SCHEDULED) or {}
    if kind == "scheduled":
        return old.get("status") == "True"
    return old.get("reason") == Reason.UNSCHEDULABLE and old.get("message") == detail


def pod_disrupted(
    status: Observed, generation: int, job_name: str, message: str, timestamp: str
) -> StatusChange:
    """Kubernetes took the run's pod away (its node deleted, an eviction): no agent runs, so
    back to Pending until the Job's replacement pod runs, saying why; once per message."""
    st = status.typed
    if not _active(st, generation, job_name):
        return NO_CHANGE
    old = typed_condition(st, ConditionType.RUNNING)
    if old is not None and old.reason == Reason.POD_DISRUPTED and old.message == message:
        return NO_CHANGE
    patch = {
        "phase": Phase.PENDING.value,
        "message": _clip(message),
        "conditions": merge_conditions(
            _conditions_of(status.raw),
            [Cond(ConditionType.RUNNING, "False", Reason.POD_DISRUPTED, message)],
            generation,
            timestamp,
        ),
    }
    return StatusChange(patch, Event("Warning", Reason.POD_DISRUPTED, _clip(message)))


def running(status: Observed, generation: int, job_name: str, timestamp: str) -> StatusChange:
    """Running: the agent's pod is up. No Event: the phase, ``startTime`` and the ``Running``
    condition say so, and the pod's own Events say when its container started, as a Job posts
    none when its pods run."""
    st = status.typed
    if not _active(st, generation, job_name) or phase_named(st) is Phase.RUNNING:
        return NO_CHANGE
    message = f"evaluation pod of Job {job_name} is running"
    patch = {
        "phase": Phase.RUNNING.value,
        "startTime": st.start_time or timestamp,
        "message": message,
        "conditions": merge_conditions(
            _conditions_of(status.raw),
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
    status: Observed, generation: int, job_name: str, outcome: Outcome, timestamp: str
) -> StatusChange:
    """Succeeded: the Job completed and the agent's results are in."""
    st = status.typed
    if not _active(st, generation, job_name):
        return NO_CHANGE
    message = _headline(outcome)
    patch = {
        "phase": Phase.SUCCEEDED.value,
        "startTime": st.start_time or timestamp,
        "completionTime": timestamp,
        "message": message,
        **_outcome_fields(outcome),
        "conditions": merge_conditions(
            _conditions_of(status.raw),
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
    status: Observed,
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
    if not _active(status.typed, generation, job_name):
        return NO_CHANGE
    ran = [Cond(ConditionType.SCHEDULED, "True", Reason.SCHEDULED)] if placed else []
    patch = {
        "phase": Phase.FAILED.value,
        "completionTime": timestamp,
        "message": _clip(message),
        **_outcome_fields(outcome),
        "conditions": merge_conditions(
            _conditions_of(status.raw),
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


def _names_run(st: EvaluationStatus, generation: int, run_id: str | None) -> bool:
    """The status still describes the finished run ``run_id`` of ``generation``."""
    return ended(st, generation) and st.run_id == run_id


def _record_of(st: EvaluationStatus, run_id: str | None) -> RecordStatus | None:
    """``status.record`` when it is about ``run_id``."""
    return st.record if st.record is not None and st.record.run_id == run_id else None


def recorded(status: Observed, generation: int, run_id: str, timestamp: str) -> StatusChange:
    """Recorded: the store holds the run (newly, or it already did). Announced by an Event only
    when it had been Pending: the common case says nothing beyond Succeeded."""
    old = _record_of(status.typed, run_id)
    state = old.state if old is not None else None
    if not _names_run(status.typed, generation, run_id) or state is RecordState.RECORDED:
        return NO_CHANGE
    attempts = (old.attempts if old is not None else 0) + 1
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
    if state is RecordState.PENDING:
        message = f"run {run_id} recorded in the results store after {attempts} attempts"
        event = Event("Normal", Reason.RECORDED, message)
    return StatusChange(patch, event)


def record_pending(status: Observed, generation: int, run_id: str, message: str) -> StatusChange:
    """Pending: the store failed (``message`` says how); the result waits to be retried. A
    Warning Event when it becomes Pending, not on every retry."""
    old = _record_of(status.typed, run_id)
    state = old.state if old is not None else None
    if not _names_run(status.typed, generation, run_id) or state is RecordState.RECORDED:
        return NO_CHANGE
    patch = {
        "record": {
            "state": RecordState.PENDING.value,
            "runId": run_id,
            "recordedAt": None,
            "attempts": (old.attempts if old is not None else 0) + 1,
            "message": _clip(message),
        }
    }
    was_pending = state is RecordState.PENDING
    event = None if was_pending else Event("Warning", Reason.RECORD_PENDING, _clip(message))
    return StatusChange(patch, event)


def not_recorded(
    status: Observed, generation: int, run_id: str | None, message: str
) -> StatusChange:
    """NotRecorded: there is nothing the store can take (no full result document for this run,
    or the store rejects it); ``message`` says which."""
    old = _record_of(status.typed, run_id)
    state = old.state if old is not None else None
    if not _names_run(status.typed, generation, run_id) or state in (
        RecordState.RECORDED,
        RecordState.NOT_RECORDED,
    ):
        return NO_CHANGE
    record = {
        "state": RecordState.NOT_RECORDED.value,
        "runId": run_id,
        "recordedAt": None,
        "attempts": old.attempts if old is not None else 0,
        "message": _clip(message),
    }
    return StatusChange({"record": record}, Event("Warning", Reason.NOT_RECORDED, _clip(message)))
