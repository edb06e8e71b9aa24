"""Launches in the cluster (`mlms serve --launch-namespace NS`): each evaluation of a form is
created as a ModelEvaluation in NS, a sweep (``kind: sweep``) as one EvaluationSweep there,
through the Kubernetes API, as the server's own ServiceAccount (the chart's Role there allows
what this module does: create, get, list, watch and delete on modelevaluations; create, list
and delete on evaluationsweeps), and the operator runs them like any other: its namespace
policy applies as for any creator, and it creates a sweep's children itself.

The store's ``launches`` row keeps the namespace, the name (``evaluation``) and the uid of the
object created, and follows its phase. A sweep's ``launch_sweeps`` row keeps its namespace and
uid; its children's rows their namespace from the start and their ModelEvaluation's uid once
the operator has created it: a ModelEvaluation labelled ``mlmodelscope.io/sweep`` with the
sweep's name and owned by the sweep's uid (:func:`child_of`), of the child's name.

:func:`decide` maps what the API server shows to the launch's state (pure);
:class:`ClusterLaunches` does the I/O: a LIST of the namespace's ModelEvaluations (every one:
no label selector asks for the launched ones and a launched sweep's children at once) and then
a watch from that LIST's resourceVersion, so a phase reaches the launch when the operator
writes it, and a sweep's child is recognised when it appears; a GET when one launch is read, a
DELETE (guarded by the uid) to cancel. While a sweep launch has children that have not ended,
the LIST also lists the namespace's launched EvaluationSweeps (by :data:`LAUNCH_LABEL`): a
sweep gone cancels its children that were never created. The watch is opened again where the
last one ended; the LIST is made again when the watch's resourceVersion is too old (410),
after a launch is submitted, when a sweep's child was deleted, and every :data:`RELIST_S`.
When the API server fails, the follower tries again after :data:`POLL_S`.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import pydantic

from mlmodelscope.contract.kube import (
    WATCH_GONE,
    Kube,
    KubeError,
    Watch,
    evaluation_path,
    sweep_path,
)
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
from mlmodelscope.server.launches import BuiltEvaluation, BuiltSweep, as_yaml
from mlmodelscope.server.sweep_launches import SweepLaunches, SweepRef, SweepRow, new_children
from mlmodelscope.spec.status import EvaluationStatus, Phase
from mlmodelscope.spec.sweep import LABEL_SWEEP, SWEEP_KIND
from mlmodelscope.store import Store

log = logging.getLogger(__name__)

POLL_S: Final = 2.0
"""How long the follower waits before it tries again when the API server failed."""
WATCH_S: Final = 60
"""How long one watch lasts (the API server ends it); the next starts where it ended."""
RELIST_S: Final = 600.0
"""The follower lists again at least this often, for launches in other namespaces (an
earlier ``--launch-namespace``), which the watch does not see."""
LAUNCH_LABEL: Final = "mlmodelscope.io/launch-id"
"""On every ModelEvaluation a launch created: the launch's id; on every EvaluationSweep a sweep
launch created: the sweep launch's id."""
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

    @property
    def path(self) -> str:
        return evaluation_path(self.namespace, self.name)


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


def child_of(obj: Mapping[str, Any], sweep: SweepRef) -> bool:
    """Whether ``obj`` is a child ModelEvaluation of ``sweep`` as the operator makes them: in
    its namespace, labelled ``mlmodelscope.io/sweep`` with its name, and owned by it (a
    controller ownerReference of kind EvaluationSweep to its uid), never by name alone."""
    meta = obj.get("metadata") or {}
    if meta.get("namespace") != sweep.namespace:
        return False
    if (meta.get("labels") or {}).get(LABEL_SWEEP) != sweep.name:
        return False
    return any(
        ref.get("kind") == SWEEP_KIND
        and ref.get("controller") is True
        and ref.get("uid") == sweep.uid
        for ref in meta.get("ownerReferences") or []
    )


def adoptions(
    rows: Iterable[LaunchRow], listed: Iterable[Mapping[str, Any]], sweeps: Iterable[SweepRef]
) -> list[tuple[LaunchRow, str]]:
    """(child launch, uid) for each launch of a sweep's child that has no uid yet and whose
    ModelEvaluation is among ``listed``: of its name, a child of its sweep (:func:`child_of`)."""
    waiting = {
        (row.sweep_id, row.evaluation): row
        for row in rows
        if row.sweep_id is not None and row.resource_uid is None
    }
    found = []
    for obj in listed if waiting else ():
        meta = obj.get("metadata") or {}
        for sweep in sweeps:
            row = waiting.get((sweep.sweep_id, str(meta.get("name") or "")))
            if row is not None and meta.get("uid") and child_of(obj, sweep):
                found.append((row, str(meta["uid"])))
    return found


def not_created(row: LaunchRow) -> str:
    """Why a sweep's child has no Events nor log yet."""
    return (
        f"ModelEvaluation {row.namespace}/{row.evaluation} does not exist yet: the operator "
        "creates a sweep's children in matrix order, spec.parallelism at a time"
    )


