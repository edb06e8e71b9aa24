"""Conflicts without a cluster: status writes guarded by resourceVersion (a fake API server
that enforces it), and which peering replica acts. The same paths run on the real control
plane in test_operator_conflicts_cluster.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fakes import FakeApiServer, FakeKube, Request
from mlmodelscope.contract.kube import KubeError, evaluation_path
from mlmodelscope.controller import peering, status
from mlmodelscope.controller.context import CONFLICT_ATTEMPTS, Context
from mlmodelscope.controller.settings import OperatorSettings

PATH = evaluation_path("a", "e")
T0 = "2026-11-22T08:00:00Z"
FOREIGN = {"type": "ExternalCheck", "status": "True", "reason": "Checked", "message": "1"}


@dataclass
class ConcurrentWriter:
    """The fake API server's hook (``FakeApiServer.before``): before each status patch of the
    evaluation, the next of ``meanwhile`` writes, as a concurrent writer would between the
    operator's read and its write. Notes the patches and which name an outdated version (the
    server refuses those 409)."""

    server: FakeApiServer
    meanwhile: list[Callable[[], None]] = field(default_factory=list)
    patches: list[dict[str, Any]] = field(default_factory=list)
    conflicts: int = 0
    written: list[str] = field(default_factory=list)
    """The resourceVersion each of the concurrent writes made."""

    def __call__(self, request: Request) -> None:
        if (request.method, request.path) != ("PATCH", PATH + "/status"):
            return
        self.patches.append(request.body)
        if self.meanwhile:
            self.meanwhile.pop(0)()
        expected = (request.body.get("metadata") or {}).get("resourceVersion")
        if expected is not None and expected != self.stored()["metadata"]["resourceVersion"]:
            self.conflicts += 1

    def stored(self) -> dict[str, Any]:
        found: dict[str, Any] = FakeKube(self.server).get(PATH)
        return found

    def write(self, status_patch: dict[str, Any]) -> None:
        done = FakeKube(self.server).merge_patch(PATH + "/status", {"status": status_patch})
        self.written.append(done["metadata"]["resourceVersion"])


def world() -> tuple[Context, ConcurrentWriter, list[status.Event]]:
    server = FakeApiServer()
    server.add_namespace("a")
    server.seed(evaluation_path("a"), {"metadata": {"name": "e"}, "status": {}})
    writer = ConcurrentWriter(server)
    server.before = writer
    events: list[status.Event] = []
    ctx = Context(
        settings=OperatorSettings(),
        kube=FakeKube(server),
        post_event=lambda _ev, event: events.append(event),
    )
    return ctx, writer, events


def add_foreign_condition(writer: ConcurrentWriter) -> Callable[[], None]:
    def write() -> None:
        conditions = list((writer.stored().get("status") or {}).get("conditions") or [])
        writer.write({"conditions": [*conditions, FOREIGN]})

    return write


def job_created(st: status.Observed) -> status.StatusChange:
    return status.job_created(st, 1, "e-g1", "e-results", None, T0)


def test_a_status_write_that_meets_a_concurrent_one_is_recomputed_from_the_fresh_object() -> None:
    """Between the operator's read and its write another writer adds a condition: the write,
    naming the version it was computed from, is refused 409, and the change is computed again
    from the object as it now is, so both the operator's conditions and the other's stay."""
    ctx, writer, events = world()
    writer.meanwhile.append(add_foreign_condition(writer))
    read = writer.stored()["metadata"]["resourceVersion"]
    seen: list[dict[str, Any]] = []

    def compute(st: status.Observed) -> status.StatusChange:
        seen.append(dict(st.raw))
        return job_created(st)

    evaluation, change = ctx.update_status("a", "e", compute)
    assert writer.conflicts == 1
    versions = [p["metadata"]["resourceVersion"] for p in writer.patches]
    assert versions == [read, writer.written[0]]
    assert seen[0] == {} and seen[1]["conditions"] == [FOREIGN]
    stored = writer.stored()
    types = [c["type"] for c in stored["status"]["conditions"]]
    assert types == ["ExternalCheck", "Valid", "Queued", "Running"]
    assert stored["status"]["phase"] == "Pending"
    assert evaluation is not None
    assert evaluation["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    made = {("get", "modelevaluations"): 2, ("patch", "modelevaluations/status"): 2}
    assert isinstance(ctx.kube, FakeKube) and ctx.kube.requests == made
    assert [e.reason for e in events] == ["JobCreated"]  # posted once, after the write
    assert change.event is not None


def test_an_unguarded_merge_patch_would_have_lost_the_concurrent_condition() -> None:
    """Why the guard: the same race with a patch that names no version replaces the
    conditions list with one computed before the other writer's condition existed."""
    ctx, writer, _ = world()
    writer.meanwhile.append(add_foreign_condition(writer))
    stale = ctx.kube.get(PATH)
    ctx.kube.merge_patch(
        PATH + "/status", {"status": job_created(status.Observed.of(stale["status"])).patch}
    )
    assert "ExternalCheck" not in [c["type"] for c in writer.stored()["status"]["conditions"]]


