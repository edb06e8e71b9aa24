"""Kueue's own reason for a queued evaluation, read from the Workload of its suspended Job.

An evaluation labelled ``kueue.x-k8s.io/queue-name`` gets a suspended Job, and Kueue makes a
``Workload`` (``workloads.kueue.x-k8s.io``, owned by the Job, labelled
``kueue.x-k8s.io/job-uid``) whose conditions say why it waits: ``QuotaReserved=False`` with
reason ``Pending`` and "couldn't assign flavors to pod set main: insufficient unused quota for
cpu in flavor default, 400m more needed", ``Inadmissible`` ("LocalQueue team-queue doesn't
exist"), ``Evicted=True`` with ``Preempted``, ``PodsReadyTimeout``, ... Kueue writes none of
this on the Job itself.

:class:`KueueWatch` is a plain thread (not a Kopf timer, which would put a finalizer on every
evaluation). The Job handler tells it which Jobs wait for Kueue (:meth:`KueueWatch.observe`:
the operator's own Jobs with a queue label that are suspended and have not ended; Kopf's
initial listing refills it after a restart). Every ``MLMS_OPERATOR_KUEUE_POLL_SECONDS`` it
lists the Workloads of those Jobs, one list per namespace (selected by the job-uid label, and
matched to the Job by ownerReference), and hands each Workload's reason to
:func:`~mlmodelscope.controller.status.kueue_waiting`. It reads the evaluation only when the
Workload's reason or message differs from what it last showed there, and patches it only when
it differs from the live status, so a quiet queue costs one list per namespace per tick and
nothing at all when nothing waits. Admission itself still arrives as a Job event (Kueue
unsuspends the Job: Pending, then Running as without Kueue).

Without Kueue (the Workload API is not served: HTTP 404) it does nothing, and says so once
in the log; without RBAC on Workloads (403) it says that once.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from mlmodelscope.contract.kube import KubeError, namespaced
from mlmodelscope.controller import job_state, names, status
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.runtime.periodic import Periodic
from mlmodelscope.spec.status import Phase

log = logging.getLogger(__name__)

GROUP: Final = "kueue.x-k8s.io"
VERSIONS: Final = ("v1beta2", "v1beta1")
"""Kueue v0.17 serves both (v1beta2 stored, v1beta1 through its conversion webhook); older
releases only v1beta1. The first that answers is remembered."""
PLURAL: Final = "workloads"
LABEL_JOB_UID: Final = f"{GROUP}/job-uid"
"""Kueue's label on a Job's Workload: the Job's UID."""
SELECTOR_LIMIT: Final = 50
"""At most this many Job UIDs in one label selector; more list the namespace's Workloads."""


def workloads_path(namespace: str, version: str = VERSIONS[0]) -> str:
    return namespaced(namespace, PLURAL, group=GROUP, version=version)


@dataclass(frozen=True)
class WaitingJob:
    """An evaluation Job that waits for Kueue (suspended, with a queue label)."""

    namespace: str
    evaluation: str
    generation: int
    job_name: str
    job_uid: str
    queue: str


def waiting_job(job: Mapping[str, Any]) -> WaitingJob | None:
    """The Job as a :class:`WaitingJob`, or None when it does not wait for Kueue: not the
    operator's, no queue label, not suspended, ended, or being deleted."""
    meta = job.get("metadata") or {}
    labels = meta.get("labels") or {}
    name = labels.get(names.LABEL_EVALUATION)
    kueue_queue = names.kueue_queue(labels)
    try:
        generation = int(labels.get(names.LABEL_GENERATION, ""))
    except ValueError:
        return None
    if not (name and kueue_queue and meta.get("namespace") and meta.get("name")):
        return None
    if not job_state.is_suspended(job) or not job_state.is_active_job(job):
        return None
    return WaitingJob(
        namespace=str(meta["namespace"]),
        evaluation=str(name),
        generation=generation,
        job_name=str(meta["name"]),
        job_uid=str(meta.get("uid") or ""),
        queue=kueue_queue,
    )


@dataclass(frozen=True)
class KueueReason:
    """Why Kueue holds a Workload back, in its own words."""

    reason: str
    """The deciding condition's reason: QuotaReserved=False's (``Pending``, ``Inadmissible``,
    ...), ``QuotaReserved`` (waiting on admission checks), or Evicted's (``Preempted``...)."""
    detail: str
    """Its message (for an eviction, followed by why it is not readmitted yet)."""
    evicted: bool = False
    since: str = ""
    """The deciding condition's lastTransitionTime: a second eviction for the same reason
    is news too."""


