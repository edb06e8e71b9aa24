"""Creating an evaluation's Job when admission allows it.

The operator's policy is checked first (:func:`enforce_policy`). Without concurrency limits or
a Kueue queue the Job is created at once. Under limits the decision reads the in-memory
ledger (:mod:`.ledger`) and the FIFO plan (:mod:`.fifo`), under one lock, so the limits hold
however many reconciles run at once; an evaluation that may not start yet is marked Queued,
and :func:`admit_queued` starts the ones the plan admits when a slot frees. With a Kueue queue
label the Job is created suspended and Kueue decides.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from mlmodelscope.contract.kube import (
    KubeError,
    all_evaluations_path,
    all_jobs_path,
    evaluation_path,
    job_path,
)
from mlmodelscope.contract.redact import redact_text
from mlmodelscope.controller import (
    builders,
    instrument,
    job_state,
    names,
    policy,
    runs,
    scope,
    status,
)
from mlmodelscope.controller.admission import fifo, ledger
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.runs import ForeignChildError, PolicyDeniedError
from mlmodelscope.controller.slim import Packed, slim_evaluation, slim_job
from mlmodelscope.controller.specs import parse_body
from mlmodelscope.controller.watched import WatchedEvaluations, version_of
from mlmodelscope.spec import ModelEvaluation, SpecValidationError

log = logging.getLogger(__name__)

UNFINISHED: Final = status.UNFINISHED


def enforce_policy(ctx: Context, evaluation: ModelEvaluation) -> None:
    """End the run Failed/PolicyDenied (a Warning Event with it) when the operator's policy,
    narrowed by the namespace's annotations, refuses what the spec asks for; nothing is
    created for it. Raises PolicyDeniedError."""
    namespace = evaluation.metadata.namespace or "default"
    effective = ctx.policy_for(namespace)
    problems = policy.denials(evaluation, effective, ctx.settings.agent_images())
    if not problems:
        return
    name = evaluation.metadata.name
    generation = builders.generation_of(evaluation)
    message = redact_text("denied by the operator's policy: " + "; ".join(problems))
    ctx.update_status(
        namespace,
        name,
        lambda st: status.policy_denied(st, generation, message, ctx.clock()),
    )
    log.warning("%s/%s: %s", namespace, name, message)
    raise PolicyDeniedError(message)


def created_at(evaluation: ModelEvaluation) -> str:
    return str((evaluation.metadata.model_extra or {}).get("creationTimestamp") or "")


def _pages_everywhere(
    ctx: Context, path_for: Callable[[str], str], everywhere: str, selector: str | None
) -> Iterator[tuple[list[dict[str, Any]], int | None]]:
    """List across the watched namespaces, page by page, each page with the resourceVersion
    of its listing: one namespace at a time when they are plain names, else cluster-wide and
    filtered (:mod:`..scope`)."""
    patterns = ctx.settings.namespaces
    plain = scope.plain_names(patterns)
    paths = [path_for(ns) for ns in plain] if plain is not None else [everywhere]
    for path in paths:
        for answer in ctx.kube.list_answers(path, selector):
            items = answer.get("items") or []
            if plain is None and patterns:
                items = [o for o in items if scope.holds(o, patterns)]
            yield items, version_of(answer)


@dataclass
class Listing:
    """What one resync keeps of its listings: the evaluations whose run has not ended (the
    only ones it reconciles) and the Jobs it may need (those holding a slot, and those of the
    unfinished evaluations), by (namespace, name). Ended evaluations and their Jobs are
    dropped page by page, so a tick's memory follows the evaluations in flight, not all of
    them; what is kept is kept slim (:mod:`..slim`: no managedFields, no evaluation spec, no
    pod template) and encoded (:class:`..slim.Packed`), since with thousands in flight the
    kept bodies were most of the tick's memory.

    A listing from the watch (``watched``) keeps no evaluations: :meth:`unfinished` reads
    each from :class:`..watched.WatchedEvaluations` as it is reached."""

    evaluations: Packed[tuple[str, str]] = field(default_factory=Packed)
    jobs: Packed[tuple[str, str]] = field(default_factory=Packed)
    watched: WatchedEvaluations | None = None

    def unfinished(self) -> Iterator[tuple[tuple[str, str], dict[str, Any]]]:
        """Each unfinished evaluation, decoded when reached and then no longer kept here."""
        if self.watched is None:
            yield from self.evaluations.drain()
            return
        for key, body in self.watched.in_flight():
            if _unfinished_job(body) is not None:
                yield key, body


def _unfinished_job(evaluation: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, Job name) of an evaluation whose current run has not ended, else None."""
    st = evaluation.get("status") or {}
    if st.get("phase") not in UNFINISHED:
        return None
    return str(evaluation["metadata"].get("namespace")), str(st.get("jobName") or "")


