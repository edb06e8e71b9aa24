"""What the operator keeps of a watched or listed object while it waits to be worked on.

With thousands of evaluations in flight, the copies that wait (a resync tick's listing, the
newest state of each Job and pod in :mod:`.object_events`) were most of the operator's memory.
Two parts of them no handler reads: ``metadata.managedFields`` (the API server's record of who
set which field, often the largest part of an object) and a Job's pod template.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` without ``metadata.managedFields``."""
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    return {**body, "metadata": meta}


def slim_job(job: Mapping[str, Any]) -> dict[str, Any]:
    """What the resync, the Job handler and the ledger read of a Job: its metadata, status
    and ``spec.suspend``; not the pod template (most of a Job) or managedFields."""
    kept = slim({k: v for k, v in job.items() if k != "spec"})
    kept["spec"] = {"suspend": (job.get("spec") or {}).get("suspend", False)}
    return kept


def slim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What the pod handler reads of a pod: its metadata, status and ``spec.nodeName``."""
    kept = slim({k: v for k, v in pod.items() if k != "spec"})
    kept["spec"] = {"nodeName": (pod.get("spec") or {}).get("nodeName")}
    return kept
