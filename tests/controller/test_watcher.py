"""The operator's own watches (controller/runtime/watcher.py, controller/object_watches.py) on
the fake API server. The same watches feed every evaluation, Job and pod event of the operator's
cluster tests on the real one (tests/controller/test_*_cluster.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from fakes import FakeApiServer, FakeKube
from mlmodelscope.contract.kube import (
    KubeError,
    all_evaluations_path,
    configmap_path,
    evaluation_path,
    job_path,
    pod_path,
)
from mlmodelscope.controller import names, object_watches
from mlmodelscope.controller.runtime.watcher import Watcher
from mlmodelscope.devcluster.pytest_plugin import wait_for

MANAGED = {names.LABEL_MANAGED_BY: names.MANAGED_BY}


class Seen:
    """What a watcher handed over, in order: (name, deleted)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, bool]] = []
        self._lock = threading.Lock()

    def __call__(self, obj: dict[str, Any], deleted: bool) -> None:
        with self._lock:
            self.events.append((str(obj["metadata"]["name"]), deleted))

    def has(self, *wanted: tuple[str, bool]) -> bool:
        with self._lock:
            return all(w in self.events for w in wanted)


def configmap(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or MANAGED},
    }


@pytest.fixture
def server() -> FakeApiServer:
    fake = FakeApiServer()
    for namespace in ("team-a", "team-b", "other"):
        fake.add_namespace(namespace)
    return fake


@pytest.fixture
def started() -> Iterator[list[Watcher]]:
    watchers: list[Watcher] = []
    yield watchers
    for watcher in watchers:
        watcher.stop()


def watching(
    started: list[Watcher], kube: FakeKube, path: str, **options: Any
) -> tuple[Watcher, Seen]:
    """A started watcher of ``path`` and what it hands over (stopped after the test)."""
    seen = Seen()
    watcher = Watcher(kube, path, seen, name="cm", **options)
    started.append(watcher)
    watcher.start()
    return watcher, seen


def test_it_lists_in_pages_then_hands_over_each_change_with_the_selector(
    server: FakeApiServer, started: list[Watcher]
) -> None:
    kube = FakeKube(server)
    path = configmap_path("team-a")
    for i in range(3):
        kube.create(path, configmap(f"before-{i}"))
    kube.create(path, configmap("unmanaged", {"app": "other"}))
    watcher, seen = watching(started, kube, path, label_selector=names.MANAGED_SELECTOR)
    wait_for("the listing", lambda: seen.has(*((f"before-{i}", False) for i in range(3))), 5)
    kube.create(path, configmap("after"))
    kube.delete(f"{path}/before-0")
    wait_for("the changes", lambda: seen.has(("after", False), ("before-0", True)), 5)
    assert all(name != "unmanaged" for name, _ in seen.events)
    assert watcher.listings == 1


def test_a_version_the_server_no_longer_holds_starts_a_new_listing(
    server: FakeApiServer, started: list[Watcher]
) -> None:
    kube = FakeKube(server)
    path = configmap_path("team-a")
    kube.create(path, configmap("first"))
    watcher, seen = watching(started, kube, path, watch_seconds=1, retry_delays=(0.01,))
    wait_for("the listing", lambda: seen.has(("first", False)), 5)
    kube.create(path, configmap("second"))
    wait_for("the change", lambda: seen.has(("second", False)), 5)
    kube.create(configmap_path("team-b"), configmap("elsewhere"))  # a version it never sees
    server.compacted = server.resource_version  # etcd compacted past what it watched from
    wait_for("a second listing", lambda: watcher.listings >= 2, 10)
    assert seen.events.count(("second", False)) == 2  # watched, then listed again
    assert watcher.listings == 2


def test_relist_ends_the_open_watch_and_hands_every_object_over_again(
    server: FakeApiServer, started: list[Watcher]
) -> None:
    kube = FakeKube(server)
    path = configmap_path("team-a")
    kube.create(path, configmap("first"))
    watcher, seen = watching(started, kube, path, retry_delays=(30.0,))
    wait_for("the listing", lambda: seen.has(("first", False)), 5)
    watcher.relist()
    wait_for("a second listing", lambda: watcher.listings == 2, 5)
    assert seen.events.count(("first", False)) == 2
    kube.create(path, configmap("then"))  # and it watches again, with no wait for a retry
    wait_for("the change after it", lambda: seen.has(("then", False)), 5)


