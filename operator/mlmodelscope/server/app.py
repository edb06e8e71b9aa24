"""The ASGI app of `mlms serve`: the JSON API under ``/api/v1`` and the dashboard under ``/``.

One :class:`~mlmodelscope.store.Store` is opened per app and kept in ``app.state.store``;
routes reach it (and the settings) through :func:`store_of` and :func:`settings_of`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI, Request

from mlmodelscope import __version__
from mlmodelscope.store import Store, open_store


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


def create_app(settings: ServeSettings, store: Store | None = None) -> FastAPI:
    """The app; it opens ``settings.store_url`` at startup unless given an open ``store``
    (which it then does not close)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = store is None
        app.state.store = store if store is not None else open_store(settings.store_url)
        try:
            yield
        finally:
            if owned:
                app.state.store.close()

    app = FastAPI(
        title="mlmodelscope results",
        version=__version__,
        description="Evaluation runs recorded by mlmodelscope: list, compare, export.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    from mlmodelscope.server import api, dashboard

    app.include_router(api.probes)
    app.include_router(api.router)
    app.include_router(dashboard.router)
    api.install_openapi(app)
    return app


def store_of(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def settings_of(request: Request) -> ServeSettings:
    settings: ServeSettings = request.app.state.settings
    return settings
