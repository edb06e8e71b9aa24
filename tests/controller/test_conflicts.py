"""Conflicts without a cluster: status writes guarded by resourceVersion (a fake API server
that enforces it), and which peering replica acts. The same paths run on the real control
plane in test_operator_conflicts_cluster.py."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mlmodelscope.contract.kube import KubeError, evaluation_path
from mlmodelscope.controller import peering, status
from mlmodelscope.controller.context import CONFLICT_ATTEMPTS, Context
from mlmodelscope.controller.settings import OperatorSettings

PATH = evaluation_path("a", "e")
T0 = "2026-11-22T08:00:00Z"
FOREIGN = {"type": "ExternalCheck", "status": "True", "reason": "Checked", "message": "1"}


class VersionedKube:
    """One evaluation, with the API server's optimistic concurrency: a merge patch naming a
    resourceVersion other than the stored one is refused 409. ``meanwhile`` runs after each
    read, as a concurrent writer would between the operator's read and its write."""

    def __init__(self, evaluation: dict[str, Any]) -> None:
        self.stored = evaluation
        self.version = 1
        self.stored["metadata"]["resourceVersion"] = "1"
        self.meanwhile: list[Callable[[], None]] = []
        self.patches: list[dict[str, Any]] = []
        self.conflicts = 0

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        assert path == PATH
        seen = copy.deepcopy(self.stored)
        if self.meanwhile:
            self.meanwhile.pop(0)()
        return seen

    def write(self, status_patch: dict[str, Any]) -> None:
        for key, value in status_patch.items():
            if value is None:
                self.stored.setdefault("status", {}).pop(key, None)
            else:
                self.stored.setdefault("status", {})[key] = value
        self.version += 1
        self.stored["metadata"]["resourceVersion"] = str(self.version)

    def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert path == PATH + "/status"
        self.patches.append(body)
        expected = (body.get("metadata") or {}).get("resourceVersion")
        if expected is not None and expected != self.stored["metadata"]["resourceVersion"]:
            self.conflicts += 1
            message = {"reason": "Conflict", "message": "the object has been modified"}
            raise KubeError(409, "PATCH", path, json.dumps(message))
        self.write(body["status"])
        return copy.deepcopy(self.stored)


def world() -> tuple[Context, VersionedKube, list[status.Event]]:
    evaluation = {"metadata": {"name": "e", "namespace": "a", "generation": 1}, "status": {}}
    kube = VersionedKube(evaluation)
    events: list[status.Event] = []
    ctx = Context(
        settings=OperatorSettings(),
        kube=kube,  # type: ignore[arg-type]
        post_event=lambda _ev, event: events.append(event),
    )
    return ctx, kube, events


def add_foreign_condition(kube: VersionedKube) -> Callable[[], None]:
    def write() -> None:
        conditions = list((kube.stored.get("status") or {}).get("conditions") or [])
        kube.write({"conditions": [*conditions, FOREIGN]})

    return write


def job_created(st: Any) -> status.StatusChange:
    return status.job_created(st, 1, "e-g1", "e-results", None, T0)


def test_a_status_write_that_meets_a_concurrent_one_is_recomputed_from_the_fresh_object() -> None:
    """Between the operator's read and its write another writer adds a condition: the write,
    naming the version it was computed from, is refused 409, and the change is computed again
    from the object as it now is, so both the operator's conditions and the other's stay."""
    ctx, kube, events = world()
    kube.meanwhile.append(add_foreign_condition(kube))
    seen: list[dict[str, Any]] = []

    def compute(st: Any) -> status.StatusChange:
        seen.append(dict(st))
        return job_created(st)

    evaluation, change = ctx.update_status("a", "e", compute)
    assert kube.conflicts == 1
    assert [p["metadata"]["resourceVersion"] for p in kube.patches] == ["1", "2"]
    assert seen[0] == {} and seen[1]["conditions"] == [FOREIGN]
    types = [c["type"] for c in kube.stored["status"]["conditions"]]
    assert types == ["ExternalCheck", "Valid", "Queued", "Running"]
    assert kube.stored["status"]["phase"] == "Pending"
    assert evaluation is not None and evaluation["metadata"]["resourceVersion"] == "3"
    assert [e.reason for e in events] == ["JobCreated"]  # posted once, after the write
    assert change.event is not None


def test_an_unguarded_merge_patch_would_have_lost_the_concurrent_condition() -> None:
    """Why the guard: the same race with a patch that names no version replaces the
    conditions list with one computed before the other writer's condition existed."""
    _, kube, _ = world()
    kube.meanwhile.append(add_foreign_condition(kube))
    stale = kube.get_or_none(PATH)
    assert stale is not None
    kube.merge_patch(PATH + "/status", {"status": job_created(stale["status"]).patch})
    assert "ExternalCheck" not in [c["type"] for c in kube.stored["status"]["conditions"]]


def test_a_change_that_became_unnecessary_after_the_conflict_is_not_written() -> None:
    """The concurrent writer made the same transition: recomputed, nothing is left to write
    and no Event is posted twice."""
    ctx, kube, events = world()
    kube.meanwhile.append(lambda: kube.write(job_created({}).patch))
    _, change = ctx.update_status("a", "e", job_created)
    assert kube.conflicts == 1 and len(kube.patches) == 1
    assert change is status.NO_CHANGE and events == []