def _true(workload: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in (workload.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def _false(workload: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in (workload.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "False":
            return dict(cond)
    return None


def _checks_pending(workload: Mapping[str, Any]) -> str:
    """Admission checks not Ready yet, e.g. ``admission check prov: Pending (waiting)``."""
    parts = []
    for check in (workload.get("status") or {}).get("admissionChecks") or []:
        if check.get("state") != "Ready":
            text = f"admission check {check.get('name')}: {check.get('state')}"
            parts.append(f"{text} ({check['message']})" if check.get("message") else text)
    return "; ".join(parts)


def workload_reason(workload: Mapping[str, Any]) -> KueueReason | None:
    """Why ``workload`` waits, or None when it does not (admitted, finished) or Kueue has not
    said yet. An eviction comes first: it stays True until quota is reserved again."""
    if _true(workload, "Finished") is not None:
        return None
    evicted = _true(workload, "Evicted")
    pending = _false(workload, "QuotaReserved")
    if evicted is not None:
        # What evicted it, then what happened since: requeued (e.g. "The workload was
        # reactivated") and why it has no quota yet, each said once.
        requeued = _true(workload, "Requeued") or {}
        parts: list[str] = []
        for cond in (evicted, requeued, pending or {}):
            text = str(cond.get("message") or "")
            if text and text not in parts:
                parts.append(text)
        return KueueReason(
            str(evicted.get("reason") or "Evicted"),
            "; ".join(parts) or "evicted",
            evicted=True,
            since=str(evicted.get("lastTransitionTime") or ""),
        )
    if _true(workload, "Admitted") is not None:
        return None  # Kueue unsuspends the Job next; that Job event makes it Pending
    reserved = _true(workload, "QuotaReserved")
    if reserved is not None:
        detail = str(reserved.get("message") or "quota reserved")
        checks = _checks_pending(workload)
        return KueueReason(
            str(reserved.get("reason") or "QuotaReserved"),
            f"{detail}; {checks}" if checks else detail,
            since=str(reserved.get("lastTransitionTime") or ""),
        )
    if pending is not None and pending.get("reason"):
        return KueueReason(
            str(pending["reason"]),
            str(pending.get("message") or pending["reason"]),
            since=str(pending.get("lastTransitionTime") or ""),
        )
    return None


def owned_by(workload: Mapping[str, Any], job: WaitingJob) -> bool:
    """``workload`` belongs to ``job``: an ownerReference to that Job (by UID when known)."""
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") != "Job" or not str(ref.get("apiVersion", "")).startswith("batch/"):
            continue
        if (job.job_uid and ref.get("uid") == job.job_uid) or (
            not job.job_uid and ref.get("name") == job.job_name
        ):
            return True
    return False


def workload_of(
    workloads: Iterable[Mapping[str, Any]], job: WaitingJob
) -> Mapping[str, Any] | None:
    """The Job's current Workload: owned by it, not being deleted, newest first."""
    mine = [
        w
        for w in workloads
        if owned_by(w, job) and not (w.get("metadata") or {}).get("deletionTimestamp")
    ]
    mine.sort(key=lambda w: str(w["metadata"].get("creationTimestamp") or ""), reverse=True)
    return mine[0] if mine else None


def selector(jobs: Iterable[WaitingJob]) -> str | None:
    """Server-side label selector of these Jobs' Workloads (None: list them all)."""
    uids = sorted({j.job_uid for j in jobs})
    if not uids or "" in uids or len(uids) > SELECTOR_LIMIT:
        return None
    return f"{LABEL_JOB_UID} in ({','.join(uids)})"


class KueueWatch(Periodic):
    """A daemon thread: every ``interval`` seconds, Kueue's reason into the status of each
    evaluation whose Job waits for Kueue (see the module's docstring)."""

    name = "kueue-reasons"

    def __init__(self, ctx: Context, interval: float | None = None) -> None:
        super().__init__(ctx.acting)
        self.ctx = ctx
        self.seconds = interval if interval is not None else ctx.settings.kueue_poll_seconds
        self._lock = threading.Lock()
        self._waiting: dict[tuple[str, str], WaitingJob] = {}
        self._shown: dict[tuple[str, str], KueueReason] = {}
        self._version: str = VERSIONS[0]
        self._said: set[str] = set()

    # -------------------------------------------------------------------- the Job stream

    def observe(self, job: Mapping[str, Any], deleted: bool = False) -> None:
        """A Job event: remember the Job while it waits for Kueue, forget it otherwise."""
        meta = job.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        found = None if deleted else waiting_job(job)
        with self._lock:
            if found is None:
                self._waiting.pop(key, None)
                self._shown.pop(key, None)
                return
            if self._waiting.get(key) != found:
                self._shown.pop(key, None)
            self._waiting[key] = found

    def waiting(self) -> list[WaitingJob]:
        with self._lock:
            return list(self._waiting.values())

    # ------------------------------------------------------------------------ one pass

    def _say_once(self, what: str, level: int, message: str, *args: Any) -> None:
        if what not in self._said:
            self._said.add(what)
            log.log(level, message, *args)

    def _list(self, namespace: str, jobs: list[WaitingJob]) -> list[dict[str, Any]] | None:
        """The Workloads of ``jobs``; None when no served Workload version exists (404)."""
        versions = [self._version, *(v for v in VERSIONS if v != self._version)]
        for version in versions:
            try:
                found = self.ctx.kube.list(workloads_path(namespace, version), selector(jobs))
            except KubeError as exc:
                if exc.status == 404:
                    continue
                raise
            if version != self._version or "absent" in self._said:
                log.info("reading Kueue Workloads as %s/%s", GROUP, version)
            self._version = version
            self._said.discard("absent")
            return found
        return None

    def poll(self) -> dict[str, str]:
        """One pass over the waiting Jobs; returns what happened to each (for logs, tests)."""
        by_namespace: dict[str, list[WaitingJob]] = defaultdict(list)
        for job in self.waiting():
            by_namespace[job.namespace].append(job)
        done: dict[str, str] = {}
        for namespace, jobs in sorted(by_namespace.items()):
            try:
                workloads = self._list(namespace, jobs)
            except KubeError as exc:
                if exc.status == 403:
                    self._say_once(
                        f"forbidden:{namespace}",
                        logging.WARNING,
                        "cannot list Kueue Workloads in %s (grant get/list on "
                        "workloads.kueue.x-k8s.io to show Kueue's reasons): %s",
                        namespace,
                        exc,
                    )
                else:
                    log.warning("listing Kueue Workloads in %s failed: %s", namespace, exc)
                continue
            if workloads is None:
                self._say_once(
                    "absent",
                    logging.INFO,
                    "Kueue's Workload API (%s) is not served: Jobs waiting for Kueue show no "
                    "Kueue reason (is Kueue installed?)",
                    GROUP,
                )
                return done
            for job in jobs:
                key = f"{namespace}/{job.job_name}"
                try:
                    done[key] = self._show(job, workloads)
                except Exception as exc:  # one evaluation's trouble must not stop the pass
                    log.warning("showing Kueue's reason for %s failed: %s", key, exc)
                    done[key] = f"error: {exc}"
        return done

    def _show(self, job: WaitingJob, workloads: list[dict[str, Any]]) -> str:
        workload = workload_of(workloads, job)
        if workload is None:
            return "no workload"
        found = workload_reason(workload)
        if found is None:
            return "not waiting"
        key = (job.namespace, job.job_name)
        with self._lock:
            if key not in self._waiting:
                return "no longer waiting"  # its Job was unsuspended or deleted meanwhile
            if self._shown.get(key) == found:
                return "unchanged"
        now = self.ctx.clock()
        evaluation, change = self.ctx.update_status(
            job.namespace,
            job.evaluation,
            lambda st: status.kueue_waiting(
                st,
                job.generation,
                job.job_name,
                job.queue,
                found.reason,
                found.detail,
                now,
                evicted=found.evicted,
            ),
        )
        current = (evaluation or {}).get("status") or {}
        shows_it = (
            status.is_current(current, job.generation)
            and current.get("jobName") == job.job_name
            and current.get("phase") == Phase.QUEUED
        )
        if shows_it:
            # Remembered only once the status shows this Job queued: a Job event that has
            # not made it Queued yet is retried at the next tick.
            with self._lock:
                if self._waiting.get(key) == job:
                    self._shown[key] = found
        if change.patch:
            return f"{found.reason}: {found.detail}"
        return "shown" if shows_it else "not queued"

    # -------------------------------------------------------------------------- thread

    def interval(self) -> float:
        return self.seconds

    def tick(self) -> None:
        if self.waiting():
            log.debug("kueue reasons: %s", self.poll())
