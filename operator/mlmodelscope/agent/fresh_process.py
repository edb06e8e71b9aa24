"""One function run in a new Python process, its progress and its result sent back.

The process is a new interpreter (``python -m mlmodelscope.agent.fresh_process``) that
inherits nothing of the caller's state: no imported framework, no loaded model, no warmed
caches, no CUDA context (which ``fork`` would break), and, unlike multiprocessing's
``spawn``, it never re-runs the caller's main script. It gets the caller's ``sys.path``, then
``work`` and ``job`` over a socket pair, runs ``work(job, progress)`` and sends every progress
call and then the result back. Whatever goes wrong there (an exception, a crash, an exit
without a result) is raised here as :class:`FreshProcessError`, so a caller never mistakes a
dead process for a finished one. The process has ended when :func:`run_in_fresh_process`
returns, so two never overlap.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

Job = TypeVar("Job")
Result = TypeVar("Result")
Progress = Callable[[int, int], None]
Work = Callable[[Job, Progress], Result]

EXIT_WAIT_S = 60.0
"""How long a process that sent its result (or its error) may take to exit before it is
killed."""


@dataclass(frozen=True)
class ChildFailure:
    """The exception that ended the work in the fresh process, as text."""

    type: str
    message: str
    field: str | None = None
    """The exception's ``field`` (a spec field path), when it names one."""


class FreshProcessError(RuntimeError):
    """The fresh process raised, crashed, or exited without sending its result."""

    def __init__(self, pid: int, exitcode: int | None, failure: ChildFailure | None) -> None:
        self.pid = pid
        self.exitcode = exitcode
        self.failure = failure
        super().__init__(f"fresh process {pid}: {describe_failure(exitcode, failure)}")


def describe_failure(exitcode: int | None, failure: ChildFailure | None) -> str:
    """What went wrong in a fresh process, in one line: its exception, else how it ended."""
    if failure is not None:
        return f"{failure.type}: {failure.message}"
    if exitcode is not None and exitcode < 0:
        return f"killed by signal {-exitcode} before sending its result"
    return f"exited with code {exitcode} before sending its result"


@dataclass(frozen=True)
class _Progress:
    done: int
    needed: int


@dataclass(frozen=True)
class _Done(Generic[Result]):
    result: Result


def run_in_fresh_process(
    work: Work[Job, Result],
    job: Job,
    *,
    progress: Progress | None = None,
) -> Result:
    """``work(job, progress)`` in a new process: its result, or :class:`FreshProcessError`.

    ``work`` must be a module-level function and ``job`` and the result picklable: they
    cross the process boundary. ``progress`` receives the fresh process's progress calls.
    The process inherits the environment, stdout and stderr; its stdin is empty.
    """
    ours, theirs = multiprocessing.Pipe(duplex=True)
    with ours:
        with theirs:  # closed here once the process has it: its exit ends recv()
            process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
            )
        ended = False  # the process sent its last message (its result or its error)
        try:
            try:
                ours.send(sys.path)
                ours.send((work, job))
            except OSError:
                pass  # it died before reading: recv() reports how it ended
            while True:
                try:
                    message: Any = ours.recv()
                except EOFError:
                    _end(process, EXIT_WAIT_S)
                    raise FreshProcessError(process.pid, process.returncode, None) from None
                if isinstance(message, _Progress):
                    if progress is not None:
                        progress(message.done, message.needed)
                    continue
                ended = True
                if isinstance(message, ChildFailure):
                    _end(process, EXIT_WAIT_S)
                    raise FreshProcessError(process.pid, process.returncode, message)
                result: Result = message.result
                return result
        finally:
            _end(process, EXIT_WAIT_S if ended else 0.0)


def _end(process: subprocess.Popen[bytes], wait_s: float) -> None:
    """Wait up to ``wait_s`` for ``process`` to exit, then kill it."""
    try:
        process.wait(wait_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _failure(exc: BaseException) -> ChildFailure:
    field = getattr(exc, "field", None)
    return ChildFailure(type(exc).__name__, str(exc), field if isinstance(field, str) else None)


def serve(fd: int) -> None:
    """The fresh process's main: receive the work over ``fd``, run it, send back its
    progress and its result (or its exception, then exit with code 1)."""
    with Connection(fd) as channel:
        sys.path[:] = channel.recv()  # before the work's module is imported

        def progress(done: int, needed: int) -> None:
            channel.send(_Progress(done, needed))

        try:
            work, job = channel.recv()
            channel.send(_Done(work(job, progress)))
        except BaseException as exc:  # every failure, even SystemExit, goes back to the caller
            channel.send(_failure(exc))
            raise SystemExit(1) from None


if __name__ == "__main__":
    from mlmodelscope.agent.fresh_process import serve as serve_by_name

    serve_by_name(int(sys.argv[1]))  # by its import name, so what it sends unpickles there
