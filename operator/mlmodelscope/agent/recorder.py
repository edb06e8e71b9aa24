"""`mlms run`'s results store: every result document recorded as it is written.

The result file is written first, so a store that fails costs a warning, never the result or
the run. The store itself is opened by the caller's ``open_store`` (the command line passes
:func:`mlmodelscope.store.open_store`): the agent never imports the store, whose SQLAlchemy
an agent image does not carry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class ResultStore(Protocol):
    """What the recorder asks of a results store."""

    @property
    def url(self) -> str:
        """Where the store is, password hidden."""
        ...

    def record(self, document: Mapping[str, Any]) -> bool:
        """Store a result document; False when its run was already recorded."""
        ...

    def close(self) -> None: ...


StoreOpener = Callable[[str | None], ResultStore]
"""Opens the store at a URL (None: the default store); ModuleNotFoundError without the
``store`` extra."""


@dataclass(frozen=True)
class Recording:
    """What became of one document: recorded in ``url`` (``inserted`` False: it already was),
    or a ``warning`` why not; neither when recording is off (``--no-store``, or a store that
    could not be opened)."""

    url: str | None = None
    inserted: bool = False
    warning: str | None = None

    @property
    def summary(self) -> str | None:
        """``recorded in <url>``, ``already recorded in <url>``, or None when not recorded."""
        if self.url is None:
            return None
        return f"{'recorded' if self.inserted else 'already recorded'} in {self.url}"


class Recorder:
    """Records `mlms run`'s documents in one results store, opened at the first document."""

    def __init__(self, url: str | None, open_store: StoreOpener) -> None:
        self.url = url  # None: --no-store; "": the default store
        self.store: ResultStore | None = None
        self.broken = url is None
        self._open = open_store

    def record(self, name: str, document: Mapping[str, Any]) -> Recording:
        """Record evaluation ``name``'s document; any failure is a warning, and a store that
        cannot be opened is not tried again."""
        if self.broken:
            return Recording()
        try:
            if self.store is None:
                self.store = self._open(self.url or None)
            inserted = self.store.record(document)
        except ModuleNotFoundError as exc:
            self.broken = True
            return Recording(warning=f"{exc}: install mlmodelscope[store], or pass --no-store")
        except Exception as exc:  # any store failure: warn, keep the run going
            self.broken = self.store is None  # could not even open it: stop trying
            return Recording(warning=f"{name}: not recorded in the results store: {exc}")
        return Recording(url=self.store.url, inserted=inserted)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
