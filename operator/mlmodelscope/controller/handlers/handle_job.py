"""An evaluation Job progressed (or vanished): mirror it into the evaluation's status.

Level-based on the Job's own status: a suspended Job (waiting for Kueue, or evicted by it)
means Queued, and unsuspending it means Pending again; ready pods mean Running; the Complete
condition means read the agent's results (ConfigMap first, then the pod's termination
message) and end Succeeded, or Failed/ResultsMissing when there are none; the Failed condition
ends Failed with the Job's reason and the agent's own error message, or with OOMKilled and the
memory limit when the kernel killed the last attempt for memory. Jobs of an older
generation are ignored, and so is the deletion of a Job whose run a spec edit replaced. With
a results store configured, a run that ended is then recorded there
(:mod:`~mlmodelscope.controller.recording`); a finished run whose ``status.record`` is still
missing (the operator stopped in between) is recorded at the Job's next event.

Read, decide, act: :func:`job_changed` (and :func:`job_vanished`, for the resync) reads the
evaluation and types what the event shows (:class:`Seen`); :func:`decide`, which makes no
request, answers either with the reads it still needs (:class:`Need`: only those the run's
state calls for, so a Job event costs no more requests than it must) or with a
:class:`JobDecision`, a list of :class:`JobAction`; :func:`act` is the one place that performs
them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Flag, StrEnum, auto
from typing import Any, Final

import urllib3

from mlmodelscope.contract.kube import KubeError, configmap_path, evaluation_path, pod_path
from mlmodelscope.controller import (
    instrument,
    job_state,
    names,
    recording,
    results,
    runs,
    simulated,
    status,
)
from mlmodelscope.controller.admission.admit import admit_queued
from mlmodelscope.controller.context import Context, StatusFn
from mlmodelscope.controller.job_state import JobState, Stage
from mlmodelscope.controller.names import JOB_NAME_LABEL
from mlmodelscope.controller.runs import Handled
from mlmodelscope.controller.status import ConditionType, Reason
from mlmodelscope.spec.status import EvaluationStatus, Phase

log = logging.getLogger(__name__)

RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0)
"""Watch events are not redelivered, so transient API errors are retried (later, off Kopf's
worker threads; the resync heals what the last retry could not)."""
SPEC_ERROR_REASONS = ("PodFailurePolicy", "BackoffLimitExceeded")
"""Job failure reasons that become InvalidSpec when the agent's error names a spec field."""


def _run_id(outcome: results.Outcome | None) -> str | None:
    return outcome.run_id if outcome is not None else None


def collect_outcome(
    ctx: Context,
    job: Mapping[str, Any],
    namespace: str,
    evaluation: str,
    generation: int,
    uid: str | None = None,
    pods: Callable[[], Sequence[Mapping[str, Any]]] | None = None,
) -> results.Outcome | None:
    """The agent's outcome for ``job``: the results ConfigMap (the evaluation's own, when its
    ``uid`` is given), else the newest termination message of its pods (``pods``: how the
    caller lists them); with the Job's creationTimestamp, for ``status.startup.jobSeconds``."""
    job_name = str(job["metadata"]["name"])
    job_created_at = job["metadata"].get("creationTimestamp")
    configmap = ctx.kube.get_or_none(
        configmap_path(namespace, names.results_configmap_name(evaluation))
    )
    if uid is not None and not names.owned_by(configmap, uid):
        configmap = None  # an earlier evaluation's of the same name, about to be collected
    outcome = results.outcome_from_configmap(configmap, generation)
    if outcome is None:
        listed = pods() if pods is not None else list_pods(ctx, namespace, job_name)
        outcome = results.outcome_from_pods(listed, generation)
    if outcome is not None and job_created_at:
        outcome = dataclasses.replace(outcome, job_created_at=job_created_at)
    return outcome


def list_pods(ctx: Context, namespace: str, job_name: str) -> list[dict[str, Any]]:
    """The pods of Job ``job_name`` (by the Job controller's label)."""
    return ctx.kube.list(pod_path(namespace), f"{JOB_NAME_LABEL}={job_name}")


