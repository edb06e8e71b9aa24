"""A ModelEvaluation was created, its spec changed, or the operator (re)started and found it.

Level-based: whatever happened before, make the cluster match the current generation. A run
that already ended is left alone (so a restart or a GitOps re-apply of the same spec starts
nothing); otherwise the spec is validated, Jobs of older generations are removed, the
ConfigMaps are made current, and the Job is created once admission allows it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from mlmodelscope.contract.kube import (
    Kube,
    KubeError,
    all_evaluations_path,
    all_jobs_path,
    configmap_path,
    evaluation_path,
    job_path,
)
from mlmodelscope.contract.redact import redact_text
from mlmodelscope.controller import (
    agent_access,
    builders,
    instrument,
    ledger,
    model_refs,
    names,
    policy,
    queue,
    results,
    runs,
    status,
)
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.runs import ForeignChildError
from mlmodelscope.controller.slim import Packed, slim_evaluation, slim_job
from mlmodelscope.spec import ModelEvaluation, SpecValidationError, parse_evaluation
from mlmodelscope.spec.document import API_VERSION_FULL, KIND

log = logging.getLogger(__name__)

UNFINISHED = ("Queued", "Pending", "Running")
"""Phases of a run that has not ended."""
KEPT_METADATA = ("name", "namespace", "uid", "generation", "creationTimestamp", "labels")


class InvalidSpecError(Exception):
    """The spec cannot run as written; status already says Failed/InvalidSpec."""


class PolicyDeniedError(InvalidSpecError):
    """The operator's policy refuses the spec; status already says Failed/PolicyDenied."""


__all__ = [
    "ForeignChildError",
    "InvalidSpecError",
    "PolicyDeniedError",
    "admit",
    "enforce_policy",
    "evaluation_changed",
]


def parse_body(body: Mapping[str, Any], kube: Kube) -> ModelEvaluation:
    """Validate a stored object with the same rules as `mlms validate` (pydantic plus the
    semantic checks the CRD schema cannot express), its modelRef resolved (once per run:
    see :mod:`..model_refs`); raises SpecValidationError."""
    meta = body.get("metadata") or {}
    document = {
        "apiVersion": body.get("apiVersion", API_VERSION_FULL),
        "kind": body.get("kind", KIND),
        "metadata": {k: meta[k] for k in KEPT_METADATA if k in meta},
        "spec": body.get("spec"),
    }
    source = f"{meta.get('namespace')}/{meta.get('name')}"
    return parse_evaluation(model_refs.resolve(kube, document, source), source=source)


