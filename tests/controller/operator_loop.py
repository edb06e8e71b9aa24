"""The operator's core reconcile, run synchronously on the fake API server (tests/fakes.py).

:class:`OperatorLoop` delivers the fake's watch events to the same handlers the operator's
watches feed (evaluations through the work queue's triage and reconciler, Jobs and pods
through their handlers), one at a time, until nothing new happens. The test plays the rest of
the cluster: the Job controller, scheduler and kubelet (:meth:`OperatorLoop.start`,
:meth:`OperatorLoop.complete`, ...) and the agent (:meth:`OperatorLoop.publish`). Time passes
only when the test says so (:meth:`OperatorLoop.pass_time`): the handlers' delayed calls
(``ctx.retries``) run then, on the test's thread.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from meval_docs import evaluation_doc
from result_docs import summary

from fakes import FakeApiServer, FakeKube, WatchEvent, matches_labels
from mlmodelscope.contract.kube import configmap_path, evaluation_path, job_path, pod_path
from mlmodelscope.contract.wire import SUMMARY_KEY
from mlmodelscope.controller import names, workqueue
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.handlers import handle_delete, handle_job, handle_pod
from mlmodelscope.controller.instrument import Instruments
from mlmodelscope.controller.main import api_event_poster, evaluation_reconciler
from mlmodelscope.controller.runtime.retry_timer import RetryTimer
from mlmodelscope.controller.settings import OperatorSettings

NAMESPACE = "team-a"
NOW = "2026-11-22T08:00:00Z"
MANAGED_SELECTOR = names.MANAGED_SELECTOR


class ManualTimer(RetryTimer):
    """``ctx.retries`` without a thread: due calls run when the test passes time."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.calls: dict[Hashable, tuple[float, Callable[[], object]]] = {}

    def call(self, key: Hashable, delay: float, action: Callable[[], object]) -> None:
        self.calls[key] = (self.now + delay, action)

    def call_once(self, key: Hashable, delay: float, action: Callable[[], object]) -> bool:
        if key in self.calls:
            return False
        self.call(key, delay, action)
        return True

    def cancel(self, key: Hashable) -> bool:
        return self.calls.pop(key, None) is not None

    def pending(self) -> int:
        return len(self.calls)

    def stop(self, timeout_s: float = 5.0) -> None:
        self.calls.clear()

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for key, (due, action) in sorted(self.calls.items(), key=lambda item: item[1][0]):
            if due <= self.now and self.calls.get(key, (None,))[0] == due:
                del self.calls[key]
                action()


@dataclass(frozen=True)
class Handled:
    """One delivered event and what its handler did (or the error class it raised)."""

    resource: str
    name: str
    outcome: str


