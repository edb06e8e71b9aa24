"""Retries run later on one daemon thread, each when it is due, so a retry that waits holds
none of the few threads every handler shares (a handler that slept would stall every other
evaluation behind a slow API server). Keyed: a newer event for the same object cancels the
pending retry of the older one, whose body is stale by then.
"""

from __future__ import annotations

import contextvars
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable

log = logging.getLogger(__name__)


class RetryTimer:
    """A timer thread for keyed retries (started on the first :meth:`call`)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Hashable]] = []
        self._pending: dict[Hashable, tuple[int, Callable[[], object]]] = {}
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def call(self, key: Hashable, delay: float, action: Callable[[], object]) -> None:
        """Run ``action`` in ``delay`` seconds, replacing a pending call for ``key``."""
        with self._cond:
            if self._stopped:
                return
            seq = next(self._order)
            self._pending[key] = (seq, action)
            heapq.heappush(self._heap, (self._clock() + delay, seq, key))
            if self._thread is None:
                # A copy of the caller's context: started from a Kopf handler, the retries
                # can post Events through Kopf as the handler did.
                context = contextvars.copy_context()
                self._thread = threading.Thread(
                    target=context.run, args=(self._loop,), name="mlmodelscope-retries", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def call_once(self, key: Hashable, delay: float, action: Callable[[], object]) -> bool:
        """Like :meth:`call`, unless a call for ``key`` is already pending (which keeps its
        time); whether this one was added."""
        with self._cond:
            if key in self._pending:
                return False
        self.call(key, delay, action)
        return True

    def cancel(self, key: Hashable) -> bool:
        """Drop the pending call for ``key``; whether there was one."""
        with self._cond:
            return self._pending.pop(key, None) is not None

    def pending(self) -> int:
        with self._cond:
            return len(self._pending)

    def _next(self) -> Callable[[], object] | None:
        """Wait for the next due call still pending; None once stopped."""
        with self._cond:
            while not self._stopped:
                if not self._heap:
                    self._cond.wait()
                    continue
                due, seq, key = self._heap[0]
                wait = due - self._clock()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
                current = self._pending.get(key)
                if current is None or current[0] != seq:
                    continue  # cancelled, or replaced by a newer call
                del self._pending[key]
                return current[1]
            return None

    def _loop(self) -> None:
        while (action := self._next()) is not None:
            try:
                action()
            except Exception as exc:  # the resync heals what a last retry could not
                log.warning("retry failed: %s", exc)

    def stop(self, timeout_s: float = 5.0) -> None:
        with self._cond:
            self._stopped = True
            self._pending.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
