"""Admission under the concurrency limits: which waiting evaluations may start a Job now.

Pure and deterministic: given the slots held and the evaluations waiting (:mod:`.ledger`),
:func:`plan` replays FIFO admission (oldest ``creationTimestamp`` first,
then namespace and name) under the cluster-wide and per-namespace limits. An evaluation starts
only if the plan admits it, so a newer evaluation never overtakes an older one that fits, and
an evaluation blocked by its own namespace's limit does not hold back other namespaces.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mlmodelscope.controller.job_state import holds_slot


@dataclass(frozen=True, order=True)
class QueueEntry:
    """A waiting evaluation, ordered FIFO."""

    created: str
    """metadata.creationTimestamp (RFC 3339 in UTC, so text order is time order)."""
    namespace: str
    name: str

    @classmethod
    def of(cls, evaluation: Mapping[str, Any]) -> QueueEntry:
        meta = evaluation["metadata"]
        return cls(str(meta.get("creationTimestamp") or ""), meta["namespace"], meta["name"])


@dataclass(frozen=True)
class Limits:
    """0 means no limit."""

    max_running: int = 0
    max_running_per_namespace: int = 0

    @property
    def unlimited(self) -> bool:
        return self.max_running == 0 and self.max_running_per_namespace == 0


@dataclass(frozen=True)
class Decision:
    admitted: bool
    message: str
    """Why it waits (empty when admitted)."""


def plan(
    waiting: Iterable[QueueEntry], running: Mapping[str, int], limits: Limits
) -> list[QueueEntry]:
    """The waiting entries that may start now, given ``running`` Jobs per namespace."""
    total = sum(running.values())
    per_namespace = Counter(running)
    admitted = []
    for entry in sorted(set(waiting)):
        if limits.max_running and total >= limits.max_running:
            break
        if (
            limits.max_running_per_namespace
            and per_namespace[entry.namespace] >= limits.max_running_per_namespace
        ):
            continue
        admitted.append(entry)
        total += 1
        per_namespace[entry.namespace] += 1
    return admitted


def decide(
    entry: QueueEntry,
    waiting: Sequence[QueueEntry],
    running: Mapping[str, int],
    limits: Limits,
) -> Decision:
    """Whether ``entry`` may start now, and if not, a message saying what holds it back."""
    if limits.unlimited:
        return Decision(True, "")
    candidates = {*waiting, entry}
    if entry in plan(candidates, running, limits):
        return Decision(True, "")
    total = sum(running.values())
    ahead = sum(1 for other in candidates if other < entry)
    if limits.max_running and total >= limits.max_running:
        why = f"{total} of {limits.max_running} evaluations running cluster-wide"
    elif (
        limits.max_running_per_namespace
        and running.get(entry.namespace, 0) >= limits.max_running_per_namespace
    ):
        why = (
            f"{running.get(entry.namespace, 0)} of {limits.max_running_per_namespace} "
            f"evaluations running in namespace {entry.namespace}"
        )
    else:
        why = "earlier evaluations take the free slots"
    return Decision(False, f"waiting for a free slot: {why}; {ahead} queued ahead")


def running_per_namespace(jobs: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Evaluation Jobs that hold a slot, per namespace."""
    counts: Counter[str] = Counter()
    for job in jobs:
        if holds_slot(job):
            counts[job["metadata"]["namespace"]] += 1
    return dict(counts)
