"""A ModelEvaluation was created, its spec changed, or the operator (re)started and found it.

Level-based: whatever happened before, make the cluster match the current generation. A run
that already ended is left alone (so a restart or a GitOps re-apply of the same spec starts
nothing); otherwise the spec is validated, Jobs of older generations are removed, the
ConfigMaps are made current, and the Job is created once admission allows it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from mlmodelscope.contract.kube import (
    Kube,
    all_evaluations_path,
    all_jobs_path,
    configmap_path,
    evaluation_path,
    job_path,
)
from mlmodelscope.controller import builders, instrument, model_refs, names, queue, status
from mlmodelscope.controller.context import Context
from mlmodelscope.spec import ModelEvaluation, SpecValidationError, parse_evaluation
from mlmodelscope.spec.document import API_VERSION_FULL, KIND

log = logging.getLogger(__name__)
KEPT_METADATA = ("name", "namespace", "uid", "generation", "creationTimestamp", "labels")


class InvalidSpecError(Exception):
    """The spec cannot run as written; status already says Failed/InvalidSpec."""


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
    """Reconcile one evaluation; returns what it did (for logs). Raises InvalidSpecError."""
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
        evaluation = parse_body(body, ctx.kube)
    except SpecValidationError as exc:
        message = "; ".join(str(p) for p in exc.problems) or str(exc)
        ctx.update_status(
            namespace,
            name,
            lambda st: status.invalid_spec(st, generation, message, ctx.clock()),
        )
        delete_outdated_jobs(ctx, namespace, name, generation)
        raise InvalidSpecError(message) from None
    delete_outdated_jobs(ctx, namespace, name, generation)
    ensure_configmaps(ctx, evaluation)
    return admit(ctx, evaluation)


def delete_outdated_jobs(ctx: Context, namespace: str, name: str, generation: int) -> list[str]:
    """Delete this evaluation's Jobs of other generations that are still running: an edited
    spec replaces the run, it does not queue behind it. Finished ones stay for their logs."""
    selector = f"{names.LABEL_EVALUATION}={name},{names.MANAGED_SELECTOR}"
    deleted = []
    for job in ctx.kube.list(job_path(namespace), selector):
        labels = job["metadata"].get("labels") or {}
        if labels.get(names.LABEL_GENERATION) == str(generation) or not queue.is_active_job(job):
            continue
        ctx.kube.delete(job_path(namespace, job["metadata"]["name"]))
        deleted.append(job["metadata"]["name"])
        log.info("%s/%s: deleted Job %s of an earlier generation", namespace, name, deleted[-1])
    return deleted


def ensure_configmaps(ctx: Context, evaluation: ModelEvaluation) -> None:
    """The spec ConfigMap holds this generation's spec; the results ConfigMap exists and holds
    nothing from another generation (the operator also checks the generation when reading)."""
    namespace = evaluation.metadata.namespace or "default"
    generation = str(builders.generation_of(evaluation))
    for body, reset in (
        (builders.build_spec_configmap(evaluation), False),
        (builders.build_results_configmap(evaluation), True),
    ):
        name = body["metadata"]["name"]
        if ctx.kube.create_if_absent(configmap_path(namespace), body):
            continue
        existing = ctx.kube.get(configmap_path(namespace, name))
        labels = existing["metadata"].get("labels") or {}
        if labels.get(names.LABEL_GENERATION) == generation:
            continue
        patch: dict[str, Any] = {"metadata": {"labels": body["metadata"]["labels"]}}
        patch["data"] = None if reset else body["data"]
        ctx.kube.merge_patch(configmap_path(namespace, name), patch)


def _waiting(evaluations: list[dict[str, Any]]) -> list[queue.QueueEntry]:
    """Evaluations that want a Job for their current generation and have none yet."""
    waiting = []
    for item in evaluations:
        meta = item["metadata"]
        st = item.get("status") or {}
        generation = int(meta.get("generation") or 1)
        if meta.get("deletionTimestamp"):
            continue
        if status.is_current(st, generation) and st.get("phase") != "Queued":
            continue
        if names.kueue_queue(meta.get("labels")):
            continue  # Kueue queues it, not the operator
        waiting.append(queue.QueueEntry.of(item))
    return waiting


def created_at(evaluation: ModelEvaluation) -> str:
    return str((evaluation.metadata.model_extra or {}).get("creationTimestamp") or "")


def _list_everywhere(
    ctx: Context, path_for: Callable[[str], str], everywhere: str, selector: str | None
) -> list[dict[str, Any]]:
    """List across the watched namespaces (all of them when no plain list is configured)."""
    spaces = ctx.settings.namespaces
    if spaces and all(not any(c in ns for c in "*?!") for ns in spaces):
        return [item for ns in spaces for item in ctx.kube.list(path_for(ns), selector)]
    return ctx.kube.list(everywhere, selector)


def admit(ctx: Context, evaluation: ModelEvaluation) -> str:
    """Create the Job if the concurrency limits allow it, else mark the evaluation Queued.

    Serialized by the admission lock, and the Job is created inside it, so the next decision
    counts it: the limits hold however many handlers run at once.

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
    with ctx.admission_lock:
        existing = ctx.kube.get_or_none(job_path(namespace, job_name))
        if existing is None and not limits.unlimited and not kueue:
            jobs = _list_everywhere(ctx, job_path, all_jobs_path(), names.MANAGED_SELECTOR)
            evaluations = _list_everywhere(ctx, evaluation_path, all_evaluations_path(), None)
            entry = queue.QueueEntry(created_at(evaluation), namespace, name)
            decision = queue.decide(
                entry,
                _waiting(evaluations),
                queue.running_per_namespace(jobs),
                limits,
            )
            if not decision.admitted:
                ctx.update_status(
                    namespace,
                    name,
                    lambda st: status.queued(st, generation, decision.message, ctx.clock()),
                )
                return "queued"
        trace_id = builders.trace_context(evaluation)[0] if settings.otlp_endpoint else None
        if kueue and (existing is None or queue.is_suspended(existing)):
            ctx.update_status(
                namespace,
                name,
                lambda st: status.waiting_for_kueue(
                    st, generation, job_name, results_cm, kueue, ctx.clock(), trace_id
                ),
            )
        else:
            if kueue and existing is not None:  # admitted while the operator was away
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
        if existing is None:
            job = builders.build_job(evaluation, settings)
            if ctx.kube.create_if_absent(job_path(namespace), job):
                instrument.job_created(evaluation)
            return "job created"
    return "job exists"


def admit_queued(ctx: Context) -> list[str]:
    """A slot may have freed (a Job ended or vanished): offer it to the queued evaluations,
    oldest first. Event-driven instead of a per-object timer, because Kopf timers need a
    finalizer on every evaluation. Returns the names that got a Job."""
    limits = queue.Limits(ctx.settings.max_running, ctx.settings.max_running_per_namespace)
    if limits.unlimited:
        return []
    queued = []
    for item in _list_everywhere(ctx, evaluation_path, all_evaluations_path(), None):
        st = item.get("status") or {}
        generation = int(item["metadata"].get("generation") or 1)
        kueue = names.kueue_queue(item["metadata"].get("labels"))
        if status.is_current(st, generation) and st.get("phase") == "Queued" and not kueue:
            queued.append(item)
    started = []
    for item in sorted(queued, key=queue.QueueEntry.of):
        try:
            evaluation = parse_body(item, ctx.kube)
        except SpecValidationError:
            continue  # its own handler reports it
        if admit(ctx, evaluation) == "job created":
            started.append(evaluation.metadata.name)
    return started
