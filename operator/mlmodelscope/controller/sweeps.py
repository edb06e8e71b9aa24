"""What an EvaluationSweep should look like, as pure functions: which child ModelEvaluations
to create next, and the sweep's aggregate status.

The sweep's spec is expanded by :func:`mlmodelscope.spec.sweep.expand` (deterministic names,
matrix order); this module compares that with the children that exist. A child belongs to a
sweep only when it has the sweep label *and* an ownerReference to the sweep's UID, never by
name alone: a same-named ModelEvaluation that someone else made is a conflict (the row ends
Failed, saying so), and a child of an earlier sweep of the same name is not counted.

* **Parallelism**: children are created in matrix order while fewer than
  ``spec.parallelism`` are active (created and not Succeeded/Failed). Every owned child that
  has not ended counts, also one the matrix no longer has after a spec edit.
* **Suspend**: nothing is created; children already running finish.
* **Failure policy**: ``Stop`` creates nothing after a child failed (phase Stopped until
  every child was created); ``Continue`` goes on, and the sweep ends Failed if any child
  failed, else Succeeded.
* **Memory**: a child that ended is remembered in ``status.children``; deleting it later
  does not run it again.

``status.children`` has a row per matrix entry (phase unset until the child exists), with
the child's own ``.status`` numbers: the summary's p50, throughput and top-1, the p99 of its
first result row, the run id and message. With ``spec.repeats`` > 1 each matrix combination
(cell) has that many children, and ``status.cells`` a row per cell over its repeats
(:mod:`.sweep_repeats`). The phase rules count children, so a sweep with a failed repeat is
never Succeeded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import ValidationError

from mlmodelscope import API_GROUP, API_VERSION
from mlmodelscope.controller import sweep_repeats
from mlmodelscope.controller.status import (
    MESSAGE_LIMIT,
    Cond,
    Event,
    StatusChange,
    merge_conditions,
)
from mlmodelscope.spec.status import IntervalMs, Phase
from mlmodelscope.spec.sweep import (
    LABEL_SWEEP,
    SWEEP_KIND,
    SWEEP_PLURAL,
    EvaluationSweep,
    FailurePolicy,
    SweepChild,
    SweepChildStatus,
    SweepPhase,
    SweepStatus,
    progress,
)

ENDED: Final = (Phase.SUCCEEDED, Phase.FAILED)
SWEEP_API_VERSION: Final = f"{API_GROUP}/{API_VERSION}"
NAMES_IN_MESSAGE: Final = 5


class ConditionType:
    VALID = "Valid"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class Reason:
    SPEC_VALID = "SpecValid"
    INVALID_SPEC = "InvalidSpec"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    RUNNING = "Running"
    ALL_SUCCEEDED = "AllSucceeded"
    CHILDREN_FAILED = "ChildrenFailed"
    FAILURE_POLICY_STOP = "FailurePolicyStop"
    CHILD_CREATED = "ChildCreated"
    NAME_CONFLICT = "NameConflict"


END_CONDITIONS: Final = (ConditionType.SUCCEEDED, ConditionType.FAILED)
"""Present only while the sweep has ended; dropped when it runs again (a spec edit)."""


# ----------------------------------------------------------------------- paths and owners


def all_sweeps_path() -> str:
    return f"/apis/{API_GROUP}/{API_VERSION}/{SWEEP_PLURAL}"


def children_selector(sweep_name: str) -> str:
    """Server-side label selector of a sweep's children (ownership is checked as well)."""
    return f"{LABEL_SWEEP}={sweep_name}"


