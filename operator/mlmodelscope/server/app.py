"""The ASGI app of `mlms serve`: the JSON API under ``/api/v1`` and the dashboard under ``/``.

One :class:`~mlmodelscope.store.Store` is opened per app and kept in ``app.state.store``, and
the launch workers (:mod:`.launch_queue`), or with ``settings.launch_namespace`` the follower
of the launches created in the cluster (:mod:`.launch_cluster`, with the cluster's node pools
for the Launch form, :mod:`.node_pools`), run while the app does, as do
the Try page's loaded models (:mod:`.trials`, released at shutdown); routes reach them (and the
settings) through :mod:`.state`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import FastAPI

from mlmodelscope import __version__
from mlmodelscope.server import api, dashboard, launch_api, try_api
from mlmodelscope.server.launch_cluster import ClusterLaunches
from mlmodelscope.server.launch_queue import LaunchWorkers
from mlmodelscope.server.launch_target import LaunchTarget, LocalLaunches
from mlmodelscope.server.node_pools import NodePools
from mlmodelscope.server.state import ServeSettings
from mlmodelscope.server.trials import Trials
from mlmodelscope.store import Store, open_store

if TYPE_CHECKING:
    from mlmodelscope.contract.kube import Kube

__all__ = ["ServeSettings", "create_app"]


def create_app(
    settings: ServeSettings, store: Store | None = None, kube: Kube | None = None
) -> FastAPI:
    """The app; it opens ``settings.store_url`` at startup unless given an open ``store``
    (which it then does not close). With ``settings.launch_namespace``, launches go to the
    cluster through ``kube`` (default: the pod's ServiceAccount, else $KUBECONFIG)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = store is None
        app.state.store = store if store is not None else open_store(settings.store_url)
        in_cluster = settings.launch_namespace is not None
        count = 0 if in_cluster else settings.launch_workers
        workers = LaunchWorkers(app.state.store, settings.catalog, count)
        app.state.launches = workers
        target: LaunchTarget = LocalLaunches(app.state.store, workers)
        app.state.node_pools = None
        if settings.launch_namespace is not None:
            from mlmodelscope.contract.kube import Kube

            client = kube if kube is not None else Kube.from_environment()
            target = ClusterLaunches(app.state.store, client, settings.launch_namespace)
            app.state.node_pools = NodePools(client)
        app.state.launch_target = target
        app.state.trials = Trials(
            max_bytes=settings.try_max_bytes,
            max_pixels=settings.try_max_pixels,
            per_minute=settings.try_per_minute,
            keep=settings.try_models,
        )
        try:
            target.start()
            yield
        finally:
            target.stop()
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