def failure(
    job_condition: Mapping[str, Any], outcome: results.Outcome | None, timeout: str | None
) -> tuple[str, str]:
    """(reason, message) for a failed Job: the Job's reason, the agent's words."""
    job_reason = str(job_condition.get("reason") or "JobFailed")
    agent = outcome.error if outcome is not None and outcome.error else None
    if job_reason == "DeadlineExceeded":
        limit = f" (spec.timeout {timeout})" if timeout else ""
        message = f"the evaluation ran longer than its deadline{limit}"
        return Reason.DEADLINE_EXCEEDED, f"{message}; agent: {agent}" if agent else message
    if job_reason in SPEC_ERROR_REASONS and outcome is not None and outcome.error_field:
        return Reason.INVALID_SPEC, agent or str(job_condition.get("message") or "")
    if job_reason == "PodFailurePolicy":
        job_reason = Reason.EVALUATION_FAILED
    return job_reason, agent or str(job_condition.get("message") or "the evaluation Job failed")


# ------------------------------------------------------------------------------- the decision


@dataclass(frozen=True)
class Seen:
    """What a Job event (or the resync) shows of one run, typed: :func:`decide`'s input."""

    namespace: str
    name: str
    """The evaluation's."""
    generation: int
    """The run's: the Job's generation label (the evaluation's, for a vanished Job)."""
    job_name: str
    job: JobState | None
    """None: the Job no longer exists (the resync found only its name in the status)."""
    status: EvaluationStatus = field(default_factory=EvaluationStatus)
    """The evaluation's status (:func:`.status.read_status`)."""
    deleted: bool = False
    """This is the Job's last event: it is gone now."""
    gone: bool = False
    """The evaluation no longer exists, or is being deleted."""
    owned: bool = True
    """The Job is this evaluation's (by owner UID), not an earlier one's of the same name."""
    latest_generation: int = 1
    """The evaluation's ``metadata.generation``: beyond ``generation``, a spec edit replaced
    the run."""
    recorder: bool = False
    """A results store is configured."""


class Need(Flag):
    """A read :func:`decide` asks for before it can decide."""

    NONE = 0
    """Nothing read yet (what :class:`Found` starts from)."""
    PUBLISHED = auto()
    """What the agent published in the evaluation's own results ConfigMap (a Job gone before
    it said it ended)."""
    OUTCOME = auto()
    """The agent's outcome for an ended Job: the results ConfigMap, else the termination
    message of its newest pod (:func:`collect_outcome`)."""
    NODES = auto()
    """Whether the pod of a Job that completed without results ran on a simulated node."""
    SPEC = auto()
    """The evaluation's spec (read again when the copy at hand has none): ``spec.timeout`` and
    the memory limit, which a failure's message names."""
    OOM = auto()
    """The failed Job's own pods: whether the kernel's OOM killer ended its last attempt."""
    LIVE_PODS = auto()
    """The Job's pods: whether a ready one is live (after a disruption the Job may still count
    the lost pod as ready)."""


@dataclass(frozen=True)
class Found:
    """What the reads :func:`decide` asked for found; a field counts once ``read`` names the
    read that fills it."""

    read: Need = Need.NONE
    outcome: results.Outcome | None = None
    """PUBLISHED or OUTCOME: None when the agent published nothing for this run."""
    simulated: tuple[str, str] | None = None
    """NODES: (reason, message) when the pod ran on a simulated node."""
    timeout: str | None = None
    """SPEC: ``spec.timeout``."""
    oom: tuple[str, str] | None = None
    """OOM: (OOMKilled, message) when the last attempt was killed for memory."""
    live_pod: bool = False
    """LIVE_PODS: a pod of the Job is ready and live."""
    pods: tuple[Mapping[str, Any], ...] | None = None
    """The Job's pods, once a read listed them (OUTCOME without a published result, NODES,
    LIVE_PODS): one reconcile lists them once."""


NOTHING_FOUND: Final = Found()


class JobAction(StrEnum):
    """One thing a Job event makes the operator do; :func:`act` performs them in order. A
    status transition posts its own Event (:meth:`.Context.update_status`)."""

    UNSUSPEND = "pending again"
    """Pending: the Job the status shows Queued was let go (Kueue admitted it)."""
    QUEUE = "queued"
    """Queued with its suspended Job, waiting for Kueue."""
    RUN = "running"
    SUCCEED = "succeeded"
    """Succeeded with the outcome's results, counted as collected."""
    FAIL = "failed"
    """Failed with the decision's reason and message (and the outcome's partial results)."""
    FINISH = "finished from the published result"
    """End the run of a Job that is gone from what the agent published
    (:func:`.runs.finish`, which records it too)."""
    RECORD = "recorded"
    """Record the ended run in the results store (:func:`.recording.record_finished`)."""
    CHECK_START = "start checked"
    """End the run Failed if its pod did not start within the start timeout
    (:func:`.runs.fail_start`, whose reads are its own)."""


