"""Kueue with no cluster: the Job shape, the operator's limits, the status transitions, and
Kueue's own reason read from the Job's Workload."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from fakes import FakeApiServer, FakeKube, Request
from mlmodelscope.contract.kube import KubeError, evaluation_path
from mlmodelscope.controller import builders, job_state, kueue, names, status
from mlmodelscope.controller.admission import fifo
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.settings import OperatorSettings, SettingsError
from mlmodelscope.controller.status import ConditionType, Observed, Reason
from mlmodelscope.spec import ModelEvaluation
from mlmodelscope.spec.status import EvaluationStatus

Make = Callable[..., ModelEvaluation]
T0, T1, T2 = "2026-11-22T08:00:00Z", "2026-11-22T08:01:00Z", "2026-11-22T08:02:00Z"
QUEUE = {names.LABEL_KUEUE_QUEUE: "team-queue"}


def apply(current: dict[str, Any], change: status.StatusChange) -> dict[str, Any]:
    out = dict(current)
    for key, value in change.patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    EvaluationStatus.model_validate(out)
    return out


def cond(st: dict[str, Any], kind: str) -> dict[str, Any]:
    found = status.condition(st, kind)
    assert found is not None, f"no {kind} condition in {st.get('conditions')}"
    return dict(found)


def job(namespace: str = "a", *, suspend: bool | None = None, ended: str = "") -> dict[str, Any]:
    spec = {} if suspend is None else {"suspend": suspend}
    conditions = [{"type": ended, "status": "True"}] if ended else []
    return {
        "metadata": {"namespace": namespace, "name": "j"},
        "spec": spec,
        "status": {"conditions": conditions},
    }


# --------------------------------------------------------------------------- the Job shape


def test_a_queue_label_makes_a_suspended_job_with_the_label(make_evaluation: Make) -> None:
    built = builders.build_job(make_evaluation(labels=QUEUE), OperatorSettings())
    assert built["spec"]["suspend"] is True
    assert built["metadata"]["labels"][names.LABEL_KUEUE_QUEUE] == "team-queue"
    # The pod template does not carry it: Kueue manages the Job, not its pods.
    assert names.LABEL_KUEUE_QUEUE not in built["spec"]["template"]["metadata"]["labels"]


def test_without_a_queue_label_the_job_starts_at_once(make_evaluation: Make) -> None:
    built = builders.build_job(make_evaluation(), OperatorSettings())
    assert "suspend" not in built["spec"]
    assert names.LABEL_KUEUE_QUEUE not in built["metadata"]["labels"]
    empty = builders.build_job(
        make_evaluation(labels={names.LABEL_KUEUE_QUEUE: ""}), OperatorSettings()
    )
    assert "suspend" not in empty["spec"]


# ------------------------------------------------------------------------ the operator's limits


def test_a_suspended_job_holds_no_slot_but_is_still_active() -> None:
    assert job_state.holds_slot(job())
    assert job_state.holds_slot(job(suspend=False))
    assert not job_state.holds_slot(job(suspend=True))
    assert job_state.is_active_job(job(suspend=True)), "an edited spec still replaces it"
    assert not job_state.holds_slot(job(ended="Complete"))
    jobs = [job("a", suspend=True), job("a", suspend=True), job("a"), job("b", suspend=False)]
    assert fifo.running_per_namespace(jobs) == {"a": 1, "b": 1}


def test_suspended_jobs_do_not_fill_the_limit() -> None:
    running = fifo.running_per_namespace([job("a", suspend=True)] * 3)
    entry = fifo.QueueEntry(T0, "a", "plain")
    assert fifo.decide(entry, [], running, fifo.Limits(max_running=1)).admitted


# ------------------------------------------------------------------------------- the status


def test_waiting_for_kueue_is_queued_with_the_job() -> None:
    change = status.waiting_for_kueue(
        Observed.of({}), 1, "e-g1", "e-results", "team-queue", T0, "ab" * 16
    )
    st = apply({}, change)
    assert st["phase"] == "Queued" and st["jobName"] == "e-g1"
    assert st["resultsConfigMap"] == "e-results" and st["traceID"] == "ab" * 16
    queued = cond(st, ConditionType.QUEUED)
    assert queued["status"] == "True" and queued["reason"] == Reason.WAITING_FOR_KUEUE
    assert queued["message"].startswith("waiting for Kueue admission in queue team-queue")
    assert change.event is not None and change.event.reason == "Queued"
    # The same Job event again changes nothing and posts nothing.
    assert not status.waiting_for_kueue(Observed.of(st), 1, "e-g1", "e-results", "team-queue", T1)


def test_a_suspended_job_without_a_queue_says_so() -> None:
    st = apply({}, status.waiting_for_kueue(Observed.of({}), 1, "e-g1", "e-results", None, T0))
    assert cond(st, ConditionType.QUEUED)["reason"] == Reason.JOB_SUSPENDED
    assert st["message"] == "Job e-g1 is suspended"


def test_admission_then_running_then_success() -> None:
    st = apply({}, status.waiting_for_kueue(Observed.of({}), 1, "e-g1", "e-results", "q", T0))
    assert not status.running(Observed.of({}), 1, "e-g1", T1), "no status of another run is touched"
    admitted = status.unsuspended(Observed.of(st), 1, "e-g1", T1)
    st = apply(st, admitted)
    assert st["phase"] == "Pending" and st["message"] == "Kueue admitted Job e-g1"
    assert cond(st, ConditionType.QUEUED)["status"] == "False"
    assert admitted.event is not None and admitted.event.reason == Reason.ADMITTED
    assert not status.unsuspended(Observed.of(st), 1, "e-g1", T1)
    st = apply(st, status.running(Observed.of(st), 1, "e-g1", T2))
    assert st["phase"] == "Running"


def test_eviction_queues_a_running_evaluation_again_and_final_ones_stay() -> None:
    st = apply({}, status.waiting_for_kueue(Observed.of({}), 1, "e-g1", "e-results", "q", T0))
    st = apply(st, status.unsuspended(Observed.of(st), 1, "e-g1", T1))
    st = apply(st, status.running(Observed.of(st), 1, "e-g1", T1))
    st = apply(st, status.waiting_for_kueue(Observed.of(st), 1, "e-g1", "e-results", "q", T2))
    assert st["phase"] == "Queued" and st["startTime"] == T1
    failed = apply(st, status.failed(Observed.of(st), 1, "e-g1", Reason.JOB_DELETED, "gone", T2))
    assert failed["phase"] == "Failed", "a Job deleted while it waits ends the run"
    assert not status.waiting_for_kueue(Observed.of(failed), 1, "e-g1", "e-results", "q", T2)


def test_a_new_generation_waits_afresh() -> None:
    st = apply({}, status.waiting_for_kueue(Observed.of({}), 1, "e-g1", "e-results", "q", T0))
    st = apply(st, status.failed(Observed.of(st), 1, "e-g1", Reason.JOB_DELETED, "gone", T1))
    st = apply(st, status.waiting_for_kueue(Observed.of(st), 2, "e-g2", "e-results", "q", T2))
    assert st["phase"] == "Queued" and st["observedGeneration"] == 2
    assert status.condition(st, ConditionType.FAILED) is None


# --------------------------------------------------------------- Kueue's reason, as status


PENDING_TEXT = (
    "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default, "
    "previously considered podsets requests (0) + current podset request (600m) > maximum "
    "capacity (500m)"
)


def waiting(queue_name: str = "q") -> dict[str, Any]:
    return apply(
        {}, status.waiting_for_kueue(Observed.of({}), 1, "e-g1", "e-results", queue_name, T0)
    )


def test_kueues_reason_and_message_become_the_queued_condition_and_the_message() -> None:
    st = waiting("team-queue")
    change = status.kueue_waiting(
        Observed.of(st), 1, "e-g1", "team-queue", "Pending", PENDING_TEXT, T1
    )
    st = apply(st, change)
    expected = f"waiting for Kueue admission in queue team-queue: {PENDING_TEXT}"
    assert st["phase"] == "Queued" and st["message"] == expected
    queued = cond(st, ConditionType.QUEUED)
    assert (queued["status"], queued["reason"], queued["message"]) == ("True", "Pending", expected)
    assert queued["lastTransitionTime"] == T0, "still True: the transition time stays"
    assert cond(st, ConditionType.RUNNING)["reason"] == "Pending"
    assert change.event == status.Event("Normal", "Pending", expected)
    # The same reason again: no patch, no event.
    assert not status.kueue_waiting(
        Observed.of(st), 1, "e-g1", "team-queue", "Pending", PENDING_TEXT, T2
    )


def test_a_new_message_with_the_same_reason_is_patched_without_an_event() -> None:
    st = apply(
        waiting(), status.kueue_waiting(Observed.of(waiting()), 1, "e-g1", "q", "Pending", "a", T1)
    )
    change = status.kueue_waiting(Observed.of(st), 1, "e-g1", "q", "Pending", "b", T2)
    assert change.patch["message"] == "waiting for Kueue admission in queue q: b"
    assert change.event is None
    other = status.kueue_waiting(
        Observed.of(st), 1, "e-g1", "q", "Inadmissible", "no LocalQueue", T2
    )
    assert other.event is not None and other.event.reason == "Inadmissible"


def test_an_eviction_is_a_warning_and_says_evicted() -> None:
    st = apply(
        waiting(), status.kueue_waiting(Observed.of(waiting()), 1, "e-g1", "q", "Pending", "a", T1)
    )
    change = status.kueue_waiting(
        Observed.of(st),
        1,
        "e-g1",
        "q",
        "Preempted",
        "Preempted to accommodate a workload",
        T2,
        evicted=True,
    )
    st = apply(st, change)
    assert cond(st, ConditionType.QUEUED)["reason"] == "Preempted"
    assert st["message"] == (
        "evicted by Kueue, waiting for readmission in queue q: Preempted to accommodate a workload"
    )
    assert change.event is not None and change.event.type == "Warning"


def test_kueues_reason_applies_only_while_the_status_shows_that_job_queued() -> None:
    args = ("q", "Pending", "a", T1)
    assert not status.kueue_waiting(Observed.of({}), 1, "e-g1", *args), "no status yet"
    st = waiting()
    assert not status.kueue_waiting(Observed.of(st), 1, "e-g0", *args), "another Job"
    assert not status.kueue_waiting(Observed.of(st), 2, "e-g1", *args), "another generation"
    running = apply(st, status.unsuspended(Observed.of(st), 1, "e-g1", T1))
    assert not status.kueue_waiting(Observed.of(running), 1, "e-g1", *args), "admitted already"
    limited = apply({}, status.queued(Observed.of({}), 1, "2 of 2 evaluations running", T0))
    assert not status.kueue_waiting(Observed.of(limited), 1, "e-g1", *args), (
        "the operator's own queue"
    )


def test_a_reason_that_is_no_condition_reason_falls_back() -> None:
    st = apply(
        waiting(),
        status.kueue_waiting(Observed.of(waiting()), 1, "e-g1", "q", "not a reason!", "x", T1),
    )
    assert cond(st, ConditionType.QUEUED)["reason"] == Reason.WAITING_FOR_KUEUE


def test_job_events_keep_kueues_reason_and_admission_still_says_kueue() -> None:
    st = apply(
        waiting(), status.kueue_waiting(Observed.of(waiting()), 1, "e-g1", "q", "Pending", "a", T1)
    )
    assert not status.waiting_for_kueue(Observed.of(st), 1, "e-g1", "e-results", "q", T2)
    admitted = status.unsuspended(Observed.of(st), 1, "e-g1", T2)
    st = apply(st, admitted)
    assert st["message"] == "Kueue admitted Job e-g1"
    assert cond(st, ConditionType.QUEUED)["reason"] == Reason.ADMITTED
    # Evicted after it ran: Queued again (generic first), then Kueue's reason.
    st = apply(st, status.running(Observed.of(st), 1, "e-g1", T2))
    st = apply(st, status.waiting_for_kueue(Observed.of(st), 1, "e-g1", "e-results", "q", T2))
    assert cond(st, ConditionType.QUEUED)["reason"] == Reason.WAITING_FOR_KUEUE
    st = apply(
        st,
        status.kueue_waiting(Observed.of(st), 1, "e-g1", "q", "Preempted", "p", T2, evicted=True),
    )
    assert st["phase"] == "Queued" and cond(st, ConditionType.QUEUED)["reason"] == "Preempted"


# ---------------------------------------------------------------- Kueue's reason, from a Workload


def condition_of(
    kind: str, state: str, reason: str, message: str = "", at: str = T0
) -> dict[str, Any]:
    return {
        "type": kind,
        "status": state,
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
    }


def workload(*conditions: dict[str, Any], uid: str = "uid-e-g1", **status_: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"job-{uid}",
            "namespace": "a",
            "creationTimestamp": T0,
            "labels": {kueue.LABEL_JOB_UID: uid},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": uid[4:], "uid": uid}
            ],
        },
        "status": {"conditions": list(conditions), **status_},
    }


def test_a_workload_without_quota_waits_with_kueues_reason() -> None:
    wl = workload(condition_of("QuotaReserved", "False", "Pending", PENDING_TEXT))
    assert kueue.workload_reason(wl) == kueue.KueueReason("Pending", PENDING_TEXT, since=T0)
    missing = workload(
        condition_of("QuotaReserved", "False", "Inadmissible", "LocalQueue q doesn't exist")
    )
    found = kueue.workload_reason(missing)
    assert found is not None and found.reason == "Inadmissible"
    assert found.detail == "LocalQueue q doesn't exist"


def test_quota_reserved_but_not_admitted_names_the_pending_checks() -> None:
    wl = workload(
        condition_of("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue c"),
        admissionChecks=[
            {"name": "prov", "state": "Pending", "message": "waiting for capacity"},
            {"name": "done", "state": "Ready"},
        ],
    )
    found = kueue.workload_reason(wl)
    assert found is not None and found.reason == "QuotaReserved"
    assert found.detail == (
        "Quota reserved in ClusterQueue c; admission check prov: Pending (waiting for capacity)"
    )


def test_an_eviction_comes_first_with_what_happened_since() -> None:
    wl = workload(
        condition_of("QuotaReserved", "False", "Pending", PENDING_TEXT),
        condition_of("Admitted", "False", "NoReservation"),
        condition_of("Evicted", "True", "Preempted", "Preempted to accommodate a workload"),
        condition_of("Requeued", "True", "Preempted", "Preempted to accommodate a workload"),
        condition_of("Preempted", "True", "InClusterQueue", "Preempted to accommodate a workload"),
    )
    found = kueue.workload_reason(wl)
    assert found is not None and found.evicted and found.reason == "Preempted"
    assert found.detail == f"Preempted to accommodate a workload; {PENDING_TEXT}"


def test_admitted_finished_or_silent_workloads_give_no_reason() -> None:
    admitted = workload(
        condition_of("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue c"),
        condition_of("Admitted", "True", "Admitted", "The workload is admitted"),
    )
    assert kueue.workload_reason(admitted) is None, "the Job event takes it from here"
    finished = workload(condition_of("Finished", "True", "Succeeded", "Job finished"))
    assert kueue.workload_reason(finished) is None
    assert kueue.workload_reason(workload()) is None


def suspended_job(name: str = "e-g1", namespace: str = "a", **spec: Any) -> dict[str, Any]:
    labels = {**names.labels(name.rsplit("-g", 1)[0], 1), **QUEUE}
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}", "labels": labels},
        "spec": {"suspend": True, **spec},
        "status": {},
    }


def test_which_jobs_wait_for_kueue() -> None:
    found = kueue.waiting_job(suspended_job())
    assert found == kueue.WaitingJob("a", "e", 1, "e-g1", "uid-e-g1", "team-queue")
    assert kueue.waiting_job(suspended_job(suspend=False)) is None
    no_queue = suspended_job()
    del no_queue["metadata"]["labels"][names.LABEL_KUEUE_QUEUE]
    assert kueue.waiting_job(no_queue) is None, "suspended without Kueue: nothing to read"
    ended = suspended_job()
    ended["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
    assert kueue.waiting_job(ended) is None
    assert kueue.waiting_job({"metadata": {"name": "x", "namespace": "a"}}) is None


def test_the_workload_of_a_job_is_found_by_its_owner_reference() -> None:
    job = kueue.waiting_job(suspended_job())
    assert job is not None
    mine = workload(uid="uid-e-g1")
    other = workload(uid="uid-f-g1")
    assert kueue.workload_of([other, mine], job) == mine
    assert kueue.workload_of([other], job) is None
    gone = copy.deepcopy(mine)
    gone["metadata"]["deletionTimestamp"] = T1
    assert kueue.workload_of([gone], job) is None
    assert kueue.selector([job]) == "kueue.x-k8s.io/job-uid in (uid-e-g1)"


# ------------------------------------------------------------------- the watch, in memory


GETS = ("get", "modelevaluations")
PATCHES = ("patch", "modelevaluations/status")


@dataclass
class WorkloadApi:
    """The fake API server's hook (``FakeApiServer.before``) for Kueue's Workload API: the
    versions it serves (others answer 404), an error every list answers instead, and the
    lists asked for, by path and label selector."""

    served: tuple[str, ...] = ("v1beta2", "v1beta1")
    list_error: KubeError | None = None
    lists: list[tuple[str, str | None]] = field(default_factory=list)

    def __call__(self, request: Request) -> None:
        if request.key != ("list", "workloads"):
            return
        self.lists.append((request.path, request.params.get("labelSelector")))
        if self.list_error is not None:
            raise self.list_error
        if request.path.split("/")[3] not in self.served:
            raise KubeError(404, "GET", request.path, '{"reason": "NotFound"}')


@dataclass
class Cluster:
    """A fake API server with namespace ``a``; ``kube`` is the operator's client on it."""

    server: FakeApiServer = field(default_factory=FakeApiServer)
    workload_api: WorkloadApi = field(default_factory=WorkloadApi)

    def __post_init__(self) -> None:
        self.server.add_namespace("a")
        self.server.before = self.workload_api
        self.kube = FakeKube(self.server)
        self.user = FakeKube(self.server)
        """The test's own client (what it writes and reads is not the operator's)."""

    def add(self, name: str, st: dict[str, Any], namespace: str = "a") -> None:
        """The evaluation ``name`` with status ``st`` (replacing the one it has)."""
        path = evaluation_path(namespace, name)
        current = self.user.get_or_none(path)
        if current is None:
            self.server.seed(evaluation_path(namespace), {"metadata": {"name": name}})
            current = {}
        gone = {key: None for key in current.get("status") or {} if key not in st}
        self.user.merge_patch(path + "/status", {"status": {**gone, **st}})

    def status(self, name: str, namespace: str = "a") -> dict[str, Any]:
        """The evaluation's status, which the operator's patches must keep valid."""
        found: dict[str, Any] = self.user.get(evaluation_path(namespace, name)).get("status") or {}
        EvaluationStatus.model_validate(found)
        return found

    def add_workloads(self, *workloads: dict[str, Any]) -> None:
        for wl in workloads:
            self.server.seed(kueue.workloads_path("a"), wl)

    def add_workload_condition(self, name: str, condition: dict[str, Any]) -> None:
        path = f"{kueue.workloads_path('a')}/{name}"
        conditions = self.user.get(path)["status"]["conditions"]
        self.user.merge_patch(
            path + "/status", {"status": {"conditions": [*conditions, condition]}}
        )