def labelled(document: Mapping[str, Any], launch_id: str) -> dict[str, Any]:
    """``document`` as created: labelled with its launch's id and its creator."""
    body = copy.deepcopy(dict(document))
    labels = body.setdefault("metadata", {}).setdefault("labels", {})
    labels.update(CREATED_BY)
    labels[LAUNCH_LABEL] = launch_id
    return body


class ClusterLaunches:
    """Launches as ModelEvaluations (a sweep: an EvaluationSweep) in ``namespace``, followed
    by a background thread."""

    def __init__(self, store: Store, kube: Kube, namespace: str, poll_s: float = POLL_S) -> None:
        self.queue = LaunchQueue(store)
        self.sweeps = SweepLaunches(store)
        self.kube = kube
        self.namespace = namespace
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: Watch | None = None
        self._watch_lock = threading.Lock()
        self._cancelling: set[str] = set()
        """Launches being cancelled here: the watch and the LIST leave them to :meth:`cancel`
        and :meth:`cancel_sweep`."""

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
                self._delete(ref.namespace, ref.path, ref.uid, quiet=True)
            if isinstance(exc, KubeError):
                raise LaunchRefusedError(exc.status, f"{self.namespace}: {exc.message}") from None
            raise
        self.wake()
        return rows

    def submit_sweep(self, built: BuiltSweep) -> SweepRow:
        """Create the EvaluationSweep (labelled with the sweep launch's id), then record the
        sweep and its children, whose ModelEvaluations the operator creates; when the store
        refuses, the sweep is deleted again. A refusal of the API server (its name taken: 409)
        records nothing."""
        sweep_id = str(uuid.uuid4())
        body = labelled(built.document, sweep_id)
        try:
            answer = self.kube.create(sweep_path(self.namespace), body)
        except KubeError as exc:
            raise LaunchRefusedError(exc.status, f"{self.namespace}: {exc.message}") from None
        name, uid = str(answer["metadata"]["name"]), str(answer["metadata"]["uid"])
        try:
            sweep = self.sweeps.create(
                name,
                as_yaml([body]),
                new_children(built, self.namespace),
                sweep_id=sweep_id,
                namespace=self.namespace,
                resource_uid=uid,
            )
        except Exception:  # no sweep half made
            self._delete(self.namespace, sweep_path(self.namespace, name), uid, quiet=True)
            raise
        self.wake()
        return sweep

    def cancel_sweep(self, sweep: SweepRow) -> bool:
        """Delete the sweep's EvaluationSweep (the garbage collector then deletes the children
        it owns, and their Jobs with them), then mark every child not yet ended cancelled;
        False when all had ended (nothing deleted)."""
        ending = {child.launch_id for child in sweep.children if child.state not in FINAL}
        if not ending:
            return False
        with self._watch_lock:
            self._cancelling |= ending  # the children's deletion is this cancel, not news
        try:
            if sweep.namespace is not None and sweep.resource_uid is not None:
                path = sweep_path(sweep.namespace, sweep.name)
                self._delete(sweep.namespace, path, sweep.resource_uid)
            return self.sweeps.cancel(sweep.sweep_id) > 0
        finally:
            with self._watch_lock:
                self._cancelling -= ending

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
                self._delete(ref.namespace, ref.path, ref.uid)
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
            found = self.kube.get_or_none(ref.path)
        except Exception as exc:  # a read of the launch still answers, with the stored state
            log.warning("launch %s: cannot read %s: %s", row.launch_id, ref, exc)
            return row
        self._apply(row, decide(row, None if found is None else Observed.of(found)))
        return self.queue.get(row.launch_id) or row

    def events(self, row: LaunchRow) -> LaunchEvents:
        """The Events of the launch's evaluation, its Job and pods (:mod:`.launch_watch`)."""
        ref = EvaluationRef.of(row)
        if ref is None and row.namespace is not None:  # a sweep's child not created yet
            return LaunchEvents(applies=True, reason=not_created(row))
        if ref is None:
            return local_events()
        return read_events(self.kube, ref.namespace, ref.name, ref.uid)

    def log(self, row: LaunchRow, tail: int) -> LogTail:
        """The tail of the agent's log in the newest pod of the launch's Job."""
        ref = EvaluationRef.of(row)
        if ref is None and row.namespace is not None:
            return LogTail(applies=True, reason=not_created(row))
        if ref is None:
            return local_log()
        return read_log(self.kube, ref.namespace, ref.name, tail)

    def sync(self) -> str:
        """Compare every launch in the cluster not yet ended with its evaluation (one LIST per
        namespace, this server's own always), learning the uids of sweep children created
        since, and cancel the never created children of a launched sweep that is gone; the
        resourceVersion of its own namespace's LIST, from which :meth:`follow_watch` goes on."""
        rows = self.queue.in_cluster()  # before the LIST: each row's object was created first
        sweeps = self.sweeps.in_cluster()
        with self._watch_lock:
            cancelling = set(self._cancelling)
        rows = [row for row in rows if row.launch_id not in cancelling]
        version = ""
        for namespace in sorted({r.namespace for r in rows if r.namespace} | {self.namespace}):
            listed, at = self.kube.list_at(evaluation_path(namespace))
            version = at if namespace == self.namespace else version
            here = [s for s in sweeps if s.namespace == namespace]
            mine = self._adopted([r for r in rows if r.namespace == namespace], listed, here)
            seen = {o.uid: o for o in map(Observed.of, listed)}
            for row in mine:
                if row.resource_uid is not None:
                    self._apply(row, decide(row, seen.get(row.resource_uid)))
            self._sweeps_gone(namespace, here, mine)
        return version

    def _adopted(
        self,
        rows: list[LaunchRow],
        listed: Iterable[Mapping[str, Any]],
        sweeps: Iterable[SweepRef],
    ) -> list[LaunchRow]:
        """``rows``, each child of a sweep found among ``listed`` now with its uid (stored)."""
        found = {
            row.launch_id: uid
            for row, uid in adoptions(rows, listed, sweeps)
            if self.queue.adopt(row.launch_id, uid)
        }
        return [replace(r, resource_uid=found.get(r.launch_id, r.resource_uid)) for r in rows]

    def _sweeps_gone(
        self, namespace: str, sweeps: Sequence[SweepRef], rows: Sequence[LaunchRow]
    ) -> None:
        """Cancel the children never created of each of ``sweeps`` no longer in the cluster
        (one LIST of the namespace's launched EvaluationSweeps); a child created goes on
        following its own ModelEvaluation."""
        if not sweeps:
            return
        listed = self.kube.list(sweep_path(namespace), LAUNCH_LABEL)
        present = {str((o.get("metadata") or {}).get("uid")) for o in listed}
        for sweep in sweeps:
            if sweep.uid in present:
                continue
            message = f"EvaluationSweep {namespace}/{sweep.name} was deleted"
            for row in rows:
                if row.sweep_id == sweep.sweep_id and row.resource_uid is None:
                    self.queue.cancel(row.launch_id, message)

    def follow_watch(self, version: str, timeout_s: int = WATCH_S) -> str:
        """Apply each change the API server reports on this namespace's evaluations from
        ``version``, until the watch ends (its timeout, :meth:`wake`, :meth:`stop`, or a
        sweep's child deleted: the next LIST finds whether its sweep is gone too); the
        resourceVersion to go on from. Raises KubeError 410 when ``version`` is too old."""
        watch = self.kube.watch(evaluation_path(self.namespace), version, timeout_s=timeout_s)
        with self._watch_lock:
            self._watch = watch
        if self._stop.is_set() or self._wake.is_set():
            watch.close()
        try:
            for event in watch.events():
                version = event.resource_version or version
                if event.type not in ("ADDED", "MODIFIED", "DELETED"):
                    continue
                if self._observed(event.object, gone=event.type == "DELETED"):
                    self._wake.set()
                    watch.close()
                    break
        finally:
            with self._watch_lock:
                self._watch = None
        return version

    def _observed(self, obj: Mapping[str, Any], *, gone: bool) -> bool:
        """Apply one watched change to the launch of that object (a sweep's child: learning its
        uid first); True when it cancelled a sweep's child."""
        observed = Observed.of(obj)
        with self._watch_lock:
            cancelling = set(self._cancelling)
        rows = [
            row
            for row in self.queue.in_cluster()
            if row.namespace == self.namespace and row.launch_id not in cancelling
        ]
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL_SWEEP) and any(row.resource_uid is None for row in rows):
            here = [s for s in self.sweeps.in_cluster() if s.namespace == self.namespace]
            rows = self._adopted(rows, [obj], here)
        relist = False
        for row in rows:
            if row.resource_uid != observed.uid:
                continue
            change = decide(row, None if gone else observed)
            if self._apply(row, change) and row.sweep_id is not None and gone:
                relist = True
        return relist

    def _apply(self, row: LaunchRow, change: Change | None) -> bool:
        if change is None:
            return False
        if change.state is LaunchState.CANCELLED:
            return self.queue.cancel(row.launch_id, change.message or "cancelled")
        return self.queue.follow(row.launch_id, change.state, change.run_id, change.message)

    def _delete(self, namespace: str, path: str, uid: str, *, quiet: bool = False) -> None:
        """Delete the object at ``path`` if it is still the one created (its uid); gone is
        fine. Its dependents go in the background (the garbage collector)."""
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": "Background",
            "preconditions": {"uid": uid},
        }
        try:
            self.kube.request("DELETE", path, options)
        except KubeError as exc:
            if exc.status in (404, 409):  # gone, or another object of that name now
                return
            if quiet:
                log.warning("cannot delete %s (uid %s): %s", path, uid, exc)
                return
            raise LaunchRefusedError(exc.status, f"{namespace}: {exc.message}") from None

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
