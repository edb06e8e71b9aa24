"""Where a launch runs: the server's own workers (:class:`LocalLaunches`, the default) or the
cluster (:class:`~mlmodelscope.server.launch_cluster.ClusterLaunches`, with
`mlms serve --launch-namespace`). The launch API hands a form's validated evaluations to the
app's one :class:`LaunchTarget` and asks it to cancel and refresh launches; both record every
launch in the store's ``launches`` table (a sweep in ``launch_sweeps``, its children as its
launches), so listing reads the same rows either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from mlmodelscope.server.launch_queue import LaunchQueue, LaunchRow, LaunchWorkers, NewLaunch
from mlmodelscope.server.launch_watch import LaunchEvents, LogTail, local_events, local_log
from mlmodelscope.server.launches import BuiltEvaluation, BuiltSweep, as_yaml
from mlmodelscope.server.sweep_launches import SweepLaunches, SweepRow, new_children
from mlmodelscope.store import Store


class LaunchRefusedError(RuntimeError):
    """The target would not take or cancel the launch; ``status`` is the HTTP status to answer
    (the API server's 409 AlreadyExists or 403 Forbidden, 503 when it did not answer)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class LaunchTarget(Protocol):
    def submit(self, built: Sequence[BuiltEvaluation]) -> list[LaunchRow]:
        """Start one launch per evaluation; their rows, in order."""
        ...

    def cancel(self, row: LaunchRow) -> bool:
        """Cancel a launch; False when it had already ended."""
        ...

    def submit_sweep(self, built: BuiltSweep) -> SweepRow:
        """Start one EvaluationSweep; its row, with its children's."""
        ...

    def cancel_sweep(self, sweep: SweepRow) -> bool:
        """Cancel every child of a sweep that has not ended; False when none had not."""
        ...

    def current(self, row: LaunchRow) -> LaunchRow:
        """The launch as it is now (a cluster launch reads its evaluation first)."""
        ...

    def events(self, row: LaunchRow) -> LaunchEvents:
        """The Kubernetes Events of the launch's evaluation, Job and pods (cluster only)."""
        ...

    def log(self, row: LaunchRow, tail: int) -> LogTail:
        """The last ``tail`` lines of its agent's log (cluster only)."""
        ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class LocalLaunches:
    """The store-backed queue run by the server's ``--launch-workers`` (`mlms run` each)."""

    def __init__(self, store: Store, workers: LaunchWorkers) -> None:
        self.queue = LaunchQueue(store)
        self.sweeps = SweepLaunches(store)
        self.workers = workers

    def submit(self, built: Sequence[BuiltEvaluation]) -> list[LaunchRow]:
        rows = self.queue.enqueue(
            [NewLaunch(b.name, b.model, b.framework, as_yaml([b.document])) for b in built]
        )
        self.workers.wake()
        return rows

    def cancel(self, row: LaunchRow) -> bool:
        return self.queue.cancel(row.launch_id)

    def submit_sweep(self, built: BuiltSweep) -> SweepRow:
        text = as_yaml([built.document])
        sweep = self.sweeps.create(built.name, text, new_children(built))
        self.workers.wake()
        return sweep

    def cancel_sweep(self, sweep: SweepRow) -> bool:
        return self.sweeps.cancel(sweep.sweep_id) > 0

    def current(self, row: LaunchRow) -> LaunchRow:
        return row

    def events(self, row: LaunchRow) -> LaunchEvents:
        return local_events()

    def log(self, row: LaunchRow, tail: int) -> LogTail:
        return local_log()

    def start(self) -> None:
        self.workers.start()

    def stop(self) -> None:
        self.workers.stop()
