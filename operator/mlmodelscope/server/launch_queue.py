"""The launch queue of `mlms serve`: launches kept in the store's ``launches`` table, run by a
bounded number of worker threads, each evaluation in its own `mlms run` process.

States: ``queued`` → ``running`` → ``succeeded`` / ``failed``; ``cancelled`` from queued or
running; ``interrupted`` for a launch that was running when its server stopped (on start-up,
a server with workers marks every ``running`` row so: never re-run, never lost). Every
transition is one guarded UPDATE (``... WHERE state = 'queued'``), so two workers never take
the same launch and a cancel is never overwritten by the run's end.

A worker runs ``python -m mlmodelscope run SPEC.yaml --no-store --models CATALOG...`` in a
fresh session (its own process group), polls the launch's state while it runs (a cancel from
any process reaches it), then records the result document in the store itself, as `mlms run`
does, and keeps the run id.

A launch of `mlms serve --launch-namespace` (:mod:`.launch_cluster`) is a row with its
``namespace`` and ``resource_uid`` set: its ModelEvaluation runs in the cluster, so workers
never claim nor interrupt it; :meth:`LaunchQueue.follow` moves it as the evaluation's phase does.
A child of a sweep launched there has its ``namespace`` from the start and its ``resource_uid``
once the operator has created it (:meth:`LaunchQueue.adopt`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

import sqlalchemy as sa

from mlmodelscope.store import Store
from mlmodelscope.store.schema import launches
from mlmodelscope.store.store import as_utc

log = logging.getLogger(__name__)

POLL_S: Final = 0.5
"""How often an idle worker looks for a queued launch, and a busy one for a cancel."""
STOP_GRACE_S: Final = 5.0
"""SIGTERM, then this long, then SIGKILL."""
LOG_TAIL: Final = 2000
"""Characters of a failed run's output kept in the launch's message."""
SECRET_ENV: Final = ("MLMS_SERVE_READ_TOKEN", "MLMS_SERVE_WRITE_TOKEN")
"""Never passed to the evaluation's process."""


class LaunchState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


FINAL: Final = frozenset(
    {LaunchState.SUCCEEDED, LaunchState.FAILED, LaunchState.CANCELLED, LaunchState.INTERRUPTED}
)
INTERRUPTED_MESSAGE: Final = "the server stopped while this launch ran; it is not run again"


@dataclass(frozen=True)
class LaunchRow:
    """One launch as stored."""

    launch_id: str
    evaluation: str
    model_name: str | None
    framework: str | None
    state: LaunchState
    spec: str
    run_id: str | None
    message: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    namespace: str | None = None
    """Where a cluster launch created its ModelEvaluation (named ``evaluation``); None: local."""
    resource_uid: str | None = None
    """That ModelEvaluation's uid: the launch follows this object, not a later one of its name."""
    sweep_id: str | None = None
    """The launched EvaluationSweep it is a child of (:mod:`.sweep_launches`); None: alone."""

    @property
    def in_cluster(self) -> bool:
        return self.namespace is not None

    @classmethod
    def of(cls, row: sa.RowMapping) -> LaunchRow:
        def when(value: datetime | None) -> datetime | None:
            return None if value is None else as_utc(value)

        return cls(
            launch_id=str(uuid.UUID(str(row["launch_id"]))),
            evaluation=row["evaluation"],
            model_name=row["model_name"],
            framework=row["framework"],
            state=LaunchState(row["state"]),
            spec=row["spec"],
            run_id=None if row["run_id"] is None else str(uuid.UUID(str(row["run_id"]))),
            message=row["message"],
            created_at=as_utc(row["created_at"]),
            started_at=when(row["started_at"]),
            finished_at=when(row["finished_at"]),
            namespace=row["namespace"],
            resource_uid=row["resource_uid"],
            sweep_id=None if row["sweep_id"] is None else str(uuid.UUID(str(row["sweep_id"]))),
        )


@dataclass(frozen=True)
class NewLaunch:
    """What :meth:`LaunchQueue.enqueue` stores for one evaluation."""

    evaluation: str
    model_name: str
    framework: str
    spec: str
    launch_id: str | None = None
    """Its id when the caller chose one (a cluster launch labels its evaluation with it)."""
    namespace: str | None = None
    """Where its ModelEvaluation was created, for a cluster launch."""
    resource_uid: str | None = None
    sweep_id: str | None = None
    """The launched EvaluationSweep it is a child of."""


