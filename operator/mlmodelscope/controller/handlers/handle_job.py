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
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

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
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.names import JOB_NAME_LABEL
from mlmodelscope.controller.runs import Handled
from mlmodelscope.controller.status import ConditionType, Reason
from mlmodelscope.spec.status import Phase

log = logging.getLogger(__name__)

RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0)
"""Watch events are not redelivered, so transient API errors are retried (later, off Kopf's
worker threads; the resync heals what the last retry could not)."""
SPEC_ERROR_REASONS = ("PodFailurePolicy", "BackoffLimitExceeded")
"""Job failure reasons that become InvalidSpec when the agent's error names a spec field."""


def _condition(job: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def _run_id(outcome: results.Outcome | None) -> str | None:
    return outcome.run_id if outcome is not None else None


def collect_outcome(
    ctx: Context,
    job: Mapping[str, Any],
    namespace: str,
    evaluation: str,
    generation: int,
    uid: str | None = None,
) -> results.Outcome | None:
    """The agent's outcome for ``job``: the results ConfigMap (the evaluation's own, when its
    ``uid`` is given), else the newest termination message; with the Job's creationTimestamp,
    for ``status.startup.jobSeconds``."""
    job_name = str(job["metadata"]["name"])
    job_created_at = job["metadata"].get("creationTimestamp")
    configmap = ctx.kube.get_or_none(
        configmap_path(namespace, names.results_configmap_name(evaluation))
    )
    if uid is not None and not names.owned_by(configmap, uid):
        configmap = None  # an earlier evaluation's of the same name, about to be collected
    outcome = results.outcome_from_configmap(configmap, generation)
    if outcome is None:
        pods = ctx.kube.list(pod_path(namespace), f"{JOB_NAME_LABEL}={job_name}")
        outcome = results.outcome_from_pods(pods, generation)
    if outcome is not None and job_created_at:
        outcome = dataclasses.replace(outcome, job_created_at=job_created_at)
    return outcome


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


def job_changed(
    job: Mapping[str, Any],
    ctx: Context,
    deleted: bool = False,
    listed: Mapping[str, Any] | None = None,
) -> Handled:
    """React to one Job event; returns what it did. ``listed``: the evaluation as
    the caller has just listed it (the resync), instead of what the watch last delivered;
    status writes are guarded by its resourceVersion either way. Neither copy has the spec
    (:func:`..slim.slim_evaluation`): the one branch that reads it (a failed Job) reads the
    evaluation again."""
    owner = names.owner_of(job)
    if owner is None:
        return Handled.NOT_OURS
    namespace, name, generation = owner
    job_name = str(job["metadata"]["name"])
    evaluation = dict(listed) if listed is not None else ctx.read_evaluation(namespace, name)
    if evaluation is None or evaluation["metadata"].get("deletionTimestamp"):
        return Handled.EVALUATION_GONE
    uid = evaluation["metadata"].get("uid")
    if not names.owned_by(job, uid):
        return Handled.NOT_OURS  # an earlier evaluation's of the same name, about to be collected
    current = evaluation.get("status") or {}
    if not status.is_current(current, generation) or current.get("jobName") != job_name:
        return Handled.OTHER_GENERATION
    if current.get("phase") not in status.UNFINISHED:
        if ctx.recorder is not None and not current.get("record") and job_state.has_ended(job):
            found = recording.record_finished(
                ctx, namespace, name, generation, current.get("runId")
            )
            log.info("%s/%s: finished run found unrecorded: %s", namespace, name, found)
        return Handled.ALREADY_FINAL
    now = ctx.clock
    if (
        deleted
        and not job_state.has_ended(job)
        and int(evaluation["metadata"].get("generation") or 1) > generation
    ):
        # The spec changed and its handler deleted this Job to replace the run: not a
        # failure. The next generation's status moves the run into history as it stood.
        return Handled.REPLACED
    if deleted and not job_state.has_ended(job):
        # Deleted before the Job said it ended: the agent may still have published the
        # result (a Job deleted right after its pod finished); that result stands.
        published = runs.published_outcome(ctx, namespace, name, uid, generation)
        if published is not None:
            return runs.finish(ctx, namespace, name, generation, job_name, published)
        message = f"Job {job_name} was deleted before it finished"
        ctx.update_status(
            namespace,
            name,
            lambda st: status.failed(st, generation, job_name, Reason.JOB_DELETED, message, now()),
            known=evaluation,
        )
        return Handled.FAILED
    # A deleted Job that had ended (TTL, or deleted by hand afterwards) ends the run as its
    # last state says: the results ConfigMap outlives it.
    if _condition(job, "Complete") is not None:
        outcome = collect_outcome(ctx, job, namespace, name, generation, uid)
        if outcome is not None and outcome.succeeded and outcome.rows:
            done = outcome
            ctx.update_status(
                namespace,
                name,
                lambda st: status.succeeded(st, generation, job_name, done, now()),
                known=evaluation,
            )
            instrument.results_collected(namespace)
            recording.record_finished(ctx, namespace, name, generation, done.run_id)
            return Handled.SUCCEEDED
        if outcome is not None and not outcome.succeeded:
            reason, message = Reason.EVALUATION_FAILED, outcome.error or "the agent reported Failed"
        else:
            reason = Reason.RESULTS_MISSING
            message = (
                f"Job {job_name} completed but the agent published no results for generation "
                f"{generation} (ConfigMap {names.results_configmap_name(name)} is empty and no "
                "termination message was found)"
            )
            on_simulated_node = simulated.missing_results(ctx.kube, namespace, job_name)
            if on_simulated_node is not None:
                reason, message = on_simulated_node
        ctx.update_status(
            namespace,
            name,
            lambda st: status.failed(
                st, generation, job_name, reason, message, now(), outcome, placed=True
            ),
            known=evaluation,
        )
        recording.record_finished(ctx, namespace, name, generation, _run_id(outcome))
        return Handled.FAILED
    failed_condition = _condition(job, "Failed")
    if failed_condition is not None:
        if "spec" not in evaluation:  # the resync's view (slim_evaluation): read the spec
            evaluation = ctx.kube.get_or_none(evaluation_path(namespace, name)) or evaluation
        outcome = collect_outcome(ctx, job, namespace, name, generation, uid)
        timeout = (evaluation.get("spec") or {}).get("timeout")
        reason, message = failure(failed_condition, outcome, timeout)
        # The Job says BackoffLimitExceeded and the termination message holds the log tail:
        # only the last pod's container statuses say the kernel killed it for memory. Past the
        # deadline the Job controller deletes the running pod, so the newest pod left may be
        # an earlier attempt's: the deadline is the verdict then.
        oom = runs.oom_failure(ctx, job, evaluation) if reason != Reason.DEADLINE_EXCEEDED else None
        if oom is not None:
            reason, message = oom
        ctx.update_status(
            namespace,
            name,
            lambda st: status.failed(st, generation, job_name, reason, message, now(), outcome),
            known=evaluation,
        )
        recording.record_finished(ctx, namespace, name, generation, _run_id(outcome))
        return Handled.FAILED
    if job_state.is_suspended(job):
        labels = job["metadata"].get("labels") or {}
        results_cm = names.results_configmap_name(name)
        kueue = names.kueue_queue(labels)
        ctx.update_status(
            namespace,
            name,
            lambda st: status.waiting_for_kueue(st, generation, job_name, results_cm, kueue, now()),
            known=evaluation,
        )
        return Handled.SUSPENDED
    if current.get("phase") == Phase.QUEUED:
        unsuspended, _ = ctx.update_status(
            namespace,
            name,
            lambda st: status.unsuspended(st, generation, job_name, now()),
            known=evaluation,
        )
        evaluation = unsuspended or evaluation  # the next write starts from this version
    if int((job.get("status") or {}).get("ready") or 0) > 0 and _a_live_pod_is_ready(
        ctx, namespace, job_name, current
    ):
        ctx.update_status(
            namespace,
            name,
            lambda st: status.running(st, generation, job_name, now()),
            known=evaluation,
        )
        return Handled.RUNNING
    if status.waits_for_a_node((evaluation or {}).get("status") or {}, generation, job_name):
        # Not a start failure (start_failure says so too, but only after listing the pods:
        # with thousands of runs waiting for a node, every resync tick listed each one's).
        return Handled.WAITING_FOR_A_NODE
    if runs.fail_start(ctx, namespace, name, generation, job):
        return Handled.FAILED
    return Handled.WAITING


def job_vanished(ctx: Context, evaluation: Mapping[str, Any]) -> Handled:
    """The evaluation's status names a Job of its current run that no longer exists (deleted
    while the operator was away, or its DELETED event was lost): finish from what the agent
    published, else Failed/JobDeleted."""
    meta = evaluation["metadata"]
    namespace, name = str(meta["namespace"]), str(meta["name"])
    generation = int(meta.get("generation") or 1)
    current = evaluation.get("status") or {}
    job_name = str(current.get("jobName") or "")
    if not job_name or not status.is_current(current, generation):
        return Handled.NOTHING_TO_DO
    published = runs.published_outcome(ctx, namespace, name, meta.get("uid"), generation)
    if published is not None:
        return runs.finish(ctx, namespace, name, generation, job_name, published)
    message = f"Job {job_name} was deleted before it finished"
    _, change = ctx.update_status(
        namespace,
        name,
        lambda st: status.failed(
            st, generation, job_name, Reason.JOB_DELETED, message, ctx.clock()
        ),
    )
    return Handled.FAILED if change else Handled.ALREADY_FINAL


def _a_live_pod_is_ready(
    ctx: Context, namespace: str, job_name: str, current: Mapping[str, Any]
) -> bool:
    """Whether the Job's ready count means the run is running again. After a disruption the
    lost pod may still count as ready (its node is gone, nobody updates it) until the pod
    garbage collector deletes it; then only a ready pod without a DisruptionTarget counts,
    or the status would flap between Running and PodDisrupted on every event."""
    running = status.condition(current, ConditionType.RUNNING)
    if running is None or running.get("reason") != Reason.POD_DISRUPTED:
        return True
    pods = ctx.kube.list(pod_path(namespace), f"{JOB_NAME_LABEL}={job_name}")
    return any(runs.is_live_and_ready(pod) for pod in pods)


def transient(exc: Exception) -> bool:
    if isinstance(exc, KubeError):
        return exc.status in (409, 429) or exc.status >= 500
    return isinstance(exc, (OSError, urllib3.exceptions.HTTPError))


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
    if deleted or (not job_state.holds_slot(job) and not outcome.frees_no_slot):
        started = admit_queued(ctx)
        if started:
            log.info("job %s %s: started %s", meta["name"], outcome, ", ".join(started))
    return outcome
