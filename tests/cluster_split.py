"""``--cluster-tests only|none`` (registered in tests/conftest.py): keep the tests that need the
dev cluster, or the others. The cluster tests mostly wait on the control plane and the node, so
``make test`` runs the two halves in two processes at once; one cluster per machine holds the
real node, so the cluster half stays in one process, in order.

Either half runs the test files that need a late tool (``LATE_FIXTURES``) after the others:
``make test`` builds those tools below the control plane's priority, so a half starts before
they are ready and reaches them last (a test that still finds one building waits on its lock)."""

from __future__ import annotations

import pytest

LATE_FIXTURES = frozenset({"jaeger", "kueue"})
"""Fixtures of the Go tools ``make test`` builds last (hack/lib.sh, ``GO_BUILDS``)."""


def needs_cluster(item: pytest.Item) -> bool:
    """Marked ``cluster`` or using the ``cluster`` fixture (directly or through another)."""
    return item.get_closest_marker("cluster") is not None or "cluster" in getattr(
        item, "fixturenames", ()
    )


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def late_files_last(items: list[pytest.Item]) -> list[pytest.Item]:
    """The same items, those of a file where any item uses a late tool moved to the end (whole
    files, so a module's fixtures are set up once); the order is otherwise kept."""
    late = {_file(i) for i in items if LATE_FIXTURES & set(getattr(i, "fixturenames", ()))}
    return sorted(items, key=lambda i: _file(i) in late)


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
    items[:] = late_files_last(kept)