def _now() -> datetime:
    return datetime.now(UTC)


class LaunchQueue:
    """The ``launches`` table: every state change is one guarded UPDATE."""

    def __init__(self, store: Store) -> None:
        self.engine = store.engine

    def enqueue(self, new: Sequence[NewLaunch]) -> list[LaunchRow]:
        now = _now()
        ids = [item.launch_id or str(uuid.uuid4()) for item in new]
        rows = [
            {
                "launch_id": launch_id,
                "evaluation": item.evaluation,
                "model_name": item.model_name,
                "framework": item.framework,
                "state": LaunchState.QUEUED.value,
                "spec": item.spec,
                "created_at": now,
                "namespace": item.namespace,
                "resource_uid": item.resource_uid,
                "sweep_id": item.sweep_id,
            }
            for launch_id, item in zip(ids, new, strict=True)
        ]
        with self.engine.begin() as conn:
            conn.execute(launches.insert(), rows)
        found = [self.get(launch_id) for launch_id in ids]
        return [row for row in found if row is not None]

    def get(self, launch_id: str) -> LaunchRow | None:
        try:
            key = str(uuid.UUID(launch_id))
        except ValueError:
            return None
        with self.engine.connect() as conn:
            row = conn.execute(launches.select().where(launches.c.launch_id == key)).first()
        return None if row is None else LaunchRow.of(row._mapping)

    def page(
        self, *, state: LaunchState | None = None, limit: int = 100, offset: int = 0
    ) -> tuple[int, list[LaunchRow]]:
        """(how many match, ``limit`` of them newest first from ``offset``)."""
        where = [] if state is None else [launches.c.state == state.value]
        query = (
            launches.select()
            .where(*where)
            .order_by(launches.c.created_at.desc(), launches.c.launch_id)
            .limit(limit)
            .offset(offset)
        )
        counting = sa.select(sa.func.count()).select_from(launches).where(*where)
        with self.engine.connect() as conn:
            total = conn.execute(counting).scalar_one()
            rows = [LaunchRow.of(r._mapping) for r in conn.execute(query)]
        return total, rows

    def _move(self, launch_id: str, sources: Sequence[LaunchState], **values: Any) -> bool:
        """Set ``values`` on the launch if it is in one of ``sources``; True when it was."""
        update = (
            launches.update()
            .where(launches.c.launch_id == launch_id)
            .where(launches.c.state.in_([s.value for s in sources]))
            .values(**values)
        )
        with self.engine.begin() as conn:
            return bool(conn.execute(update).rowcount)

    def claim_next(self) -> LaunchRow | None:
        """The oldest queued launch, now running (None when none is queued)."""
        while True:
            with self.engine.connect() as conn:
                candidate = conn.execute(
                    sa.select(launches.c.launch_id)
                    .where(launches.c.state == LaunchState.QUEUED.value)
                    .where(launches.c.namespace.is_(None))
                    .order_by(launches.c.created_at, launches.c.launch_id)
                    .limit(1)
                ).scalar_one_or_none()
            if candidate is None:
                return None
            launch_id = str(uuid.UUID(str(candidate)))
            if self._move(
                launch_id, [LaunchState.QUEUED], state=LaunchState.RUNNING.value, started_at=_now()
            ):
                return self.get(launch_id)
            # another worker took it (or it was cancelled) in between: look again

    def finish(
        self, launch_id: str, state: LaunchState, run_id: str | None, message: str | None
    ) -> bool:
        """A running launch's end; False when it was no longer running (cancelled)."""
        return self._move(
            launch_id,
            [LaunchState.RUNNING],
            state=state.value,
            run_id=run_id,
            message=message,
            finished_at=_now(),
        )

    def cancel(self, launch_id: str, message: str = "cancelled") -> bool:
        """Cancel a queued or running launch; False when it had already ended."""
        return self._move(
            launch_id,
            [LaunchState.QUEUED, LaunchState.RUNNING],
            state=LaunchState.CANCELLED.value,
            message=message,
            finished_at=_now(),
        )

    def interrupt_running(self) -> int:
        """Mark every running local launch interrupted (a server starting up, or stopping); how
        many. A cluster launch goes on without the server."""
        update = (
            launches.update()
            .where(launches.c.state == LaunchState.RUNNING.value)
            .where(launches.c.namespace.is_(None))
            .values(
                state=LaunchState.INTERRUPTED.value,
                message=INTERRUPTED_MESSAGE,
                finished_at=_now(),
            )
        )
        with self.engine.begin() as conn:
            return int(conn.execute(update).rowcount)

    def in_cluster(self) -> list[LaunchRow]:
        """Cluster launches not yet ended, oldest first."""
        query = (
            launches.select()
            .where(launches.c.namespace.is_not(None))
            .where(launches.c.state.in_([LaunchState.QUEUED.value, LaunchState.RUNNING.value]))
            .order_by(launches.c.created_at, launches.c.launch_id)
        )
        with self.engine.connect() as conn:
            return [LaunchRow.of(r._mapping) for r in conn.execute(query)]

    def follow(
        self,
        launch_id: str,
        state: LaunchState,
        run_id: str | None = None,
        message: str | None = None,
    ) -> bool:
        """Move a queued or running launch to ``state`` (what its evaluation's phase says);
        False when it had already ended (a cancel came first). Starting sets ``started_at``,
        ending ``finished_at``."""
        values: dict[str, Any] = {"state": state.value, "message": message}
        if state in FINAL:
            values.update(run_id=run_id, finished_at=_now())
        sources = [LaunchState.QUEUED, LaunchState.RUNNING]
        if state is LaunchState.RUNNING:
            values["started_at"] = _now()
            sources = [LaunchState.QUEUED]
        return self._move(launch_id, sources, **values)

    def adopt(self, launch_id: str, resource_uid: str) -> bool:
        """Record the uid of a sweep child's ModelEvaluation, which the operator created after
        the launch was recorded; False when the launch already has one, or has ended."""
        update = (
            launches.update()
            .where(launches.c.launch_id == launch_id)
            .where(launches.c.resource_uid.is_(None))
            .where(launches.c.state.in_([LaunchState.QUEUED.value, LaunchState.RUNNING.value]))
            .values(resource_uid=resource_uid)
        )
        with self.engine.begin() as conn:
            return bool(conn.execute(update).rowcount)