def test_after_a_failed_request_it_goes_on_from_the_version_it_reached(
    server: FakeApiServer, started: list[Watcher]
) -> None:
    kube = FakeKube(server)
    path = configmap_path("team-a")
    refused = threading.Event()
    real_watch = kube.watch

    def watch_refused_once(*args: Any, **kwargs: Any) -> Any:
        if not refused.is_set():
            refused.set()
            raise KubeError(503, "WATCH", path, '{"reason": "ServiceUnavailable"}')
        return real_watch(*args, **kwargs)

    kube.watch = watch_refused_once  # type: ignore[method-assign]
    watcher, seen = watching(started, kube, path, retry_delays=(0.01,))
    wait_for("the refusal", refused.is_set, 5)
    kube.create(path, configmap("while-away"))
    wait_for(
        "the change made while the watch was refused", lambda: seen.has(("while-away", False)), 5
    )
    assert watcher.listings == 1  # no second listing: it went on from the first's version


def test_stop_ends_an_open_watch_at_once(server: FakeApiServer) -> None:
    watcher = Watcher(FakeKube(server), configmap_path("team-a"), Seen(), name="cm")
    watcher.start()
    wait_for("the listing", lambda: watcher.listings == 1, 5)
    thread = watcher._thread
    watcher.stop(timeout_s=5)
    assert thread is not None and not thread.is_alive()


def job(name: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": MANAGED}}


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": MANAGED}}


@pytest.mark.parametrize(
    ("patterns", "paths"),
    [
        ((), {"/apis/batch/v1/jobs", "/api/v1/pods"}),
        (
            ("team-a", "team-b"),
            {job_path("team-a"), job_path("team-b"), pod_path("team-a"), pod_path("team-b")},
        ),
        (("team-*",), {"/apis/batch/v1/jobs", "/api/v1/pods"}),
    ],
)
def test_plain_names_are_watched_one_namespace_at_a_time_globs_cluster_wide(
    server: FakeApiServer, started: list[Watcher], patterns: tuple[str, ...], paths: set[str]
) -> None:
    kube = FakeKube(server)
    jobs, pods = Seen(), Seen()
    watchers = object_watches.job_and_pod_watches(kube, patterns, jobs, pods)
    assert {w.path for w in watchers} == paths
    assert {w.label_selector for w in watchers} == {names.MANAGED_SELECTOR}
    started.extend(watchers)
    for watcher in watchers:
        watcher.start()
    for namespace in ("team-a", "team-b", "other"):
        kube.create(job_path(namespace), job(f"job-{namespace}"))
        kube.create(pod_path(namespace), pod(f"pod-{namespace}"))
    wait_for(
        "team-b's", lambda: jobs.has(("job-team-b", False)) and pods.has(("pod-team-b", False)), 5
    )
    wait_for(
        "team-a's", lambda: jobs.has(("job-team-a", False)) and pods.has(("pod-team-a", False)), 5
    )
    if patterns:  # "other" is not watched: nothing of it is handed over
        assert ("job-other", False) not in jobs.events and ("pod-other", False) not in pods.events
    else:
        wait_for(
            "other's", lambda: jobs.has(("job-other", False)) and pods.has(("pod-other", False)), 5
        )


@pytest.mark.parametrize(
    ("patterns", "paths"),
    [
        ((), {all_evaluations_path()}),
        (("team-a", "team-b"), {evaluation_path("team-a"), evaluation_path("team-b")}),
        (("team-*",), {all_evaluations_path()}),
    ],
)
def test_every_evaluation_of_the_watched_namespaces_is_handed_over_unfiltered_by_label(
    server: FakeApiServer, started: list[Watcher], patterns: tuple[str, ...], paths: set[str]
) -> None:
    kube = FakeKube(server)
    seen = Seen()
    watchers = object_watches.evaluation_watches(kube, patterns, seen)
    assert {w.path for w in watchers} == paths
    assert {w.label_selector for w in watchers} == {None}  # a user's evaluation has no label
    started.extend(watchers)
    for watcher in watchers:
        watcher.start()
    for namespace in ("team-a", "team-b", "other"):
        kube.create(evaluation_path(namespace), evaluation(f"ev-{namespace}"))
    kube.delete(evaluation_path("team-a", "ev-team-a"))
    wait_for("team-a's, created and deleted", lambda: seen.has(("ev-team-a", True)), 5)
    wait_for("team-b's", lambda: seen.has(("ev-team-b", False)), 5)
    if patterns:
        assert ("ev-other", False) not in seen.events
    else:
        wait_for("other's", lambda: seen.has(("ev-other", False)), 5)


def evaluation(name: str) -> dict[str, Any]:
    return {"apiVersion": "mlmodelscope.io/v1alpha1", "kind": "ModelEvaluation",
            "metadata": {"name": name}}  # fmt: skip