@dataclass(frozen=True)
class JobDecision:
    """What one Job event needs (:func:`decide`)."""

    handled: Handled
    """What the event is reported as; CHECK_START reports FAILED when the check ends the
    run."""
    actions: tuple[JobAction, ...] = ()
    reason: str = ""
    """FAIL: the Failed condition's reason."""
    message: str = ""
    """FAIL: what the user reads."""
    outcome: results.Outcome | None = None
    """SUCCEED, FAIL, FINISH: what the agent published."""
    placed: bool = False
    """FAIL: the Job completed, so its pod was on a node (the Scheduled condition says so)."""
    run_id: str | None = None
    """RECORD: the run to record."""
    unchanged: Handled | None = None
    """Reported instead of ``handled`` when FAIL changed nothing (the run had ended already)."""


def decide(seen: Seen, found: Found = NOTHING_FOUND) -> JobDecision | Need:
    """What a Job event needs, from what it shows (``seen``) and what was read for it
    (``found``): the reads still missing, or the decision. Makes no request: the caller reads
    what it asks for and asks again (:func:`job_changed`)."""
    if seen.gone:
        return JobDecision(Handled.EVALUATION_GONE)
    if not seen.owned:
        # An earlier evaluation's of the same name, about to be collected.
        return JobDecision(Handled.NOT_OURS)
    current = seen.status
    job = seen.job
    if job is None:  # vanished: the status names it, the API server no longer has it
        if not seen.job_name or current.observed_generation != seen.generation:
            return JobDecision(Handled.NOTHING_TO_DO)
        return _gone_before_it_ended(seen, found, unchanged=Handled.ALREADY_FINAL)
    if current.observed_generation != seen.generation or current.job_name != seen.job_name:
        return JobDecision(Handled.OTHER_GENERATION)
    phase = status.phase_named(current)
    if phase not in status.UNFINISHED:
        if seen.recorder and current.record is None and job.stage.ended:
            # The operator stopped between the run's end and its record: record it now.
            return JobDecision(Handled.ALREADY_FINAL, (JobAction.RECORD,), run_id=current.run_id)
        return JobDecision(Handled.ALREADY_FINAL)
    if seen.deleted and not job.stage.ended:
        if seen.latest_generation > seen.generation:
            # The spec changed and its handler deleted this Job to replace the run: not a
            # failure. The next generation's status moves the run into history as it stood.
            return JobDecision(Handled.REPLACED)
        # Deleted before the Job said it ended: the agent may still have published the
        # result (a Job deleted right after its pod finished); that result stands.
        return _gone_before_it_ended(seen, found)
    # A deleted Job that had ended (TTL, or deleted by hand afterwards) ends the run as its
    # last state says: the results ConfigMap outlives it.
    if job.stage is Stage.COMPLETE:
        return _completed(seen, found)
    if job.stage is Stage.FAILED:
        return _failed(job, found)
    if job.stage is Stage.SUSPENDED:
        return JobDecision(Handled.SUSPENDED, (JobAction.QUEUE,))
    return _active(current, job, phase, found)


def _gone_before_it_ended(
    seen: Seen, found: Found, unchanged: Handled | None = None
) -> JobDecision | Need:
    """The Job is gone and never said it ended: what the agent published ends the run, else
    Failed/JobDeleted."""
    if Need.PUBLISHED not in found.read:
        return Need.PUBLISHED
    published = found.outcome
    if published is not None:
        handled = Handled.SUCCEEDED if published.succeeded and published.rows else Handled.FAILED
        return JobDecision(handled, (JobAction.FINISH,), outcome=published)
    message = f"Job {seen.job_name} was deleted before it finished"
    return JobDecision(
        Handled.FAILED,
        (JobAction.FAIL,),
        reason=Reason.JOB_DELETED,
        message=message,
        unchanged=unchanged,
    )


