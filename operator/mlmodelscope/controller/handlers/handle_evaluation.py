"""A ModelEvaluation was created, its spec changed, or the operator (re)started and found it.

Level-based: whatever happened before, make the cluster match the current generation. A run
that already ended is left alone (so a restart or a GitOps re-apply of the same spec starts
nothing); otherwise the spec is validated, Jobs of older generations are removed, the
children the Job needs are made current (:mod:`..children`), and the Job is created once
admission allows it (:mod:`..admission.admit`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from mlmodelscope.contract.kube import evaluation_path, job_path
from mlmodelscope.contract.redact import redact_text
from mlmodelscope.controller import builders, children, job_state, names, runs, status
from mlmodelscope.controller.admission.admit import admit, enforce_policy
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.runs import InvalidSpecError
from mlmodelscope.controller.specs import parse_body
from mlmodelscope.spec import ModelEvaluation, SpecValidationError

log = logging.getLogger(__name__)


def evaluation_changed(body: Mapping[str, Any], ctx: Context) -> str:
    """Reconcile one evaluation at the generation ``body`` names; returns what it did (for
    logs). Raises InvalidSpecError. ``body`` is the whole object (the watch event that queued
    it), or only its metadata, and then the evaluation is read fresh. A whole body that is older
    than the API server's object is safe: children are created only if absent, status writes
    carry the resourceVersion they were computed from, and a newer generation queues its own
    reconcile."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    generation = int(meta.get("generation") or 1)
    current = body if "spec" in body else ctx.kube.get_or_none(evaluation_path(namespace, name))
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
    results_configmap = children.ensure(ctx, evaluation)
    finished = finish_published_run(ctx, evaluation, results_configmap)
    if finished is not None:
        return finished
    return admit(ctx, evaluation)


def finish_published_run(
    ctx: Context, evaluation: ModelEvaluation, results_configmap: Mapping[str, Any] | None
) -> str | None:
    """The run of this generation already happened when its Job is gone but the agent's
    result for this generation is in the evaluation's results ConfigMap (the Job finished
    and was TTL-deleted while the operator was away): end the run from that result instead
    of running it a second time. None when there is no such result.

    ``results_configmap``: the evaluation's own, as :func:`..children.ensure` found it (None:
    it was created just now, so nothing can have been published into it)."""
    namespace = evaluation.metadata.namespace or "default"
    name = evaluation.metadata.name
    generation = builders.generation_of(evaluation)
    job_name = names.job_name(name, generation)
    published = runs.published_in(results_configmap, generation)
    if published is None:
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
        this_run = labels.get(names.LABEL_GENERATION) == str(generation)
        if this_run or not job_state.is_active_job(job):
            continue
        ctx.kube.delete(job_path(namespace, job["metadata"]["name"]))
        deleted.append(job["metadata"]["name"])
        log.info("%s/%s: deleted Job %s of an earlier generation", namespace, name, deleted[-1])
    return deleted
