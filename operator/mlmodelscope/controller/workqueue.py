"""Evaluations waiting for a reconcile, held as keys with the packed event that queued them.

A watch event only decides *whether* an evaluation needs a reconcile: its generation was not
taken yet and its run has not ended. If it does, the event queues the evaluation's (namespace,
name) with the event's body, deflated (:func:`..slim.compress`). Threads
(``MLMS_OPERATOR_RECONCILE_WORKERS``) take the keys in arrival order and reconcile each
(:func:`..handlers.handle_evaluation.evaluation_changed`, level-based) from that body, so the
first reconcile of a generation reads nothing; a retry reads the evaluation fresh. A key queued
twice is queued once, with the newer body, as in client-go's work queue. Nearly all of a
reconcile is waiting on the API server, so the number of threads, not the CPU, bounds how many
evaluations a second get their Job.

Kopf's handler bookkeeping is kept in memory instead of in annotations:
- **Generation taken, per uid.** RetryTimer events of the same generation, such as our own status
  patches, queue nothing. After a restart nothing is remembered, so the initial listing
  queues every unfinished evaluation once: Kopf's "resume".
- **Retries.** A temporary failure is retried after a delay, with no limit, as Kopf did. A
  permanent one is not retried until the spec changes.
- **Peering.** A key taken while this replica stands by is dropped and forgotten. The leader
  lists the evaluation when it takes over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from mlmodelscope.controller import status
from mlmodelscope.controller.runtime.keyed import KeyedQueue
from mlmodelscope.controller.runtime.retry_timer import RetryTimer
from mlmodelscope.controller.slim import compress

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""(namespace, name) of an evaluation."""

WORKERS: Final = 4
"""Reconcile threads when none are given (the operator gives its setting's number);
:mod:`.object_events` has six for Job and pod events beside them."""


class TransientError(Exception):
    """The reconcile waits on the world (API errors that heal): try the key again later."""


class PermanentError(Exception):
    """The reconcile cannot succeed as the spec is written: not retried until it changes."""


@dataclass(frozen=True)
class Entry:
    """What a queued key is reconciled as: the uid and generation of the event that queued
    it, and why (``created``, ``spec-changed``, ``resumed``: the handler label of metrics)."""

    namespace: str
    name: str
    uid: str
    generation: int
    reason: str
    body: bytes = b""
    """The event's body, deflated (:func:`..slim.compress`); empty: read it fresh."""

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)


Reconcile = Callable[[Entry], str]
"""Reconciles one evaluation and returns what it did; raises TransientError (retried later)
or PermanentError (not retried)."""


def entry_of(body: Mapping[str, Any], taken: int | None) -> Entry | None:
    """The work an evaluation's watch event asks for, given the generation already taken for
    its uid (None: not yet); None when there is none."""
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp") or not meta.get("uid") or not meta.get("name"):
        return None
    generation = int(meta.get("generation") or 1)
    if taken is not None and taken >= generation:
        return None
    current = body.get("status") or {}
    if status.is_terminal(current, generation):
        return None
    reason = "spec-changed" if taken is not None else "resumed" if current else "created"
    return Entry(
        str(meta.get("namespace") or "default"), str(meta["name"]), str(meta["uid"]),
        generation, reason, compress(body),
    )  # fmt: skip


class WorkQueue(KeyedQueue[Key, Entry]):
    """Keys of evaluations to reconcile and the threads that reconcile them (see the module)."""

    def __init__(
        self,
        reconcile: Reconcile,
        *,
        workers: int = WORKERS,
        retry_delay: float = 5.0,
        acting: Callable[[], bool] = lambda: True,
        retries: RetryTimer | None = None,
    ) -> None:
        super().__init__(workers=workers, thread_name="mlmodelscope-reconcile")
        self._reconcile = reconcile
        self._retry_delay = retry_delay
        self._acting = acting
        self._retries = retries or RetryTimer()
        self._taken: dict[str, int] = {}
        """The generation taken into the queue, per uid (forgotten when the uid is deleted)."""

    # ---------------------------------------------------------------- fed by the watch

    def offer(self, body: Mapping[str, Any], *, deleted: bool = False) -> Entry | None:
        """An evaluation's watch event (the initial listing too): queue it if it needs a
        reconcile. Cheap and non-blocking, so the watch's event loop may call it."""
        uid = str((body.get("metadata") or {}).get("uid") or "")
        with self._cond:
            if deleted:
                self._taken.pop(uid, None)
                return None
            entry = entry_of(body, self._taken.get(uid))
            if entry is None:
                if uid and self._taken.get(uid) is None:
                    self._remember_ended(body, uid)
                return None
            self._taken[uid] = entry.generation
            self._add(entry.key, entry)
            return entry

    def _remember_ended(self, body: Mapping[str, Any], uid: str) -> None:
        """A run seen ended needs nothing until its generation changes: remember that, so a
        later event of it (a label edit) does not queue it."""
        generation = int((body.get("metadata") or {}).get("generation") or 1)
        if status.is_terminal(body.get("status") or {}, generation):
            self._taken[uid] = generation

    def requeue(self, entry: Entry) -> None:
        """Queue ``entry`` again, to be read fresh, unless a newer generation was taken
        meanwhile."""
        with self._cond:
            if self._stopped or self._taken.get(entry.uid) != entry.generation:
                return
            self._add(entry.key, replace(entry, body=b""))

    # ---------------------------------------------------------------- the threads

    def stop(self, timeout_s: float = 10.0) -> None:
        """Let the running reconciles finish; what is still queued is resumed after a
        restart from the listing."""
        super().stop(timeout_s)
        self._retries.stop()

    def _run(self, key: Key, entry: Entry) -> None:
        where = f"{entry.namespace}/{entry.name}"
        if not self._acting():
            with self._cond:  # the leader reconciles it from its own listing
                if self._taken.get(entry.uid) == entry.generation:
                    del self._taken[entry.uid]
            log.debug("reconcile %s of %s skipped: standing by", entry.reason, where)
            return
        try:
            outcome = self._reconcile(entry)
        except PermanentError as exc:
            log.warning("reconcile %s of %s failed, not retried: %s", entry.reason, where, exc)
        except TransientError as exc:
            log.warning("reconcile %s of %s will be retried in %.0f s: %s", entry.reason, where,
                        self._retry_delay, exc)  # fmt: skip
            self._retry(entry)
        except Exception:  # a bug must not lose the evaluation: retry it as Kopf would
            log.exception("reconcile %s of %s failed; retrying in %.0f s", entry.reason, where,
                          self._retry_delay)  # fmt: skip
            self._retry(entry)
        else:
            log.info("reconcile %s of %s succeeded: %s", entry.reason, where, outcome)

    def _retry(self, entry: Entry) -> None:
        self._retries.call(("reconcile", entry.key), self._retry_delay, lambda: self.requeue(entry))