def _completed(seen: Seen, found: Found) -> JobDecision | Need:
    """The Job completed: Succeeded with the agent's results, else Failed with why not."""
    if Need.OUTCOME not in found.read:
        return Need.OUTCOME
    outcome = found.outcome
    if outcome is not None and outcome.succeeded and outcome.rows:
        return JobDecision(
            Handled.SUCCEEDED,
            (JobAction.SUCCEED, JobAction.RECORD),
            outcome=outcome,
            run_id=outcome.run_id,
        )
    if outcome is not None and not outcome.succeeded:
        reason, message = Reason.EVALUATION_FAILED, outcome.error or "the agent reported Failed"
    elif Need.NODES not in found.read:
        return Need.NODES
    elif found.simulated is not None:
        reason, message = found.simulated
    else:
        reason = Reason.RESULTS_MISSING
        message = (
            f"Job {seen.job_name} completed but the agent published no results for generation "
            f"{seen.generation} (ConfigMap {names.results_configmap_name(seen.name)} is empty "
            "and no termination message was found)"
        )
    return JobDecision(
        Handled.FAILED,
        (JobAction.FAIL, JobAction.RECORD),
        reason=reason,
        message=message,
        outcome=outcome,
        placed=True,
        run_id=_run_id(outcome),
    )


def _failed(job: JobState, found: Found) -> JobDecision | Need:
    """The Job failed: its reason, the agent's words, or the OOM kill that ended it."""
    missing = (Need.SPEC | Need.OUTCOME) & ~found.read
    if missing:
        return missing
    reason, message = failure(job.failed or {}, found.outcome, found.timeout)
    # The Job says BackoffLimitExceeded and the termination message holds the log tail: only
    # the last pod's container statuses say the kernel killed it for memory. Past the deadline
    # the Job controller deletes the running pod, so the newest pod left may be an earlier
    # attempt's: the deadline is the verdict then.
    if reason != Reason.DEADLINE_EXCEEDED:
        if Need.OOM not in found.read:
            return Need.OOM
        if found.oom is not None:
            reason, message = found.oom
    return JobDecision(
        Handled.FAILED,
        (JobAction.FAIL, JobAction.RECORD),
        reason=reason,
        message=message,
        outcome=found.outcome,
        run_id=_run_id(found.outcome),
    )


def _active(
    current: EvaluationStatus, job: JobState, phase: Phase | None, found: Found
) -> JobDecision | Need:
    """The Job neither ended nor waits for Kueue: Pending again if the status shows it Queued
    (Kueue let it go), Running once a live pod is ready, else waiting, for a node or for a
    start the start timeout may declare failed."""
    first = (JobAction.UNSUSPEND,) if phase is Phase.QUEUED else ()
    if job.ready > 0:
        live = True
        running = status.typed_condition(current, ConditionType.RUNNING)
        if running is not None and running.reason == Reason.POD_DISRUPTED:
            # The lost pod may still count as ready (its node is gone, nobody updates it) until
            # the pod garbage collector deletes it: only a live ready pod counts, or the status
            # would flap between Running and PodDisrupted on every event.
            if Need.LIVE_PODS not in found.read:
                return Need.LIVE_PODS
            live = found.live_pod
        if live:
            return JobDecision(Handled.RUNNING, (*first, JobAction.RUN))
    scheduled = status.typed_condition(current, ConditionType.SCHEDULED)
    if (
        scheduled is not None
        and scheduled.status == "False"
        and scheduled.reason == Reason.UNSCHEDULABLE
    ):
        # Waiting for a node is not a start failure (start_failure says so too, but only after
        # listing the pods, for every run that waits, on every event and resync).
        return JobDecision(Handled.WAITING_FOR_A_NODE, first)
    return JobDecision(Handled.WAITING, (*first, JobAction.CHECK_START))


# ---------------------------------------------------------------------------- read, then act


def job_changed(
    job: Mapping[str, Any],
    ctx: Context,
    deleted: bool = False,
    listed: Mapping[str, Any] | None = None,
    observed: status.Observed | None = None,
) -> Handled:
    """React to one Job event: read, :func:`decide`, :func:`act`; returns what it did.
    ``listed``: the evaluation as the caller has just listed it (the resync), instead of what
    the watch last delivered; status writes are guarded by its resourceVersion either way;
    ``observed``: the caller's read of its status. Neither copy has the spec
    (:func:`..slim.slim_evaluation`): the one decision that needs it (a failed Job's) reads
    the evaluation again."""
    owner = names.owner_of(job)
    if owner is None:
        return Handled.NOT_OURS
    namespace, name, generation = owner
    job_name = str(job["metadata"]["name"])
    evaluation = dict(listed) if listed is not None else ctx.read_evaluation(namespace, name)
    if evaluation is None or evaluation["metadata"].get("deletionTimestamp"):
        seen = Seen(namespace, name, generation, job_name, JobState.of(job), gone=True)
        return _settle(ctx, seen, job, {}, None)
    meta = evaluation["metadata"]
    raw = evaluation.get("status")
    if observed is None or not observed.reads(raw):
        observed = status.Observed.of(raw)
    seen = Seen(
        namespace,
        name,
        generation,
        job_name,
        JobState.of(job),
        status=observed.typed,
        deleted=deleted,
        owned=names.owned_by(job, meta.get("uid")),
        latest_generation=int(meta.get("generation") or 1),
        recorder=ctx.recorder is not None,
    )
    return _settle(ctx, seen, job, evaluation, evaluation, observed)