def test_a_change_that_became_unnecessary_after_the_conflict_is_not_written() -> None:
    """The concurrent writer made the same transition: recomputed, nothing is left to write
    and no Event is posted twice."""
    ctx, writer, events = world()
    writer.meanwhile.append(lambda: writer.write(job_created(status.Observed.of({})).patch))
    _, change = ctx.update_status("a", "e", job_created)
    assert writer.conflicts == 1 and len(writer.patches) == 1
    assert change is status.NO_CHANGE and events == []


def test_endless_conflicts_are_raised_after_a_few_attempts_for_the_handler_to_retry() -> None:
    ctx, writer, events = world()
    writer.meanwhile.extend(add_foreign_condition(writer) for _ in range(CONFLICT_ATTEMPTS))
    with pytest.raises(KubeError) as info:
        ctx.update_status("a", "e", job_created)
    assert info.value.status == 409
    assert writer.conflicts == CONFLICT_ATTEMPTS and events == []


# ------------------------------------------------------------------------------- peering

NOW = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)


def keepalive(priority: int, seconds_ago: float = 0, lifetime: int = 60) -> dict[str, Any]:
    seen = NOW - timedelta(seconds=seconds_ago)
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen.isoformat()}


PEERINGS = "/apis/kopf.dev/v1"
CLUSTER_PEERING = f"{PEERINGS}/clusterkopfpeerings/mlmodelscope"


def peering_server(namespaces: tuple[str, ...] = ()) -> FakeKube:
    """An API server with ``namespaces``; the replica's client on it."""
    server = FakeApiServer()
    for namespace in namespaces:
        server.add_namespace(namespace)
    return FakeKube(server)


def cluster_peering(kube: FakeKube, peers: dict[str, dict[str, Any]]) -> None:
    """The ClusterKopfPeering ``mlmodelscope`` with ``peers``' keep-alives, as Kopf writes it."""
    kube.server.seed(f"{PEERINGS}/clusterkopfpeerings", {"metadata": {"name": "mlmodelscope"},
                                                         "status": peers})  # fmt: skip


def keep_alive(kube: FakeKube, identity: str, info: dict[str, Any]) -> None:
    """A peer writes its keep-alive into the ClusterKopfPeering (a merge patch, as Kopf's)."""
    FakeKube(kube.server).merge_patch(CLUSTER_PEERING, {"status": {identity: info}})


def unreachable(request: Request) -> None:
    raise OSError("connection refused")


def me(kube: FakeKube, priority: int, namespaces: tuple[str, ...] = ()) -> peering.Peering:
    return peering.Peering(
        kube=kube,
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
    kube = peering_server()
    cluster_peering(kube, {"me": keepalive(-5)})
    replica = me(kube, -5)
    assert replica.acting()
    keep_alive(kube, "standby", keepalive(-9))
    assert replica.acting()
    keep_alive(kube, "older", keepalive(-1, seconds_ago=30))
    assert not replica.acting()
    keep_alive(kube, "older", keepalive(-1, seconds_ago=61))  # killed: its keep-alive expired
    assert replica.acting()
    keep_alive(kube, "twin", keepalive(-5))
    assert not replica.acting()  # equal priorities pause both, as in Kopf
    keep_alive(kube, "twin", keepalive(-5, lifetime=0))  # exited cleanly
    assert replica.acting()


def test_acting_again_after_standing_by_lists_the_evaluations_again() -> None:
    answers = iter([True, True, False, False, True, True, False, True])
    relisted: list[int] = []
    acting = peering.resuming(lambda: next(answers), lambda: relisted.append(len(relisted)))
    said = [acting() for _ in range(8)]
    assert said == [True, True, False, False, True, True, False, True]
    assert len(relisted) == 2  # after each standby, not at the first answer


def test_an_unreadable_peering_keeps_the_last_answer_and_a_missing_one_means_no_peers() -> None:
    kube = peering_server()
    replica = me(kube, -5)
    kube.server.before = unreachable
    assert not replica.acting()  # never act on a guess at start
    kube.server.before = None
    assert replica.acting()  # no peering object: no peers (Kopf does not pause either)
    cluster_peering(kube, {"older": keepalive(-1)})
    assert not replica.acting()
    kube.server.before = unreachable
    assert not replica.acting()


def test_namespaced_peerings_are_read_in_every_watched_namespace_globs_included() -> None:
    kube = peering_server(("team-a", "ml-a", "ml-b", "other"))
    older = {"metadata": {"name": "mlmodelscope"}, "status": {"older": keepalive(-1)}}
    kube.server.seed(f"{PEERINGS}/namespaces/ml-b/kopfpeerings", older)
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
