"""Work the operator repeats on a clock (retrying unrecorded results, resyncing sweeps,
reading Kueue's reasons), each in one daemon thread.

Not Kopf timers: a Kopf timer puts a finalizer on every object it runs for, so deleting an
evaluation would then wait for the operator. One thread per kind of work runs regardless of
how many objects there are; each tick does what is due for all of them. Kopf's peering pauses
only Kopf's own watches, so each tick first asks whether this replica acts (:mod:`.peering`):
a standby replica's threads run but do nothing.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from typing import ClassVar

log = logging.getLogger(__name__)


class Periodic:
    """A daemon thread that calls :meth:`tick` every :meth:`interval` seconds until
    :meth:`stop`. An exception in a tick is logged and the next tick tries again (the API
    server or the database may be away for a while)."""

    name: ClassVar[str] = "periodic"
    """The thread's name, also used in log lines."""
    first_tick_at_start: ClassVar[bool] = False
    """Tick at once when started, or only after the first interval."""

    def __init__(self, acting: Callable[[], bool] | None = None) -> None:
        self._acting = acting or (lambda: True)
        """Asked before every tick: False on a standby replica (peering), which skips it."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def interval(self) -> float:
        raise NotImplementedError

    def tick(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        """Start the thread, in a copy of the caller's context: started from Kopf's startup
        handler, it can then post Events through Kopf as handlers do."""
        if self._thread is not None:
            return
        self._stop.clear()
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._loop,), name=f"mlmodelscope-{self.name}", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        if not self.first_tick_at_start and self._stop.wait(self.interval()):
            return
        while not self._stop.is_set():
            try:
                if self._acting():
                    self.tick()
            except Exception as exc:  # try again next time
                log.warning("%s failed: %s", self.name, exc)
            self._stop.wait(self.interval())

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