def job_vanished(
    ctx: Context, evaluation: Mapping[str, Any], current: EvaluationStatus | None = None
) -> Handled:
    """The evaluation's status names a Job of its current run that no longer exists (deleted
    while the operator was away, or its DELETED event was lost): finish from what the agent
    published, else Failed/JobDeleted. ``current``: the caller's read of its status."""
    meta = evaluation["metadata"]
    if current is None:
        current = status.read_status(evaluation.get("status") or {})
    seen = Seen(
        str(meta["namespace"]),
        str(meta["name"]),
        int(meta.get("generation") or 1),
        current.job_name or "",
        None,
        status=current,
    )
    # Its writes start from what the watch delivered: the resync's listing may be older.
    return _settle(ctx, seen, None, evaluation, None)


def _settle(
    ctx: Context,
    seen: Seen,
    job: Mapping[str, Any] | None,
    evaluation: Mapping[str, Any],
    known: Mapping[str, Any] | None,
    observed: status.Observed | None = None,
) -> Handled:
    """Decide, making each read the decision asks for, then act. ``known``: the evaluation
    the status writes start from (replaced by a copy read again for its spec); ``observed``:
    its status as read."""
    found = NOTHING_FOUND
    decision = decide(seen, found)
    while isinstance(decision, Need):
        found, evaluation = _read(ctx, seen, job, evaluation, decision, found)
        known = evaluation if known is not None else None
        decision = decide(seen, found)
    return act(ctx, seen, decision, job, known, observed)


def _read(
    ctx: Context,
    seen: Seen,
    job: Mapping[str, Any] | None,
    evaluation: Mapping[str, Any],
    need: Need,
    found: Found,
) -> tuple[Found, Mapping[str, Any]]:
    """Make the reads ``need`` names and add what they found to ``found``; returns it with
    the evaluation as read last."""
    if need & found.read:
        raise AssertionError(f"decide asked again for {need & found.read}")
    namespace, name, generation = seen.namespace, seen.name, seen.generation
    uid = (evaluation.get("metadata") or {}).get("uid")
    fields: dict[str, Any] = {}
    if Need.SPEC in need:
        if "spec" not in evaluation:  # the watch's or the resync's copy (slim_evaluation)
            again = ctx.kube.get_or_none(evaluation_path(namespace, name))
            evaluation = again or evaluation
        fields["timeout"] = (evaluation.get("spec") or {}).get("timeout")
    if Need.PUBLISHED in need:
        fields["outcome"] = runs.published_outcome(ctx, namespace, name, uid, generation)
    listed = found.pods

    def pods() -> tuple[Mapping[str, Any], ...]:
        nonlocal listed
        if listed is None:
            listed = tuple(list_pods(ctx, namespace, seen.job_name))
        return listed

    if Need.OUTCOME in need:
        assert job is not None
        fields["outcome"] = collect_outcome(ctx, job, namespace, name, generation, uid, pods)
    if Need.NODES in need:
        fields["simulated"] = simulated.missing_results(
            ctx.kube, namespace, seen.job_name, pods(), ctx.simulated_nodes
        )
    if Need.OOM in need:
        assert job is not None
        fields["oom"] = runs.oom_failure(ctx, job, evaluation, pods())
    if Need.LIVE_PODS in need:
        fields["live_pod"] = any(runs.is_live_and_ready(pod) for pod in pods())
    found = dataclasses.replace(found, read=found.read | need, pods=listed, **fields)
    return found, evaluation


