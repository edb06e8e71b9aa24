"""Job and pod watch events: triaged on the watch's thread, worked on by a few threads.

The handlers make requests, so they run on a few threads of their own; the watch
(:mod:`.object_watches`) only decides, without a request, whether an event needs one.

Each event is decided where it arrives:
- **A pod event that repeats what is shown.** Its scheduling state is the one its
  evaluation's status was seen to show (:class:`.pod_memo.PodMemo`), and it shows no
  disruption: nothing to do. Most pod events are such repeats.
- **An event of a settled Job.** The Job had ended, and its run was then found final or not
  current. A Job that ended does not start again, so a later event of it (the Job controller's
  last status updates, a relisting) changes nothing. Its DELETED event still counts.
- **Anything else** queues the object's slim state (:mod:`.slim`), as compact JSON, under its
  uid, the newest state replacing one still waiting (:class:`.keyed.KeyedQueue`). A few
  threads run the Job and pod handlers on it. What waits is bounded by the number of Jobs and
  pods, not by the number of events, and a burst of events of one object costs one handler
  run.

Handlers are level-based: they read the evaluation fresh and act on the newest state, so an
intermediate state that was replaced while it waited is not missed. A state taken while this
replica stands by is dropped; the leader has its own watch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from mlmodelscope.controller import job_state
from mlmodelscope.controller.pod_memo import UidMemo
from mlmodelscope.controller.runs import Handled
from mlmodelscope.controller.runtime.keyed import KeyedQueue
from mlmodelscope.controller.slim import slim_job, slim_pod

log = logging.getLogger(__name__)

WORKERS: Final = 6
"""Threads for Job and pod events, beside the work queue's four reconcile threads."""

Key = tuple[str, str]
"""("job" or "pod", the object's uid)."""

Handle = Callable[..., str]
"""A handler, called as ``handle(body=..., deleted=...)``; returns what it did (for logs)."""


@dataclass(frozen=True)
class Event:
    """The newest state of a Job or pod that waits for a thread, as compact JSON: when Jobs
    and pods appear faster than the handlers take them, thousands wait at once, and one
    string each is a fraction of a decoded tree of small objects."""

    kind: str
    packed: str
    deleted: bool

    @classmethod
    def of(cls, kind: str, body: Mapping[str, Any], deleted: bool) -> Event:
        return cls(kind, json.dumps(body, separators=(",", ":")), deleted)

    @property
    def body(self) -> dict[str, Any]:
        """The state, decoded afresh."""
        decoded: dict[str, Any] = json.loads(self.packed)
        return decoded


class ObjectEvents(KeyedQueue[Key, Event]):
    """The newest state of each Job and pod that needs a handler, and the threads that run
    the handlers (see the module)."""

    def __init__(
        self,
        on_job: Handle,
        on_pod: Handle,
        *,
        workers: int = WORKERS,
        acting: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__(workers=workers, thread_name="mlmodelscope-events")
        self._handlers = {"job": on_job, "pod": on_pod}
        self._acting = acting
        self._settled: UidMemo[bool] = UidMemo()
        """Jobs that had ended when their handler found nothing more to do."""

    def offer_job(self, job: Mapping[str, Any], *, deleted: bool = False) -> bool:
        """A Job's watch event (the initial listing too); returns whether it was queued.
        Cheap and non-blocking, so the watch's thread may call it."""
        uid = str((job.get("metadata") or {}).get("uid") or "")
        if not uid:
            return False
        if deleted:
            self._settled.forget(uid)
        elif self._settled.shown(uid, True):
            return False
        self.put(("job", uid), Event.of("job", slim_job(job), deleted))
        return True

    def offer_pod(
        self, pod: Mapping[str, Any], *, deleted: bool = False, shown: bool = False
    ) -> bool:
        """A pod's watch event; ``shown``: it repeats what its evaluation's status shows (the
        caller asks the pod memo). Returns whether it was queued."""
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if not uid or (shown and not deleted):
            return False
        self.put(("pod", uid), Event.of("pod", slim_pod(pod), deleted))
        return True

    def settled(self) -> int:
        """Jobs whose later events are not worked on."""
        return len(self._settled)

    def _run(self, key: Key, event: Event) -> None:
        kind, uid = key
        body = event.body
        name = str(body["metadata"].get("name"))
        if not self._acting():
            log.debug("%s %s: standing by", kind, name)
            return
        try:
            outcome = self._handlers[kind](body=body, deleted=event.deleted)
        except Exception:  # as Kopf did for an event handler: logged, not retried
            log.exception("%s %s: the handler failed", kind, name)
            return
        log.debug("%s %s: %s", kind, name, outcome)
        if kind == "job" and not event.deleted and _settles(body, outcome):
            self._settled.remember(uid, True)


def _settles(job: Mapping[str, Any], outcome: object) -> bool:
    """The Job has ended and its handler ended the run or found it ended: nothing a later
    event of this Job says can change the evaluation (a pending retry still may)."""
    return job_state.has_ended(job) and outcome is not Handled.RETRYING
