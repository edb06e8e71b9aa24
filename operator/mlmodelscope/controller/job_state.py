"""What an evaluation Job's own status and spec say: whether it ended, waits for Kueue, or
holds one of the operator's concurrency slots; and, read once into :class:`JobState`, the
facts the Job handler decides on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from mlmodelscope.controller.names import kueue_queue


class Stage(StrEnum):
    """Where a Job is in its life. A Job that says both Complete and Failed is Complete (the
    agent's result decides then)."""

    ACTIVE = "active"
    """Neither suspended nor ended: its pod is on its way, running, or being replaced."""
    SUSPENDED = "suspended"
    """``spec.suspend``: no pods until someone (Kueue) unsuspends it."""
    COMPLETE = "complete"
    FAILED = "failed"

    @property
    def ended(self) -> bool:
        """A Job never starts again once it says Complete or Failed."""
        return self in (Stage.COMPLETE, Stage.FAILED)


def _condition(job: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    """The Job's condition of type ``kind`` with status True, if it has one."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def stage(job: Mapping[str, Any]) -> Stage:
    """The Job's :class:`Stage`, from its conditions and ``spec.suspend``."""
    if _condition(job, "Complete") is not None:
        return Stage.COMPLETE
    if _condition(job, "Failed") is not None:
        return Stage.FAILED
    return Stage.SUSPENDED if is_suspended(job) else Stage.ACTIVE


@dataclass(frozen=True)
class JobState:
    """An evaluation Job as the Job handler decides on it: read once from the object, so the
    decision is a function of plain values."""

    name: str
    stage: Stage
    ready: int = 0
    """Pods the Job controller counts ready (one may be a disrupted pod not yet deleted)."""
    failed: Mapping[str, Any] | None = None
    """The Failed condition (its reason and message), when the Job failed."""
    queue: str | None = None
    """The Kueue LocalQueue its labels name, if any."""

    @classmethod
    def of(cls, job: Mapping[str, Any]) -> JobState:
        meta = job.get("metadata") or {}
        return cls(
            name=str(meta.get("name") or ""),
            stage=stage(job),
            ready=int((job.get("status") or {}).get("ready") or 0),
            failed=_condition(job, "Failed"),
            queue=kueue_queue(meta.get("labels") or {}),
        )


def is_active_job(job: Mapping[str, Any]) -> bool:
    """A Job that has not ended: not yet Complete or Failed, not being deleted (suspended ones
    included: an edited spec still replaces a run that waits for Kueue)."""
    return not has_ended(job) and not (job.get("metadata") or {}).get("deletionTimestamp")


def has_ended(job: Mapping[str, Any]) -> bool:
    """The Job says it ended: a Complete or Failed condition. A Job never starts again."""
    return any(
        condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True"
        for condition in (job.get("status") or {}).get("conditions") or []
    )


def is_suspended(job: Mapping[str, Any]) -> bool:
    """``spec.suspend`` is set: the Job has no pods until someone (Kueue) unsuspends it."""
    return bool((job.get("spec") or {}).get("suspend"))


def holds_slot(job: Mapping[str, Any]) -> bool:
    """A Job that counts against the operator's limits: active and not suspended. A Job that
    waits for Kueue admission runs nothing, so it takes no slot; once Kueue admits it (and
    unsuspends it) it runs, and counts like any other."""
    return is_active_job(job) and not is_suspended(job)