def act(
    ctx: Context,
    seen: Seen,
    decision: JobDecision,
    job: Mapping[str, Any] | None,
    known: Mapping[str, Any] | None,
    observed: status.Observed | None = None,
) -> Handled:
    """Perform ``decision``'s actions in order: the one place a Job event writes. Returns what
    the event is reported as. The first status write starts from ``known`` (None: from what
    the watch delivered; ``observed``: its status as read), each later one from what the
    write before it returned."""
    namespace, name, generation = seen.namespace, seen.name, seen.generation
    handled = decision.handled
    for action in decision.actions:
        if action in _TRANSITIONS:
            compute = _transition(action, seen, decision, ctx.clock)
            written, change = ctx.update_status(
                namespace, name, compute, known=known, observed=observed
            )
            known = written or known
            if action is JobAction.SUCCEED:
                instrument.results_collected(namespace)
            if action is JobAction.FAIL and not change and decision.unchanged is not None:
                handled = decision.unchanged
        elif action is JobAction.FINISH:
            assert decision.outcome is not None
            handled = runs.finish(ctx, namespace, name, generation, seen.job_name, decision.outcome)
        elif action is JobAction.RECORD:
            recorded = recording.record_finished(ctx, namespace, name, generation, decision.run_id)
            if handled is Handled.ALREADY_FINAL:
                log.info("%s/%s: finished run found unrecorded: %s", namespace, name, recorded)
        elif action is JobAction.CHECK_START:
            assert job is not None
            if runs.fail_start(ctx, namespace, name, generation, job):
                handled = Handled.FAILED
    return handled


_TRANSITIONS: Final = frozenset(
    {JobAction.UNSUSPEND, JobAction.QUEUE, JobAction.RUN, JobAction.SUCCEED, JobAction.FAIL}
)
"""The actions that are one status transition (:func:`_transition`)."""


def _transition(
    action: JobAction, seen: Seen, decision: JobDecision, clock: Callable[[], str]
) -> StatusFn:
    """The status transition ``action`` writes, as a function of the status it is computed
    from (:meth:`.Context.update_status` may compute it again after a conflict)."""
    generation, job_name, outcome = seen.generation, seen.job_name, decision.outcome
    match action:
        case JobAction.UNSUSPEND:
            return lambda st: status.unsuspended(st, generation, job_name, clock())
        case JobAction.QUEUE:
            results_cm = names.results_configmap_name(seen.name)
            queue = seen.job.queue if seen.job is not None else None
            return lambda st: status.waiting_for_kueue(
                st, generation, job_name, results_cm, queue, clock()
            )
        case JobAction.RUN:
            return lambda st: status.running(st, generation, job_name, clock())
        case JobAction.SUCCEED:
            assert outcome is not None
            done = outcome
            return lambda st: status.succeeded(st, generation, job_name, done, clock())
        case JobAction.FAIL:
            reason, message, placed = decision.reason, decision.message, decision.placed
            return lambda st: status.failed(
                st, generation, job_name, reason, message, clock(), outcome, placed=placed
            )
    raise ValueError(f"{action} is not a status transition")


# ----------------------------------------------------------------------------- the Job event


def transient(exc: Exception) -> bool:
    if isinstance(exc, KubeError):
        return exc.status in (409, 429) or exc.status >= 500
    return isinstance(exc, (OSError, urllib3.exceptions.HTTPError))


def admits_next(job: Mapping[str, Any], deleted: bool, handled: Handled) -> bool:
    """After this Job event, queued evaluations may take a slot: the Job is gone, or it holds
    none now and its run changed (:attr:`.Handled.frees_no_slot`)."""
    return deleted or (not job_state.holds_slot(job) and not handled.frees_no_slot)


def job_progressed(
    job: Mapping[str, Any], ctx: Context, deleted: bool = False, attempt: int = 0
) -> Handled:
    """A Job event: note whether it holds a slot, update its evaluation, then, if the Job no
    longer holds a slot, let queued evaluations take it.

    A transient API error is retried after ``RETRY_DELAYS[attempt]`` by ``ctx.retries``, never
    by sleeping here: this runs in one of a few handler threads (:mod:`..object_events`). A
    newer event of the same Job cancels the pending retry of this one."""
    meta = job["metadata"]
    key = ("job", meta.get("namespace"), meta["name"])
    if attempt == 0:
        ctx.retries.cancel(key)
        ctx.ledger.observe_job(job, deleted)
    try:
        outcome = job_changed(job, ctx, deleted)
    except Exception as exc:
        if attempt >= len(RETRY_DELAYS) or not transient(exc):
            raise
        delay = RETRY_DELAYS[attempt]
        log.warning("job %s: %s; retrying in %.1fs", meta["name"], exc, delay)
        ctx.retries.call(key, delay, lambda: job_progressed(job, ctx, deleted, attempt + 1))
        return Handled.RETRYING
    if admits_next(job, deleted, outcome):
        started = admit_queued(ctx)
        if started:
            log.info("job %s %s: started %s", meta["name"], outcome, ", ".join(started))
    return outcome