def watch(cluster: Cluster, events: list[status.Event]) -> kueue.KueueWatch:
    ctx = Context(
        settings=OperatorSettings(),
        kube=cluster.kube,
        post_event=lambda _obj, event: events.append(event),
        clock=lambda: T1,
    )
    return kueue.KueueWatch(ctx)


def test_the_watch_shows_kueues_reason_once_and_reads_nothing_more_while_it_holds() -> None:
    cluster, events = Cluster(), []
    cluster.add("e", waiting("team-queue"))
    cluster.add(
        "f",
        apply({}, status.waiting_for_kueue(Observed.of({}), 1, "f-g1", "f-r", "team-queue", T0)),
    )
    cluster.add_workloads(
        *(
            workload(condition_of("QuotaReserved", "False", "Pending", PENDING_TEXT), uid=uid)
            for uid in ("uid-e-g1", "uid-f-g1")
        )
    )
    kube = cluster.kube
    w = watch(cluster, events)
    assert w.poll() == {}, "nothing waits: nothing is read"
    assert not kube.requests
    w.observe(suspended_job("e-g1"))
    w.observe(suspended_job("f-g1"))
    done = w.poll()
    assert set(done) == {"a/e-g1", "a/f-g1"} and done["a/e-g1"].startswith("Pending: ")
    assert kube.requests[("list", "workloads")] == 1, "one list per namespace per tick"
    assert cluster.workload_api.lists[0][1] == "kueue.x-k8s.io/job-uid in (uid-e-g1,uid-f-g1)"
    assert cond(cluster.status("e"), ConditionType.QUEUED)["reason"] == "Pending"
    assert [e.reason for e in events] == ["Pending", "Pending"]
    gets, patches = kube.requests[GETS], kube.requests[PATCHES]
    assert w.poll() == {"a/e-g1": "unchanged", "a/f-g1": "unchanged"}
    assert (kube.requests[GETS], kube.requests[PATCHES], len(events)) == (gets, patches, 2)

    # Kueue's reason changes: patched, with an Event; the Job unsuspended: forgotten.
    cluster.add_workload_condition(
        "job-uid-e-g1",
        condition_of("Evicted", "True", "Deactivated", "The workload is deactivated", T1),
    )
    w.poll()
    st = cluster.status("e")
    assert cond(st, ConditionType.QUEUED)["reason"] == "Deactivated"
    assert events[-1].type == "Warning" and len(events) == 3
    w.observe(suspended_job("e-g1", suspend=False))
    w.observe(suspended_job("f-g1"), deleted=True)
    assert w.waiting() == []


