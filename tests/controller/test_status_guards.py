"""The status transitions' guards, on the typed status: which transitions a status refuses
(a run that ended, a stale generation, another Job), what a status that does not validate
still says, patches keyed by the CRD's names, and one parse of the status per read."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from result_docs import row

from fakes import FakeApiServer, FakeKube
from mlmodelscope.contract.kube import evaluation_path
from mlmodelscope.controller import names, resync, status
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.handlers import handle_job
from mlmodelscope.controller.results import Outcome
from mlmodelscope.controller.runs import Handled
from mlmodelscope.controller.settings import OperatorSettings
from mlmodelscope.controller.status import Observed, Reason
from mlmodelscope.spec.status import EvaluationStatus, LatencySummary

T0, T1, T2 = "2026-11-22T08:00:00Z", "2026-11-22T08:01:00Z", "2026-11-22T08:02:00Z"
ALIASES = {info.alias or name for name, info in EvaluationStatus.model_fields.items()}
"""The keys a status patch may have: the CRD's (camelCase) names of the status fields."""

Transition = Callable[[Observed, int, str], status.StatusChange]
"""A transition of the run of (generation, Job name), with its other arguments fixed."""

SUCCESS = Outcome(
    status="Succeeded",
    run_id="run-1",
    generation=1,
    rows=[row(1, latency_ms=LatencySummary(p50=0.2), throughput=5000.0)],
)

RUN_TRANSITIONS: dict[str, Transition] = {
    "queued": lambda st, g, job: status.queued(st, g, "2 of 2 running", T2),
    "job_created": lambda st, g, job: status.job_created(st, g, job, "e-results", None, T2),
    "waiting_for_kueue": lambda st, g, job: status.waiting_for_kueue(
        st, g, job, "e-results", "q", T2
    ),
    "kueue_waiting": lambda st, g, job: status.kueue_waiting(
        st, g, job, "q", "Pending", "no quota", T2
    ),
    "unsuspended": lambda st, g, job: status.unsuspended(st, g, job, T2),
    "unschedulable": lambda st, g, job: status.unschedulable(st, g, job, "0/3 nodes", T2),
    "scheduled": lambda st, g, job: status.scheduled(st, g, job, "node-1", T2),
    "pod_disrupted": lambda st, g, job: status.pod_disrupted(st, g, job, "evicted", T2),
    "running": lambda st, g, job: status.running(st, g, job, T2),
    "succeeded": lambda st, g, job: status.succeeded(st, g, job, SUCCESS, T2),
    "failed": lambda st, g, job: status.failed(st, g, job, Reason.JOB_DELETED, "gone", T2),
    "job_rejected": lambda st, g, job: status.job_rejected(st, g, job, "invalid", T2),
}
"""Every transition of a run, from admission to its end."""

ACTIVE_RUN = (
    "kueue_waiting",
    "unsuspended",
    "unschedulable",
    "scheduled",
    "pod_disrupted",
    "running",
    "succeeded",
    "failed",
)
"""The transitions of a run's Job: only while the status shows that Job's run unfinished."""

RECORD_TRANSITIONS: dict[str, Transition] = {
    "recorded": lambda st, g, job: status.recorded(st, g, "run-1", T2),
    "record_pending": lambda st, g, job: status.record_pending(st, g, "run-1", "down"),
    "not_recorded": lambda st, g, job: status.not_recorded(st, g, "run-1", "no document"),
}


def apply(current: dict[str, Any], change: status.StatusChange) -> dict[str, Any]:
    """JSON merge patch of the top-level keys, as the API server applies the operator's."""
    out = dict(current)
    for key, value in change.patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def through(st: dict[str, Any], *steps: Transition, generation: int = 1) -> dict[str, Any]:
    job = f"e-g{generation}"
    for step in steps:
        st = apply(st, step(Observed.of(st), generation, job))
    return st


def succeeded_run() -> dict[str, Any]:
    t = RUN_TRANSITIONS
    return through({}, t["job_created"], t["running"], t["succeeded"])


def failed_run() -> dict[str, Any]:
    t = RUN_TRANSITIONS
    return through({}, t["job_created"], t["running"], t["failed"])


def invalid_run() -> dict[str, Any]:
    return apply({}, status.invalid_spec(Observed.of({}), 1, "spec.model.uri: missing", T0))


