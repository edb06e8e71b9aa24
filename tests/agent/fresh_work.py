"""Work for the fresh-process tests: module-level functions a new process can import by name,
each doing one thing a real repetition's process may do (report, answer, raise, die)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

from mlmodelscope.spec.base import SpecError

Progress = Callable[[int, int], None]

mark = "as imported"
"""Module state: a test changes it in its own process; a fresh process sees it as imported."""


def report_and_answer(job: int, progress: Progress) -> tuple[int, int, str]:
    """Reports ``job`` steps, then answers (its pid, the job, :data:`mark` as it sees it)."""
    for step in range(1, job + 1):
        progress(step, job)
    return os.getpid(), job, mark


def raise_spec_error(job: str, progress: Progress) -> None:
    raise SpecError("spec.model.uri", job)


def exit_without_answer(job: int, progress: Progress) -> None:
    os._exit(job)


def kill_itself(job: None, progress: Progress) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def answer_unpicklable(job: None, progress: Progress) -> Callable[[], None]:
    return lambda: None
