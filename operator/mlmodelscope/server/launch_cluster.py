"""Launches in the cluster (`mlms serve --launch-namespace NS`): each evaluation of a form is
created as a ModelEvaluation in NS through the Kubernetes API, as the server's own
ServiceAccount (the chart's Role there allows create, get, list, watch and delete on
modelevaluations, nothing else), and the operator runs it like any other: its namespace policy
applies as for any creator.

The store's ``launches`` row keeps the namespace, the name (``evaluation``) and the uid of the
object created, and follows its phase: :func:`decide` maps what the API server shows to the
launch's state (pure), :class:`ClusterLaunches` does the I/O: a LIST of the namespace's
launched evaluations (by the label :data:`LAUNCH_LABEL`) and then a watch from that LIST's
resourceVersion, so a phase reaches the launch when the operator writes it; a GET when one
launch is read, a DELETE (guarded by the uid) to cancel. The watch is opened again where the
last one ended; the LIST is made again when the watch's resourceVersion is too old (410),
after a launch is submitted, and every :data:`RELIST_S`. When the API server fails, the
follower tries again after :data:`POLL_S`.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pydantic

from mlmodelscope.contract.kube import WATCH_GONE, Kube, KubeError, Watch, evaluation_path
from mlmodelscope.server.launch_queue import FINAL, LaunchQueue, LaunchRow, LaunchState, NewLaunch
from mlmodelscope.server.launch_target import LaunchRefusedError
from mlmodelscope.server.launch_watch import (
    LaunchEvents,
    LogTail,
    local_events,
    local_log,
    read_events,
    read_log,
)
from mlmodelscope.server.launches import BuiltEvaluation, as_yaml
from mlmodelscope.spec.status import EvaluationStatus, Phase

log = logging.getLogger(__name__)

POLL_S: Final = 2.0
"""How long the follower waits before it tries again when the API server failed."""
WATCH_S: Final = 60
"""How long one watch lasts (the API server ends it); the next starts where it ended."""
RELIST_S: Final = 600.0
"""The follower lists again at least this often, for launches in other namespaces (an
earlier ``--launch-namespace``), which the watch does not see."""
LAUNCH_LABEL: Final = "mlmodelscope.io/launch-id"
"""On every ModelEvaluation a launch created: the launch's id."""
CREATED_BY: Final = {"app.kubernetes.io/created-by": "mlms-serve"}


@dataclass(frozen=True)
class EvaluationRef:
    """A ModelEvaluation a launch created."""

    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, row: LaunchRow) -> EvaluationRef | None:
        if row.namespace is None or row.resource_uid is None:
            return None
        return cls(row.namespace, row.evaluation, row.resource_uid)


@dataclass(frozen=True)
class Observed:
    """What the API server shows of a launched ModelEvaluation."""

    uid: str
    phase: Phase
    run_id: str | None
    message: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Observed:
        meta = obj.get("metadata") or {}
        try:
            status = EvaluationStatus.model_validate(obj.get("status") or {})
        except pydantic.ValidationError:  # a status the operator would not write
            raw = obj.get("status") or {}
            phase = str(raw.get("phase"))
            known = Phase(phase) if phase in set(Phase) else Phase.PENDING
            run_id = raw.get("runId") if isinstance(raw.get("runId"), str) else None
            status = EvaluationStatus(
                phase=known, run_id=run_id, message=str(raw.get("message", ""))[:32768]
            )
        return cls(str(meta.get("uid", "")), status.phase, status.run_id, status.message)


@dataclass(frozen=True)
class Change:
    """The launch's next state, its run and why (a failure's message)."""

    state: LaunchState
    run_id: str | None = None
    message: str | None = None


PHASE_STATES: Final = {
    Phase.PENDING: LaunchState.QUEUED,
    Phase.QUEUED: LaunchState.QUEUED,
    Phase.RUNNING: LaunchState.RUNNING,
    Phase.SUCCEEDED: LaunchState.SUCCEEDED,
    Phase.FAILED: LaunchState.FAILED,
}