def running_run(generation: int = 1) -> dict[str, Any]:
    t = RUN_TRANSITIONS
    return through({}, t["job_created"], t["running"], generation=generation)


ENDED = {"succeeded": succeeded_run, "failed": failed_run, "invalid spec": invalid_run}


@pytest.mark.parametrize("ended", ENDED)
@pytest.mark.parametrize("transition", RUN_TRANSITIONS)
def test_no_transition_of_a_run_touches_a_run_that_ended(ended: str, transition: str) -> None:
    st = ENDED[ended]()
    assert RUN_TRANSITIONS[transition](Observed.of(st), 1, "e-g1") is status.NO_CHANGE


@pytest.mark.parametrize("transition", [*ACTIVE_RUN, *RECORD_TRANSITIONS])
def test_an_older_generations_news_is_ignored(transition: str) -> None:
    """The status describes generation 2's run: what generation 1's Job (or its record)
    says changes nothing."""
    st = running_run(generation=2)
    step = {**RUN_TRANSITIONS, **RECORD_TRANSITIONS}[transition]
    assert step(Observed.of(st), 1, "e-g1") is status.NO_CHANGE


@pytest.mark.parametrize("transition", ACTIVE_RUN)
def test_another_jobs_news_is_ignored(transition: str) -> None:
    st = running_run()
    assert RUN_TRANSITIONS[transition](Observed.of(st), 1, "e-g0") is status.NO_CHANGE


@pytest.mark.parametrize("transition", ACTIVE_RUN)
def test_a_status_that_names_no_phase_is_no_active_run(transition: str) -> None:
    """The typed model's default phase (Pending) is not something such a status says."""
    st = {"observedGeneration": 1, "jobName": "e-g1"}
    assert RUN_TRANSITIONS[transition](Observed.of(st), 1, "e-g1") is status.NO_CHANGE
    assert status.job_created(Observed.of(st), 1, "e-g1", "e-results", None, T1)


@pytest.mark.parametrize(
    ("ended", "transition", "changes"),
    [
        (invalid_run, status.invalid_spec, False),  # the same spec seen again
        (invalid_run, status.policy_denied, True),  # another reason: written
        (succeeded_run, status.invalid_spec, True),
    ],
)
def test_a_refusal_is_written_once_per_reason(
    ended: Callable[[], dict[str, Any]],
    transition: Callable[[Observed, int, str, str], status.StatusChange],
    changes: bool,
) -> None:
    change = transition(Observed.of(ended()), 1, "spec.model.uri: missing", T1)
    assert bool(change) is changes


@pytest.mark.parametrize(
    ("record", "transition", "changes"),
    [
        (None, "recorded", True),
        (None, "record_pending", True),
        (None, "not_recorded", True),
        ("Pending", "recorded", True),
        ("Pending", "not_recorded", True),
        ("Recorded", "recorded", False),
        ("Recorded", "record_pending", False),
        ("Recorded", "not_recorded", False),
        ("NotRecorded", "not_recorded", False),
    ],
)
def test_record_transitions_by_the_state_they_find(
    record: str | None, transition: str, changes: bool
) -> None:
    st = succeeded_run()
    if record is not None:
        st["record"] = {"state": record, "runId": "run-1", "attempts": 1}
    change = RECORD_TRANSITIONS[transition](Observed.of(st), 1, "e-g1")
    assert bool(change) is changes
    if changes and record is not None:
        assert change.patch["record"]["attempts"] >= 1


def test_a_record_about_another_run_counts_as_none() -> None:
    st = {**succeeded_run(), "record": {"state": "Recorded", "runId": "run-0", "attempts": 3}}
    change = status.recorded(Observed.of(st), 1, "run-1", T2)
    assert change.patch["record"]["attempts"] == 1


def test_a_field_that_does_not_validate_leaves_the_others_deciding() -> None:
    """Hand-edited or from another operator version: the guards read what does validate."""
    st = {**running_run(), "stack": {"framework": ["not", "a", "string"]}}
    assert status.running(Observed.of(st), 1, "e-g1", T2) is status.NO_CHANGE
    done = status.succeeded(Observed.of(st), 1, "e-g1", SUCCESS, "2026-11-22T09:00:00Z")
    assert done.patch["phase"] == "Succeeded" and done.patch["startTime"] == st["startTime"]


