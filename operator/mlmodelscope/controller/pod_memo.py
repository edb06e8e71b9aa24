"""What the pod watch already told the operator: the scheduling state each evaluation pod last
showed in its evaluation's status, and which Jobs have a pod that started.

Every pod event (bound to a node, started, finished, deleted) says "scheduled" again; each
used to read the evaluation only to compute that nothing changes. With the state remembered
per pod uid, a repeat costs no request. Only a state the status was seen to hold is kept
(never one a not-yet-active run ignored), a pod's DELETED event drops its entry, and the map
is bounded, oldest out first, for pods deleted while the operator was down.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final, Generic, TypeVar

PodState = tuple[str, str]
"""("scheduled", node) or ("unschedulable", the scheduler's message)."""

LIMIT: Final = 50_000
"""Pods remembered at most (about 10 MiB at the limit; one per running evaluation in use)."""

T = TypeVar("T")


class UidMemo(Generic[T]):
    """A value per object uid, bounded (oldest out first), safe across threads: what the
    operator already knows of an object, so a repeated event of it costs no request."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._states: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()
        self._limit = limit

    def shown(self, uid: str, state: T) -> bool:
        """Whether ``state`` is what is remembered for ``uid``."""
        with self._lock:
            return self._states.get(uid) == state

    def remember(self, uid: str, state: T) -> None:
        with self._lock:
            self._states[uid] = state
            self._states.move_to_end(uid)
            while len(self._states) > self._limit:
                self._states.popitem(last=False)

    def forget(self, uid: str) -> None:
        with self._lock:
            self._states.pop(uid, None)

    def __len__(self) -> int:
        return len(self._states)


class PodMemo(UidMemo[PodState]):
    """Per pod uid, the scheduling state its evaluation's status was seen to show."""


STARTED_PHASES: Final = ("Running", "Succeeded")


class StartedJobs(UidMemo[bool]):
    """Jobs (by uid) one of whose pods was seen Running or Succeeded. Such a run started, so
    the start-failure check (:func:`.runs.start_failure`) lists no pods for it. With thousands
    of runs whose pods had finished before the Job controller counted them, every resync tick
    listed each one's pods (and its Events) to learn just that. Fed by the pod watch, whose
    initial listing refills it after a restart."""

    def observe_pod(self, pod: Mapping[str, Any]) -> None:
        """A pod's watch event (cheap: the watch's thread calls it)."""
        if (pod.get("status") or {}).get("phase") not in STARTED_PHASES:
            return
        for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("kind") == "Job" and ref.get("controller") and ref.get("uid"):
                self.remember(str(ref["uid"]), True)
