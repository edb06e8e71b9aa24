"""The ASGI app of `mlms serve`: the JSON API under ``/api/v1`` and the dashboard under ``/``.

One :class:`~mlmodelscope.store.Store` is opened per app and kept in ``app.state.store``, and
the launch workers (:mod:`.launch_queue`) run while the app does, as do the Try page's loaded
models (:mod:`.trials`, released at shutdown); routes reach them (and the settings) through
:mod:`.state`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from mlmodelscope import __version__
from mlmodelscope.server import api, dashboard, launch_api, try_api
from mlmodelscope.server.launch_queue import LaunchWorkers
from mlmodelscope.server.state import ServeSettings
from mlmodelscope.server.trials import Trials
from mlmodelscope.store import Store, open_store

__all__ = ["ServeSettings", "create_app"]


def create_app(settings: ServeSettings, store: Store | None = None) -> FastAPI:
    """The app; it opens ``settings.store_url`` at startup unless given an open ``store``
    (which it then does not close)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = store is None
        app.state.store = store if store is not None else open_store(settings.store_url)
        workers = LaunchWorkers(app.state.store, settings.catalog, settings.launch_workers)
        app.state.launches = workers
        app.state.trials = Trials(
            max_bytes=settings.try_max_bytes,
            max_pixels=settings.try_max_pixels,
            per_minute=settings.try_per_minute,
            keep=settings.try_models,
        )
        try:
            workers.start()
            yield
        finally:
            workers.stop()
            app.state.trials.close()
            if owned:
                app.state.store.close()

    app = FastAPI(
        title="mlmodelscope results",
        version=__version__,
        description="Evaluation runs recorded by mlmodelscope: list, compare, export; launch; try.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.include_router(api.probes)
    app.include_router(api.router)
    app.include_router(launch_api.router)
    app.include_router(try_api.router)
    app.include_router(try_api.pages)
    app.include_router(dashboard.router)
    api.install_openapi(app)
    return app