def decide(row: LaunchRow, observed: Observed | None) -> Change | None:
    """The change the launch ``row`` needs given its evaluation (None: it is gone); None when
    none. An ended launch never changes; a running one never goes back to queued; an
    evaluation that is gone, or replaced by another of its name (another uid), cancels it."""
    if row.state in FINAL:
        return None
    if observed is None or observed.uid != row.resource_uid:
        where = f"{row.namespace}/{row.evaluation}"
        return Change(LaunchState.CANCELLED, None, f"ModelEvaluation {where} was deleted")
    state = PHASE_STATES[observed.phase]
    if state is row.state or (state is LaunchState.QUEUED and row.state is LaunchState.RUNNING):
        return None
    if state is LaunchState.FAILED:
        return Change(state, observed.run_id, observed.message or "the ModelEvaluation failed")
    return Change(state, observed.run_id)


def labelled(document: Mapping[str, Any], launch_id: str) -> dict[str, Any]:
    """``document`` as created: labelled with its launch's id and its creator."""
    body = copy.deepcopy(dict(document))
    labels = body.setdefault("metadata", {}).setdefault("labels", {})
    labels.update(CREATED_BY)
    labels[LAUNCH_LABEL] = launch_id
    return body


class ClusterLaunches:
    """Launches as ModelEvaluations in ``namespace``, followed by a background thread."""

    def __init__(
        self, queue: LaunchQueue, kube: Kube, namespace: str, poll_s: float = POLL_S
    ) -> None:
        self.queue = queue
        self.kube = kube
        self.namespace = namespace
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: Watch | None = None
        self._watch_lock = threading.Lock()
        self._cancelling: set[str] = set()
        """Launches being cancelled here: the watch leaves them to :meth:`cancel`."""

    def submit(self, built: Sequence[BuiltEvaluation]) -> list[LaunchRow]:
        """Create every evaluation, then record the launches; when one create is refused (a
        name already taken: 409), the ones created before it are deleted and nothing is
        recorded."""
        created: list[tuple[BuiltEvaluation, dict[str, Any], EvaluationRef, str]] = []
        try:
            for item in built:
                launch_id = str(uuid.uuid4())
                body = labelled(item.document, launch_id)
                answer = self.kube.create(evaluation_path(self.namespace), body)
                meta = answer["metadata"]
                ref = EvaluationRef(self.namespace, meta["name"], meta["uid"])
                created.append((item, body, ref, launch_id))
            rows = self.queue.enqueue(
                [
                    NewLaunch(
                        item.name,
                        item.model,
                        item.framework,
                        as_yaml([body]),
                        launch_id=launch_id,
                        namespace=ref.namespace,
                        resource_uid=ref.uid,
                    )
                    for item, body, ref, launch_id in created
                ]
            )
        except Exception as exc:  # no launch half made: undo the creates, say why
            for _, _, ref, _ in created:
                self._delete(ref, quiet=True)
            if isinstance(exc, KubeError):
                raise LaunchRefusedError(exc.status, f"{self.namespace}: {exc.message}") from None
            raise
        self.wake()
        return rows

    def cancel(self, row: LaunchRow) -> bool:
        """Delete the launch's evaluation (the operator's owner references take its Job), then
        mark the launch cancelled; False when it had already ended (nothing deleted)."""
        if row.state in FINAL:
            return False
        ref = EvaluationRef.of(row)
        with self._watch_lock:
            self._cancelling.add(row.launch_id)  # its deletion is this cancel, not news
        try:
            if ref is not None:
                self._delete(ref)
            return self.queue.cancel(row.launch_id)
        finally:
            with self._watch_lock:
                self._cancelling.discard(row.launch_id)

    def current(self, row: LaunchRow) -> LaunchRow:
        """``row`` after one GET of its evaluation (unchanged when the API server fails)."""
        ref = EvaluationRef.of(row)
        if ref is None or row.state in FINAL:
            return row
        try:
            found = self.kube.get_or_none(evaluation_path(ref.namespace, ref.name))
        except Exception as exc:  # a read of the launch still answers, with the stored state
            log.warning("launch %s: cannot read %s: %s", row.launch_id, ref, exc)
            return row
        self._apply(row, decide(row, None if found is None else Observed.of(found)))
        return self.queue.get(row.launch_id) or row

    def events(self, row: LaunchRow) -> LaunchEvents:
        """The Events of the launch's evaluation, its Job and pods (:mod:`.launch_watch`)."""
        ref = EvaluationRef.of(row)
        if ref is None:
            return local_events()
        return read_events(self.kube, ref.namespace, ref.name, ref.uid)

    def log(self, row: LaunchRow, tail: int) -> LogTail:
        """The tail of the agent's log in the newest pod of the launch's Job."""
        ref = EvaluationRef.of(row)
        if ref is None:
            return local_log()
        return read_log(self.kube, ref.namespace, ref.name, tail)

    def sync(self) -> str:
        """Compare every launch in the cluster not yet ended with its evaluation (one LIST per
        namespace, this server's own always); the resourceVersion of its own namespace's
        LIST, from which :meth:`follow_watch` goes on."""
        rows = self.queue.in_cluster()  # before the LIST: each row's object was created first
        version = ""
        for namespace in sorted({r.namespace for r in rows if r.namespace} | {self.namespace}):
            listed, at = self.kube.list_at(evaluation_path(namespace), LAUNCH_LABEL)
            version = at if namespace == self.namespace else version
            seen = {o.uid: o for o in map(Observed.of, listed)}
            for row in rows:
                if row.namespace == namespace:
                    self._apply(row, decide(row, seen.get(row.resource_uid or "")))
        return version

    def follow_watch(self, version: str, timeout_s: int = WATCH_S) -> str:
        """Apply each change the API server reports on this namespace's launched evaluations
        from ``version``, until the watch ends (its timeout, :meth:`wake` or :meth:`stop`);
        the resourceVersion to go on from. Raises KubeError 410 when ``version`` is too old."""
        watch = self.kube.watch(
            evaluation_path(self.namespace),
            version,
            label_selector=LAUNCH_LABEL,
            timeout_s=timeout_s,
        )
        with self._watch_lock:
            self._watch = watch
        if self._stop.is_set() or self._wake.is_set():
            watch.close()
        try:
            for event in watch.events():
                version = event.resource_version or version
                if event.type in ("ADDED", "MODIFIED", "DELETED"):
                    self._observed(Observed.of(event.object), gone=event.type == "DELETED")
        finally:
            with self._watch_lock:
                self._watch = None
        return version

    def _observed(self, observed: Observed, *, gone: bool) -> None:
        with self._watch_lock:
            cancelling = set(self._cancelling)
        for row in self.queue.in_cluster():
            mine = row.namespace == self.namespace and row.resource_uid == observed.uid
            if mine and row.launch_id not in cancelling:
                self._apply(row, decide(row, None if gone else observed))

    def _apply(self, row: LaunchRow, change: Change | None) -> bool:
        if change is None:
            return False
        if change.state is LaunchState.CANCELLED:
            return self.queue.cancel(row.launch_id, change.message or "cancelled")
        return self.queue.follow(row.launch_id, change.state, change.run_id, change.message)

    def _delete(self, ref: EvaluationRef, *, quiet: bool = False) -> None:
        """Delete the evaluation if it is still the one created (its uid); gone is fine."""
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": "Background",
            "preconditions": {"uid": ref.uid},
        }
        try:
            self.kube.request("DELETE", evaluation_path(ref.namespace, ref.name), options)
        except KubeError as exc:
            if exc.status in (404, 409):  # gone, or another object of that name now
                return
            if quiet:
                log.warning("cannot delete %s: %s", ref, exc)
                return
            raise LaunchRefusedError(exc.status, f"{ref.namespace}: {exc.message}") from None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._follow, name="mlms-launch-cluster", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def wake(self) -> None:
        """List again now (after a submit, so no change made before its launch was recorded
        is missed)."""
        self._wake.set()
        with self._watch_lock:
            if self._watch is not None:
                self._watch.close()

    def _follow(self) -> None:
        version = ""
        listed_at = 0.0
        while not self._stop.is_set():
            try:
                if not version or self._wake.is_set() or time.monotonic() - listed_at > RELIST_S:
                    self._wake.clear()
                    version, listed_at = self.sync(), time.monotonic()
                version = self.follow_watch(version)
            except KubeError as exc:
                version = ""
                if exc.status != WATCH_GONE:
                    log.warning("following launches in the cluster: %s", exc)
                    self._wake.wait(self.poll_s)
            except Exception as exc:  # the API server or the store is away: try again later
                version = ""
                log.warning("following launches in the cluster: %s", exc)
                self._wake.wait(self.poll_s)
