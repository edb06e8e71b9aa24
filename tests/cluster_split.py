"""``--cluster-tests only|none`` (registered in tests/conftest.py): keep the tests that need the
dev cluster, or the others. The cluster tests mostly wait on the control plane and the node, so
``make test`` runs the two halves in two processes at once; one cluster per machine holds the
real node, so the cluster half stays in one process, in order."""

from __future__ import annotations

import pytest


def needs_cluster(item: pytest.Item) -> bool:
    """Marked ``cluster`` or using the ``cluster`` fixture (directly or through another)."""
    return item.get_closest_marker("cluster") is not None or "cluster" in getattr(
        item, "fixturenames", ()
    )


def keep_half(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop the other half in place and report it deselected; ``all`` keeps every item."""
    choice = config.getoption("cluster_tests", "all")
    if choice == "all":
        return
    want = choice == "only"
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (kept if needs_cluster(item) == want else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept
