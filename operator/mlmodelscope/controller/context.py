"""What every handler shares: settings, the API client, the results store, locks, and how
events are posted.

Status is written by read-modify-write of the freshest object (never a handler's possibly
stale body) under a per-evaluation lock, because the evaluation's own handlers and the Job
and Pod handlers all update the same status from different Kopf workers; the write is
guarded by the resourceVersion it was computed from, because writers outside this process
(another replica, a user, another controller) take no lock of ours.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from mlmodelscope.contract.kube import Kube, KubeError, evaluation_path
from mlmodelscope.controller import status
from mlmodelscope.controller.admission.ledger import AdmissionLedger
from mlmodelscope.controller.namespace_policy import NamespacePolicies
from mlmodelscope.controller.pod_memo import PodMemo, StartedJobs
from mlmodelscope.controller.policy import Policy
from mlmodelscope.controller.run_store import Recorder
from mlmodelscope.controller.runtime.fanout import Fanout
from mlmodelscope.controller.runtime.retry_timer import RetryTimer
from mlmodelscope.controller.settings import OperatorSettings
from mlmodelscope.controller.simulated import SimulatedNodes
from mlmodelscope.controller.watched import WatchedEvaluations

log = logging.getLogger("mlmodelscope.controller")

CONFLICT_ATTEMPTS: Final = 5
"""Status writes tried before a conflict (409) is left to the caller's retry."""

EventPoster = Callable[[Mapping[str, Any], status.Event], None]
StatusFn = Callable[[status.Observed], status.StatusChange]
"""A status transition: the change to make to the status as read (:mod:`.status`)."""


def always() -> bool:
    return True


def log_event(evaluation: Mapping[str, Any], event: status.Event) -> None:
    """The event poster outside Kopf (tests, dry runs): log it."""
    meta = evaluation.get("metadata") or {}
    log.info("event %s/%s %s %s: %s", meta.get("namespace"), meta.get("name"), event.type,
             event.reason, event.message)  # fmt: skip


@dataclass
class Context:
    settings: OperatorSettings
    kube: Kube
    post_event: EventPoster = log_event
    clock: Callable[[], str] = status.now
    recorder: Recorder | None = None
    """The results store finished runs are recorded in (None: MLMS_OPERATOR_STORE_URL unset)."""
    admission_lock: threading.Lock = field(default_factory=threading.Lock)
    """Serializes decisions under the concurrency limits (only when limits are set)."""
    ledger: AdmissionLedger = field(default_factory=AdmissionLedger)
    """Slots held and evaluations waiting, from the watch streams (shared by copies)."""
    retries: RetryTimer = field(default_factory=RetryTimer)
    """Retries of Job events, off Kopf's worker threads."""
    fanout: Fanout = field(default_factory=Fanout)
    """Independent requests of a reconcile, made at once (shared by copies)."""
    acting: Callable[[], bool] = always
    """Whether this replica acts now (:meth:`.peering.Peering.acting`; standalone: always);
    the periodic threads skip their ticks while it says no."""
    namespace_policies: NamespacePolicies = field(default_factory=NamespacePolicies)
    """Namespaces' policy annotations, each read at most every 10 s (shared by copies)."""
    pod_memo: PodMemo = field(default_factory=PodMemo)
    """Each pod's scheduling state its evaluation's status shows (shared by copies)."""
    started_jobs: StartedJobs = field(default_factory=StartedJobs)
    """Jobs a pod of which was seen running or finished (shared by copies)."""
    simulated_nodes: SimulatedNodes = field(default_factory=SimulatedNodes)
    """Whether each node read lately is simulated (shared by copies)."""
    watched: WatchedEvaluations = field(default_factory=WatchedEvaluations)
    """The newest state of each evaluation in flight, from the watch and the operator's own
    writes (shared by copies)."""
    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)
    _locks_guard: threading.Lock = field(default_factory=threading.Lock)

    def policy_for(self, namespace: str) -> Policy:
        """The operator-wide policy narrowed by ``namespace``'s annotations."""
        return self.namespace_policies.effective(self.settings.policy, self.kube, namespace)

    def lock(self, namespace: str, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault((namespace, name), threading.Lock())

    def forget(self, namespace: str, name: str) -> None:
        with self._locks_guard:
            self._locks.pop((namespace, name), None)

    def read_evaluation(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The evaluation's metadata and status as last watched or written (in flight, or
        ended not long ago), else as the API server has it now (None when gone). Without its
        spec when it comes from the watch."""
        held = self.watched.recent(namespace, name)
        return held if held is not None else self.kube.get_or_none(evaluation_path(namespace, name))

    def update_status(
        self,
        namespace: str,
        name: str,
        compute: StatusFn,
        known: Mapping[str, Any] | None = None,
        observed: status.Observed | None = None,
    ) -> tuple[dict[str, Any] | None, status.StatusChange]:
        """Apply ``compute(current status)`` to the live object and post its event.

        The patch carries the resourceVersion it was computed from, so a write by anyone else
        in between (another replica during a peering handover, a user, another controller)
        makes it fail with 409 instead of silently replacing lists such as ``conditions``
        with ones computed from the older object; it is then recomputed from a fresh read, up
        to :data:`CONFLICT_ATTEMPTS` times (then the 409 is raised: handlers retry it).

        ``known``: the evaluation as the caller has just read it. The first attempt computes
        from it, else from what the watch last delivered (:attr:`watched`), instead of reading
        again; if that is outdated the patch gets 409 and the next attempt reads. A change
        computed as nothing from it writes nothing and reads nothing.

        ``compute`` gets each status it is computed from read once (:class:`.status.Observed`);
        ``observed``: the caller's read of ``known``'s status, used instead of parsing it again
        while that is the status at hand.

        Returns the evaluation as read (None when gone or being deleted) and the change.
        """
        path = evaluation_path(namespace, name)
        with self.lock(namespace, name):
            held = known if known is not None else self.watched.get(namespace, name)
            for attempt in range(1, CONFLICT_ATTEMPTS + 1):
                if attempt == 1 and held is not None:
                    current: dict[str, Any] | None = dict(held)
                else:
                    current = self.kube.get_or_none(path)
                if current is None or current["metadata"].get("deletionTimestamp"):
                    return None, status.NO_CHANGE
                evaluation: dict[str, Any] = current
                raw = evaluation.get("status")
                read = observed if observed is not None and observed.reads(raw) else None
                change = compute(read or status.Observed.of(raw))
                if not change.patch:
                    break
                try:
                    evaluation = self.kube.merge_patch(
                        path + "/status", guarded(evaluation, change)
                    )
                except KubeError as exc:
                    if exc.status != 409 or attempt == CONFLICT_ATTEMPTS:
                        raise
                    log.debug("status of %s/%s changed meanwhile (409): recomputing", namespace,
                              name)  # fmt: skip
                    continue
                self.ledger.observe_evaluation(evaluation)
                self.watched.observe(evaluation)
                break
        if change.event is not None:
            self.post_event(evaluation, change.event)
        return evaluation, change


def guarded(evaluation: Mapping[str, Any], change: status.StatusChange) -> dict[str, Any]:
    """The merge patch of ``change``, valid only on the version it was computed from (the API
    server answers 409 when ``metadata.resourceVersion`` no longer matches)."""
    body: dict[str, Any] = {"status": change.patch}
    version = (evaluation.get("metadata") or {}).get("resourceVersion")
    if version:
        body["metadata"] = {"resourceVersion": version}
    return body
