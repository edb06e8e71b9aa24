"""A ModelEvaluation was created, its spec changed, or the operator (re)started and found it.

Level-based: whatever happened before, make the cluster match the current generation. A run
that already ended is left alone (so a restart or a GitOps re-apply of the same spec starts
nothing); otherwise the spec is validated, Jobs of older generations are removed, the
children the Job needs are made current (:mod:`..children`), and the Job is created once
admission allows it (:mod:`..admission.admit`).

Read, decide, act, as for Jobs (:mod:`.handle_job`): :func:`evaluation_changed` types what it
sees of the evaluation (:class:`Seen`); :func:`decide`, which makes no request, answers with
the read it needs next (:class:`Need`) or with the actions to take next (:class:`Decision`);
:func:`act` is the one place that performs them. Some reads follow writes (the published
result is in the results ConfigMap as :func:`..children.ensure` leaves it; an invalid spec's
status is written before the outdated Jobs are listed), so one reconcile may act more than
once: it ends with a decision whose last action is final.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Flag, StrEnum, auto
from typing import Any, Final, assert_never

from mlmodelscope.contract.kube import evaluation_path, job_path
from mlmodelscope.contract.redact import redact_text
from mlmodelscope.controller import children, job_state, names, runs, status
from mlmodelscope.controller.admission.admit import admit, enforce_policy
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.results import Outcome
from mlmodelscope.controller.runs import InvalidSpecError
from mlmodelscope.controller.specs import parse_body
from mlmodelscope.spec import ModelEvaluation, SpecValidationError
from mlmodelscope.spec.status import EvaluationStatus

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------- the decision


class Skip(StrEnum):
    """Why a reconcile leaves the evaluation alone (what it reports)."""

    GONE = "gone"
    """The evaluation no longer exists, or is being deleted."""
    STALE = "stale"
    """A newer generation exists; its own update event handles it."""
    FINISHED = "finished"
    """The run of this generation ended."""


@dataclass(frozen=True)
class Seen:
    """What the reconcile sees of the evaluation, typed: :func:`decide`'s input."""

    namespace: str
    name: str
    generation: int
    """The generation the queued event names."""
    gone: bool = False
    """The evaluation no longer exists, or is being deleted."""
    latest_generation: int = 1
    """The evaluation's ``metadata.generation`` as read."""
    status: EvaluationStatus = field(default_factory=EvaluationStatus)
    """The evaluation's status (:func:`.status.read_status`)."""

    @classmethod
    def of(
        cls, namespace: str, name: str, generation: int, current: Mapping[str, Any] | None
    ) -> Seen:
        """``current``: the evaluation as read (None: not found)."""
        if current is None or current["metadata"].get("deletionTimestamp"):
            return cls(namespace, name, generation, gone=True)
        return cls(
            namespace,
            name,
            generation,
            latest_generation=int(current["metadata"].get("generation") or 1),
            status=status.read_status(current.get("status") or {}),
        )


class Need(Flag):
    """A read :func:`decide` asks for before it can decide."""

    NONE = 0
    """Nothing read yet (what :class:`Found` starts from)."""
    SPEC = auto()
    """The spec validated (:func:`..specs.parse_body`, which reads the Model a ``modelRef``
    names): the evaluation, or what is wrong with it."""
    OUTDATED_JOBS = auto()
    """This evaluation's Jobs, listed by label. Never asked for a first generation: it has no
    earlier Jobs (an older evaluation's of the same name belong to another UID)."""
    JOB = auto()
    """Whether this generation's Job exists."""


@dataclass(frozen=True)
class ListedJob:
    """One of the evaluation's Jobs as listed: what deciding to delete it looks at."""

    name: str
    generation: str | None
    """Its generation label."""
    owned: bool
    """This evaluation's (by owner UID), not an earlier evaluation's of the same name, which
    is the garbage collector's."""
    active: bool
    """Not ended and not being deleted (:func:`..job_state.is_active_job`)."""

    @classmethod
    def of(cls, job: Mapping[str, Any], uid: str | None) -> ListedJob:
        meta = job["metadata"]
        return cls(
            name=str(meta["name"]),
            generation=(meta.get("labels") or {}).get(names.LABEL_GENERATION),
            owned=names.owned_by(job, uid),
            active=job_state.is_active_job(job),
        )


@dataclass(frozen=True)
class Nothing:
    """Final: leave the evaluation alone; the reconcile reports ``why``."""

    why: Skip


@dataclass(frozen=True)
class InvalidSpec:
    """End the run Failed/InvalidSpec with ``message`` (:func:`.status.invalid_spec`)."""

    message: str


@dataclass(frozen=True)
class Refuse:
    """Final: raise InvalidSpecError(``message``), which is not retried: the spec must change."""

    message: str


