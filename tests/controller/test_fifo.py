"""FIFO admission under cluster-wide and per-namespace limits."""

from __future__ import annotations

from mlmodelscope.controller.admission.fifo import (
    Limits,
    QueueEntry,
    decide,
    plan,
    running_per_namespace,
)
from mlmodelscope.controller.job_state import is_active_job


def entry(minute: int, namespace: str = "a", name: str | None = None) -> QueueEntry:
    return QueueEntry(f"2026-11-22T08:{minute:02d}:00Z", namespace, name or f"e{minute}")


def test_unlimited_admits_everything() -> None:
    waiting = [entry(3), entry(1), entry(2)]
    assert plan(waiting, {"a": 10}, Limits()) == sorted(waiting)
    assert decide(entry(9), waiting, {"a": 50}, Limits()).admitted


def test_cluster_limit_admits_the_oldest_first() -> None:
    waiting = [entry(5), entry(1), entry(3)]
    assert plan(waiting, {"a": 1}, Limits(max_running=3)) == [entry(1), entry(3)]
    assert decide(entry(1), waiting, {"a": 1}, Limits(max_running=2)).admitted
    late = decide(entry(3), waiting, {"a": 1}, Limits(max_running=2))
    assert not late.admitted
    assert "1 queued ahead" in late.message


def test_full_cluster_says_why() -> None:
    d = decide(entry(1), [], {"a": 1, "b": 1}, Limits(max_running=2))
    assert not d.admitted
    assert d.message == (
        "waiting for a free slot: 2 of 2 evaluations running cluster-wide; 0 queued ahead"
    )


def test_namespace_limit_does_not_block_other_namespaces() -> None:
    waiting = [entry(1, "a"), entry(2, "a"), entry(3, "b")]
    limits = Limits(max_running=10, max_running_per_namespace=1)
    assert plan(waiting, {"a": 1}, limits) == [entry(3, "b")]
    blocked = decide(entry(1, "a"), waiting, {"a": 1}, limits)
    assert not blocked.admitted and "in namespace a" in blocked.message
    assert decide(entry(3, "b"), waiting, {"a": 1}, limits).admitted


def test_ties_break_by_namespace_then_name() -> None:
    same = "2026-11-22T08:00:00Z"
    waiting = [QueueEntry(same, "b", "x"), QueueEntry(same, "a", "z"), QueueEntry(same, "a", "y")]
    assert plan(waiting, {}, Limits(max_running=1)) == [QueueEntry(same, "a", "y")]


def test_the_deciding_entry_counts_even_if_not_listed_as_waiting() -> None:
    assert decide(entry(1), [], {}, Limits(max_running=1)).admitted


def test_active_jobs_are_counted_per_namespace() -> None:
    def job(ns: str, *conditions: str, deleting: bool = False) -> dict[str, object]:
        meta: dict[str, object] = {"namespace": ns, "name": "j"}
        if deleting:
            meta["deletionTimestamp"] = "2026-11-22T08:00:00Z"
        conds = [{"type": c, "status": "True"} for c in conditions]
        return {"metadata": meta, "status": {"conditions": conds}}

    jobs = [job("a"), job("a"), job("b"), job("b", "Complete"), job("c", "Failed")]
    jobs.append(job("c", deleting=True))
    assert running_per_namespace(jobs) == {"a": 2, "b": 1}
    assert is_active_job({"metadata": {}, "status": {"conditions": [{"type": "Suspended"}]}})
