"""pytest fixtures: one real cluster per session, a fresh namespace per test.

Register with `pytest_plugins = ["mlmodelscope.devcluster.pytest_plugin"]` in the root conftest.
The session fixture stops every process by PID even when tests fail, then checks that nothing
the harness started (components, or pod processes on exec nodes) is still alive.
"""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from mlmodelscope.devcluster import versions
from mlmodelscope.devcluster.cluster import Cluster, marked_processes, pid_alive

T = TypeVar("T")

KEEP_RUNS = 3
"""Old per-session run dirs (logs) kept for post-mortems; older ones are pruned."""


def wait_for(
    what: str,
    fn: Callable[[], T | None],
    timeout: float = 60.0,
    detail: Callable[[], str] | None = None,
    interval: float = 0.25,
) -> T:
    """Poll ``fn`` until it returns something truthy; on timeout fail naming ``what`` (and
    ``detail()``, e.g. the operator's log). Tests wait on threads and controllers, never
    sleep: the first polls come 10 ms apart, doubling up to ``interval``, so a wait on a
    thread ends within milliseconds and one on a controller polls no more than it needs."""
    deadline = time.monotonic() + timeout
    pause = min(0.01, interval)
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{detail()}" if detail else ""
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}{extra}")
        time.sleep(pause)
        pause = min(pause * 2, interval)


def _runs_dir() -> Path:
    return versions.cache_base() / "runs"


def _prune_runs() -> None:
    runs = sorted(_runs_dir().glob("pytest-*"), key=lambda p: p.stat().st_mtime)
    for old in runs[:-KEEP_RUNS]:
        if not (old / "state.json").exists():  # never a run dir that may still be live
            shutil.rmtree(old, ignore_errors=True)


_NO_REAL_NODE: list[str] = []
"""Why this session's cluster has no real node (empty when it has one)."""


def _real_node_possible() -> str:
    """'' when this session can run the real node, else why not (root, Debian packages, or
    another live cluster holding it: then this session runs without one, not not at all)."""
    from mlmodelscope.devcluster import node
    from mlmodelscope.devcluster.cluster import containerd_runs

    if os.environ.get("MLMS_TEST_NO_REAL_NODE"):
        return "MLMS_TEST_NO_REAL_NODE is set"
    try:
        node.preflight()
    except node.NodeError as exc:
        return str(exc)
    owner = node.holder(node.Paths(run=Path(), cache=node.cache_dir()), containerd_runs)
    if owner is not None:
        return f"the dev cluster in {owner} runs the real node (one at a time)"
    return ""


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """A started control plane with the simulated node pools and, where this machine allows
    (root, containerd, runc, CNI plugins, iptables), the real node; stopped after the session."""
    from mlmodelscope.devcluster import build, registry

    built = all(build.is_built(c) for c in versions.ALL_COMPONENTS) and registry.is_built()
    if shutil.which("go") is None and not built:
        pytest.skip("the dev cluster needs Go >= 1.26 to build (or a prebuilt cache)")
    _runs_dir().mkdir(parents=True, exist_ok=True)
    _prune_runs()
    run_dir = _runs_dir() / f"pytest-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    why_not = _real_node_possible()
    if why_not:
        _NO_REAL_NODE.append(why_not)
    instance = Cluster(run_dir, real_node=not why_not)
    try:
        instance.start()
        yield instance
    finally:
        leftovers = instance.stop()
        recorded = [p.pid for p in instance.state.processes] if instance.state else []
        alive = [pid for pid in recorded if pid_alive(pid)]
        if instance.state is not None:
            leftovers += marked_processes(instance.state.marker)
        assert not leftovers and not alive, (
            f"dev cluster processes left running: {sorted(set(leftovers + alive))}; "
            f"logs in {run_dir}"
        )


@pytest.fixture(scope="session")
def real_node(cluster: Cluster) -> str:
    """The real node's name; skips (fails under MLMS_STRICT_TESTS) where it cannot run."""
    from mlmodelscope.devcluster import node

    if not cluster.real_node:
        pytest.skip(f"no real node in this cluster: {'; '.join(_NO_REAL_NODE)}")
    return node.NAME


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:40].strip("-") or "test"


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace unique to this test (its default ServiceAccount ready), deleted after."""
    from kubernetes import client

    name = f"{_slug(request.node.name)}-{uuid.uuid4().hex[:5]}"
    core = client.CoreV1Api(cluster.api_client())
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    deadline = time.monotonic() + 30
    while True:
        try:
            core.read_namespaced_service_account("default", name)
            break
        except client.ApiException as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
