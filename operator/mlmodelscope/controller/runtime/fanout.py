"""Independent requests of one reconcile, made at once on a shared pool of threads.

A reconcile thread waits on the API server for almost all of its time, one request after
another; requests that do not depend on each other (the objects an evaluation needs before
its Job) are sent together instead, so its wait is the slowest of them rather than their sum.
The pool is shared by every reconcile and bounded, so the requests in flight stay within the
client's connection pool (:data:`~mlmodelscope.contract.kube.POOL_SIZE`). Work given to the
pool must not itself fan out: a bounded pool waiting on itself could deadlock.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Final, TypeVar

T = TypeVar("T")
R = TypeVar("R")

THREADS: Final = 32
"""Requests of all reconciles in flight at once through the pool."""


class Fanout:
    """``map`` calls a function on each item at once and returns the answers in order."""

    def __init__(self, threads: int = THREADS) -> None:
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._guard = threading.Lock()

    def _executor(self) -> ThreadPoolExecutor:
        with self._guard:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="fanout")
            return self._pool

    def map(self, call: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``[call(item) for item in items]``, the calls made at once, each in a copy of the
        caller's context (its tracing and logging variables). Every call ends before this
        returns; then the first failure, in the items' order, is raised."""
        todo = list(items)
        if len(todo) < 2:
            return [call(item) for item in todo]
        pool = self._executor()
        futures: list[Future[R]] = [
            pool.submit(contextvars.copy_context().run, call, item) for item in todo
        ]
        wait(futures)
        return [future.result() for future in futures]

    def shutdown(self) -> None:
        with self._guard:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