def test_a_status_not_yet_queued_is_tried_again_at_the_next_tick() -> None:
    cluster, events = Cluster(), []
    cluster.add("e", {})  # the Job event that makes it Queued has not been handled yet
    cluster.add_workloads(workload(condition_of("QuotaReserved", "False", "Pending", "x")))
    w = watch(cluster, events)
    w.observe(suspended_job())
    assert w.poll() == {"a/e-g1": "not queued"}
    cluster.add("e", waiting())
    assert w.poll()["a/e-g1"] == "Pending: x"
    assert w.poll()["a/e-g1"] == "unchanged"


def test_without_kueue_the_watch_does_nothing_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster, events = Cluster(), []
    cluster.add("e", waiting())
    cluster.workload_api.served = ()
    w = watch(cluster, events)
    w.observe(suspended_job())
    with caplog.at_level(logging.INFO, logger="mlmodelscope.controller.kueue"):
        assert w.poll() == {}
        assert w.poll() == {}
    assert [p for p, _ in cluster.workload_api.lists] == [
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/a/workloads",
        "/apis/kueue.x-k8s.io/v1beta1/namespaces/a/workloads",
    ] * 2
    said = [r.getMessage() for r in caplog.records if "not served" in r.getMessage()]
    assert len(said) == 1 and not events
    assert cluster.kube.requests == {("list", "workloads"): 4}


