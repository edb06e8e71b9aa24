"""What the operator keeps of a watched or listed object while it waits to be worked on.

With thousands of evaluations in flight, the copies that wait (a resync tick's listing, the
newest state of each Job and pod in :mod:`.object_events`) were most of the operator's memory.
Three parts of them the resync and the Job and pod handlers do not read: ``metadata.managedFields``
(the API server's record of who set which field, often the largest part of an object), a Job's
pod template, and an evaluation's spec. What waits longest (a resync tick's thousands of
copies) waits encoded (:class:`Packed`).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Hashable, Iterator, Mapping, MutableMapping
from typing import Any, TypeVar

K = TypeVar("K", bound=Hashable)


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
    is about 9 KiB, two thirds of the object; at 5,000 evaluations a tick held 3,935
    unfinished ones, some 34 MiB of specs. Only a failed run's end reads the spec (its timeout,
    its memory limit), and it reads the evaluation again when the spec is missing
    (:func:`..handlers.handle_job.job_changed`)."""
    return slim({k: v for k, v in evaluation.items() if k != "spec"})


def compress(body: Mapping[str, Any]) -> bytes:
    """``body`` without managedFields as deflated compact JSON, for the time an evaluation with
    its spec waits for a reconcile."""
    return zlib.compress(json.dumps(slim(body), separators=(",", ":")).encode(), 1)


def decompress(packed: bytes) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(zlib.decompress(packed))
    return decoded


class Packed(MutableMapping[K, dict[str, Any]]):
    """Objects kept as compact JSON text until read, each decoded afresh when read.

    A resync tick holds a copy of every unfinished evaluation and of its Job until it reaches
    them; at 5,000 evaluations that was 8,000 decoded objects (about 35 MiB in small Python
    objects, spread over the interpreter's arenas, which it keeps once the tick has freed
    them). One string per object is about a fifth of that, and a block of its own that
    ``malloc_trim`` gives back (:mod:`.memory`). Decoding costs a few microseconds an object."""

    def __init__(self) -> None:
        self._packed: dict[K, str] = {}

    def __getitem__(self, key: K) -> dict[str, Any]:
        decoded: dict[str, Any] = json.loads(self._packed[key])
        return decoded

    def __setitem__(self, key: K, value: Mapping[str, Any]) -> None:
        self._packed[key] = json.dumps(value, separators=(",", ":"))

    def __delitem__(self, key: K) -> None:
        del self._packed[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._packed)

    def __len__(self) -> int:
        return len(self._packed)

    def discard(self, key: K) -> None:
        """Drop ``key`` if held, without decoding it (``pop`` would)."""
        self._packed.pop(key, None)

    def drain(self) -> Iterator[tuple[K, dict[str, Any]]]:
        """Each entry decoded and removed, in the order it was added: what has been handed
        out is no longer held here."""
        for key in list(self._packed):
            packed = self._packed.pop(key, None)
            if packed is not None:
                yield key, json.loads(packed)
