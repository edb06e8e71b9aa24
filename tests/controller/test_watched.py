"""What the operator holds of the evaluations it watches: those in flight for every read, and
the last ones that ended for the reads that follow an end (controller/watched.py)."""

from __future__ import annotations

from typing import Any

from mlmodelscope.controller import watched
from mlmodelscope.controller.watched import WatchedEvaluations


def body(name: str, version: int, phase: str = "Running", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "a",
            "name": name,
            "resourceVersion": str(version),
            "generation": 1,
            **meta,
        },
        "spec": {"model": {"uri": "digits.onnx"}},
        "status": {"phase": phase, "observedGeneration": 1},
    }


def test_a_run_in_flight_is_held_without_its_spec() -> None:
    held = WatchedEvaluations()
    held.observe(body("e", 5))
    got = held.get("a", "e")
    assert got is not None and got["status"]["phase"] == "Running" and "spec" not in got
    assert held.recent("a", "e") == got and len(held) == 1


def test_an_ended_run_leaves_get_but_stays_recent_until_deleted() -> None:
    held = WatchedEvaluations()
    held.observe(body("e", 5))
    held.observe(body("e", 6, phase="Failed"))
    assert held.get("a", "e") is None and len(held) == 0  # in flight: nothing
    recent = held.recent("a", "e")
    assert recent is not None and recent["status"]["phase"] == "Failed"
    held.observe(body("e", 5))  # an older event does not bring the run back
    assert held.get("a", "e") is None
    held.observe(body("e", 7, deletionTimestamp="2026-11-28T00:00:00Z"))
    deleting = held.recent("a", "e")
    assert deleting is not None and deleting["metadata"]["deletionTimestamp"]
    held.observe(body("e", 8), deleted=True)
    assert held.recent("a", "e") is None


def test_a_rerun_after_an_end_is_in_flight_again() -> None:
    held = WatchedEvaluations()
    held.observe(body("e", 6, phase="Succeeded"))
    rerun = body("e", 9, phase="Pending")
    rerun["metadata"]["generation"] = 2
    held.observe(rerun)
    got = held.get("a", "e")
    assert got is not None and got["metadata"]["generation"] == 2
    assert held.recent("a", "e") == got


def test_only_the_last_ended_runs_are_kept() -> None:
    held = WatchedEvaluations()
    for i in range(watched.ENDED_KEPT + 10):
        held.observe(body(f"e{i}", i + 1, phase="Succeeded"))
    assert held.recent("a", "e0") is None and held.recent("a", "e9") is None
    assert held.recent("a", "e10") is not None
    assert held.recent("a", f"e{watched.ENDED_KEPT + 9}") is not None
    assert len(held._ended) == watched.ENDED_KEPT


def test_in_flight_hands_out_each_run_not_ended_and_skips_one_that_ended_meanwhile() -> None:
    held = WatchedEvaluations()
    for i, name in enumerate(("e1", "e2", "e3")):
        held.observe(body(name, 10 + i))
    held.observe(body("done", 20, phase="Succeeded"))
    reading = held.in_flight()
    first_key, first = next(reading)
    assert first_key == ("a", "e1") and "spec" not in first
    held.observe(body("e2", 30, phase="Failed"))  # ends while the reader is at e1
    assert [key for key, _ in reading] == [("a", "e3")]


def test_a_listing_forgets_what_it_lacks_unless_an_event_since_showed_it() -> None:
    """A relisting after 410 Gone delivers no DELETED: the resync's periodic listing shows
    which evaluations went while the watch was away."""
    held = WatchedEvaluations()
    held.observe(body("kept", 10))
    held.observe(body("gone", 11))
    held.observe(body("ended-and-gone", 12, phase="Failed"))
    held.observe(body("newer", 40))  # created after the listing was taken at 30
    assert held.forget_missing({("a", "kept")}, listed_at=30) == 2
    assert [key for key, _ in held.in_flight()] == [("a", "kept"), ("a", "newer")]
    assert held.recent("a", "ended-and-gone") is None