def test_an_older_kueue_is_read_as_v1beta1_and_remembered() -> None:
    cluster, events = Cluster(), []
    cluster.add("e", waiting())
    cluster.workload_api.served = ("v1beta1",)
    cluster.add_workloads(workload(condition_of("QuotaReserved", "False", "Pending", "x")))
    w = watch(cluster, events)
    w.observe(suspended_job())
    w.poll()
    cluster.workload_api.lists.clear()
    w.poll()
    lists = [p for p, _ in cluster.workload_api.lists]
    assert lists == ["/apis/kueue.x-k8s.io/v1beta1/namespaces/a/workloads"]
    assert cond(cluster.status("e"), ConditionType.QUEUED)["reason"] == "Pending"


def test_no_rbac_on_workloads_is_said_once_and_never_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster, events = Cluster(), []
    cluster.add("e", waiting())
    api = cluster.workload_api
    api.list_error = KubeError(403, "GET", "/apis/kueue.x-k8s.io", '{"reason": "Forbidden"}')
    w = watch(cluster, events)
    w.observe(suspended_job())
    with caplog.at_level(logging.WARNING, logger="mlmodelscope.controller.kueue"):
        assert w.poll() == {} and w.poll() == {}
    said = [r for r in caplog.records if "workloads.kueue.x-k8s.io" in r.getMessage()]
    assert len(said) == 1
    api.list_error = KubeError(500, "GET", "/apis/kueue.x-k8s.io", "boom")
    assert w.poll() == {}, "a failing API server is tried again next tick"
    assert cluster.kube.requests == {("list", "workloads"): 3}


def test_the_watch_thread_starts_and_stops() -> None:
    w = watch(Cluster(), [])
    w.seconds = 0.01
    w.start()
    w.stop()
    assert w._thread is None


def test_the_poll_interval_is_a_setting() -> None:
    assert OperatorSettings.from_env({}).kueue_poll_seconds == 5.0
    env = {"MLMS_OPERATOR_KUEUE_POLL_SECONDS": "1.5"}
    assert OperatorSettings.from_env(env).kueue_poll_seconds == 1.5
    with pytest.raises(SettingsError, match="MLMS_OPERATOR_KUEUE_POLL_SECONDS"):
        OperatorSettings.from_env({"MLMS_OPERATOR_KUEUE_POLL_SECONDS": "0"})
