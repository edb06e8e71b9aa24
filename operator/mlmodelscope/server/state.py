"""What `mlms serve` keeps on its app, and how routes read it.

:func:`~mlmodelscope.server.app.create_app` puts the :class:`ServeSettings` in
``app.state.settings``, one open :class:`~mlmodelscope.store.Store` in ``app.state.store`` and
the launch workers in ``app.state.launches``;
the API, the dashboard and the token checks reach them through :func:`settings_of` and
:func:`store_of` (and :func:`launches_of`), so none of them imports the app that includes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import Request

from mlmodelscope.store import Store

if TYPE_CHECKING:
    from mlmodelscope.server.launch_queue import LaunchWorkers


@dataclass(frozen=True)
class ServeSettings:
    """What `mlms serve` was started with."""

    store_url: str | None = None
    """The results store (None: the default SQLite file `mlms run` records in)."""
    read_token: str | None = None
    """Bearer token for reading; None = reads need no token (allowed only on loopback)."""
    write_token: str | None = None
    """Bearer token for writes (POST /api/v1/runs); None = writes are refused."""
    jaeger_url: str | None = None
    """Jaeger UI base URL for the run page's trace link, e.g. http://jaeger:16686."""
    catalog: tuple[str, ...] = ()
    """Files and folders of Model manifests a launch may name (``--catalog``)."""
    launch_workers: int = 1
    """Launches run at once (``--launch-workers``); 0: this server queues, runs none."""


def store_of(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def settings_of(request: Request) -> ServeSettings:
    settings: ServeSettings = request.app.state.settings
    return settings


def launches_of(request: Request) -> LaunchWorkers:
    workers: LaunchWorkers = request.app.state.launches
    return workers