@dataclass(frozen=True)
class Outcome:
    """How a finished `mlms run` process ends its launch."""

    state: LaunchState
    run_id: str | None
    message: str | None


def outcome_of(returncode: int, document: Mapping[str, Any] | None, output: str) -> Outcome:
    """The launch's end from the process's exit status, its result document (None: it wrote
    none) and its output: succeeded on exit 0 with a document, else failed with the
    document's error or the output's last lines."""
    run_id = document.get("run_id") if document is not None else None
    run_id = run_id if isinstance(run_id, str) else None
    if returncode == 0 and document is not None:
        return Outcome(LaunchState.SUCCEEDED, run_id, None)
    error = document.get("error") if document is not None else None
    if isinstance(error, Mapping) and error.get("message"):
        message = f"{error.get('type', 'Error')}: {error['message']}"
    else:
        tail = output.strip()[-LOG_TAIL:]
        message = f"mlms run exited with status {returncode}" + (f":\n{tail}" if tail else "")
    return Outcome(LaunchState.FAILED, run_id, message)


def run_command(spec: Path, output: Path, catalog: Sequence[str]) -> list[str]:
    """The `mlms run` command of one launch (results in ``output``, not recorded by it)."""
    command = [sys.executable, "-m", "mlmodelscope", "run", str(spec), "--output", str(output)]
    command.append("--no-store")
    for path in catalog:
        command += ["--models", path]
    return command


def dying_with_its_worker(command: list[str], setpriv: str | None) -> list[str]:
    """``command`` run through util-linux ``setpriv --pdeathsig KILL``, so the kernel kills
    the run when the worker thread that started it dies: a server killed without its shutdown
    (SIGKILL, the OOM killer) leaves no run going on unrecorded. The run has a session of its
    own (a cancel stops its group), which a signal to the server's group does not reach.
    Without ``setpriv`` the command is unchanged."""
    if setpriv is None:
        return command
    return [setpriv, "--pdeathsig", "KILL", "--", *command]


