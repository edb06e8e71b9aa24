"""Job and pod events: which ones the watch's thread lets through, that what waits is the
newest slim state per object, packed, and that a settled Job's later events cost nothing
(controller/object_events.py, controller/keyed.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

from mlmodelscope.controller.object_events import ObjectEvents
from mlmodelscope.controller.runs import Handled
from mlmodelscope.devcluster.pytest_plugin import wait_for


def job(uid: str = "j1", *, ended: str | None = None, ready: int = 0) -> dict[str, Any]:
    conditions = [{"type": ended, "status": "True"}] if ended else []
    return {
        "kind": "Job",
        "metadata": {
            "namespace": "ns",
            "name": f"job-{uid}",
            "uid": uid,
            "managedFields": [{"manager": "kube-controller-manager"}],
        },
        "spec": {"suspend": False, "template": {"spec": {"containers": [{"name": "agent"}]}}},
        "status": {"ready": ready, "conditions": conditions},
    }


def pod(uid: str = "p1") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": f"pod-{uid}", "uid": uid},
        "spec": {"nodeName": "cpu-0", "containers": [{"name": "agent", "image": "agent:1"}]},
        "status": {"phase": "Running"},
    }


class Handler:
    """Records what it was given; can be held (to let events pile up) or made to fail."""

    def __init__(self, outcome: str = Handled.WAITING) -> None:
        self.seen: list[tuple[dict[str, Any], bool]] = []
        self.outcome = outcome
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Event()
        self.fail = False

    def __call__(self, *, body: dict[str, Any], deleted: bool) -> str:
        self.seen.append((body, deleted))
        self.started.set()
        self.release.wait(5)
        if self.fail:
            raise RuntimeError("a bug in the handler")
        return self.outcome


def test_events_of_a_waiting_job_run_its_handler_once_on_the_newest_slim_state() -> None:
    on_job = Handler()
    events = ObjectEvents(on_job, Handler(), workers=1)
    for ready in (0, 1, 1, 0):
        assert events.offer_job(job(ready=ready))
    assert events.waiting() == 1  # one key, however many events
    [waiting] = events._queued.values()
    assert isinstance(waiting.packed, str) and '"ready":0' in waiting.packed  # compact JSON
    events.start()
    try:
        wait_for("the handler", lambda: len(on_job.seen) == 1)
        time.sleep(0.05)
        assert len(on_job.seen) == 1
        body, deleted = on_job.seen[0]
        assert not deleted and body["status"]["ready"] == 0
        assert body["spec"] == {"suspend": False}  # no pod template
        assert "managedFields" not in body["metadata"] and body["kind"] == "Job"
    finally:
        events.stop()


def test_an_event_of_a_job_being_handled_runs_it_again_afterwards() -> None:
    on_job = Handler()
    on_job.release.clear()
    events = ObjectEvents(on_job, Handler(), workers=2)
    events.start()
    try:
        events.offer_job(job(ready=0))
        assert on_job.started.wait(5)
        events.offer_job(job(ready=1))
        time.sleep(0.05)
        assert len(on_job.seen) == 1  # never two threads on one Job
        on_job.release.set()
        wait_for("the second run", lambda: len(on_job.seen) == 2)
        assert on_job.seen[1][0]["status"]["ready"] == 1
    finally:
        events.stop()


def test_a_pod_event_that_repeats_what_is_shown_is_not_queued_but_its_deletion_is() -> None:
    on_pod = Handler()
    events = ObjectEvents(Handler(), on_pod, workers=1)
    assert not events.offer_pod(pod(), shown=True)
    assert events.waiting() == 0
    assert events.offer_pod(pod(), deleted=True, shown=True)
    events.start()
    try:
        wait_for("the deletion", lambda: len(on_pod.seen) == 1)
        body, deleted = on_pod.seen[0]
        assert deleted and body["spec"] == {"nodeName": "cpu-0"}
    finally:
        events.stop()


def test_later_events_of_a_settled_job_are_not_queued_until_it_is_deleted() -> None:
    on_job = Handler(outcome=Handled.ALREADY_FINAL)
    events = ObjectEvents(on_job, Handler(), workers=1)
    events.start()
    try:
        events.offer_job(job(ended="Complete"))
        wait_for("the handler", lambda: events.settled() == 1)
        assert not events.offer_job(job(ended="Complete"))  # the Job controller's last update
        assert events.offer_job(job(ended="Complete"), deleted=True)
        wait_for("the deletion", lambda: len(on_job.seen) == 2)
        assert on_job.seen[1][1] and events.settled() == 0
    finally:
        events.stop()


def test_a_job_is_not_settled_while_it_runs_while_a_retry_waits_or_when_its_handler_failed() -> (
    None
):
    cases: list[tuple[dict[str, Any], Handled, bool]] = [
        (job(ready=1), Handled.RUNNING, False),
        (job(ended="Failed"), Handled.RETRYING, False),
        (job(ended="Failed"), Handled.FAILED, True),
    ]
    for body, outcome, fail in cases:
        on_job = Handler(outcome=outcome)
        on_job.fail = fail
        events = ObjectEvents(on_job, Handler(), workers=1)
        events.start()
        try:
            events.offer_job(body)
            wait_for("the handler", lambda h=on_job: len(h.seen) == 1)
            time.sleep(0.05)
            assert events.settled() == 0, outcome
            assert events.offer_job(body), outcome  # its next event still runs the handler
        finally:
            events.stop()


def test_a_failing_handler_does_not_stop_its_thread() -> None:
    on_pod = Handler()
    on_pod.fail = True
    events = ObjectEvents(Handler(), on_pod, workers=1)
    events.start()
    try:
        events.offer_pod(pod("p1"))
        events.offer_pod(pod("p2"))
        wait_for("both pods", lambda: len(on_pod.seen) == 2)
    finally:
        events.stop()


def test_a_standby_replica_drops_what_it_took() -> None:
    on_job = Handler()
    acting = threading.Event()
    events = ObjectEvents(on_job, Handler(), workers=1, acting=acting.is_set)
    events.start()
    try:
        events.offer_job(job())
        wait_for("the queue to drain", lambda: events.waiting() == 0)
        time.sleep(0.05)
        assert on_job.seen == []
        acting.set()
        events.offer_job(job())
        wait_for("the handler", lambda: len(on_job.seen) == 1)
    finally:
        events.stop()
