"""The admission ledger: slots and waiting evaluations from events, rebuilt from listings
without losing what events said while the listings were in flight."""

from __future__ import annotations

from typing import Any

from mlmodelscope.controller.admission import fifo
from mlmodelscope.controller.admission.ledger import AdmissionLedger, waiting_entry

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:00:01Z"


def job(namespace: str, name: str, *, ended: bool = False, suspend: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Complete", "status": "True"}] if ended else []
    return {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"suspend": suspend},
        "status": {"conditions": conditions},
    }


def evaluation(
    namespace: str, name: str, phase: str | None, *, created: str = T0, generation: int = 1
) -> dict[str, Any]:
    st = {"phase": phase, "observedGeneration": 1} if phase else {}
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "generation": generation,
            "creationTimestamp": created,
        },
        "status": st,
    }


def test_jobs_hold_slots_until_they_end_or_go() -> None:
    book = AdmissionLedger()
    book.observe_job(job("a", "x-g1"))
    book.observe_job(job("a", "y-g1"))
    book.observe_job(job("b", "z-g1"))
    book.observe_job(job("b", "k-g1", suspend=True))  # waits for Kueue: runs nothing
    assert book.running() == {"a": 2, "b": 1}
    book.observe_job(job("a", "x-g1", ended=True))
    book.observe_job(job("b", "z-g1"), deleted=True)
    assert book.running() == {"a": 1}


def test_only_evaluations_admission_queued_for_their_generation_wait() -> None:
    book = AdmissionLedger()
    book.observe_evaluation(evaluation("a", "queued", "Queued"))
    book.observe_evaluation(evaluation("a", "fresh", None))  # never got a status
    book.observe_evaluation(evaluation("a", "edited", "Queued", generation=2))
    kueued = evaluation("a", "kueued", "Queued")
    kueued["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}
    book.observe_evaluation(kueued)
    assert book.waiting() == [fifo.QueueEntry(T0, "a", "queued")]
    book.observe_evaluation(evaluation("a", "queued", "Pending"))
    assert book.waiting() == []
    assert waiting_entry(kueued) is None


def test_a_rebuild_takes_the_listings_but_keeps_what_events_said_meanwhile() -> None:
    book = AdmissionLedger()
    assert not book.synced
    book.begin_rebuild()
    listed_jobs = [job("a", "old-g1"), job("a", "ends-g1")]
    listed = [evaluation("a", "waits", "Queued"), evaluation("a", "starts", "Queued", created=T1)]
    # While the listings were in flight: one Job ended, one evaluation got its Job.
    book.observe_job(job("a", "ends-g1", ended=True))
    book.observe_evaluation(evaluation("a", "starts", "Pending", created=T1))
    book.finish_rebuild(listed_jobs, listed)
    assert book.synced
    assert book.running() == {"a": 1}
    assert book.waiting() == [fifo.QueueEntry(T0, "a", "waits")]
    # After the rebuild, the listings no longer win.
    book.observe_job(job("a", "old-g1", ended=True))
    assert book.running() == {}


def test_a_rebuild_drops_what_no_listing_and_no_event_shows() -> None:
    book = AdmissionLedger()
    book.observe_job(job("a", "lost-g1"))  # its DELETED event was lost
    book.observe_evaluation(evaluation("a", "gone", "Queued"))
    book.begin_rebuild()
    book.finish_rebuild([], [])
    assert book.running() == {} and book.waiting() == []