def sync_ledger(ctx: Context, *, from_watch: bool = False) -> Listing:
    """Rebuild the admission ledger from the evaluations and one listing of the evaluation
    Jobs (at the first decision after start-up, and on every resync), in pages; returns what
    the resync needs of them (:class:`Listing`).

    The evaluations are listed too, unless ``from_watch``: then they are read from what the
    evaluation watch delivered (``ctx.watched``), and the API server encodes none of them. A
    listing also shows which evaluations the watch missed the deletion of (deleted while it
    was away: a relisting after 410 Gone delivers no DELETED), and ``ctx.watched`` forgets
    them."""
    ctx.ledger.begin_rebuild()
    listing = Listing(watched=ctx.watched if from_watch else None)
    wanted_jobs: set[tuple[str, str]] = set()
    waiting: list[dict[str, Any]] = []
    for item in _watched(ctx) if from_watch else _listed(ctx, listing):
        job_key = _unfinished_job(item)
        if job_key is None:
            continue
        wanted_jobs.add(job_key)
        if ledger.waiting_entry(item) is not None:
            waiting.append(item)
    selector = names.MANAGED_SELECTOR
    for page, _ in _pages_everywhere(ctx, job_path, all_jobs_path(), selector):
        for job in page:
            meta = job["metadata"]
            key = (str(meta["namespace"]), str(meta["name"]))
            if key in wanted_jobs or job_state.holds_slot(job):
                listing.jobs[key] = slim_job(job)
    ctx.ledger.finish_rebuild(listing.jobs.values(), waiting)
    return listing


def _watched(ctx: Context) -> Iterator[dict[str, Any]]:
    for _, body in ctx.watched.in_flight():
        yield body


def _listed(ctx: Context, listing: Listing) -> Iterator[dict[str, Any]]:
    """Each listed evaluation whose run has not ended, slim, also kept in ``listing``."""
    present: set[tuple[str, str]] = set()
    listed_at: int | None = None
    for page, version in _pages_everywhere(ctx, evaluation_path, all_evaluations_path(), None):
        if version is not None:
            listed_at = version if listed_at is None else min(listed_at, version)
        for item in page:
            meta = item["metadata"]
            key = (str(meta["namespace"]), str(meta["name"]))
            present.add(key)
            if _unfinished_job(item) is None:
                continue
            body = slim_evaluation(item)
            listing.evaluations[key] = body
            yield body
    if listed_at is not None:
        ctx.watched.forget_missing(present, listed_at)


