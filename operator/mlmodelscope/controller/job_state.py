"""What an evaluation Job's own status and spec say: whether it ended, waits for Kueue, or
holds one of the operator's concurrency slots."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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
