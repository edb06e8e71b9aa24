"""What every handler shares: settings, the API client, the results store, locks, and how
events are posted.

Status is written by read-modify-write of the freshest object (never a handler's possibly
stale body) under a per-evaluation lock, because the evaluation's own handlers and the Job
and Pod handlers all update the same status from different Kopf workers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlmodelscope.contract.kube import Kube, evaluation_path
from mlmodelscope.controller import status
from mlmodelscope.controller.later import Later
from mlmodelscope.controller.ledger import AdmissionLedger
from mlmodelscope.controller.namespace_policy import NamespacePolicies
from mlmodelscope.controller.policy import Policy
from mlmodelscope.controller.settings import OperatorSettings

if TYPE_CHECKING:
    from mlmodelscope.controller.recording import Recorder

log = logging.getLogger("mlmodelscope.controller")

EventPoster = Callable[[Mapping[str, Any], status.Event], None]
StatusFn = Callable[[Mapping[str, Any]], status.StatusChange]


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
    later: Later = field(default_factory=Later)
    """Retries of Job events, off Kopf's worker threads."""
    namespace_policies: NamespacePolicies = field(default_factory=NamespacePolicies)
    """Namespaces' policy annotations, each read at most every 10 s (shared by copies)."""
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

    def update_status(
        self, namespace: str, name: str, compute: StatusFn
    ) -> tuple[dict[str, Any] | None, status.StatusChange]:
        """Apply ``compute(current status)`` to the live object and post its event.

        Returns the evaluation as read (None when gone or being deleted) and the change.
        """
        with self.lock(namespace, name):
            evaluation = self.kube.get_or_none(evaluation_path(namespace, name))
            if evaluation is None or evaluation["metadata"].get("deletionTimestamp"):
                return None, status.NO_CHANGE
            change = compute(evaluation.get("status") or {})
            if change.patch:
                path = evaluation_path(namespace, name) + "/status"
                evaluation = self.kube.merge_patch(path, {"status": change.patch})
                self.ledger.observe_evaluation(evaluation)
        if change.event is not None:
            self.post_event(evaluation, change.event)
        return evaluation, change
