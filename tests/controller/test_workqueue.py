"""The evaluation work queue: which watch events queue a reconcile, that a key waits once
however many events name it, and how failures are retried (controller/workqueue.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from mlmodelscope.controller import workqueue
from mlmodelscope.controller.slim import decompress
from mlmodelscope.controller.workqueue import Entry, WorkQueue, entry_of
from mlmodelscope.devcluster.pytest_plugin import wait_for


def body(
    name: str = "ev",
    *,
    uid: str = "u1",
    generation: int = 1,
    phase: str | None = None,
    observed: int | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "ns", "name": name, "uid": uid, "generation": generation}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-24T00:00:00Z"
    st: dict[str, Any] = {}
    if phase is not None:
        st = {"phase": phase, "observedGeneration": generation if observed is None else observed}
    return {"metadata": meta, "status": st}


# ---------------------------------------------------------------- which events queue work


def test_a_new_evaluation_is_created_work() -> None:
    entry = entry_of(body(), None)
    assert entry is not None
    assert (entry.namespace, entry.name, entry.uid, entry.generation) == ("ns", "ev", "u1", 1)
    assert entry.reason == "created"


def test_the_entry_carries_the_event_so_the_first_reconcile_reads_nothing() -> None:
    event = body()
    event["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    entry = entry_of(event, None)
    assert entry is not None
    del event["metadata"]["managedFields"]
    assert decompress(entry.body) == event


def test_an_unfinished_run_found_at_start_is_resumed() -> None:
    entry = entry_of(body(phase="Running"), None)
    assert entry is not None and entry.reason == "resumed"


def test_a_newer_generation_than_the_one_taken_is_a_spec_change() -> None:
    entry = entry_of(body(generation=2, phase="Running", observed=1), 1)
    assert entry is not None and (entry.reason, entry.generation) == ("spec-changed", 2)


@pytest.mark.parametrize(
    ("event", "taken"),
    [
        pytest.param(body(phase="Succeeded"), None, id="ended"),
        pytest.param(body(phase="Failed"), None, id="failed"),
        pytest.param(body(phase="Pending"), 1, id="generation already taken"),
        pytest.param(body(deleting=True), None, id="being deleted"),
    ],
)
def test_events_that_need_no_reconcile(event: dict[str, Any], taken: int | None) -> None:
    assert entry_of(event, taken) is None


def test_an_ended_run_of_an_older_generation_needs_work() -> None:
    entry = entry_of(body(generation=2, phase="Succeeded", observed=1), None)
    assert entry is not None and entry.reason == "resumed"


# ---------------------------------------------------------------- the queue


class Recorder:
    """A reconcile that records what it was given and can be held or made to fail."""

    def __init__(self) -> None:
        self.seen: list[Entry] = []
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Event()
        self.fail_with: list[Exception] = []

    def __call__(self, entry: Entry) -> str:
        self.seen.append(entry)
        self.started.set()
        self.release.wait(5)
        if self.fail_with:
            raise self.fail_with.pop(0)
        return "done"


def test_events_of_a_waiting_evaluation_queue_it_once() -> None:
    queue = WorkQueue(Recorder(), workers=1)
    assert queue.offer(body()) is not None
    for _ in range(5):  # our own status patches, Kopf's relisting
        assert queue.offer(body(phase="Pending")) is None
    assert queue.waiting() == 1


def test_a_spec_change_while_waiting_keeps_the_place_in_line_with_the_newer_generation() -> None:
    recorder = Recorder()
    queue = WorkQueue(recorder, workers=1)
    queue.offer(body("a", uid="a"))
    queue.offer(body("b", uid="b"))
    queue.offer(body("a", uid="a", generation=2))
    assert queue.waiting() == 2
    queue.start()
    try:
        wait_for("both reconciled", lambda: len(recorder.seen) == 2)
    finally:
        queue.stop()
    assert [(e.name, e.generation) for e in recorder.seen] == [("a", 2), ("b", 1)]


def test_a_change_during_its_reconcile_runs_it_again_afterwards_never_at_once() -> None:
    recorder = Recorder()
    recorder.release.clear()
    queue = WorkQueue(recorder, workers=2)
    queue.start()
    try:
        queue.offer(body())
        assert recorder.started.wait(5)
        queue.offer(body(generation=2, phase="Pending", observed=1))
        time.sleep(0.1)
        assert len(recorder.seen) == 1, "the second thread took a key that was being reconciled"
        recorder.release.set()
        wait_for("the second reconcile", lambda: len(recorder.seen) == 2)
    finally:
        queue.stop()
    reconciled = [(e.generation, e.reason) for e in recorder.seen]
    assert reconciled == [(1, "created"), (2, "spec-changed")]


def test_a_transient_failure_is_retried_and_a_permanent_one_is_not() -> None:
    recorder = Recorder()
    recorder.fail_with = [workqueue.TransientError("API server away"),
                          workqueue.PermanentError("invalid spec")]  # fmt: skip
    queue = WorkQueue(recorder, workers=1, retry_delay=0.05)
    queue.start()
    try:
        queue.offer(body())
        wait_for("the retry", lambda: len(recorder.seen) == 2)
        assert recorder.seen[0].body and not recorder.seen[1].body, "a retry reads it fresh"
        time.sleep(0.3)
        assert len(recorder.seen) == 2, "a permanent failure was retried"
        queue.offer(body(generation=2))  # ...until the spec changes
        wait_for("the new generation", lambda: len(recorder.seen) == 3)
    finally:
        queue.stop()


def test_an_unexpected_error_does_not_lose_the_evaluation() -> None:
    recorder = Recorder()
    recorder.fail_with = [KeyError("bug")]
    queue = WorkQueue(recorder, workers=1, retry_delay=0.05)
    queue.start()
    try:
        queue.offer(body())
        wait_for("the retry", lambda: len(recorder.seen) == 2)
    finally:
        queue.stop()


def test_a_retry_of_an_outdated_generation_is_dropped() -> None:
    recorder = Recorder()
    queue = WorkQueue(recorder, workers=1)
    first = queue.offer(body())
    queue.offer(body(generation=2))
    assert first is not None
    queue.requeue(first)  # a retry of generation 1 comes due after generation 2 was taken
    queue.start()
    try:
        wait_for("a reconcile", lambda: len(recorder.seen) == 1)
        time.sleep(0.1)
    finally:
        queue.stop()
    assert [e.generation for e in recorder.seen] == [2]


def test_a_standby_replica_reconciles_nothing_and_forgets_what_it_dropped() -> None:
    recorder = Recorder()
    acting = threading.Event()
    queue = WorkQueue(recorder, workers=1, acting=acting.is_set)
    queue.start()
    try:
        queue.offer(body())
        wait_for("the key to be taken", lambda: queue.waiting() == 0)
        time.sleep(0.1)
        assert recorder.seen == []
        acting.set()  # taking over: the leader's listing offers it again
        assert queue.offer(body()) is not None
        wait_for("the reconcile", lambda: len(recorder.seen) == 1)
    finally:
        queue.stop()


def test_deleting_forgets_the_uid_so_a_recreated_namesake_is_created_work() -> None:
    queue = WorkQueue(Recorder(), workers=1)
    queue.offer(body(phase="Succeeded"))
    assert queue.offer(body(phase="Succeeded")) is None
    queue.offer(body(phase="Succeeded"), deleted=True)
    entry = queue.offer(body(uid="u2"))
    assert entry is not None and (entry.uid, entry.reason) == ("u2", "created")
