"""What the evaluation handler, the Job handler and the resync share about one run: its owned
children, finishing it from what the agent published, why its pod never started, whether
the kernel's OOM killer ended it, and whether Kubernetes took its pod away (a disruption).

Children are matched by their owner's UID (ownerReferences), never only by name and labels: a
ModelEvaluation deleted and re-created under the same name leaves Jobs and ConfigMaps with the
same names and labels that the garbage collector is about to delete, and they are not the new
evaluation's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final

from mlmodelscope.contract.kube import KubeError, configmap_path, job_path, pod_path
from mlmodelscope.contract.wire import CONTAINER_NAME
from mlmodelscope.controller import instrument, names, recording, results, status
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.names import JOB_NAME_LABEL
from mlmodelscope.controller.pod_memo import STARTED_PHASES
from mlmodelscope.controller.status import Reason

log = logging.getLogger(__name__)

START_FAILURES: Final = (
    "CreateContainerConfigError",
    "CreateContainerError",
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "RunContainerError",
)
"""Waiting reasons of a container that will not start by itself (a missing Secret or
ConfigMap, an image that cannot be pulled): after the start timeout the run ends Failed."""
REJECTED: Final = (400, 422)
"""Answers to creating a Job that no retry can change (the Job is invalid as built)."""
OOM_KILLED: Final = "OOMKilled"
"""The terminated reason the kubelet gives a container the kernel's OOM killer ended (exit
code 137, SIGKILL)."""
MEMORY_LIMIT_FIELD: Final = "spec.hardware.resources.limits.memory"
DISRUPTION_TARGET: Final = "DisruptionTarget"
"""The pod condition Kubernetes sets on a pod it deletes or evicts (reason
``DeletionByPodGC`` when the pod's node no longer exists)."""


class Handled(StrEnum):
    """What handling a run's Job did (a Job event, the resync, a finished run found): what
    follows is decided on it, the words are for logs. Why a run failed is in its status."""

    NOT_OURS = "not ours"
    EVALUATION_GONE = "evaluation gone"
    OTHER_GENERATION = "other generation"
    NOTHING_TO_DO = "nothing to do"
    ALREADY_FINAL = "already final"
    WAITING = "waiting"
    WAITING_FOR_A_NODE = "waiting for a node"
    RUNNING = "running"
    SUSPENDED = "suspended"
    REPLACED = "replaced"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRYING = "retrying"

    @property
    def frees_no_slot(self) -> bool:
        """Nothing about the run ended or changed hands: no need to look at the queue."""
        return self in _FREES_NO_SLOT

    @property
    def worth_logging(self) -> bool:
        """The run's status moved (what the resync reports)."""
        return self not in _FREES_NO_SLOT and self is not Handled.NOTHING_TO_DO


_FREES_NO_SLOT: Final = frozenset(
    {
        Handled.NOT_OURS,
        Handled.OTHER_GENERATION,
        Handled.ALREADY_FINAL,
        Handled.WAITING,
        Handled.WAITING_FOR_A_NODE,
        Handled.RUNNING,
    }
)


class InvalidSpecError(Exception):
    """The spec cannot run as written; status already says Failed/InvalidSpec."""


class PolicyDeniedError(InvalidSpecError):
    """The operator's policy refuses the spec; status already says Failed/PolicyDenied."""


class ForeignChildError(Exception):
    """A Job or ConfigMap of this evaluation's name belongs to another object (an earlier
    evaluation of the same name, about to be garbage-collected): wait for it to go."""


def is_rejection(exc: KubeError) -> bool:
    """The API server refuses the object itself (invalid, or forbidden by policy), as opposed
    to a transient refusal (conflict, throttling, a full quota, a server error)."""
    if exc.status in REJECTED:
        return True
    return exc.status == 403 and "exceeded quota" not in exc.message


def owned_configmap(
    ctx: Context, namespace: str, name: str, uid: str | None
) -> dict[str, Any] | None:
    """The evaluation's results ConfigMap, if it exists and is this evaluation's."""
    configmap = ctx.kube.get_or_none(configmap_path(namespace, names.results_configmap_name(name)))
    return configmap if names.owned_by(configmap, uid) else None


def published_outcome(
    ctx: Context, namespace: str, name: str, uid: str | None, generation: int
) -> results.Outcome | None:
    """What the agent published for ``generation`` in the evaluation's own results ConfigMap."""
    return published_in(owned_configmap(ctx, namespace, name, uid), generation)


def published_in(configmap: Mapping[str, Any] | None, generation: int) -> results.Outcome | None:
    """The outcome the results ConfigMap holds for ``generation`` (an outcome that names
    another generation, or none, is not this run's)."""
    outcome = results.outcome_from_configmap(configmap, generation)
    if outcome is None or outcome.generation != generation:
        return None
    return outcome


def finish(
    ctx: Context,
    namespace: str,
    name: str,
    generation: int,
    job_name: str,
    outcome: results.Outcome,
) -> Handled:
    """End the run of ``job_name`` from what the agent published (its Job may be gone: deleted
    after it completed, or TTL-deleted while the operator was away)."""
    now = ctx.clock
    ctx.update_status(
        namespace,
        name,
        lambda st: (
            status.job_created(
                st, generation, job_name, names.results_configmap_name(name), None, now()
            )
            if st.typed.observed_generation != generation or not st.typed.job_name
            else status.NO_CHANGE
        ),
    )
    if outcome.succeeded and outcome.rows:
        ctx.update_status(
            namespace, name, lambda st: status.succeeded(st, generation, job_name, outcome, now())
        )
        instrument.results_collected(namespace)
        recording.record_finished(ctx, namespace, name, generation, outcome.run_id)
        return Handled.SUCCEEDED
    message = outcome.error or "the agent reported Failed"
    ctx.update_status(
        namespace,
        name,
        lambda st: status.failed(
            st, generation, job_name, Reason.EVALUATION_FAILED, message, now(), outcome
        ),
    )
    recording.record_finished(ctx, namespace, name, generation, outcome.run_id)
    return Handled.FAILED


def _age_seconds(obj: Mapping[str, Any]) -> float | None:
    stamp = str((obj.get("metadata") or {}).get("creationTimestamp") or "")
    try:
        created = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return (datetime.now(UTC) - created).total_seconds()


def _waiting_reason(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    pod_status = pod.get("status") or {}
    for container in [
        *(pod_status.get("initContainerStatuses") or []),
        *(pod_status.get("containerStatuses") or []),
    ]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if reason in START_FAILURES:
            detail = str(waiting.get("message") or "").strip()
            return reason, f"{reason}: {detail}" if detail else reason
    return None


def _failed_create(ctx: Context, job: Mapping[str, Any]) -> tuple[str, str] | None:
    """The Job controller's FailedCreate (a pod it cannot create, e.g. its ServiceAccount
    does not exist): a Job condition where the version has one, else the Job's Event."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("reason") == "FailedCreate" and cond.get("status") == "True":
            return "FailedCreate", f"FailedCreate: {cond.get('message') or ''}".strip()
    meta = job.get("metadata") or {}
    selector = f"involvedObject.kind=Job,involvedObject.name={meta.get('name')},reason=FailedCreate"
    try:
        answer = ctx.kube.request(
            "GET",
            f"/api/v1/namespaces/{meta.get('namespace')}/events",
            params={"fieldSelector": selector},
        )
    except KubeError as exc:  # e.g. no permission to list Events: say nothing
        log.debug("reading the events of Job %s: %s", meta.get("name"), exc)
        return None
    uid = meta.get("uid")
    found = [
        e
        for e in (answer or {}).get("items") or []
        if not uid or (e.get("involvedObject") or {}).get("uid") in (None, uid)
    ]
    if not found:
        return None
    newest = max(found, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return "FailedCreate", f"FailedCreate: {newest.get('message') or ''}".strip()


def _has_pods(job: Mapping[str, Any]) -> bool:
    """The Job controller counts a pod of this Job (active, terminating, ended, or ended but
    not yet counted). It counts a pod once it created it, so none means there is none to
    list (or one created a moment ago, which the next check sees)."""
    st = job.get("status") or {}
    counted = ("active", "ready", "terminating", "succeeded", "failed")
    uncounted = st.get("uncountedTerminatedPods") or {}
    return any(int(st.get(key) or 0) for key in counted) or any(uncounted.values())


def start_failure(ctx: Context, job: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) when the Job's pod has not started within the start timeout and
    will not by itself: a container waiting with a reason such as CreateContainerConfigError
    (secret "x" not found) or ImagePullBackOff, or the Job unable to create its pod at all
    (FailedCreate: its ServiceAccount is missing). None while it is young, running (or its
    pod ran: ``ctx.started_jobs``, or a pod Succeeded), waiting for a node or for Kueue. The
    pods are listed only when the Job counts some; a Job that counts none is asked only for
    its FailedCreate Event."""
    if (job.get("spec") or {}).get("suspend"):
        return None
    if int((job.get("status") or {}).get("ready") or 0) > 0:
        return None
    age = _age_seconds(job)
    if age is None or age < ctx.settings.start_timeout_seconds:
        return None
    meta = job.get("metadata") or {}
    if ctx.started_jobs.shown(str(meta.get("uid") or ""), True):
        return None  # the pod watch saw one of its pods run
    if not _has_pods(job):
        return _failed_create(ctx, job)
    pods = ctx.kube.list(
        pod_path(str(meta.get("namespace"))), f"{JOB_NAME_LABEL}={meta.get('name')}"
    )
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in STARTED_PHASES:
            return None
    for pod in pods:
        found = _waiting_reason(pod)
        if found is not None:
            return found
    if not any((p.get("status") or {}).get("phase") in ("Pending", "Running") for p in pods):
        return _failed_create(ctx, job)
    return None


def fail_start(
    ctx: Context, namespace: str, name: str, generation: int, job: Mapping[str, Any]
) -> bool:
    """End the run Failed when its pod did not start (see :func:`start_failure`), naming the
    reason, and delete the Job so the kubelet stops retrying. Returns whether it did."""
    found = start_failure(ctx, job)
    if found is None:
        return False
    reason, detail = found
    job_name = str(job["metadata"]["name"])
    limit = f"{ctx.settings.start_timeout_seconds:g}s"
    message = f"the evaluation pod of Job {job_name} did not start within {limit}: {detail}"
    evaluation, change = ctx.update_status(
        namespace,
        name,
        lambda st: status.failed(st, generation, job_name, reason, message, ctx.clock()),
    )
    current = (evaluation or {}).get("status") or {}
    if not status.is_terminal(current, generation) or current.get("jobName") != job_name:
        return False
    ctx.kube.delete(job_path(namespace, job_name))  # the kubelet would retry it forever
    if change:
        log.info("%s/%s: %s", namespace, name, message)
        recording.record_finished(ctx, namespace, name, generation, None)
    return True


@dataclass(frozen=True)
class OOMKill:
    """A container of a run's last attempt that the kernel's OOM killer ended."""

    pod: str
    container: str
    exit_code: int | None
    memory_limit: str | None
    """The limit it ran under, from its pod's spec; None: it had none (its node ran out)."""


def _attempt_order(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")


def _last_termination(container_status: Mapping[str, Any]) -> Mapping[str, Any]:
    """How the container last ended: its current state, else (restarted in place since, or
    waiting to be) its last state."""
    for key in ("state", "lastState"):
        terminated = (container_status.get(key) or {}).get("terminated")
        if terminated:
            return dict(terminated)
    return {}


def _memory_limit(pod: Mapping[str, Any], container: str) -> str | None:
    spec = pod.get("spec") or {}
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if c.get("name") == container:
            limit = ((c.get("resources") or {}).get("limits") or {}).get("memory")
            return str(limit) if limit is not None else None
    return None


def oom_kill(pods: Sequence[Mapping[str, Any]]) -> OOMKill | None:
    """The OOM kill that ended a Job's last attempt: in its newest pod (a retried Job keeps the
    pods of earlier attempts), a container or init container whose last termination has the
    reason OOMKilled. None when the last attempt ended otherwise, or there is no pod.

    The Job itself only says BackoffLimitExceeded, and the termination message holds the log
    tail (FallbackToLogsOnError): the pod's container statuses are the one place that says so.
    """
    if not pods:
        return None
    last = max(pods, key=_attempt_order)
    pod_status = last.get("status") or {}
    for container in [
        *(pod_status.get("initContainerStatuses") or []),
        *(pod_status.get("containerStatuses") or []),
    ]:
        terminated = _last_termination(container)
        if terminated.get("reason") == OOM_KILLED:
            name = str(container.get("name") or "")
            code = terminated.get("exitCode")
            return OOMKill(
                pod=str((last.get("metadata") or {}).get("name") or ""),
                container=name,
                exit_code=int(code) if code is not None else None,
                memory_limit=_memory_limit(last, name),
            )
    return None


def oom_message(kill: OOMKill, limit_from_spec: bool = True) -> str:
    """What the user reads: the limit the container exceeded and the field that raises it
    (``limit_from_spec`` False: the spec sets none, the limit is the operator's default or the
    spec's memory request)."""
    who = "the agent" if kill.container == CONTAINER_NAME else f"container {kill.container}"
    how = f"OOMKilled, exit {kill.exit_code}" if kill.exit_code is not None else OOM_KILLED
    if kill.memory_limit is None:
        return (
            f"{who} was killed by the kernel's OOM killer ({how}) without a memory limit: its "
            f"node ran out of memory; set {MEMORY_LIMIT_FIELD} and requests.memory to what the "
            "model needs"
        )
    message = f"{who} was killed for exceeding its memory limit of {kill.memory_limit} ({how})"
    if kill.container != CONTAINER_NAME:
        return f"{message}; it is not the agent's container, so its own limit must rise"
    if not limit_from_spec:
        return (
            f"{message}, which the operator set because the spec sets none; set "
            f"{MEMORY_LIMIT_FIELD} above it"
        )
    return f"{message}; raise {MEMORY_LIMIT_FIELD}"


def oom_failure(
    ctx: Context,
    job: Mapping[str, Any],
    evaluation: Mapping[str, Any],
    listed: Sequence[Mapping[str, Any]] | None = None,
) -> tuple[str, str] | None:
    """(OOMKilled, message) when the failed Job's last attempt was OOM-killed, else None.
    Only the Job's own pods count (by owner UID): a pod of an earlier Job of the same name
    may still be waiting for the garbage collector. ``listed``: the pods with the Job's name
    label when the caller has listed them."""
    meta = job.get("metadata") or {}
    pods = list(listed) if listed is not None else ctx.kube.list(
        pod_path(str(meta.get("namespace"))), f"{JOB_NAME_LABEL}={meta.get('name')}"
    )  # fmt: skip
    if meta.get("uid"):
        pods = [p for p in pods if names.owned_by(p, meta["uid"])]
    kill = oom_kill(pods)
    if kill is None:
        return None
    hardware = (evaluation.get("spec") or {}).get("hardware") or {}
    limits = (hardware.get("resources") or {}).get("limits") or {}
    return Reason.OOM_KILLED, oom_message(kill, limit_from_spec=limits.get("memory") is not None)


@dataclass(frozen=True)
class Disruption:
    """An evaluation pod Kubernetes took away (its node deleted, an eviction, a preemption):
    the ``DisruptionTarget`` condition the pod garbage collector, the taint manager or the
    eviction API writes on it. The agent in it never reports: only this condition says why."""

    pod: str
    node: str | None
    reason: str
    message: str


def disruption(pod: Mapping[str, Any]) -> Disruption | None:
    """The pod's DisruptionTarget condition (status True), else None."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == DISRUPTION_TARGET and cond.get("status") == "True":
            return Disruption(
                pod=str((pod.get("metadata") or {}).get("name") or ""),
                node=(pod.get("spec") or {}).get("nodeName") or None,
                reason=str(cond.get("reason") or DISRUPTION_TARGET),
                message=str(cond.get("message") or ""),
            )
    return None


def is_live_and_ready(pod: Mapping[str, Any]) -> bool:
    """Ready, not being deleted and not disrupted: a pod whose agent really runs."""
    if (pod.get("metadata") or {}).get("deletionTimestamp") or disruption(pod) is not None:
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def superseded(pod: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    """A later attempt of the same Job already runs: news about ``pod`` is stale (watch events
    of different pods arrive in any order)."""
    mine = _attempt_order(pod)
    return any(
        _attempt_order(other) > mine and (other.get("status") or {}).get("phase") == "Running"
        for other in pods
    )


def disruption_message(lost: Disruption, job_name: str, counted: bool) -> str:
    """What the user reads while the Job replaces the pod: which pod, where, who said why.
    ``counted``: the Job has no podFailurePolicy rule that ignores disruptions, so the
    replacement uses one of ``spec.retries`` (and there may be none left)."""
    where = f" on node {lost.node}" if lost.node else ""
    why = f"{lost.reason}: {lost.message}" if lost.message else lost.reason
    then = (
        "replaces it if spec.retries allows"
        if counted
        else "replaces it without counting it against spec.retries"
    )
    return f"evaluation pod {lost.pod}{where} was disrupted ({why}); Job {job_name} {then}"
