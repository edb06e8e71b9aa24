"""The operator's handle on the results store (``MLMS_OPERATOR_STORE_URL``).

The store is opened on first use, not at start, so an unreachable database never stops the
operator; PostgreSQL connections time out after :data:`CONNECT_TIMEOUT_S` seconds and
statements after :data:`STATEMENT_TIMEOUT_MS`, so a Job handler waits on the store briefly.
The ``store`` extra is imported only when a store URL is set. What is recorded when, and the
outbox that keeps a result the store could not take, are :mod:`.recording`'s.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final, Protocol

from mlmodelscope.controller.instrument import StartupError
from mlmodelscope.controller.metrics import OperatorMetrics
from mlmodelscope.controller.settings import OperatorSettings

CONNECT_TIMEOUT_S: Final = 5
STATEMENT_TIMEOUT_MS: Final = 30_000
STORE_HINT: Final = "pip install 'mlmodelscope[store]'"


class RunStore(Protocol):
    """What recording needs of :class:`mlmodelscope.store.Store`."""

    @property
    def url(self) -> str: ...

    def record(self, document: Mapping[str, Any]) -> bool: ...

    def close(self) -> None: ...


class StoreUnavailableError(Exception):
    """The store could not take the document now (down, timed out); retry later."""


class DocumentRejectedError(Exception):
    """The store will never take this document (not a result document, no run id)."""


def open_operator_store(url: str, connect_timeout: int = CONNECT_TIMEOUT_S) -> RunStore:
    """Open (and migrate) the store at ``url`` like ``open_store``, with PostgreSQL's connect and
    statement timeouts, and connections checked before use (a restarted database costs no
    failed write). Raises ``StoreError``."""
    import sqlalchemy as sa

    from mlmodelscope.store import Store, StoreError, open_store
    from mlmodelscope.store.store import migrate, normalize_url

    parsed = normalize_url(url)
    if parsed.get_backend_name() != "postgresql":
        return open_store(url)
    connect_args = {
        "connect_timeout": connect_timeout,
        "options": f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
    }
    try:
        engine = sa.create_engine(parsed, connect_args=connect_args, pool_pre_ping=True)
        migrate(engine)
    except (sa.exc.SQLAlchemyError, OSError) as exc:
        shown = parsed.render_as_string(hide_password=True)
        raise StoreError(f"cannot open the results store {shown}: {exc}") from exc
    return Store(engine)


class Recorder:
    """The operator's handle on the results store: opened on first use (and again after a
    failed open), shared by the Job handlers and the retry thread."""

    def __init__(
        self,
        url: str,
        *,
        opener: Callable[[str], RunStore] | None = None,
        metrics: OperatorMetrics | None = None,
    ) -> None:
        try:
            from mlmodelscope.store import NotRecordableError, StoreError
        except ImportError as exc:
            raise StartupError(
                f"MLMS_OPERATOR_STORE_URL is set but the results store is not installed "
                f"({exc}); install it with: {STORE_HINT}, or unset MLMS_OPERATOR_STORE_URL"
            ) from exc
        self._url = url
        self._opener = opener or open_operator_store
        self._store_error = StoreError
        self._not_recordable = NotRecordableError
        self.metrics = metrics
        self._store: RunStore | None = None
        self._lock = threading.Lock()
        self._in_flight: set[str] = set()

    @classmethod
    def from_settings(
        cls, settings: OperatorSettings, metrics: OperatorMetrics | None = None
    ) -> Recorder | None:
        return cls(settings.store_url, metrics=metrics) if settings.store_url else None

    @property
    def url(self) -> str:
        """The store's URL, password hidden."""
        from mlmodelscope.store.store import normalize_url

        return normalize_url(self._url).render_as_string(hide_password=True)

    def record(self, document: Mapping[str, Any]) -> bool:
        """Write ``document``; True when new, False when the run was already there. Raises
        :class:`StoreUnavailableError` (retry later) or :class:`DocumentRejectedError` (never)."""
        try:
            with self._lock:
                if self._store is None:
                    self._store = self._opener(self._url)
                store = self._store
            new = store.record(document)
        except self._not_recordable as exc:
            self._count("not_recordable")
            raise DocumentRejectedError(str(exc)) from exc
        except self._store_error as exc:
            self._count("store_error")
            raise StoreUnavailableError(str(exc)) from exc
        self._count("recorded" if new else "already_recorded")
        return new

    def not_recordable(self) -> None:
        """A finished run with nothing to record (counted like a rejected document)."""
        self._count("not_recordable")

    @contextmanager
    def claim(self, run_id: str) -> Iterator[bool]:
        """True for the one caller recording ``run_id`` now; others get False and skip it
        (a Job event and the retry pass may meet on the same run)."""
        with self._lock:
            mine = run_id not in self._in_flight
            self._in_flight.add(run_id)
        try:
            yield mine
        finally:
            if mine:
                with self._lock:
                    self._in_flight.discard(run_id)

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.record_attempted(outcome)