class LaunchWorkers:
    """``workers`` threads taking queued launches, one `mlms run` process each."""

    def __init__(self, store: Store, catalog: Sequence[str], workers: int) -> None:
        self.store = store
        self.queue = LaunchQueue(store)
        self.catalog = [str(Path(p).resolve()) for p in catalog]
        self.workers = workers
        self._stop = threading.Event()
        self._wake = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._recovering = threading.Lock()
        self._recovered = False
        self.started: list[str] = []
        """Launch ids this process started, in order (what tests check "never twice" on)."""

    def start(self) -> None:
        """Mark what a previous server left running as interrupted, then start the workers.
        With no workers, this server only queues (another one runs the launches)."""
        if self.workers < 1:
            return
        self._recover()
        for index in range(self.workers):
            thread = threading.Thread(target=self._work, name=f"mlms-launch-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _recover(self) -> bool:
        """Mark the launches a previous server left running as interrupted, once, before any
        worker claims one; False while the store does not answer (the workers try again, the
        server still starts and ``/readyz`` says what is wrong)."""
        with self._recovering:
            if self._recovered:
                return True
            try:
                count = self.queue.interrupt_running()
            except sa.exc.SQLAlchemyError as exc:
                log.warning("launch queue: cannot mark interrupted launches yet: %s", exc)
                return False
            if count:
                log.warning("%d launch(es) left running by a previous server: interrupted", count)
            self._recovered = True
            return True

    def wake(self) -> None:
        """A launch was queued: a waiting worker looks now rather than at its next poll."""
        with self._wake:
            self._wake.notify_all()

    def stop(self) -> None:
        """Stop the workers; a launch still running ends interrupted."""
        self._stop.set()
        self.wake()
        for thread in self._threads:
            thread.join(timeout=STOP_GRACE_S + 10)
        self._threads.clear()

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                claimed = self.queue.claim_next() if self._recover() else None
            except sa.exc.SQLAlchemyError as exc:
                log.warning("launch queue: %s", exc)
                claimed = None
            if claimed is None:
                with self._wake:
                    self._wake.wait(POLL_S)
                continue
            try:
                self._run(claimed)
            except Exception as exc:  # a worker never dies: the launch fails, it goes on
                log.exception("launch %s", claimed.launch_id)
                self.queue.finish(claimed.launch_id, LaunchState.FAILED, None, f"{exc}")

    def _run(self, launch: LaunchRow) -> None:
        self.started.append(launch.launch_id)
        with tempfile.TemporaryDirectory(prefix="mlms-launch-") as tmp:
            folder = Path(tmp)
            spec = folder / "spec.yaml"
            spec.write_text(launch.spec, encoding="utf-8")
            output = folder / "results"
            log_path = folder / "output.log"
            env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
            with log_path.open("wb") as sink:
                process = subprocess.Popen(
                    dying_with_its_worker(
                        run_command(spec, output, self.catalog), shutil.which("setpriv")
                    ),
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    cwd=folder,
                    start_new_session=True,
                )
                ended = self._wait(launch.launch_id, process)
            if ended is not None:  # cancelled (already recorded) or the server stopping
                if ended is LaunchState.INTERRUPTED:
                    self.queue.finish(launch.launch_id, ended, None, INTERRUPTED_MESSAGE)
                return
            document = _read_document(output / f"{launch.evaluation}.json")
            text = log_path.read_text(encoding="utf-8", errors="replace")
            result = outcome_of(process.returncode, document, text)
            message = result.message
            if document is not None and document.get("run_id"):
                try:
                    self.store.record(document)
                except Exception as exc:  # the run happened; say it was not recorded
                    message = f"not recorded in the results store: {exc}"
                    result = Outcome(LaunchState.FAILED, None, message)
            self.queue.finish(launch.launch_id, result.state, result.run_id, message)

    def _wait(self, launch_id: str, process: subprocess.Popen[bytes]) -> LaunchState | None:
        """Wait for the process; None when it exits by itself, else the state it was stopped
        for (cancelled, or interrupted because the server stops)."""
        while True:
            try:
                process.wait(POLL_S)
                return None
            except subprocess.TimeoutExpired:
                pass
            if self._stop.is_set():
                _terminate(process)
                return LaunchState.INTERRUPTED
            current = self.queue.get(launch_id)
            if current is None or current.state is not LaunchState.RUNNING:
                _terminate(process)
                return LaunchState.CANCELLED


def _terminate(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group, SIGKILL after :data:`STOP_GRACE_S`."""
    for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _read_document(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None
