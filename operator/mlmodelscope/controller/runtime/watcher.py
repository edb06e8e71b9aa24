"""A collection kept in view, in a thread of its own: client-go's reflector without its store.

The thread lists the collection in pages, hands over each object, then watches from the
listing's resourceVersion, and goes on from the last version it saw whenever the server ends
the watch (its timeout) or the connection drops. A version the server no longer holds (410
Gone) starts a new listing. Each object is handed to ``handle(object, deleted)`` on the
watcher's thread as it arrives, so ``handle`` must be quick and must not block: it decides and
queues (:mod:`..object_events`); nothing is kept here but the version to go on from.

As with Kopf's watches, an object deleted while no watch was open (the operator away, or a
410 while it was deleted) gets no DELETED: the next listing lacks it, and the resync reads
what is missing (:mod:`..resync`).
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from typing import Any, Final

from mlmodelscope.contract.kube import LIST_PAGE, WATCH_GONE, Kube, KubeError, Watch

log = logging.getLogger(__name__)

Handle = Callable[[dict[str, Any], bool], None]
"""Called with each object listed or watched and whether the event deleted it."""

WATCH_SECONDS: Final = 300
"""How long the server keeps one watch open before the thread opens the next (Kopf's
``server_timeout`` as the operator configured it)."""

RETRY_DELAYS: Final = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Waits after consecutive failures (the API server away, a refusal); the last repeats."""


class Watcher:
    """One collection's list-then-watch loop (see the module); :meth:`start`, :meth:`stop`."""

    def __init__(
        self,
        kube: Kube,
        path: str,
        handle: Handle,
        *,
        label_selector: str | None = None,
        name: str = "",
        watch_seconds: int = WATCH_SECONDS,
        retry_delays: tuple[float, ...] = RETRY_DELAYS,
    ) -> None:
        self.kube = kube
        self.path = path
        self.label_selector = label_selector
        self.name = name or path
        self._handle = handle
        self._watch_seconds = watch_seconds
        self._retry_delays = retry_delays
        self._stop = threading.Event()
        self._relist = threading.Event()
        self._lock = threading.Lock()
        self._watch: Watch | None = None
        self._thread: threading.Thread | None = None
        self.listings = 0
        """Listings made (the first, and one after each 410 Gone)."""

    def start(self) -> None:
        """Start the thread, in a copy of the caller's context."""
        if self._thread is not None:
            return
        self._stop.clear()
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._loop,), name=f"mlmodelscope-watch-{self.name}",
            daemon=True,
        )  # fmt: skip
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """End the watch now and wait for the thread."""
        self._stop.set()
        with self._lock:
            watch = self._watch
        if watch is not None:
            watch.close()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def relist(self) -> None:
        """List again now and hand every object over again (a replica that acts again after
        standing by, as Kopf's resumed watches do): ends the open watch."""
        self._relist.set()
        with self._lock:
            watch = self._watch
        if watch is not None:
            watch.close()

    def _loop(self) -> None:
        version = ""
        failures = 0
        while not self._stop.is_set():
            try:
                if self._relist.is_set():
                    self._relist.clear()
                    version = ""
                if not version:
                    version = self._list()
                version = self._follow(version)
                failures = 0
            except KubeError as exc:
                if exc.status == WATCH_GONE:
                    log.info("watch %s: %s; listing again", self.name, exc.message)
                    version = ""
                    continue
                failures = self._wait_after(exc, failures)
            except Exception as exc:  # a dropped connection, a refused one: go on from version
                if self._relist.is_set():  # relist() closed the watch
                    continue
                failures = self._wait_after(exc, failures)

    def _wait_after(self, exc: Exception, failures: int) -> int:
        delay = self._retry_delays[min(failures, len(self._retry_delays) - 1)]
        if not self._stop.is_set():
            log.warning("watch %s: %s; again in %.0f s", self.name, exc, delay)
        self._stop.wait(delay)
        return failures + 1

    def _list(self) -> str:
        """Hand over every object of a fresh listing, page by page; its resourceVersion."""
        version = ""
        for answer in self.kube.list_answers(self.path, self.label_selector, LIST_PAGE):
            for item in answer.get("items") or []:
                self._handle(item, False)
            version = str((answer.get("metadata") or {}).get("resourceVersion") or "")
        self.listings += 1
        return version

    def _follow(self, version: str) -> str:
        """Hand over each change after ``version`` until the watch ends; the version reached."""
        watch = self.kube.watch(
            self.path, version, label_selector=self.label_selector, timeout_s=self._watch_seconds
        )
        with self._lock:
            self._watch = watch
        if self._stop.is_set() or self._relist.is_set():
            watch.close()
        try:
            for event in watch.events():
                version = event.resource_version or version
                if event.type in ("ADDED", "MODIFIED", "DELETED"):
                    self._handle(event.object, event.type == "DELETED")
        finally:
            with self._lock:
                self._watch = None
        return version
