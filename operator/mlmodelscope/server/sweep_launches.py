"""EvaluationSweeps launched on `mlms serve`: the sweep's document in ``launch_sweeps``, its
children (the ModelEvaluations :func:`mlmodelscope.spec.sweep.expand` makes) recorded as
ordinary launches with its ``sweep_id``: run by the same workers, or, for a sweep created in
the cluster (`mlms serve --launch-namespace`, :mod:`.launch_cluster`), with the sweep's
namespace and uid kept, followed as the operator creates and runs them.

A sweep keeps no state of its own: :func:`sweep_state` sums its children's up when it is
read, so it can never disagree with them. Cancelling a sweep cancels every child that has not
ended, each by the queue's own guarded UPDATE.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import sqlalchemy as sa

from mlmodelscope.server.launch_queue import FINAL, LaunchQueue, LaunchRow, LaunchState, NewLaunch
from mlmodelscope.server.launches import BuiltSweep, as_yaml
from mlmodelscope.store import Store
from mlmodelscope.store.schema import launch_sweeps, launches
from mlmodelscope.store.store import as_utc


def sweep_state(states: Iterable[LaunchState]) -> LaunchState:
    """A sweep's state from its children's: queued while none has started; running while any
    is queued or running and one has started or ended; once all have ended, failed if any
    failed, else interrupted if any was, else cancelled if any was, else succeeded."""
    found = set(states)
    if not found:
        return LaunchState.QUEUED
    if found - FINAL:  # some still to run
        return LaunchState.QUEUED if found == {LaunchState.QUEUED} else LaunchState.RUNNING
    for state in (LaunchState.FAILED, LaunchState.INTERRUPTED, LaunchState.CANCELLED):
        if state in found:
            return state
    return LaunchState.SUCCEEDED


@dataclass(frozen=True)
class SweepRow:
    """One launched sweep and its children, in matrix order."""

    sweep_id: str
    name: str
    spec: str
    created_at: datetime
    children: list[LaunchRow]
    namespace: str | None = None
    """Where a cluster launch created its EvaluationSweep (named ``name``); None: local."""
    resource_uid: str | None = None
    """That EvaluationSweep's uid: its children are the ModelEvaluations it owns."""

    @property
    def state(self) -> LaunchState:
        return sweep_state(child.state for child in self.children)

    @property
    def counts(self) -> dict[str, int]:
        """Children per state, e.g. ``{"succeeded": 4, "running": 2}``."""
        return dict(Counter(child.state.value for child in self.children))


@dataclass(frozen=True)
class SweepRef:
    """An EvaluationSweep a cluster launch created, for following its children."""

    sweep_id: str
    namespace: str
    name: str
    uid: str


def new_children(built: BuiltSweep, namespace: str | None = None) -> list[NewLaunch]:
    """The launches of a sweep's children, in matrix order: each its expanded document (the
    ModelEvaluation the operator creates, or the workers run); ``namespace``: in the cluster,
    where the operator creates them (their uid is learnt when they appear)."""
    return [
        NewLaunch(
            child.name,
            child.document["spec"]["modelRef"]["name"],
            child.axes["framework"],
            as_yaml([child.document]),
            namespace=namespace,
        )
        for child in built.children
    ]


class SweepLaunches:
    """The ``launch_sweeps`` table and the children it groups in ``launches``."""

    def __init__(self, store: Store) -> None:
        self.engine = store.engine
        self.queue = LaunchQueue(store)

    def create(
        self,
        name: str,
        spec: str,
        children: Sequence[NewLaunch],
        *,
        sweep_id: str | None = None,
        namespace: str | None = None,
        resource_uid: str | None = None,
    ) -> SweepRow:
        """Keep the sweep (``sweep_id`` when the caller chose it: a cluster launch labels its
        EvaluationSweep with it), then queue its children as its launches. Their ids ascend in
        the order given (matrix order): workers take them, and :meth:`get` lists them, in that
        order."""
        sweep_id = sweep_id or str(uuid.uuid4())
        now = datetime.now(UTC)
        row = {
            "sweep_id": sweep_id,
            "name": name,
            "spec": spec,
            "created_at": now,
            "namespace": namespace,
            "resource_uid": resource_uid,
        }
        with self.engine.begin() as conn:
            conn.execute(launch_sweeps.insert(), [row])
        ids = sorted(str(uuid.uuid4()) for _ in children)
        queued = self.queue.enqueue(
            [replace(c, launch_id=i, sweep_id=sweep_id) for i, c in zip(ids, children, strict=True)]
        )
        return SweepRow(sweep_id, name, spec, now, queued, namespace, resource_uid)

    def get(self, sweep_id: str) -> SweepRow | None:
        """The sweep and its children in matrix order, or None."""
        try:
            key = str(uuid.UUID(sweep_id))
        except ValueError:
            return None
        children = (
            launches.select()
            .where(launches.c.sweep_id == key)
            .order_by(launches.c.created_at, launches.c.launch_id)
        )
        with self.engine.connect() as conn:
            found = conn.execute(
                launch_sweeps.select().where(launch_sweeps.c.sweep_id == key)
            ).first()
            if found is None:
                return None
            rows = [LaunchRow.of(r._mapping) for r in conn.execute(children)]
        sweep = found._mapping
        return SweepRow(
            key,
            sweep["name"],
            sweep["spec"],
            as_utc(sweep["created_at"]),
            rows,
            sweep["namespace"],
            sweep["resource_uid"],
        )

    def in_cluster(self) -> list[SweepRef]:
        """The sweeps created in the cluster with a child not yet ended, oldest first."""
        open_children = sa.select(launches.c.sweep_id).where(
            launches.c.state.in_([LaunchState.QUEUED.value, LaunchState.RUNNING.value])
        )
        query = (
            sa.select(
                launch_sweeps.c.sweep_id,
                launch_sweeps.c.namespace,
                launch_sweeps.c.name,
                launch_sweeps.c.resource_uid,
            )
            .where(launch_sweeps.c.namespace.is_not(None))
            .where(launch_sweeps.c.resource_uid.is_not(None))
            .where(launch_sweeps.c.sweep_id.in_(open_children))
            .order_by(launch_sweeps.c.created_at, launch_sweeps.c.sweep_id)
        )
        with self.engine.connect() as conn:
            return [
                SweepRef(str(uuid.UUID(str(i))), str(ns), str(name), str(uid))
                for i, ns, name, uid in conn.execute(query)
            ]

    def names(self, sweep_ids: Iterable[str]) -> dict[str, str]:
        """Sweep id -> name, for the sweeps among ``sweep_ids`` that exist."""
        keys = sorted(set(sweep_ids))
        if not keys:
            return {}
        query = sa.select(launch_sweeps.c.sweep_id, launch_sweeps.c.name).where(
            launch_sweeps.c.sweep_id.in_(keys)
        )
        with self.engine.connect() as conn:
            return {str(uuid.UUID(str(i))): name for i, name in conn.execute(query)}

    def cancel(self, sweep_id: str) -> int:
        """Cancel every child that has not ended; how many were."""
        found = self.get(sweep_id)
        if found is None:
            return 0
        return sum(
            self.queue.cancel(child.launch_id)
            for child in found.children
            if child.state not in FINAL
        )