def test_endless_conflicts_are_raised_after_a_few_attempts_for_the_handler_to_retry() -> None:
    ctx, kube, events = world()
    kube.meanwhile.extend(add_foreign_condition(kube) for _ in range(CONFLICT_ATTEMPTS))
    with pytest.raises(KubeError) as info:
        ctx.update_status("a", "e", job_created)
    assert info.value.status == 409
    assert kube.conflicts == CONFLICT_ATTEMPTS and events == []


# ------------------------------------------------------------------------------- peering

NOW = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)


def keepalive(priority: int, seconds_ago: float = 0, lifetime: int = 60) -> dict[str, Any]:
    seen = NOW - timedelta(seconds=seconds_ago)
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen.isoformat()}


class PeeringKube:
    """Peering objects by path; ``fail`` makes every read raise."""

    def __init__(self, objects: dict[str, dict[str, Any]], namespaces: tuple[str, ...] = ()):
        self.objects = objects
        self.namespaces = namespaces
        self.fail = False

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        if self.fail:
            raise OSError("connection refused")
        return self.objects.get(path)

    def list(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        assert path == "/api/v1/namespaces"
        return [{"metadata": {"name": ns}} for ns in self.namespaces]


def cluster_peering(peers: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {"/apis/kopf.dev/v1/clusterkopfpeerings/mlmodelscope": {"status": peers}}


def me(kube: PeeringKube, priority: int, namespaces: tuple[str, ...] = ()) -> peering.Peering:
    return peering.Peering(
        kube=kube,  # type: ignore[arg-type]
        name="mlmodelscope",
        identity="me",
        priority=priority,
        namespaces=namespaces,
        clock=lambda: NOW,
    )


def test_replicas_started_later_get_lower_priorities_and_never_the_same() -> None:
    first = peering.start_priority(now_s=1_800_000_000.000, jitter=999)
    later = peering.start_priority(now_s=1_800_000_000.001, jitter=0)
    assert first > later  # the oldest replica acts; a restarted one is a standby
    assert first < 0 and abs(first) < 2**53  # below any explicit priority; exact in JSON
    same_ms = {peering.start_priority(now_s=1_800_000_000.0) for _ in range(50)}
    assert len(same_ms) > 1  # the jitter separates replicas started in the same millisecond


def test_the_replica_acts_only_while_no_live_peer_has_its_priority_or_more() -> None:
    """Kopf's rule: a higher or an equal priority pauses us; dead peers and lower ones
    do not; our own keep-alive is not a rival."""
    kube = PeeringKube(cluster_peering({"me": keepalive(-5)}))
    replica = me(kube, -5)
    assert replica.acting()
    peers = kube.objects["/apis/kopf.dev/v1/clusterkopfpeerings/mlmodelscope"]["status"]
    peers["standby"] = keepalive(-9)
    assert replica.acting()
    peers["older"] = keepalive(-1, seconds_ago=30)
    assert not replica.acting()
    peers["older"] = keepalive(-1, seconds_ago=61)  # killed: its keep-alive expired
    assert replica.acting()
    peers["twin"] = keepalive(-5)
    assert not replica.acting()  # equal priorities pause both, as in Kopf
    peers["twin"] = keepalive(-5, lifetime=0)  # exited cleanly
    assert replica.acting()


def test_an_unreadable_peering_keeps_the_last_answer_and_a_missing_one_means_no_peers() -> None:
    kube = PeeringKube({})
    replica = me(kube, -5)
    kube.fail = True
    assert not replica.acting()  # never act on a guess at start
    kube.fail = False
    assert replica.acting()  # no peering object: no peers (Kopf does not pause either)
    kube.objects = cluster_peering({"older": keepalive(-1)})
    assert not replica.acting()
    kube.fail = True
    assert not replica.acting()


def test_namespaced_peerings_are_read_in_every_watched_namespace_globs_included() -> None:
    path = "/apis/kopf.dev/v1/namespaces/{}/kopfpeerings/mlmodelscope"
    kube = PeeringKube(
        {path.format("ml-b"): {"status": {"older": keepalive(-1)}}},
        namespaces=("team-a", "ml-a", "ml-b", "other"),
    )
    assert me(kube, -5, ("team-a", "ml-a")).acting()
    assert not me(kube, -5, ("team-a", "ml-*")).acting()
    assert me(kube, -5, ("team-a", "ml-*", "!ml-b")).acting()
    assert not me(kube, -5, ("ml-b",)).acting()


def test_peering_priority_and_lifetime_settings() -> None:
    s = OperatorSettings.from_env(
        {"MLMS_OPERATOR_PEERING_PRIORITY": "-3", "MLMS_OPERATOR_PEERING_LIFETIME_SECONDS": "8"}
    )
    assert (s.peering_priority, s.peering_lifetime_seconds) == (-3, 8)
    defaults = OperatorSettings.from_env({})
    assert (defaults.peering_priority, defaults.peering_lifetime_seconds) == (None, 60)
    with pytest.raises(ValueError) as info:
        OperatorSettings.from_env(
            {
                "MLMS_OPERATOR_PEERING_PRIORITY": "high",
                "MLMS_OPERATOR_PEERING_LIFETIME_SECONDS": "1",
            }
        )
    assert "MLMS_OPERATOR_PEERING_PRIORITY='high'" in str(info.value)
    assert "MLMS_OPERATOR_PEERING_LIFETIME_SECONDS='1'" in str(info.value)
