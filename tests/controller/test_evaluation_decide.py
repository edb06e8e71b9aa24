"""The evaluation handler's decision, one row per situation, with no API server: what the
reconcile sees of the evaluation, what decide answers round by round (a read, or the actions
to take), given what the reads and actions find. Then the real handler on the fake API
server: its requests follow those rounds in order. What the actions write is the reconcile
table's (test_reconcile.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_args

import pytest
from meval_docs import evaluation_doc
from result_docs import row, summary

from fakes import FakeApiServer, FakeKube, Request
from mlmodelscope.contract.kube import configmap_path, evaluation_path, job_path
from mlmodelscope.contract.wire import SUMMARY_KEY
from mlmodelscope.controller import status
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.handlers.handle_evaluation import (
    FINAL,
    NOTHING_FOUND,
    Action,
    Admit,
    DeleteOutdatedJobs,
    EnforcePolicy,
    EnsureChildren,
    FinishPublished,
    Found,
    InvalidSpec,
    ListedJob,
    Need,
    Nothing,
    Refuse,
    Seen,
    Skip,
    decide,
    evaluation_changed,
)
from mlmodelscope.controller.results import Outcome
from mlmodelscope.controller.runs import InvalidSpecError
from mlmodelscope.controller.runtime.fanout import Fanout
from mlmodelscope.controller.settings import OperatorSettings
from mlmodelscope.spec import parse_evaluation

NAMESPACE = "team-a"
EVALUATION = parse_evaluation(evaluation_doc("e", NAMESPACE))
PROBLEMS = "spec.model.format: Input should be 'onnx'"
RESULT = Outcome(status="Succeeded", run_id="run-1", generation=1, rows=[row()])
FAILURE = Outcome(status="Failed", run_id="run-2", generation=2, error="CUDA out of memory")
ONE_BY_ONE = Fanout(1)
"""The children created one after another, so the order of requests is the same each run."""

Step = Need | tuple[Action, ...]
"""What decide answers in one round: a read, or the actions to take."""


def seen(generation: int = 1, st: dict[str, Any] | None = None, **fields: Any) -> Seen:
    """Evaluation team-a/e at ``generation`` (also its latest unless given), status ``st``."""
    fields.setdefault("latest_generation", generation)
    return Seen(NAMESPACE, "e", generation, status=status.read_status(st or {}), **fields)


def run_status(phase: str, generation: int = 1) -> dict[str, Any]:
    return {"phase": phase, "observedGeneration": generation, "jobName": f"e-g{generation}"}


def job(generation: int, owned: bool = True, active: bool = True) -> ListedJob:
    """Job e-g<generation> as the listing shows it."""
    return ListedJob(f"e-g{generation}", str(generation), owned, active)


@dataclass(frozen=True)
class Row:
    """What the reconcile sees (``seen``), what decide answers round by round (``steps``, the
    last one final), and what the reads and actions find (``facts``)."""

    seen: Seen
    steps: tuple[Step, ...]
    facts: Found = field(default=NOTHING_FOUND)


VALID = Found(evaluation=EVALUATION)
INVALID = Found(problems=PROBLEMS)
PREPARE = (EnforcePolicy(), EnsureChildren())
ADMIT = (Admit(),)


def nothing(why: Skip) -> tuple[Step, ...]:
    return ((Nothing(why),),)


ROWS: dict[str, Row] = {
    # Nothing to do, decided on the evaluation as read: its spec is not even validated.
    "evaluation gone": Row(seen(gone=True), nothing(Skip.GONE)),
    "a newer generation exists": Row(seen(latest_generation=2), nothing(Skip.STALE)),
    "this generation succeeded": Row(seen(st=run_status("Succeeded")), nothing(Skip.FINISHED)),
    "this generation failed": Row(seen(st=run_status("Failed")), nothing(Skip.FINISHED)),
    # A run to start, or to carry on.
    "a new evaluation": Row(seen(), (Need.SPEC, PREPARE, ADMIT), VALID),
    "its run goes on (a restart)": Row(
        seen(st=run_status("Running")), (Need.SPEC, PREPARE, ADMIT), VALID
    ),
    "a status phase none of ours": Row(
        seen(st={**run_status("Succeeded"), "phase": "Paused"}), (Need.SPEC, PREPARE, ADMIT), VALID
    ),
    "an earlier generation ended": Row(
        seen(2, st=run_status("Succeeded", 1)),
        (Need.SPEC, Need.OUTDATED_JOBS, PREPARE, ADMIT),
        dataclasses.replace(VALID, jobs=(job(1, active=False),)),
    ),
    # An edit replaces the run of the generation before.
    "an edit: the run it replaces is deleted": Row(
        seen(2),
        (Need.SPEC, Need.OUTDATED_JOBS, (DeleteOutdatedJobs(("e-g1",)), *PREPARE), ADMIT),
        dataclasses.replace(VALID, jobs=(job(1),)),
    ),
    "edits in a row: every earlier run still going is deleted": Row(
        seen(3),
        (Need.SPEC, Need.OUTDATED_JOBS, (DeleteOutdatedJobs(("e-g1", "e-g2")), *PREPARE), ADMIT),
        dataclasses.replace(VALID, jobs=(job(1), job(2))),
    ),
    "an edit: finished, foreign and its own Jobs stay": Row(
        seen(2),
        (Need.SPEC, Need.OUTDATED_JOBS, PREPARE, ADMIT),
        dataclasses.replace(VALID, jobs=(job(1, active=False), job(1, owned=False), job(2))),
    ),
    # An invalid spec: Failed first, then the run it replaces deleted.
    "invalid spec": Row(seen(), (Need.SPEC, (InvalidSpec(PROBLEMS), Refuse(PROBLEMS))), INVALID),
    "invalid spec on an edit: the run it replaces is deleted": Row(
        seen(2),
        (
            Need.SPEC,
            (InvalidSpec(PROBLEMS),),
            Need.OUTDATED_JOBS,
            (DeleteOutdatedJobs(("e-g1",)), Refuse(PROBLEMS)),
        ),
        dataclasses.replace(INVALID, jobs=(job(1),)),
    ),
    "invalid spec on an edit, nothing running": Row(
        seen(2),
        (Need.SPEC, (InvalidSpec(PROBLEMS),), Need.OUTDATED_JOBS, (Refuse(PROBLEMS),)),
        dataclasses.replace(INVALID, jobs=(job(1, active=False),)),
    ),
    # The agent published this generation's result already.
    "already ran: its Job is gone": Row(
        seen(),
        (Need.SPEC, PREPARE, Need.JOB, (FinishPublished(RESULT),)),
        dataclasses.replace(VALID, published=RESULT),
    ),
    "published, its Job still there (its events end the run)": Row(
        seen(),
        (Need.SPEC, PREPARE, Need.JOB, ADMIT),
        dataclasses.replace(VALID, published=RESULT, job_exists=True),
    ),
    "an edit that already ran (and failed)": Row(
        seen(2),
        (
            Need.SPEC,
            Need.OUTDATED_JOBS,
            (DeleteOutdatedJobs(("e-g1",)), *PREPARE),
            Need.JOB,
            (FinishPublished(FAILURE),),
        ),
        dataclasses.replace(VALID, jobs=(job(1),), published=FAILURE),
    ),
}

FILLS = {
    Need.SPEC: ("evaluation", "problems"),
    Need.OUTDATED_JOBS: ("jobs",),
    Need.JOB: ("job_exists",),
}
"""The fields of :class:`Found` each read fills (EnsureChildren fills ``published``)."""


def decided(row: Row) -> list[Step]:
    """Decide as the handler does, each round revealing only what the reads asked for and the
    actions done so far found (``row.facts``): a decision that looked at a fact it did not
    ask for sees nothing."""
    found, steps = NOTHING_FOUND, list[Step]()
    while len(steps) < 10:
        step = decide(row.seen, found)
        if isinstance(step, Need):
            assert not step & found.read, f"asked again for {step}"
            steps.append(step)
            shown = {name: getattr(row.facts, name) for name in FILLS[step]}
            found = dataclasses.replace(found, read=found.read | step, **shown)
            continue
        steps.append(step.actions)
        assert not any(isinstance(a, FINAL) for a in step.actions[:-1]), step
        if step.final:
            return steps
        found = dataclasses.replace(found, done=found.done + step.actions)
        if EnsureChildren() in step.actions:
            found = dataclasses.replace(found, published=row.facts.published)
    raise AssertionError(f"no final decision in {steps}")


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_decide(row: Row) -> None:
    assert tuple(decided(row)) == row.steps


def one_by_one(steps: tuple[Step, ...]) -> list[Need | type]:
    """The reads and the kinds of action of ``steps``, in order."""
    return [
        kind
        for step in steps
        for kind in ([step] if isinstance(step, Need) else [type(a) for a in step])
    ]


def test_the_table_covers_every_read_and_action() -> None:
    steps = [kind for r in ROWS.values() for kind in one_by_one(r.steps)]
    assert {s for s in steps if isinstance(s, Need)} == set(FILLS)
    assert {s for s in steps if not isinstance(s, Need)} == set(get_args(Action))
    actions = [a for r in ROWS.values() for s in r.steps if not isinstance(s, Need) for a in s]
    assert {a.why for a in actions if isinstance(a, Nothing)} == set(Skip)


# ------------------------------------------------------------- the handler, in that order

STATUS = {("get", "modelevaluations"), ("patch", "modelevaluations/status")}
CHILDREN = {
    (verb, resource)
    for verb in ("create", "get", "patch")
    for resource in ("configmaps", "serviceaccounts", "roles", "rolebindings")
}
MAKES: dict[Need | type, set[tuple[str, str]]] = {
    Need.SPEC: {("get", "models")},
    Need.OUTDATED_JOBS: {("list", "jobs")},
    Need.JOB: {("get", "jobs")},
    InvalidSpec: STATUS,
    DeleteOutdatedJobs: {("delete", "jobs")},
    EnforcePolicy: {("get", "namespaces")} | STATUS,
    EnsureChildren: CHILDREN,
    FinishPublished: STATUS,
    Admit: {("create", "jobs"), ("get", "jobs")} | STATUS,
    Nothing: set(),
    Refuse: set(),
}
"""The requests (verb, resource) each read and action may make."""


def made_by(requests: list[tuple[str, str]], steps: tuple[Step, ...]) -> list[Need | type]:
    """The reads and actions of ``steps`` that made ``requests``, in order, each request
    taken as made by the step at hand or else by the next one that makes such requests."""
    flat = one_by_one(steps)
    at, made = 0, list[tuple[int, Need | type]]()
    for request in requests:
        while at < len(flat) and request not in MAKES[flat[at]]:
            at += 1
        assert at < len(flat), f"{request}: no step left makes it ({requests})"
        if not made or made[-1][0] != at:
            made.append((at, flat[at]))
    return [step for _, step in made]


def new_world() -> tuple[FakeKube, dict[str, Any]]:
    kube = FakeKube(FakeApiServer())
    kube.server.add_namespace(NAMESPACE)
    return kube, kube.server.seed(evaluation_path(NAMESPACE), evaluation_doc("e", NAMESPACE))


def reconcile(kube: FakeKube, body: Mapping[str, Any]) -> tuple[str, list[tuple[str, str]]]:
    """Run the handler on ``body`` with a fresh operator (the namespace's policy not cached);
    returns what it reported (or the error it
    raised) and its requests, in order."""
    requests: list[tuple[str, str]] = []

    def note(request: Request) -> None:
        requests.append(request.key)

    kube.server.before = note
    ctx = Context(settings=OperatorSettings(), kube=kube, fanout=ONE_BY_ONE)
    try:
        reported = evaluation_changed(body, ctx)
    except InvalidSpecError as exc:
        reported = f"InvalidSpecError: {exc}"
    finally:
        kube.server.before = None
    return reported, requests


def started(edit: dict[str, Any] | None = None) -> tuple[FakeKube, dict[str, Any]]:
    """Evaluation e reconciled once (its Job e-g1 created), then its spec edited if given;
    returns the evaluation as the API server has it."""
    kube, body = new_world()
    reconcile(kube, body)
    if edit is not None:
        return kube, kube.merge_patch(evaluation_path(NAMESPACE, "e"), {"spec": edit})
    return kube, kube.get(evaluation_path(NAMESPACE, "e"))


def published(delete_job: bool) -> tuple[FakeKube, dict[str, Any]]:
    """The agent published generation 1's result; its Job deleted if ``delete_job``."""
    kube, body = started()
    done = {"data": {SUMMARY_KEY: summary(generation=1).model_dump_json()}}
    kube.merge_patch(configmap_path(NAMESPACE, "e-results"), done)
    if delete_job:
        kube.delete(job_path(NAMESPACE, "e-g1"))
    return kube, body


World = Callable[[], tuple[FakeKube, dict[str, Any]]]
SCENARIOS: dict[str, tuple[World, str]] = {
    # row: (the world before the reconcile, what it reports)
    "a new evaluation": (new_world, "job created"),
    "an edit: the run it replaces is deleted": (lambda: started({"timeout": "5m"}), "job created"),
    "invalid spec on an edit: the run it replaces is deleted": (
        lambda: started({"model": {"format": "keras"}}),
        "InvalidSpecError: spec.model.format: Input should be 'onnx'",
    ),
    "already ran: its Job is gone": (lambda: published(delete_job=True), "already ran: succeeded"),
    "published, its Job still there (its events end the run)": (
        lambda: published(delete_job=False),
        "job exists",
    ),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_handler_reads_and_acts_in_the_order_decide_asks(name: str) -> None:
    """The real handler's requests, in order, are those of the row's reads and actions, in
    the row's order (reads and actions that make no request here left out)."""
    world, reports = SCENARIOS[name]
    reported, requests = reconcile(*world())
    assert reported.startswith(reports)
    silent = (Need.SPEC, Nothing, Refuse)  # a spec without a modelRef reads nothing
    steps = ROWS[name].steps
    expected = [kind for kind in one_by_one(steps) if kind not in silent]
    assert made_by(requests, steps) == expected, requests
