"""Work held by key, for a few threads: client-go's work queue, in the operator's threads.

A key queued twice is queued once, with the newer value; a key offered while a thread works
on it is queued again when that thread is done, so one key is never worked on by two threads
at once and its last value is always seen. What waits is one value per key, however many
watch events named it: the memory of a backlog is bounded by the number of objects, not by
the number of events (:mod:`.workqueue` holds evaluation keys, :mod:`.object_events` the
latest Job and pod states).
"""

from __future__ import annotations

import contextvars
import threading
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class KeyedQueue(Generic[K, V]):
    """The queue and its threads; subclasses say what working on a value is (:meth:`_run`)."""

    def __init__(self, *, workers: int, thread_name: str) -> None:
        self._workers = workers
        self._thread_name = thread_name
        self._cond = threading.Condition()
        self._order: deque[K] = deque()
        self._queued: dict[K, V] = {}
        self._active: set[K] = set()
        self._again: dict[K, V] = {}
        """Values offered while a thread works on their key: queued when it is done."""
        self._threads: list[threading.Thread] = []
        self._stopped = False

    def _run(self, key: K, value: V) -> None:
        raise NotImplementedError

    def _add(self, key: K, value: V) -> None:
        """Queue ``value`` under ``key`` (call with ``self._cond`` held)."""
        if key in self._active:
            self._again[key] = value
        elif key in self._queued:
            self._queued[key] = value  # the newer value; its place in line stays
        else:
            self._queued[key] = value
            self._order.append(key)
            self._cond.notify()

    def put(self, key: K, value: V) -> None:
        with self._cond:
            if not self._stopped:
                self._add(key, value)

    def start(self) -> None:
        """Start the threads, each in a copy of the caller's context (the tracing and
        logging context variables of Kopf's startup handler)."""
        with self._cond:
            if self._threads:
                return
            self._stopped = False
            for i in range(self._workers):
                context = contextvars.copy_context()
                thread = threading.Thread(
                    target=context.run, args=(self._loop,), name=f"{self._thread_name}-{i}",
                    daemon=True,
                )  # fmt: skip
                self._threads.append(thread)
                thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Let the running work finish; what is still queued is dropped (the listing after
        a restart brings it back)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            threads, self._threads = self._threads, []
        for thread in threads:
            thread.join(timeout_s)

    def waiting(self) -> int:
        """Keys queued and not yet taken by a thread."""
        with self._cond:
            return len(self._order)

    def _take(self) -> tuple[K, V] | None:
        with self._cond:
            while not self._stopped and not self._order:
                self._cond.wait()
            if self._stopped:
                return None
            key = self._order.popleft()
            self._active.add(key)
            return key, self._queued.pop(key)

    def _done(self, key: K) -> None:
        with self._cond:
            self._active.discard(key)
            again = self._again.pop(key, None)
            if again is not None and not self._stopped:
                self._add(key, again)

    def _loop(self) -> None:
        while (taken := self._take()) is not None:
            key, value = taken
            try:
                self._run(key, value)
            finally:
                self._done(key)
