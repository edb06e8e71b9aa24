"""What the operator keeps of a watched or listed object while it waits to be worked on.

With thousands of evaluations in flight, the copies that wait (a resync tick's listing, the
newest state of each Job and pod in :mod:`.object_events`) were most of the operator's memory.
Three parts of them the resync and the Job and pod handlers do not read: ``metadata.managedFields``
(the API server's record of who set which field, often the largest part of an object), a Job's
pod template, and an evaluation's spec.
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


def slim_evaluation(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    """What the resync keeps of an unfinished evaluation for the length of a tick: its
    identity, metadata and status, not its spec. Decoded, the spec of even a small evaluation
    is about 9 KiB, two thirds of the object; with 4,500 of 5,000 evaluations waiting for a
    node, a tick held 40 MiB of specs. Only a failed run's end reads the spec (its timeout,
    its memory limit), and it reads the evaluation again when the spec is missing
    (:func:`..handlers.handle_job.job_changed`)."""
    return slim({k: v for k, v in evaluation.items() if k != "spec"})
