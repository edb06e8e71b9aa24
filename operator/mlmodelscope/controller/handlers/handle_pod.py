"""An evaluation pod could not be scheduled (or finally was), or Kubernetes took it away: say
so in the evaluation's status.

The scheduler's own message ("0/6 nodes are available: 3 Insufficient nvidia.com/gpu, ...")
is the most useful thing a user can see when a GPU evaluation waits, so it goes verbatim into
the Scheduled condition, status.message and a Warning event. A pod whose node was deleted (or
that was evicted) carries a DisruptionTarget condition; its agent never reports, and the Job
replaces the pod (the operator's podFailurePolicy does not count that against
``spec.retries``), so the run goes back to Pending with a PodDisrupted Warning naming the pod,
its node and Kubernetes' reason, until the replacement runs.

"Scheduled" is written :data:`SCHEDULED_GRACE_SECONDS` after the pod was first seen placed, and
only if its run does not show Running by then: the Running transition sets the condition too,
so a pod that starts within the grace costs no write of its own, while one whose image takes
minutes to pull shows the node it waits on. A pod that was Unschedulable is shown placed at
once, so the scheduler's old message does not stay.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from mlmodelscope.contract.kube import pod_path
from mlmodelscope.controller import runs, status
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.names import JOB_NAME_LABEL, owner_of
from mlmodelscope.controller.pod_memo import STARTED_PHASES, PodMemo

SCHEDULED_GRACE_SECONDS: Final = 5.0
"""How long a placed pod may take to run before its placement is written on its own."""
REFUSAL_TRIES: Final = 6
"""How often a pod's refusal by the scheduler is offered to its run's status while that status
names no Job yet, 1 s after the first, doubling (:func:`_before_its_job`)."""


def scheduling_state(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """("unschedulable", scheduler message) or ("scheduled", node), or None if undecided."""
    node = (pod.get("spec") or {}).get("nodeName")
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") != "PodScheduled":
            continue
        if cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
            return "unschedulable", str(cond.get("message") or "the pod cannot be scheduled")
        if cond.get("status") == "True" and node:
            return "scheduled", str(node)
    return None


def repeats_what_is_shown(pod: Mapping[str, Any], memo: PodMemo) -> bool:
    """The pod's scheduling state is the one its evaluation's status was seen to show, or the
    pod runs (its placement is the Running transition's), and it shows no disruption: its
    event needs nothing. No request, so the watch's thread asks before a handler thread is spent
    on it (:mod:`..object_events`)."""
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    state = scheduling_state(pod)
    if not uid or state is None or runs.disruption(pod) is not None:
        return False
    return (_started(pod) and state[0] == "scheduled") or memo.shown(uid, state)


def _started(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in STARTED_PHASES


class PodAction(StrEnum):
    """What one pod event needs (:func:`decide`)."""

    NOTHING = "nothing to do"
    ALREADY_SHOWN = "already shown"
    DISRUPTED = "disrupted"
    SHOWN_WHEN_IT_RUNS = "scheduled, shown when it runs"
    SCHEDULED_LATER = "scheduled, written unless it runs soon"
    WRITE_SCHEDULED = "scheduled"
    WRITE_UNSCHEDULABLE = "unschedulable"


@dataclass(frozen=True)
class PodDecision:
    action: PodAction
    detail: str = ""
    """The node (scheduled) or the scheduler's message (unschedulable)."""
    lost: runs.Disruption | None = None
    """What took the pod away (DISRUPTED)."""


def decide(pod: Mapping[str, Any], *, shown: bool, refused: bool, deleted: bool) -> PodDecision:
    """What a pod event needs, from the pod, whether its scheduling state is known to be shown
    (``shown``) and whether its run's status still carries the scheduler's refusal
    (``refused``); no request. The caller has found its evaluation and Job
    (:func:`pod_changed`)."""
    lost = runs.disruption(pod)
    if lost is not None:
        return PodDecision(PodAction.DISRUPTED, lost=lost)
    state = scheduling_state(pod)
    if state is None:
        return PodDecision(PodAction.NOTHING)
    kind, detail = state
    if shown:
        return PodDecision(PodAction.ALREADY_SHOWN, detail)
    if kind == "unschedulable":
        return PodDecision(PodAction.WRITE_UNSCHEDULABLE, detail)
    if deleted:
        return PodDecision(PodAction.NOTHING)
    if _started(pod):
        return PodDecision(PodAction.SHOWN_WHEN_IT_RUNS, detail)  # Running sets Scheduled
    if refused:
        return PodDecision(PodAction.WRITE_SCHEDULED, detail)  # at once: clears the refusal
    return PodDecision(PodAction.SCHEDULED_LATER, detail)


def pod_changed(
    pod: Mapping[str, Any], ctx: Context, deleted: bool = False, *, attempt: int = 0
) -> str:
    """React to one evaluation pod event (:func:`decide`, then act); returns what it did (for
    logs). A scheduling state the evaluation's status was seen to show for this pod is not
    read again (``ctx.pod_memo``): most pod events repeat "scheduled". ``attempt``: how often
    this refusal was offered before (:data:`REFUSAL_TRIES`)."""
    owner = owner_of(pod)
    state = scheduling_state(pod)
    job_name = ((pod.get("metadata") or {}).get("labels") or {}).get(JOB_NAME_LABEL)
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    shown = bool(uid) and state is not None and ctx.pod_memo.shown(uid, state)
    if deleted and uid:
        ctx.pod_memo.forget(uid)  # its last event: what follows runs as without a memory
    if owner is None or not job_name:
        return PodAction.NOTHING.value
    namespace, name, generation = owner
    held = ctx.watched.get(namespace, name)
    observed = status.Observed.of((held or {}).get("status"))
    refused = status.waits_for_a_node(observed.typed, generation, job_name)
    decision = decide(pod, shown=shown, refused=refused, deleted=deleted)
    action, detail = decision.action, decision.detail
    if decision.lost is not None:
        return _disrupted(ctx, namespace, name, generation, job_name, pod, decision.lost)
    if action is PodAction.ALREADY_SHOWN:
        assert state is not None
        return f"{state[0]}, already shown"
    if action is PodAction.SCHEDULED_LATER:
        ctx.retries.call_once(
            ("scheduled", uid),
            SCHEDULED_GRACE_SECONDS,
            lambda: _write_scheduled(ctx, namespace, name, generation, job_name, uid, detail),
        )
    if action not in (PodAction.WRITE_SCHEDULED, PodAction.WRITE_UNSCHEDULABLE):
        return action.value
    if action is PodAction.WRITE_UNSCHEDULABLE:
        evaluation, _ = ctx.update_status(
            namespace,
            name,
            lambda st: status.unschedulable(st, generation, job_name, detail, ctx.clock()),
            known=held,
            observed=observed,
        )
        if evaluation is not None and _before_its_job(evaluation, generation):
            if uid and attempt + 1 < REFUSAL_TRIES:
                ctx.retries.call(
                    ("refused", uid),
                    2.0**attempt,
                    lambda: pod_changed(pod, ctx, attempt=attempt + 1),
                )
            return "unschedulable, offered again once the run's status names its Job"
    else:
        evaluation, _ = ctx.update_status(
            namespace,
            name,
            lambda st: status.scheduled(st, generation, job_name, detail, ctx.clock()),
            known=held,
            observed=observed,
        )
    assert state is not None
    if (
        uid
        and not deleted
        and evaluation is not None
        and status.shows_pod_state(
            evaluation.get("status") or {}, generation, job_name, state[0], detail
        )
    ):
        ctx.pod_memo.remember(uid, state)
    return action.value


def _before_its_job(evaluation: Mapping[str, Any], generation: int) -> bool:
    """The pod's generation is the evaluation's, but the status names no Job of it yet: the
    reconcile that created the Job has not written its status, and the scheduler, which can
    refuse the pod first, may not change the pod again for the refusal to be seen later."""
    current = int((evaluation.get("metadata") or {}).get("generation") or 1)
    shown = status.Observed.of(evaluation.get("status")).typed
    return current == generation and (
        (shown.observed_generation or 0) < generation
        or (shown.observed_generation == generation and not shown.job_name)
    )


def _write_scheduled(
    ctx: Context, namespace: str, name: str, generation: int, job_name: str, uid: str, node: str
) -> None:
    """The delayed placement write (see the module): nothing when the run shows it by now or
    has ended (no longer held as watched: nothing to read)."""
    if ctx.watched.get(namespace, name) is None:
        return
    evaluation, _ = ctx.update_status(
        namespace, name, lambda st: status.scheduled(st, generation, job_name, node, ctx.clock())
    )
    if evaluation is not None and status.shows_pod_state(
        evaluation.get("status") or {}, generation, job_name, "scheduled", node
    ):
        ctx.pod_memo.remember(uid, ("scheduled", node))


def _disrupted(
    ctx: Context,
    namespace: str,
    name: str,
    generation: int,
    job_name: str,
    pod: Mapping[str, Any],
    lost: runs.Disruption,
) -> str:
    """A pod of the run was disrupted: say so, unless a later attempt already runs."""
    if runs.superseded(pod, ctx.kube.list(pod_path(namespace), f"{JOB_NAME_LABEL}={job_name}")):
        return "disrupted, superseded"
    counted = not ctx.settings.pod_failure_policy
    message = runs.disruption_message(lost, job_name, counted)
    ctx.update_status(
        namespace,
        name,
        lambda st: status.pod_disrupted(st, generation, job_name, message, ctx.clock()),
    )
    return "disrupted"