def owner_reference(sweep: Mapping[str, Any]) -> dict[str, Any]:
    """The sweep as controller owner: the garbage collector deletes the child with it."""
    meta = sweep.get("metadata") or {}
    if not meta.get("uid"):
        raise ValueError("the sweep has no metadata.uid; build children from a stored object")
    return {
        "apiVersion": SWEEP_API_VERSION,
        "kind": SWEEP_KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owner_of(child: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(namespace, sweep name, sweep uid) of a child ModelEvaluation: its controller
    ownerReference of kind EvaluationSweep, when it also carries the sweep label."""
    meta = child.get("metadata") or {}
    labelled = (meta.get("labels") or {}).get(LABEL_SWEEP)
    for ref in meta.get("ownerReferences") or []:
        if (
            ref.get("kind") == SWEEP_KIND
            and str(ref.get("apiVersion", "")).startswith(f"{API_GROUP}/")
            and ref.get("controller")
            and ref.get("name") == labelled
            and meta.get("namespace")
        ):
            return str(meta["namespace"]), str(ref["name"]), str(ref.get("uid"))
    return None


def owned_children(
    sweep: Mapping[str, Any], items: Iterable[Mapping[str, Any]]
) -> dict[str, Mapping[str, Any]]:
    """The listed ModelEvaluations that belong to ``sweep`` (label and owner UID), by name."""
    meta = sweep.get("metadata") or {}
    owned = {}
    for item in items:
        owner = owner_of(item)
        if owner is not None and owner[1:] == (meta.get("name"), meta.get("uid")):
            owned[str(item["metadata"]["name"])] = item
    return owned


def build_child(sweep: Mapping[str, Any], child: SweepChild) -> dict[str, Any]:
    """The child ModelEvaluation to create: the expanded document in the sweep's namespace,
    owned by the sweep, with the sweep label."""
    meta = sweep["metadata"]
    document = dict(child.document)
    child_meta = dict(document.get("metadata") or {})
    child_meta["name"] = child.name
    child_meta["namespace"] = meta["namespace"]
    child_meta["labels"] = {**(child_meta.get("labels") or {}), LABEL_SWEEP: meta["name"]}
    child_meta["ownerReferences"] = [owner_reference(sweep)]
    document["metadata"] = child_meta
    return document


# --------------------------------------------------------------------------------- rows


def _clip(message: str) -> str:
    return message if len(message) <= MESSAGE_LIMIT else message[: MESSAGE_LIMIT - 3] + "..."


def child_phase(child: Mapping[str, Any]) -> Phase:
    """The child's phase for its current spec; Pending until its operator has seen it."""
    meta = child.get("metadata") or {}
    st = child.get("status") or {}
    if st.get("observedGeneration") != int(meta.get("generation") or 1):
        return Phase.PENDING
    try:
        return Phase(str(st.get("phase")))
    except ValueError:
        return Phase.PENDING


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _interval(value: Any) -> IntervalMs | None:
    """A child's p50 interval from its status (None when absent or not one)."""
    if not isinstance(value, Mapping):
        return None
    try:
        return IntervalMs.model_validate(value)
    except ValidationError:
        return None


def child_row(child: SweepChild, existing: Mapping[str, Any] | None) -> SweepChildStatus:
    """One row of ``status.children``: the matrix entry, and the child's numbers when it
    exists (its summary and first result row)."""
    axes = child.axes
    batch = axes.get("batchSize")
    row = SweepChildStatus(
        name=child.name,
        model=axes.get("model"),
        framework=axes.get("framework"),
        device=axes.get("device"),
        gpu_product=axes.get("gpuProduct"),
        scenario=axes.get("scenario"),
        batch_size=int(batch) if batch else None,
        cell=child.cell if child.repeat is not None else None,
        repeat=child.repeat,
    )
    if existing is None:
        return row
    phase = child_phase(existing)
    st = existing.get("status") or {}
    if st.get("observedGeneration") != int(existing["metadata"].get("generation") or 1):
        return row.model_copy(update={"phase": phase})  # not seen by its operator yet
    summary = st.get("summary") or {}
    results = st.get("results") or []
    first = results[0] if results and isinstance(results[0], Mapping) else {}
    batch_size = summary.get("batchSize", first.get("batchSize"))
    return row.model_copy(
        update={
            "phase": phase,
            "batch_size": int(batch_size) if isinstance(batch_size, int) else row.batch_size,
            "p50_ms": _number(summary.get("p50Ms")),
            "p99_ms": _number((first.get("latencyMs") or {}).get("p99")),
            "p50_interval_ms": _interval(first.get("p50IntervalMs")),
            "throughput": _number(summary.get("throughput")),
            "top1": _number(summary.get("top1")),
            "metric": summary.get("metric") if isinstance(summary.get("metric"), str) else None,
            "metric_value": _number(summary.get("metricValue")),
            "run_id": st.get("runId") or None,
            "message": _clip(str(st.get("message") or "")),
        }
    )


def _previous_rows(current: Mapping[str, Any]) -> dict[str, SweepChildStatus]:
    rows = {}
    for item in current.get("children") or []:
        try:
            row = SweepChildStatus.model_validate(item)
        except ValidationError:
            continue
        rows[row.name] = row
    return rows


def _conflict_row(child: SweepChild) -> SweepChildStatus:
    return child_row(child, None).model_copy(
        update={
            "phase": Phase.FAILED,
            "message": f"a ModelEvaluation named {child.name} already exists and does not "
            "belong to this sweep; delete or rename it",
        }
    )


# --------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Plan:
    """What to do now: the children to create (matrix order) and the status to show."""

    create: list[SweepChild]
    status: SweepStatus
    rows: dict[str, SweepChildStatus] = field(default_factory=dict)


def _names(rows: Iterable[SweepChildStatus]) -> str:
    names = [r.name for r in rows]
    more = f" and {len(names) - NAMES_IN_MESSAGE} more" if len(names) > NAMES_IN_MESSAGE else ""
    return ", ".join(names[:NAMES_IN_MESSAGE]) + more


def plan(
    sweep: EvaluationSweep,
    children: list[SweepChild],
    owned: Mapping[str, Mapping[str, Any]],
    current: Mapping[str, Any],
    timestamp: str,
    conflicts: Iterable[str] = (),
) -> Plan:
    """Decide for a valid sweep: ``children`` is :func:`expand`'s list, ``owned`` the
    existing children that belong to it (:func:`owned_children`), ``current`` its
    ``.status``, ``conflicts`` names taken by ModelEvaluations that are not its own."""
    spec = sweep.spec
    generation = sweep.metadata.generation or 1
    taken = set(conflicts)
    previous = _previous_rows(current)
    rows: dict[str, SweepChildStatus] = {}
    for child in children:
        existing = owned.get(child.name)
        if existing is not None:
            rows[child.name] = child_row(child, existing)
        elif child.name in taken:
            rows[child.name] = _conflict_row(child)
        elif (old := previous.get(child.name)) is not None and old.phase in ENDED:
            rows[child.name] = old  # it ended and was deleted since: not run again
        else:
            rows[child.name] = child_row(child, None)
    active = sum(1 for item in owned.values() if child_phase(item) not in ENDED)
    failed = [r for r in rows.values() if r.phase == Phase.FAILED]
    stopping = spec.failure_policy == FailurePolicy.STOP and bool(failed)

    create: list[SweepChild] = []
    if not spec.suspend and not stopping:
        for child in children:
            if active + len(create) >= spec.parallelism:
                break
            if rows[child.name].phase is None:
                create.append(child)
    for child in create:
        rows[child.name] = rows[child.name].model_copy(update={"phase": Phase.PENDING})
    active += len(create)

    status = _status(sweep, rows, active, generation, current, timestamp)
    return Plan(create, status, rows)


def _status(
    sweep: EvaluationSweep,
    rows: Mapping[str, SweepChildStatus],
    active: int,
    generation: int,
    current: Mapping[str, Any],
    timestamp: str,
) -> SweepStatus:
    spec = sweep.spec
    total = len(rows)
    succeeded = [r for r in rows.values() if r.phase == Phase.SUCCEEDED]
    failed = [r for r in rows.values() if r.phase == Phase.FAILED]
    created = sum(1 for r in rows.values() if r.phase is not None)
    ended = len(succeeded) + len(failed) == total
    stop = spec.failure_policy == FailurePolicy.STOP
    conds = [Cond(ConditionType.VALID, "True", Reason.SPEC_VALID)]
    if spec.suspend or any(
        c.get("type") == ConditionType.SUSPENDED for c in current.get("conditions") or []
    ):
        conds.append(
            Cond(ConditionType.SUSPENDED, "True", Reason.SUSPENDED, "spec.suspend is true")
            if spec.suspend
            else Cond(ConditionType.SUSPENDED, "False", Reason.RESUMED)
        )
    running = f"{active} running, {len(succeeded)} succeeded, {len(failed)} failed of {total}"
    if ended and not failed:
        phase = SweepPhase.SUCCEEDED
        message = f"all {total} children succeeded"
        conds += [
            Cond(ConditionType.SUCCEEDED, "True", Reason.ALL_SUCCEEDED, message),
            Cond(ConditionType.FAILED, "False", Reason.ALL_SUCCEEDED),
        ]
    elif ended:
        phase = SweepPhase.FAILED
        message = f"{len(failed)} of {total} children failed: {_names(failed)}"
        conds += [
            Cond(ConditionType.SUCCEEDED, "False", Reason.CHILDREN_FAILED, message),
            Cond(ConditionType.FAILED, "True", Reason.CHILDREN_FAILED, message),
        ]
    elif stop and failed:
        phase = SweepPhase.STOPPED
        message = (
            f"child {failed[0].name} failed and failurePolicy is Stop: no further children "
            f"are created ({running})"
        )
        if active == 0:
            conds += [
                Cond(ConditionType.SUCCEEDED, "False", Reason.FAILURE_POLICY_STOP, message),
                Cond(ConditionType.FAILED, "True", Reason.FAILURE_POLICY_STOP, message),
            ]
    elif spec.suspend:
        phase = SweepPhase.SUSPENDED
        message = f"suspended: no further children are created ({running})"
    elif created == 0:
        phase = SweepPhase.PENDING
        message = f"no child created yet ({total} in the matrix)"
    else:
        phase = SweepPhase.RUNNING
        message = running
    conditions = merge_conditions(
        list(current.get("conditions") or []), conds, generation, timestamp, drop=END_CONDITIONS
    )
    cells = sweep_repeats.cells(rows.values(), spec.repeats) if spec.repeats > 1 else None
    return SweepStatus.model_validate(
        {
            "observedGeneration": generation,
            "phase": phase,
            "total": total,
            "created": created,
            "succeeded": len(succeeded),
            "failed": len(failed),
            "active": active,
            "progress": progress(len(succeeded), total),
            "children": [r.model_dump(by_alias=True, exclude_none=True) for r in rows.values()],
            "cells": cells,
            "interval": sweep_repeats.HOW if cells is not None else None,
            "conditions": conditions,
            "message": _clip(message),
        }
    )


def invalid(
    generation: int, message: str, current: Mapping[str, Any], timestamp: str
) -> SweepStatus:
    """Failed/InvalidSpec: the sweep cannot be expanded; nothing is created."""
    conditions = merge_conditions(
        list(current.get("conditions") or []),
        [
            Cond(ConditionType.VALID, "False", Reason.INVALID_SPEC, message),
            Cond(ConditionType.SUCCEEDED, "False", Reason.INVALID_SPEC, message),
            Cond(ConditionType.FAILED, "True", Reason.INVALID_SPEC, message),
        ],
        generation,
        timestamp,
    )
    old = _previous_rows(current)
    return SweepStatus.model_validate(
        {
            "observedGeneration": generation,
            "phase": SweepPhase.FAILED,
            "total": 0,
            "created": sum(1 for r in old.values() if r.phase is not None),
            "progress": progress(0, 0),
            "conditions": conditions,
            "message": _clip(message),
        }
    )


# ------------------------------------------------------------------------- status change


def to_json(status: SweepStatus) -> dict[str, Any]:
    value: dict[str, Any] = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return value


def _normalized(current: Mapping[str, Any]) -> dict[str, Any] | None:
    try:
        return to_json(SweepStatus.model_validate(dict(current)))
    except ValidationError:
        return None


PHASE_EVENTS: Final = {
    SweepPhase.SUCCEEDED: "Normal",
    SweepPhase.FAILED: "Warning",
    SweepPhase.STOPPED: "Warning",
    SweepPhase.SUSPENDED: "Normal",
}


def change(current: Mapping[str, Any], new: SweepStatus) -> StatusChange:
    """The status patch (empty when nothing changed) and the Event of a phase transition:
    Succeeded, Failed (its reason, e.g. InvalidSpec), Stopped, Suspended, and Resumed when a
    suspended sweep runs again."""
    body = to_json(new)
    if _normalized(current) == body:
        return StatusChange()
    # Merge patch: every field of the new status, and null for keys it no longer has.
    patch: dict[str, Any] = {key: None for key in current if key not in body}
    patch.update(body)
    old_phase = current.get("phase")
    event = None
    if old_phase != new.phase.value:
        kind = PHASE_EVENTS.get(new.phase)
        if kind is not None:
            reason = new.phase.value
            failed_cond = next((c for c in new.conditions if c.type == ConditionType.FAILED), None)
            if new.phase == SweepPhase.FAILED and failed_cond is not None:
                reason = failed_cond.reason or reason
            event = Event("Warning" if kind == "Warning" else "Normal", reason, new.message)
        elif old_phase == SweepPhase.SUSPENDED.value:
            event = Event("Normal", Reason.RESUMED, new.message)
    return StatusChange(patch, event)


def created_event(child: SweepChild) -> Event:
    axes = ", ".join(f"{k} {v}" for k, v in child.axes.items())
    if child.repeat is not None:
        axes += f", repeat {child.repeat}"
    return Event("Normal", Reason.CHILD_CREATED, f"created ModelEvaluation {child.name} ({axes})")


def conflict_event(child: SweepChild) -> Event:
    return Event("Warning", Reason.NAME_CONFLICT, _conflict_row(child).message)