@dataclass(frozen=True)
class DeleteOutdatedJobs:
    """Delete these Jobs: an edited spec replaces the run, it does not queue behind it."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class EnforcePolicy:
    """Check the operator's policy (:func:`..admission.admit.enforce_policy`, which ends a
    refused run Failed/PolicyDenied and raises PolicyDeniedError)."""


@dataclass(frozen=True)
class EnsureChildren:
    """Make the children the Job needs current (:func:`..children.ensure`), and note what the
    agent published for this generation in the results ConfigMap as that leaves it."""


@dataclass(frozen=True)
class FinishPublished:
    """Final: end the run from what the agent published (:func:`.runs.finish`) instead of
    running it a second time."""

    outcome: Outcome


@dataclass(frozen=True)
class Admit:
    """Final: create the Job, or mark the evaluation Queued (:func:`..admission.admit.admit`);
    the reconcile reports what admission did."""


Action = (
    Nothing
    | InvalidSpec
    | Refuse
    | DeleteOutdatedJobs
    | EnforcePolicy
    | EnsureChildren
    | FinishPublished
    | Admit
)
FINAL: Final = (Nothing, Refuse, FinishPublished, Admit)
"""The actions that end a reconcile (each decision's last, when it has one)."""


@dataclass(frozen=True)
class Decision:
    """What to do next (:func:`decide`), in order."""

    actions: tuple[Action, ...]

    @property
    def final(self) -> bool:
        """The reconcile ends with these actions; otherwise it decides again after them."""
        return isinstance(self.actions[-1], FINAL)


@dataclass(frozen=True)
class Found:
    """What the reads :func:`decide` asked for, and the actions done so far, found; a field
    counts once ``read`` names the read (or ``done`` the action) that fills it."""

    read: Need = Need.NONE
    evaluation: ModelEvaluation | None = None
    """SPEC: the evaluation, when its spec is valid."""
    problems: str | None = None
    """SPEC: what is wrong with the spec (redacted), when it is invalid."""
    jobs: tuple[ListedJob, ...] = ()
    """OUTDATED_JOBS."""
    job_exists: bool = False
    """JOB."""
    done: tuple[Action, ...] = ()
    """The actions performed so far, in order."""
    published: Outcome | None = None
    """:class:`EnsureChildren`: what the agent published for this generation (None too when
    the results ConfigMap was created just now, empty)."""


NOTHING_FOUND: Final = Found()


def decide(seen: Seen, found: Found = NOTHING_FOUND) -> Decision | Need:
    """What to do next for the evaluation ``seen`` shows, given what was read and done for it
    (``found``): the read still missing, or the actions. Makes no request: the caller reads
    or acts, and asks again until a decision is final (:func:`evaluation_changed`)."""
    if seen.gone:
        return Decision((Nothing(Skip.GONE),))
    if seen.latest_generation != seen.generation:
        return Decision((Nothing(Skip.STALE),))
    if status.ended(seen.status, seen.generation):
        # Before the spec is read: a Model deleted since cannot touch a past run.
        return Decision((Nothing(Skip.FINISHED),))
    if Need.SPEC not in found.read:
        return Need.SPEC
    listed = seen.generation <= 1 or Need.OUTDATED_JOBS in found.read
    if found.problems is not None:
        # The Failed status first; the outdated Jobs are listed and deleted after it.
        failed = InvalidSpec(found.problems)
        written = failed in found.done
        if not listed:
            return Need.OUTDATED_JOBS if written else Decision((failed,))
        first = () if written else (failed,)
        return Decision((*first, *_delete_outdated(seen, found), Refuse(found.problems)))
    if not listed:
        return Need.OUTDATED_JOBS
    if EnsureChildren() not in found.done:
        return Decision((*_delete_outdated(seen, found), EnforcePolicy(), EnsureChildren()))
    if found.published is None:
        return Decision((Admit(),))
    # Published: the run already happened if its Job is gone (it finished and was
    # TTL-deleted while the operator was away); a Job that still exists is finished by its
    # own events.
    if Need.JOB not in found.read:
        return Need.JOB
    if found.job_exists:
        return Decision((Admit(),))
    return Decision((FinishPublished(found.published),))


def _delete_outdated(seen: Seen, found: Found) -> tuple[DeleteOutdatedJobs, ...]:
    """Delete this evaluation's Jobs of other generations that still run; finished ones stay
    for their logs, and an earlier evaluation's are the garbage collector's."""
    outdated = tuple(
        job.name
        for job in found.jobs
        if job.owned and job.active and job.generation != str(seen.generation)
    )
    return (DeleteOutdatedJobs(outdated),) if outdated else ()


# ---------------------------------------------------------------------------- read, then act


def evaluation_changed(body: Mapping[str, Any], ctx: Context) -> str:
    """Reconcile one evaluation at the generation ``body`` names: read, :func:`decide`,
    :func:`act`, until the decision is final; returns what it did (for logs). Raises
    InvalidSpecError. ``body`` is the whole object (the watch event that queued it), or only
    its metadata, and then the evaluation is read fresh. A whole body that is older than the
    API server's object is safe: children are created only if absent, status writes carry the
    resourceVersion they were computed from, and a newer generation queues its own
    reconcile."""
    meta = body["metadata"]
    namespace, name = str(meta["namespace"]), str(meta["name"])
    generation = int(meta.get("generation") or 1)
    current = body if "spec" in body else ctx.kube.get_or_none(evaluation_path(namespace, name))
    seen = Seen.of(namespace, name, generation, current)
    found = NOTHING_FOUND
    while True:
        step = decide(seen, found)
        if isinstance(step, Need):
            assert current is not None
            found = _read(ctx, seen, current, step, found)
            continue
        if not step.final and all(action in found.done for action in step.actions):
            raise AssertionError(f"decide asked again for {step}")
        found, reported = act(ctx, seen, step, found)
        if reported is not None:
            return reported


def _read(ctx: Context, seen: Seen, current: Mapping[str, Any], need: Need, found: Found) -> Found:
    """Make the reads ``need`` names and add what they found to ``found``."""
    if need & found.read:
        raise AssertionError(f"decide asked again for {need & found.read}")
    namespace, name = seen.namespace, seen.name
    fields: dict[str, Any] = {}
    if Need.SPEC in need:
        try:
            fields["evaluation"] = parse_body(current, ctx.kube)
        except SpecValidationError as exc:
            problems = "; ".join(str(p) for p in exc.problems) or str(exc)
            fields["problems"] = redact_text(problems)
    if Need.OUTDATED_JOBS in need:
        selector = f"{names.LABEL_EVALUATION}={name},{names.MANAGED_SELECTOR}"
        uid = current["metadata"].get("uid")
        listed = ctx.kube.list(job_path(namespace), selector)
        fields["jobs"] = tuple(ListedJob.of(job, uid) for job in listed)
    if Need.JOB in need:
        job_name = names.job_name(name, seen.generation)
        fields["job_exists"] = ctx.kube.get_or_none(job_path(namespace, job_name)) is not None
    return dataclasses.replace(found, read=found.read | need, **fields)


def act(ctx: Context, seen: Seen, decision: Decision, found: Found) -> tuple[Found, str | None]:
    """Perform ``decision``'s actions in order: the one place a reconcile writes. Returns
    ``found`` with them done, and what the reconcile reports once a final action ran (None
    before). Raises what the actions raise (InvalidSpecError, PolicyDeniedError,
    ForeignChildError)."""
    namespace, name, generation = seen.namespace, seen.name, seen.generation
    published = found.published
    reported: str | None = None
    for action in decision.actions:
        match action:
            case Nothing(why=why):
                reported = why
            case InvalidSpec(message=message):
                _mark_invalid(ctx, seen, message)
            case Refuse(message=message):
                raise InvalidSpecError(message)
            case DeleteOutdatedJobs(names=outdated):
                for job_name in outdated:
                    ctx.kube.delete(job_path(namespace, job_name))
                    log.info(
                        "%s/%s: deleted Job %s of an earlier generation", namespace, name, job_name
                    )
            case EnforcePolicy():
                enforce_policy(ctx, _evaluation(found))
            case EnsureChildren():
                results_configmap = children.ensure(ctx, _evaluation(found))
                published = runs.published_in(results_configmap, generation)
            case FinishPublished(outcome=outcome):
                job_name = names.job_name(name, generation)
                handled = runs.finish(ctx, namespace, name, generation, job_name, outcome)
                log.info(
                    "%s/%s: generation %d already ran: %s", namespace, name, generation, handled
                )
                reported = f"already ran: {handled}"
            case Admit():
                reported = admit(ctx, _evaluation(found))
            case _:
                assert_never(action)
    done = dataclasses.replace(found, done=found.done + decision.actions, published=published)
    return done, reported


def _mark_invalid(ctx: Context, seen: Seen, message: str) -> None:
    generation = seen.generation
    ctx.update_status(
        seen.namespace,
        seen.name,
        lambda st: status.invalid_spec(st, generation, message, ctx.clock()),
    )


def _evaluation(found: Found) -> ModelEvaluation:
    """The evaluation the spec read validated (the actions that need it follow that read)."""
    if found.evaluation is None:
        raise AssertionError("an action on the evaluation before its spec was validated")
    return found.evaluation
