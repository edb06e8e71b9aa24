"""Retries run later on one thread: due ones in order, a newer call for a key replacing the
older, cancelled ones never."""

from __future__ import annotations

import threading

from mlmodelscope.controller.runtime.retry_timer import RetryTimer


def test_calls_run_when_due_and_a_newer_call_replaces_the_pending_one() -> None:
    later = RetryTimer()
    ran: list[str] = []
    done = threading.Event()
    try:
        later.call("job-a", 0.05, lambda: ran.append("a-old"))
        later.call("job-a", 0.10, lambda: ran.append("a-new"))
        later.call("job-b", 0.01, lambda: ran.append("b"))
        later.call("job-c", 0.02, lambda: ran.append("c"))
        assert later.cancel("job-c") and not later.cancel("job-c")
        later.call("end", 0.15, done.set)
        assert done.wait(5)
    finally:
        later.stop()
    assert ran == ["b", "a-new"]
    assert later.pending() == 0


def test_a_failing_call_does_not_stop_the_others() -> None:
    later = RetryTimer()
    done = threading.Event()

    def boom() -> None:
        raise ConnectionError("the API server is away")

    try:
        later.call("x", 0.0, boom)
        later.call("y", 0.01, done.set)
        assert done.wait(5)
    finally:
        later.stop()


def test_nothing_runs_after_stop() -> None:
    later = RetryTimer()
    ran: list[str] = []
    later.call("x", 0.2, lambda: ran.append("x"))
    later.stop()
    later.call("y", 0.0, lambda: ran.append("y"))
    assert ran == [] and later.pending() == 0