@dataclass
class OperatorLoop:
    """A single-threaded operator on a fake API server (see the module)."""

    settings: OperatorSettings = field(default_factory=OperatorSettings)
    server: FakeApiServer = field(default_factory=FakeApiServer)
    handled: list[Handled] = field(default_factory=list)
    _cursor: int = 0
    _taken: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.kube = FakeKube(self.server)
        """The test's client: the user's and the cluster's requests."""
        self.operator_kube = FakeKube(self.server)
        """The operator's client: its requests are counted apart."""
        self.ctx = Context(
            settings=self.settings,
            kube=self.operator_kube,
            post_event=api_event_poster(self.operator_kube),
            clock=lambda: NOW,
            retries=ManualTimer(),
        )
        self._reconcile = evaluation_reconciler(self.ctx, Instruments())
        if self.server.objects.get(("", "namespaces", "", NAMESPACE)) is None:
            self.server.add_namespace(NAMESPACE)

    # ------------------------------------------------------------------ the operator

    def settle(self, limit: int = 500) -> list[Handled]:
        """Deliver every watch event not yet delivered, and those they cause; returns what
        was handled."""
        first = len(self.handled)
        for _ in range(limit):
            if self._cursor >= len(self.server.watch_log):
                return self.handled[first:]
            event = self.server.watch_log[self._cursor]
            self._cursor += 1
            self._deliver(event)
        raise AssertionError(f"still busy after {limit} events: {self.handled[-10:]}")

    def pass_time(self, seconds: float) -> list[Handled]:
        """Run the delayed calls that come due, then deliver what they caused."""
        timer = self.ctx.retries
        assert isinstance(timer, ManualTimer)
        timer.advance(seconds)
        return self.settle()

    def restart(self) -> OperatorLoop:
        """A new operator process on the same API server: nothing in memory, every object
        delivered once as its initial listing does."""
        fresh = OperatorLoop(settings=self.settings, server=self.server)
        fresh.kube = self.kube
        fresh._cursor = len(self.server.watch_log)
        for (_, resource, _, _), obj in sorted(self.server.objects.items()):
            fresh._deliver(WatchEvent("ADDED", resource, copy.deepcopy(obj)))
        return fresh

    def _deliver(self, event: WatchEvent) -> None:
        deleted = event.type == "DELETED"
        body = event.object
        labels = body["metadata"].get("labels") or {}
        if event.resource == "modelevaluations":
            self._evaluation(body, deleted)
        elif event.resource == "jobs" and matches_labels(labels, MANAGED_SELECTOR):
            outcome = handle_job.job_progressed(body, self.ctx, deleted=deleted)
            self._note(event, outcome)
        elif event.resource == "pods" and matches_labels(labels, MANAGED_SELECTOR):
            self._note(event, handle_pod.pod_changed(body, self.ctx, deleted=deleted))

    def _evaluation(self, body: Mapping[str, Any], deleted: bool) -> None:
        """What the operator's evaluation watch does: the ledger sees every event; a deleted
        one is forgotten; the others are triaged as the work queue does and reconciled."""
        self.ctx.ledger.observe_evaluation(body, deleted=deleted)
        self.ctx.watched.observe(body, deleted=deleted)
        uid = str(body["metadata"].get("uid"))
        name = str(body["metadata"]["name"])
        if deleted:
            self._taken.pop(uid, None)
            self.handled.append(
                Handled("modelevaluations", name, handle_delete.evaluation_deleted(body, self.ctx))
            )
            return
        entry = workqueue.entry_of(body, self._taken.get(uid))
        if entry is None:
            return
        self._taken[uid] = entry.generation
        try:
            outcome = self._reconcile(entry)
        except workqueue.PermanentError:
            outcome = "PermanentError"
        except workqueue.TransientError:
            outcome = "TransientError"
        self.handled.append(Handled("modelevaluations", name, outcome))

    def _note(self, event: WatchEvent, outcome: str) -> None:
        self.handled.append(Handled(event.resource, event.key[1], outcome))

    # ------------------------------------------------------------------ the user

    def apply(self, name: str = "e", **spec: Any) -> dict[str, Any]:
        """Create an evaluation as ``kubectl apply`` would."""
        doc = evaluation_doc(name=name, namespace=NAMESPACE, **spec)
        for generated in ("uid", "generation", "creationTimestamp"):
            del doc["metadata"][generated]
        return self.kube.create(evaluation_path(NAMESPACE), doc)

    def edit(self, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        return self.kube.merge_patch(evaluation_path(NAMESPACE, name), {"spec": dict(spec)})

    def delete(self, name: str) -> None:
        self.kube.delete(evaluation_path(NAMESPACE, name))

    def evaluation(self, name: str = "e") -> dict[str, Any]:
        return self.kube.get(evaluation_path(NAMESPACE, name))

    def status(self, name: str = "e") -> dict[str, Any]:
        return self.evaluation(name).get("status") or {}

    def condition(self, name: str, kind: str) -> dict[str, Any] | None:
        return next(
            (c for c in self.status(name).get("conditions") or [] if c["type"] == kind), None
        )

    def jobs(self) -> list[str]:
        return [job["metadata"]["name"] for job in self.server.of("jobs", NAMESPACE)]

    def event_reasons(self, name: str = "e") -> list[str]:
        return [
            event["reason"]
            for event in self.server.of("events", NAMESPACE)
            if (event.get("involvedObject") or {}).get("name") == name
        ]

    # ------------------------------------------------------------------ the cluster

    def _job_status(self, job: str, status: Mapping[str, Any]) -> None:
        self.kube.merge_patch(job_path(NAMESPACE, job) + "/status", {"status": dict(status)})

    def start(self, job: str, node: str = "node-a", run: bool = True) -> str:
        """The Job controller creates a pod, the scheduler binds it, the kubelet runs it
        (``run``; else its image is still being pulled: :meth:`run`)."""
        body = self.kube.get(job_path(NAMESPACE, job))
        template = body["spec"]["template"]["metadata"]
        attempt = len(self.kube.list(pod_path(NAMESPACE), f"{names.JOB_NAME_LABEL}={job}"))
        pod_name = f"{job}-{attempt}"
        labels = {**(template.get("labels") or {}), names.JOB_NAME_LABEL: job}
        owner = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": job,
            "uid": body["metadata"]["uid"],
            "controller": True,
        }
        meta = {"name": pod_name, "labels": labels, "ownerReferences": [owner]}
        self.kube.create(pod_path(NAMESPACE), {"apiVersion": "v1", "metadata": meta, "spec": {}})
        self.place(pod_name, node)
        if run:
            self.run(job, pod_name)
        return pod_name

    def run(self, job: str, pod: str) -> None:
        """The kubelet runs the placed pod; the Job controller counts it ready."""
        conditions = [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True"},
        ]
        self.kube.merge_patch(
            pod_path(NAMESPACE, pod) + "/status",
            {"status": {"phase": "Running", "conditions": conditions}},
        )
        self._job_status(job, {"active": 1, "ready": 1, "startTime": NOW})

    def place(self, pod: str, node: str = "node-a") -> None:
        """The scheduler binds the pod to ``node``; its containers are still being created."""
        self.kube.merge_patch(pod_path(NAMESPACE, pod), {"spec": {"nodeName": node}})
        placed = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
        self.kube.merge_patch(pod_path(NAMESPACE, pod) + "/status", {"status": placed})

    def publish(self, name: str = "e", generation: int = 1, **fields: Any) -> None:
        """The agent writes its summary into the evaluation's results ConfigMap."""
        done = summary(generation=generation, **fields)
        self.kube.merge_patch(
            configmap_path(NAMESPACE, names.results_configmap_name(name)),
            {"data": {SUMMARY_KEY: done.model_dump_json()}},
        )

    def complete(self, job: str) -> None:
        condition = {"type": "Complete", "status": "True", "lastTransitionTime": NOW}
        self._job_status(job, {"active": 0, "ready": 0, "succeeded": 1, "conditions": [condition]})

    def fail(self, job: str, reason: str = "BackoffLimitExceeded", message: str = "") -> None:
        condition = {
            "type": "Failed",
            "status": "True",
            "reason": reason,
            "message": message or reason,
            "lastTransitionTime": NOW,
        }
        self._job_status(job, {"active": 0, "ready": 0, "failed": 1, "conditions": [condition]})

    def disrupt(self, pod: str, reason: str = "DeletionByTaintManager") -> None:
        """The node's taint manager evicts the pod: DisruptionTarget, then it fails."""
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": reason,
            "message": "Taint manager: deleting due to NoExecute taint",
        }
        current = self.kube.get(pod_path(NAMESPACE, pod))["status"]["conditions"]
        self.kube.merge_patch(
            pod_path(NAMESPACE, pod) + "/status",
            {"status": {"phase": "Failed", "conditions": [*current, condition]}},
        )