def admit(ctx: Context, evaluation: ModelEvaluation) -> str:
    """Create the Job if the concurrency limits allow it, else mark the evaluation Queued.

    Under limits, decisions are serialized by the admission lock and the Job is created
    inside it, so the next decision counts it: the limits hold however many handlers run at
    once. A decision reads the in-memory ledger (:mod:`.ledger`), not the cluster, so its cost
    does not grow with the number of evaluations. Without limits nothing is serialized:
    creating the Job is idempotent.

    An evaluation with a Kueue queue label bypasses the operator's limits: its Job is created
    at once, suspended, and the evaluation is Queued until Kueue admits (unsuspends) it.
    """
    namespace = evaluation.metadata.namespace or "default"
    name = evaluation.metadata.name
    generation = builders.generation_of(evaluation)
    job_name = names.job_name(name, generation)
    settings = ctx.settings
    limits = fifo.Limits(settings.max_running, settings.max_running_per_namespace)
    kueue = names.kueue_queue(evaluation.metadata.labels)
    results_cm = names.results_configmap_name(name)
    decides = not limits.unlimited and not kueue
    with ctx.admission_lock if decides else contextlib.nullcontext():
        # Without a decision to make, the Job is created first and read only when it exists.
        existing = ctx.kube.get_or_none(job_path(namespace, job_name)) if decides or kueue else None
        _check_owner(existing, evaluation)
        if existing is None and decides:
            if not ctx.ledger.synced:
                sync_ledger(ctx)
            entry = fifo.QueueEntry(created_at(evaluation), namespace, name)
            decision = fifo.decide(entry, ctx.ledger.waiting(), ctx.ledger.running(), limits)
            if not decision.admitted:
                ctx.update_status(
                    namespace,
                    name,
                    lambda st: status.queued(st, generation, decision.message, ctx.clock()),
                )
                return "queued"
        trace_id = builders.trace_context(evaluation)[0] if settings.otlp_endpoint else None
        outcome = "job exists"
        if existing is None:
            # The Job first, then the status that names it: a Job the API server rejects ends
            # the run Failed with the server's words, never Pending with a JobCreated event.
            job = builders.build_job(evaluation, settings)
            try:
                created = ctx.kube.create_if_absent(job_path(namespace), job)
            except KubeError as exc:
                if not runs.is_rejection(exc):
                    raise
                answer = exc.message
                ctx.update_status(
                    namespace,
                    name,
                    lambda st: status.job_rejected(st, generation, job_name, answer, ctx.clock()),
                )
                log.warning("%s/%s: Job %s rejected: %s", namespace, name, job_name, answer)
                return "job rejected"
            if created:
                ctx.ledger.observe_job(job)
                instrument.job_created(evaluation)
                outcome = "job created"
                existing = job
            else:
                existing = ctx.kube.get_or_none(job_path(namespace, job_name)) or job
                _check_owner(existing, evaluation)
        if kueue and job_state.is_suspended(existing):
            ctx.update_status(
                namespace,
                name,
                lambda st: status.waiting_for_kueue(
                    st, generation, job_name, results_cm, kueue, ctx.clock(), trace_id
                ),
            )
        else:
            if kueue and outcome == "job exists":  # admitted while the operator was away
                ctx.update_status(
                    namespace,
                    name,
                    lambda st: status.unsuspended(st, generation, job_name, ctx.clock()),
                )
            ctx.update_status(
                namespace,
                name,
                lambda st: status.job_created(
                    st, generation, job_name, results_cm, trace_id, ctx.clock()
                ),
            )
    return outcome


def _check_owner(job: Mapping[str, Any] | None, evaluation: ModelEvaluation) -> None:
    """Raise ForeignChildError when ``job`` exists and is not this evaluation's."""
    if job is not None and not names.owned_by(job, evaluation.metadata.uid):
        name = job["metadata"]["name"]
        raise ForeignChildError(
            f"Job {name} belongs to another object (an earlier evaluation of the same name?); "
            "waiting for it to be garbage-collected"
        )


def admit_queued(ctx: Context) -> list[str]:
    """A slot may have freed (a Job ended or vanished): start the queued evaluations the
    ledger's FIFO plan admits now, oldest first. The others are not touched (their Queued
    status stays as admission wrote it), so a freed slot costs a read of the evaluations it
    starts, not a patch of every queued one. Event-driven instead of a per-object timer,
    because Kopf timers need a finalizer on every evaluation. Returns the names that got a
    Job."""
    limits = fifo.Limits(ctx.settings.max_running, ctx.settings.max_running_per_namespace)
    if limits.unlimited:
        return []
    if not ctx.ledger.synced:
        sync_ledger(ctx)
    started: list[str] = []
    passed: set[fifo.QueueEntry] = set()
    while True:
        waiting = [e for e in ctx.ledger.waiting() if e not in passed]
        planned = fifo.plan(waiting, ctx.ledger.running(), limits)
        if not planned:
            return started
        entry = planned[0]
        passed.add(entry)
        outcome = _admit_queued_one(ctx, entry)
        if outcome == "job created":
            started.append(entry.name)


def _admit_queued_one(ctx: Context, entry: fifo.QueueEntry) -> str:
    """Admit one queued evaluation the plan chose, read fresh (it may have changed or gone)."""
    item = ctx.kube.get_or_none(evaluation_path(entry.namespace, entry.name))
    if item is None:
        ctx.ledger.observe_evaluation(
            {"metadata": {"namespace": entry.namespace, "name": entry.name}}, deleted=True
        )
        return "gone"
    ctx.ledger.observe_evaluation(item)
    if ledger.waiting_entry(item) is None:
        return "no longer queued"
    try:
        evaluation = parse_body(item, ctx.kube)
    except SpecValidationError:
        return "invalid"  # its own handler reports it
    try:  # the policy may have narrowed since it queued (its namespace, a restart)
        enforce_policy(ctx, evaluation)
    except PolicyDeniedError:
        return "denied"
    return admit(ctx, evaluation)
