"""Who holds a slot and who waits for one, kept in memory from the watch streams.

Admission used to list every Job and every evaluation in the cluster for each decision, and
each finished Job re-decided (and re-patched) every queued evaluation: O(N²) API traffic for
N evaluations. The ledger is fed by what the operator receives anyway (every Job event, every
evaluation event, the Jobs it creates itself) and rebuilt from one listing of each kind at the
first decision and on every resync, so a decision costs no API call.

A rebuild races with the events that arrive while its listings are in flight: an object an
event touched since the rebuild began keeps what the event said, since the listing may be
older. What can still drift (an event lost while the operator was away) is conservative until
the next resync rebuilds it: a slot counted busy a little longer, never a limit exceeded by
more than the evaluations the operator itself admitted.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from mlmodelscope.controller import job_state, names, status
from mlmodelscope.controller.admission import fifo
from mlmodelscope.spec.status import Phase

Key = tuple[str, str]


def waiting_entry(evaluation: Mapping[str, Any]) -> fifo.QueueEntry | None:
    """The queue entry of an evaluation that waits for a slot (admission marked it Queued for
    its current generation, and Kueue does not queue it), else None. Only what admission queued
    waits ahead: an evaluation that never got a status (its handler failed, or nobody watches
    its namespace) must not block the others."""
    meta = evaluation["metadata"]
    st = evaluation.get("status") or {}
    if meta.get("deletionTimestamp") or names.kueue_queue(meta.get("labels")):
        return None
    if (
        not status.is_current(st, int(meta.get("generation") or 1))
        or st.get("phase") != Phase.QUEUED
    ):
        return None
    return fifo.QueueEntry.of(evaluation)


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj["metadata"]
    return str(meta["namespace"]), str(meta["name"])


class AdmissionLedger:
    """Slots held (active, unsuspended evaluation Jobs) and evaluations waiting, per object."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: set[Key] = set()
        self._waiting: dict[Key, fifo.QueueEntry] = {}
        self._synced = False
        self._touched: set[tuple[str, Key]] | None = None
        """While a rebuild lists: the objects events changed meanwhile (kind, key)."""

    @property
    def synced(self) -> bool:
        return self._synced

    def observe_job(self, job: Mapping[str, Any], deleted: bool = False) -> None:
        """A Job event (or a Job the operator just created)."""
        key = _key(job)
        with self._lock:
            if not deleted and job_state.holds_slot(job):
                self._slots.add(key)
            else:
                self._slots.discard(key)
            if self._touched is not None:
                self._touched.add(("job", key))

    def observe_evaluation(self, evaluation: Mapping[str, Any], deleted: bool = False) -> None:
        """An evaluation event, or a status the operator just wrote."""
        key = _key(evaluation)
        entry = None if deleted else waiting_entry(evaluation)
        with self._lock:
            if entry is None:
                self._waiting.pop(key, None)
            else:
                self._waiting[key] = entry
            if self._touched is not None:
                self._touched.add(("evaluation", key))

    def begin_rebuild(self) -> None:
        """Call before listing: events from now on win over the listings."""
        with self._lock:
            self._touched = set()

    def finish_rebuild(
        self, jobs: Iterable[Mapping[str, Any]], evaluations: Iterable[Mapping[str, Any]]
    ) -> None:
        """Replace the books with the listings, except for the objects events touched since
        :meth:`begin_rebuild`."""
        slots = {_key(j) for j in jobs if job_state.holds_slot(j)}
        waiting = {}
        for item in evaluations:
            entry = waiting_entry(item)
            if entry is not None:
                waiting[_key(item)] = entry
        with self._lock:
            touched = self._touched or set()
            self._touched = None
            for kind, key in touched:
                if kind == "job":
                    slots.discard(key)
                    if key in self._slots:
                        slots.add(key)
                else:
                    waiting.pop(key, None)
                    if key in self._waiting:
                        waiting[key] = self._waiting[key]
            self._slots, self._waiting, self._synced = slots, waiting, True

    def running(self) -> dict[str, int]:
        """Slots held, per namespace."""
        with self._lock:
            return dict(Counter(namespace for namespace, _ in self._slots))

    def waiting(self) -> list[fifo.QueueEntry]:
        with self._lock:
            return list(self._waiting.values())
