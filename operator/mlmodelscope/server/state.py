"""What `mlms serve` keeps on its app, and how routes read it.

:func:`~mlmodelscope.server.app.create_app` puts the :class:`ServeSettings` in
``app.state.settings``, one open :class:`~mlmodelscope.store.Store` in ``app.state.store`` and
the launch workers in ``app.state.launches``, where launches run (the workers, or the cluster)
in ``app.state.launch_target``, the cluster's node pools in ``app.state.node_pools`` (None
without a cluster), the Try page's loaded models and rate limit in ``app.state.trials``; the
API, the dashboard and the token checks reach them through :func:`settings_of` and
:func:`store_of` (and :func:`launches_of`, :func:`launch_target_of`, :func:`node_pools_of`,
:func:`trials_of`), so none of them imports the app that includes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import Request

from mlmodelscope.store import Store

if TYPE_CHECKING:
    from mlmodelscope.server.launch_queue import LaunchWorkers
    from mlmodelscope.server.launch_target import LaunchTarget
    from mlmodelscope.server.node_pools import NodePools
    from mlmodelscope.server.trials import Trials


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
    launch_namespace: str | None = None
    """Create launches as ModelEvaluations in this namespace through the Kubernetes API
    (``--launch-namespace``) instead of running them; None: the workers run them."""
    try_max_bytes: int = 1024 * 1024
    """Largest image file ``POST /api/v1/try`` and the Try page take, in bytes."""
    try_max_pixels: int = 2048 * 2048
    """Largest image they decode (width x height), checked before the pixels are read."""
    try_per_minute: int = 30
    """Tries one client may start a minute: a burst of as many, then one every 60/N s."""
    try_models: int = 6
    """(Model, framework) pairs kept loaded between tries; the least recently used goes."""


def store_of(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def settings_of(request: Request) -> ServeSettings:
    settings: ServeSettings = request.app.state.settings
    return settings


def launches_of(request: Request) -> LaunchWorkers:
    workers: LaunchWorkers = request.app.state.launches
    return workers


def launch_target_of(request: Request) -> LaunchTarget:
    target: LaunchTarget = request.app.state.launch_target
    return target


def node_pools_of(request: Request) -> NodePools | None:
    """The cluster's node pools (``--launch-namespace``); None when launches run here."""
    pools: NodePools | None = getattr(request.app.state, "node_pools", None)
    return pools


def trials_of(request: Request) -> Trials:
    trials: Trials = request.app.state.trials
    return trials