def test_conditions_the_typed_model_cannot_read_are_carried_over_unchanged() -> None:
    """A patch carries the raw conditions it does not change, so another writer's condition,
    even one the typed model rejects, stays exactly as written."""
    foreign = {"type": "ExternalCheck", "status": "Maybe", "note": "not metav1"}
    st = running_run()
    st["conditions"] = [*st["conditions"], foreign]
    assert status.read_status(st).conditions == []
    change = status.pod_disrupted(Observed.of(st), 1, "e-g1", "evicted", T2)
    assert change.patch["conditions"][-1] == foreign
    assert change.patch["conditions"][-1] is not foreign  # a copy, never the read itself


def every_change() -> Iterator[status.StatusChange]:
    """The changes of a run through every phase, its record, and the next generation."""
    t = {**RUN_TRANSITIONS, **RECORD_TRANSITIONS}
    st: dict[str, Any] = {}
    order = ("queued", "waiting_for_kueue", "kueue_waiting", "unsuspended", "unschedulable")
    order += ("scheduled", "running", "pod_disrupted", "running", "succeeded", "record_pending")
    for name in (*order, "recorded"):
        change = t[name](Observed.of(st), 1, "e-g1")
        assert change, name
        yield change
        st = apply(st, change)
    yield status.job_created(Observed.of(st), 2, "e-g2", "e-results", "ab" * 16, T2)


def test_patches_are_keyed_by_the_crds_names_and_fit_its_schema() -> None:
    st: dict[str, Any] = {}
    for change in every_change():
        assert set(change.patch) <= ALIASES
        st = apply(st, change)
        EvaluationStatus.model_validate(st)
    assert [h["generation"] for h in st["history"]] == [1]


# --------------------------------------------------------------- one parse per status read


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The statuses :func:`.status.read_status` parses, in order."""
    seen: list[dict[str, Any]] = []
    real = status.read_status

    def counting(raw: Any) -> EvaluationStatus:
        seen.append(dict(raw))
        return real(raw)

    monkeypatch.setattr(status, "read_status", counting)
    return seen


def pending_world() -> tuple[Context, FakeKube, dict[str, Any]]:
    """An evaluation whose status shows its Job e-g1 Pending, on a fake API server; and that
    Job, with a ready pod, as its event brings it."""
    server = FakeApiServer()
    server.add_namespace("a")
    pending = through({}, RUN_TRANSITIONS["job_created"])
    evaluation = server.seed(evaluation_path("a"), {"metadata": {"name": "e"}, "status": pending})
    kube = FakeKube(server)
    ctx = Context(settings=OperatorSettings(), kube=kube, clock=lambda: T1)
    meta = {
        "name": "e-g1",
        "namespace": "a",
        "uid": "job-uid",
        "labels": names.labels("e", 1),
        "ownerReferences": [{"uid": evaluation["metadata"]["uid"]}],
    }
    return ctx, kube, {"metadata": meta, "status": {"active": 1, "ready": 1}}


def test_update_status_computes_from_the_read_it_is_given() -> None:
    ctx, kube, _ = pending_world()
    known = kube.get(evaluation_path("a", "e"))
    observed = Observed.of(known["status"])
    given: list[Observed] = []

    def compute(st: Observed) -> status.StatusChange:
        given.append(st)
        return status.NO_CHANGE

    ctx.update_status("a", "e", compute, known=known, observed=observed)
    assert given == [observed] and given[0] is observed
    # A read of another status is not used for this one.
    ctx.update_status("a", "e", compute, known=known, observed=Observed.of({}))
    assert given[1] is not observed and given[1].raw is known["status"]


def test_a_job_event_parses_the_status_once(parses: list[dict[str, Any]]) -> None:
    ctx, kube, job = pending_world()
    parses.clear()
    assert handle_job.job_changed(job, ctx) is Handled.RUNNING
    assert kube.get(evaluation_path("a", "e"))["status"]["phase"] == "Running"
    assert [p["phase"] for p in parses] == ["Pending"]


def test_a_resync_parses_the_status_once(parses: list[dict[str, Any]]) -> None:
    ctx, kube, job = pending_world()
    listed = kube.get(evaluation_path("a", "e"))
    parses.clear()
    assert resync.resync_one(ctx, listed, {("a", "e-g1"): job}) is Handled.RUNNING
    assert [p["phase"] for p in parses] == ["Pending"]