def evaluation_changed(body: Mapping[str, Any], ctx: Context) -> str:
    """Reconcile one evaluation at the generation ``body`` names; returns what it did (for
    logs). Raises InvalidSpecError. Only ``body``'s metadata is read: the spec comes from a
    fresh read, so the caller may pass what it queued instead of the whole object."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    generation = int(meta.get("generation") or 1)
    current = ctx.kube.get_or_none(evaluation_path(namespace, name))
    if current is None or current["metadata"].get("deletionTimestamp"):
        return "gone"
    if int(current["metadata"].get("generation") or 1) != generation:
        return "stale"  # a newer generation exists; its own update event handles it
    if status.is_terminal(current.get("status") or {}, generation):
        return "finished"  # before parsing: a Model deleted since cannot touch a past run
    try:
        evaluation = parse_body(current, ctx.kube)
    except SpecValidationError as exc:
        message = redact_text("; ".join(str(p) for p in exc.problems) or str(exc))
        ctx.update_status(
            namespace,
            name,
            lambda st: status.invalid_spec(st, generation, message, ctx.clock()),
        )
        delete_outdated_jobs(ctx, namespace, name, generation, current)
        raise InvalidSpecError(message) from None
    delete_outdated_jobs(ctx, namespace, name, generation, current)
    enforce_policy(ctx, evaluation)
    results_configmap = ensure_configmaps(ctx, evaluation)
    finished = finish_published_run(ctx, evaluation, results_configmap)
    if finished is not None:
        return finished
    return admit(ctx, evaluation)


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


def finish_published_run(
    ctx: Context, evaluation: ModelEvaluation, results_configmap: Mapping[str, Any] | None
) -> str | None:
    """The run of this generation already happened when its Job is gone but the agent's
    result for this generation is in the evaluation's results ConfigMap (the Job finished
    and was TTL-deleted while the operator was away): end the run from that result instead
    of running it a second time. None when there is no such result.

    ``results_configmap``: the evaluation's own, as :func:`ensure_configmaps` found it (None:
    it was created just now, so nothing can have been published into it)."""
    namespace = evaluation.metadata.namespace or "default"
    name = evaluation.metadata.name
    generation = builders.generation_of(evaluation)
    job_name = names.job_name(name, generation)
    published = results.outcome_from_configmap(results_configmap, generation)
    if published is None or published.generation != generation:
        return None
    if ctx.kube.get_or_none(job_path(namespace, job_name)) is not None:
        return None  # not run yet, or its Job still exists and its events finish it
    outcome = runs.finish(ctx, namespace, name, generation, job_name, published)
    log.info("%s/%s: generation %d already ran: %s", namespace, name, generation, outcome)
    return f"already ran: {outcome}"


def delete_outdated_jobs(
    ctx: Context, namespace: str, name: str, generation: int, current: Mapping[str, Any]
) -> list[str]:
    """Delete this evaluation's Jobs of other generations that are still running: an edited
    spec replaces the run, it does not queue behind it. Finished ones stay for their logs.

    ``current``: the evaluation as just read. Its first generation has no earlier Jobs (an
    older evaluation's of the same name belong to another UID), so no listing is spent on
    each new evaluation."""
    if generation <= 1:
        return []
    selector = f"{names.LABEL_EVALUATION}={name},{names.MANAGED_SELECTOR}"
    deleted = []
    owner = current["metadata"].get("uid")
    for job in ctx.kube.list(job_path(namespace), selector):
        if not names.owned_by(job, owner):
            continue  # an earlier evaluation's of the same name: the garbage collector's
        labels = job["metadata"].get("labels") or {}
        if labels.get(names.LABEL_GENERATION) == str(generation) or not queue.is_active_job(job):
            continue
        ctx.kube.delete(job_path(namespace, job["metadata"]["name"]))
        deleted.append(job["metadata"]["name"])
        log.info("%s/%s: deleted Job %s of an earlier generation", namespace, name, deleted[-1])
    return deleted


def ensure_configmaps(ctx: Context, evaluation: ModelEvaluation) -> dict[str, Any] | None:
    """The spec ConfigMap holds this generation's spec; the results ConfigMap exists and holds
    nothing from another generation (the operator also checks the generation when reading);
    the evaluation's pods may write that ConfigMap (:mod:`..agent_access`). Returns the
    results ConfigMap as it now is, or None when it was created just now (empty)."""
    namespace = evaluation.metadata.namespace or "default"
    generation = str(builders.generation_of(evaluation))
    found: dict[str, Any] | None = None
    for body, reset in (
        (builders.build_spec_configmap(evaluation), False),
        (builders.build_results_configmap(evaluation), True),
    ):
        name = body["metadata"]["name"]
        if ctx.kube.create_if_absent(configmap_path(namespace), body):
            continue
        existing = ctx.kube.get(configmap_path(namespace, name))
        if not names.owned_by(existing, evaluation.metadata.uid):
            raise ForeignChildError(
                f"ConfigMap {name} belongs to another object (an earlier evaluation of the same "
                "name?); waiting for it to be garbage-collected"
            )
        labels = existing["metadata"].get("labels") or {}
        if labels.get(names.LABEL_GENERATION) != generation:
            patch: dict[str, Any] = {"metadata": {"labels": body["metadata"]["labels"]}}
            patch["data"] = None if reset else body["data"]
            existing = ctx.kube.merge_patch(configmap_path(namespace, name), patch)
        if reset:
            found = existing
    agent_access.ensure_agent_access(ctx, evaluation)
    return found


def created_at(evaluation: ModelEvaluation) -> str:
    return str((evaluation.metadata.model_extra or {}).get("creationTimestamp") or "")


def _pages_everywhere(
    ctx: Context, path_for: Callable[[str], str], everywhere: str, selector: str | None
) -> Iterator[list[dict[str, Any]]]:
    """List across the watched namespaces (all of them when no plain list is configured),
    page by page."""
    spaces = ctx.settings.namespaces
    if spaces and all(not any(c in ns for c in "*?!") for ns in spaces):
        for ns in spaces:
            yield from ctx.kube.pages(path_for(ns), selector)
    else:
        yield from ctx.kube.pages(everywhere, selector)


@dataclass
class Listing:
    """What one resync keeps of its listings: the evaluations whose run has not ended (the
    only ones it reconciles) and the Jobs it may need (those holding a slot, and those of the
    unfinished evaluations), by (namespace, name). Ended evaluations and their Jobs are
    dropped page by page, so a tick's memory follows the evaluations in flight, not all of
    them; what is kept is kept slim (:mod:`..slim`: no managedFields, no evaluation spec, no
    pod template) and encoded (:class:`..slim.Packed`), since with thousands in flight the
    kept bodies were most of the tick's memory. Both by (namespace, name)."""

    evaluations: Packed[tuple[str, str]] = field(default_factory=Packed)
    jobs: Packed[tuple[str, str]] = field(default_factory=Packed)


def _unfinished_job(evaluation: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, Job name) of an evaluation whose current run has not ended, else None."""
    st = evaluation.get("status") or {}
    if st.get("phase") not in UNFINISHED:
        return None
    return str(evaluation["metadata"].get("namespace")), str(st.get("jobName") or "")


def sync_ledger(ctx: Context) -> Listing:
    """Rebuild the admission ledger from one listing of the evaluations and one of the
    evaluation Jobs (at the first decision after start-up, and on every resync), in pages;
    returns what the resync needs of them (:class:`Listing`)."""
    ctx.ledger.begin_rebuild()
    listing = Listing()
    wanted_jobs: set[tuple[str, str]] = set()
    everywhere = all_evaluations_path()
    for page in _pages_everywhere(ctx, evaluation_path, everywhere, None):
        for item in page:
            key = _unfinished_job(item)
            if key is not None:
                meta = item["metadata"]
                listing.evaluations[str(meta["namespace"]), str(meta["name"])] = slim_evaluation(
                    item
                )
                wanted_jobs.add(key)
    selector = names.MANAGED_SELECTOR
    for page in _pages_everywhere(ctx, job_path, all_jobs_path(), selector):
        for job in page:
            meta = job["metadata"]
            key = (str(meta["namespace"]), str(meta["name"]))
            if key in wanted_jobs or queue.holds_slot(job):
                listing.jobs[key] = slim_job(job)
    ctx.ledger.finish_rebuild(listing.jobs.values(), listing.evaluations.values())
    return listing


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
    limits = queue.Limits(settings.max_running, settings.max_running_per_namespace)
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
            entry = queue.QueueEntry(created_at(evaluation), namespace, name)
            decision = queue.decide(entry, ctx.ledger.waiting(), ctx.ledger.running(), limits)
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
        if kueue and queue.is_suspended(existing):
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
    limits = queue.Limits(ctx.settings.max_running, ctx.settings.max_running_per_namespace)
    if limits.unlimited:
        return []
    if not ctx.ledger.synced:
        sync_ledger(ctx)
    started: list[str] = []
    passed: set[queue.QueueEntry] = set()
    while True:
        waiting = [e for e in ctx.ledger.waiting() if e not in passed]
        planned = queue.plan(waiting, ctx.ledger.running(), limits)
        if not planned:
            return started
        entry = planned[0]
        passed.add(entry)
        outcome = _admit_queued_one(ctx, entry)
        if outcome == "job created":
            started.append(entry.name)


def _admit_queued_one(ctx: Context, entry: queue.QueueEntry) -> str:
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
