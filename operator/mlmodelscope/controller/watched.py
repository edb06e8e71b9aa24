"""The newest state of each evaluation in flight, as the watch delivered it or the operator
wrote it: what the Job and pod handlers and status writes read instead of a GET.

Like client-go's informer cache, it is fed by what the operator receives anyway (every event
of the evaluation watch, its initial listing, the resync's listings) and by the answers to its
own status writes. A read may be older than the API server's object; every write computed from
it carries the resourceVersion it read (:func:`..context.guarded`), so a stale read costs a
409 and a fresh GET, never a lost update. A reader that finds nothing here (an ended run, an
evaluation not seen yet) reads the API server.

What is kept: metadata and status, no spec (:func:`..slim.slim_evaluation`; the one handler
branch that needs the spec reads it), encoded (:class:`..slim.Packed`), while the run has not
ended, so memory follows the evaluations in flight; and the last :data:`ENDED_KEPT` that ended
or are being deleted, for :meth:`WatchedEvaluations.recent`: the Job controller updates a
Job's status after its run has ended, and each such event reads the evaluation.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any, Final

from mlmodelscope.controller import status
from mlmodelscope.controller.slim import Packed, slim_evaluation

Key = tuple[str, str]

ENDED_KEPT: Final = 256
"""Evaluations kept after their run ended (the most recent): enough for the events that
follow an end by seconds, a bounded memory whatever the number of evaluations."""


def version_of(body: Mapping[str, Any]) -> int | None:
    """The resourceVersion as a number (etcd's revision), None when it is not one."""
    text = str((body.get("metadata") or {}).get("resourceVersion") or "")
    return int(text) if text.isdigit() else None


class WatchedEvaluations:
    """Evaluations whose run has not ended, newest version first (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bodies: Packed[Key] = Packed()
        self._ended: Packed[Key] = Packed()
        """Ended or being deleted, oldest first, at most :data:`ENDED_KEPT`."""
        self._versions: dict[Key, int] = {}
        """The newest resourceVersion seen per evaluation (ended ones too): an event older
        than an answer the operator already holds does not replace it."""

    def observe(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        """A watch event, a listed object, or the answer to one of the operator's writes."""
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        version = version_of(body)
        generation = int(meta.get("generation") or 1)
        with self._lock:
            if deleted:
                self._versions.pop(key, None)
                self._bodies.discard(key)
                self._ended.discard(key)
                return
            seen = self._versions.get(key)
            if version is not None and seen is not None and version < seen:
                return
            if version is not None:
                self._versions[key] = version
            self._ended.discard(key)
            if meta.get("deletionTimestamp") or status.is_terminal(
                body.get("status") or {}, generation
            ):
                self._bodies.discard(key)
                self._ended[key] = slim_evaluation(body)
                while len(self._ended) > ENDED_KEPT:
                    self._ended.discard(next(iter(self._ended)))
            else:
                self._bodies[key] = slim_evaluation(body)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The newest state held of an evaluation in flight (without its spec), else None."""
        with self._lock:
            return self._bodies.get((namespace, name))

    def recent(self, namespace: str, name: str) -> dict[str, Any] | None:
        """What :meth:`get` holds, else the evaluation as last seen if its run ended (or its
        deletion began) among the last :data:`ENDED_KEPT`; None otherwise."""
        key = (namespace, name)
        with self._lock:
            held = self._bodies.get(key)
            return held if held is not None else self._ended.get(key)

    def in_flight(self) -> Iterator[tuple[Key, dict[str, Any]]]:
        """Each evaluation held whose run has not ended, decoded when reached; the keys are
        those held when called, and one that ended or went since is skipped."""
        with self._lock:
            keys = list(self._bodies)
        for key in keys:
            with self._lock:
                body = self._bodies.get(key)
            if body is not None:
                yield key, body

    def forget_missing(self, listed: set[Key], listed_at: int) -> int:
        """Forget the evaluations a complete listing at resourceVersion ``listed_at`` lacks
        and no event since has shown: deleted while the watch was away (a relisting after
        410 Gone delivers no DELETED). Returns how many."""
        with self._lock:
            gone = [
                key
                for key, version in self._versions.items()
                if key not in listed and version <= listed_at
            ]
            for key in gone:
                self._versions.pop(key, None)
                self._bodies.discard(key)
                self._ended.discard(key)
        return len(gone)

    def __len__(self) -> int:
        return len(self._bodies)
