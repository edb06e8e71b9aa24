"""The load generator's rules, with NullBackend and fake backends.

Most tests run on a ``VirtualClock``: fake backends "work" by moving it forward and the Server
loop "sleeps" on it, so queueing, windows and verdicts are simulated exactly and the results do
not depend on how loaded the machine is. The real-clock tests (spinning backends) assert only
what holds under any load: counts, orderings, and hard lower bounds ("a 1 ms spin takes at
least 1 ms"), never speed.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from mlmodelscope.agent import scenarios
from mlmodelscope.agent.backends.base import NullBackend
from mlmodelscope.agent.scenarios import (
    BackendSUT,
    BatchRing,
    Measurement,
    measure_harness_overhead,
    poisson_schedule,
    run_scenario,
)
from mlmodelscope.spec.evaluation import Scenario, ScenarioType

MS = 1_000_000


def spin(ns: int) -> None:
    """Busy-wait: unlike sleep, it takes the time it is asked for, not more on average."""
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


class VirtualClock:
    """Simulated nanoseconds: every read costs ``tick``; work and sleep move it forward."""

    def __init__(self, tick: int = 100) -> None:
        self.now = 0
        self.tick = tick

    def __call__(self) -> int:
        self.now += self.tick
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns

    def sleep(self, seconds: float) -> None:
        self.now += round(seconds * 1e9)


class Sleepy(NullBackend):
    """Takes ``service_ns`` per batch (the first ``slow_calls`` calls take ``slow_ns``): spins
    on the real clock, or advances a virtual one."""

    def __init__(
        self,
        service_ns: int,
        *,
        clock: VirtualClock | None = None,
        slow_calls: int = 0,
        slow_ns: int = 0,
    ) -> None:
        super().__init__()
        self.service_ns = service_ns
        self.work = clock.advance if clock is not None else spin
        self.slow_calls = slow_calls
        self.slow_ns = slow_ns
        self.calls = 0
        self.batch_sizes: list[int] = []

    def predict(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        self.calls += 1
        self.batch_sizes.append(int(inputs[0].shape[0]))
        self.work(self.slow_ns if self.calls <= self.slow_calls else self.service_ns)
        return super().predict(inputs)


class PerWindowSUT:
    """A custom SUT whose service time is picked per window (``reset`` starts a window)."""

    def __init__(self, service_ns_per_window: Sequence[int], clock: VirtualClock) -> None:
        self.times = list(service_ns_per_window)
        self.clock = clock
        self.window = -1
        self.count = 0

    def issue(self, batch: tuple[np.ndarray, ...]) -> None:
        self.clock.advance(self.times[min(self.window, len(self.times) - 1)])
        self.count += 1

    def reset(self) -> None:
        self.window += 1
        self.count = 0

    def reserve(self, calls: int) -> None:
        return None

    def breakdown(self) -> tuple[np.ndarray, np.ndarray]:
        zeros = np.zeros(self.count, dtype=np.int64)
        return zeros, zeros.copy()


def dataset(n: int = 10, width: int = 2) -> list[np.ndarray]:
    """Sample i holds the values i*width ... so a batch shows which samples it took."""
    return [np.arange(n * width, dtype=np.float32).reshape(n, width)]


def scenario(**fields: Any) -> Scenario:
    base: dict[str, Any] = {
        "minQueryCount": 20,
        "minDuration": "50ms",
        "warmup": 2,
        "stability": {"tolerancePercent": 100, "maxWindows": 2},
    }
    return Scenario.model_validate({**base, **fields})


def run(
    sc: Scenario,
    backend: Any,
    batch_size: int = 1,
    clock: VirtualClock | None = None,
    **kwargs: Any,
) -> Measurement:
    """Run ``sc``; with ``clock`` everything (harness, SUT, sleeps) runs on virtual time."""
    ring = BatchRing.for_scenario(sc, dataset(), batch_size)
    if clock is None:
        return run_scenario(sc, BackendSUT(backend), ring, **kwargs)
    sut = backend if isinstance(backend, PerWindowSUT) else BackendSUT(backend, clock=clock)
    return run_scenario(sc, sut, ring, clock=clock, sleep=clock.sleep, **kwargs)


# ------------------------------------------------------------------------------ batch ring


def test_ring_prebuilds_contiguous_batches_in_seeded_order() -> None:
    data = dataset(10)
    ring = BatchRing(data, 3, seed=7)
    assert len(ring) == 4  # ceil(10 / 3): enough to cover the dataset once
    assert ring.batches_per_query == 1
    order = np.concatenate([q[0] for q in ring.sample_indices])
    assert sorted(order[:10].tolist()) == list(range(10))  # a permutation, then it wraps
    for query, indices in zip(ring.queries, ring.sample_indices, strict=True):
        (batch,) = query
        assert batch[0].flags.c_contiguous
        assert batch[0].base is None or batch[0].base is not data[0]
        np.testing.assert_array_equal(batch[0], data[0][indices[0]])
    same = BatchRing(data, 3, seed=7)
    other = BatchRing(data, 3, seed=8)
    assert all(
        np.array_equal(a[0], b[0])
        for a, b in zip(ring.sample_indices, same.sample_indices, strict=True)
    )
    assert not all(
        np.array_equal(a[0], b[0])
        for a, b in zip(ring.sample_indices, other.sample_indices, strict=True)
    )


def test_ring_size_limits() -> None:
    big = dataset(1000)
    assert len(BatchRing(big, 2)) == 16
    assert len(BatchRing(big, 2, max_queries=3)) == 3
    assert len(BatchRing(big, 2, max_bytes=1)) == 1  # memory cap, but never empty
    tiny = BatchRing(dataset(2), 5)  # fewer samples than a batch: samples repeat
    assert len(tiny) == 1
    assert tiny.queries[0][0][0].shape == (5, 2)


def test_ring_keeps_inputs_aligned() -> None:
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.arange(6, dtype=np.int64) * 10
    ring = BatchRing([x, y], 2, seed=1)
    for (batch,) in ring.queries:
        np.testing.assert_array_equal(batch[1], batch[0][:, 0].astype(np.int64) * 5)


def test_ring_validates() -> None:
    with pytest.raises(ValueError):
        BatchRing([], 1)
    with pytest.raises(ValueError):
        BatchRing([np.zeros((3, 2)), np.zeros((4, 2))], 1)
    with pytest.raises(ValueError):
        BatchRing(dataset(), 0)


def test_multistream_ring_splits_queries() -> None:
    ring = BatchRing.for_scenario(scenario(type="MultiStream", samplesPerQuery=8), dataset(), 3)
    assert ring.samples_per_query == 8
    assert ring.batches_per_query == 3
    assert [b[0].shape[0] for b in ring.queries[0]] == [3, 3, 2]


# ------------------------------------------------------------------------- system under test


def test_backend_sut_times_predict_and_postprocess() -> None:
    seen: list[int] = []

    def postprocess(outputs: list[np.ndarray]) -> None:
        seen.append(outputs[0].shape[0])
        spin(MS)

    sut = BackendSUT(Sleepy(1 * MS), postprocess, capacity=1)
    batch = (np.zeros((4, 2), dtype=np.float32),)
    for _ in range(3):  # past the capacity: it grows
        sut.issue(batch)
    predict, post = sut.breakdown()
    assert seen == [4, 4, 4]
    assert predict.shape == post.shape == (3,)
    assert (predict >= MS).all() and (post >= MS).all()
    sut.reset()
    assert sut.breakdown()[0].shape == (0,)


# ------------------------------------------------------------------------------ SingleStream


def test_single_stream_runs_until_count_and_duration() -> None:
    clock = VirtualClock()
    m = run(scenario(minQueryCount=5, minDuration="50ms"), Sleepy(MS, clock=clock), clock=clock)
    assert m.scenario == "SingleStream"
    assert m.duration_s >= 0.05  # duration drives this one
    assert 49 <= m.queries <= 50  # 1 ms each (plus clock reads): the first query past 50 ms
    assert m.latencies_ns.shape == (m.queries,)
    assert np.unique(m.latencies_ns).size == 1  # every query did the same simulated work
    assert m.latency.min_s >= 0.001
    assert m.latency.count == m.queries == m.predict.count
    assert (m.latencies_ns >= m.predict_ns + m.postprocess_ns).all()
    assert m.throughput_samples_per_s == pytest.approx(m.samples / m.duration_s)
    assert m.qps == pytest.approx(m.queries / m.duration_s)
    assert m.verdict.valid, m.verdict.reasons

    counted = run(
        scenario(minQueryCount=300, minDuration="10us"), Sleepy(0, clock=clock), clock=clock
    )
    assert counted.queries == 300  # count drives this one: it stops at exactly the minimum
    assert counted.duration_s >= 10e-6


def test_single_stream_on_the_real_clock() -> None:
    m = run(scenario(minQueryCount=5, minDuration="50ms"), Sleepy(MS))
    assert m.duration_s >= 0.05
    assert 5 <= m.queries <= 51  # every query takes >= 1 ms, so it cannot overshoot much
    assert m.latency.min_s >= 0.001
    assert (m.latencies_ns >= m.predict_ns + m.postprocess_ns).all()
    assert (m.predict_ns >= MS).all()
    counted = run(scenario(minQueryCount=300, minDuration="1ms"), NullBackend())
    assert counted.queries >= 300


def test_too_short_and_too_few_are_invalid() -> None:
    clock = VirtualClock()
    sc = scenario(minQueryCount=10**6, minDuration="10s")
    m = run(sc, Sleepy(MS, clock=clock), clock=clock, time_limit_s=0.03)
    assert not m.verdict.valid
    reasons = " | ".join(m.verdict.reasons)
    assert f"too few queries: {m.queries} < minQueryCount 1000000" in reasons
    assert "too short: 0.0" in reasons and " s < minDuration 10s" in reasons
    assert m.duration_s < 0.03  # the limit counts from the start, warm-up included
    assert "unstable: only one window ran" in reasons  # the limit also stopped the windows
    assert len(m.windows) == 1


def test_windows_repeat_until_p50_settles() -> None:
    clock = VirtualClock()
    unstable = run(
        scenario(stability={"tolerancePercent": 10, "maxWindows": 3}, warmup=0),
        PerWindowSUT([MS, 2 * MS, 4 * MS], clock),
        clock=clock,
    )
    assert not unstable.stable
    assert len(unstable.windows) == 3
    assert [w.index for w in unstable.windows] == [0, 1, 2]
    assert unstable.windows[2].p50_s > unstable.windows[1].p50_s > unstable.windows[0].p50_s
    assert any(
        r.startswith("unstable: p50 moved 100.0% between the last windows (tolerance 10%")
        for r in unstable.verdict.reasons
    ), unstable.verdict.reasons
    assert unstable.latency.percentile(50) == unstable.windows[-1].p50_s  # the final window

    settled = run(
        scenario(stability={"tolerancePercent": 10, "maxWindows": 5}, warmup=0),
        PerWindowSUT([4 * MS, 2 * MS, 2 * MS, 8 * MS], clock),
        clock=clock,
    )
    assert settled.stable
    assert len(settled.windows) == 3  # 4 -> 2 ms moved 50 %, 2 -> 2 ms settled
    assert settled.verdict.valid, settled.verdict.reasons


def test_warmup_is_reported_and_excluded() -> None:
    clock = VirtualClock()
    backend = Sleepy(MS // 10, clock=clock, slow_calls=3, slow_ns=60 * MS)
    m = run(scenario(warmup=3), backend, clock=clock)
    assert m.warmup_queries == 3
    assert m.warmup is not None and m.warmup.count == 3
    assert m.warmup.min_s >= 0.06
    assert m.latency.max_s < 0.001
    assert backend.calls == 3 + sum(w.queries for w in m.windows)

    none = run(scenario(warmup=0), NullBackend())
    assert none.warmup_queries == 0 and none.warmup is None


def test_progress_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenarios, "PROGRESS_INTERVAL_NS", 0)
    calls: list[tuple[int, int]] = []
    run(scenario(minQueryCount=20), NullBackend(), progress=lambda d, t: calls.append((d, t)))
    assert calls
    assert all(t == 20 for _, t in calls)
    assert calls[0][0] >= 1


def test_gc_state_is_restored() -> None:
    assert gc.isenabled()
    run(scenario(), NullBackend())
    assert gc.isenabled()


def test_result_document() -> None:
    m = run(scenario(repetitions=2), Sleepy(MS // 10))
    doc = m.to_dict(include_raw=True)
    assert json.loads(json.dumps(doc)) == doc
    assert doc["raw"]["latencies_ns"] == m.latencies_ns.tolist()
    assert all(isinstance(v, int) for v in doc["raw"]["latencies_ns"])
    assert len(doc["raw"]["predict_ns"]) == m.queries
    assert len(doc["repetitions"]) == 2
    assert "raw" not in doc["repetitions"][0]
    assert doc["latency"]["percentiles_s"].keys() >= {"p50", "p90", "p95", "p99", "p99.9"}
    assert doc["verdict"]["result"] in ("VALID", "INVALID")
    assert doc["server"] is None
    assert doc["percentile_method"].startswith("loadgen")
    assert "raw" not in m.to_dict()


# ------------------------------------------------------------------------------ MultiStream


def test_multistream_issues_ceil_spq_over_batch_batches_per_query() -> None:
    backend = Sleepy(MS)
    m = run(scenario(type="MultiStream", samplesPerQuery=8, warmup=1), backend, batch_size=3)
    assert m.batches_per_query == 3
    assert m.samples_per_query == 8
    assert m.samples == 8 * m.queries
    assert backend.batch_sizes == [3, 3, 2] * (1 + sum(w.queries for w in m.windows))
    assert m.latency.min_s >= 0.003  # a query ends when its last batch completes
    assert m.predict_ns.shape == (m.queries,)
    assert (m.predict_ns >= 3 * MS).all()  # summed over the query's batches
    assert (m.latencies_ns >= m.predict_ns).all()


def test_mismatched_ring_is_refused() -> None:
    sc = scenario(type="MultiStream", samplesPerQuery=8)
    with pytest.raises(ValueError, match="for_scenario"):
        run_scenario(sc, BackendSUT(NullBackend()), BatchRing(dataset(), 3))
    multi = BatchRing.for_scenario(sc, dataset(), 3)
    with pytest.raises(ValueError):
        run_scenario(scenario(), BackendSUT(NullBackend()), multi)


# ----------------------------------------------------------------------------------- Server


def test_poisson_schedule_is_seeded() -> None:
    a = poisson_schedule(1000.0, 20_000, 0.0, 5)
    b = poisson_schedule(1000.0, 20_000, 0.0, 5)
    c = poisson_schedule(1000.0, 20_000, 0.0, 6)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[:100], c[:100])
    assert a.dtype == np.int64
    assert (np.diff(a) >= 0).all() and a[0] > 0
    assert a.size == 20_000
    gaps_s = np.diff(a) / 1e9
    assert gaps_s.mean() == pytest.approx(1 / 1000, rel=0.1)
    assert gaps_s.std() == pytest.approx(gaps_s.mean(), rel=0.1)  # exponential: stdev = mean


def test_poisson_schedule_meets_count_and_duration() -> None:
    by_duration = poisson_schedule(100.0, 5, 2.0, 1)
    assert by_duration[-1] >= 2 * 10**9 and by_duration[-2] < 2 * 10**9
    assert by_duration.size >= 5
    by_count = poisson_schedule(100.0, 500, 0.01, 1)
    assert by_count.size == 500


def test_server_fast_backend_meets_the_bound() -> None:
    clock = VirtualClock()
    sc = scenario(type="Server", targetQPS=200, latencyBound="10ms", minQueryCount=50)
    m = run(sc, Sleepy(MS // 5, clock=clock), clock=clock)
    assert m.server is not None and m.queue_ns is not None
    assert m.server.bound_met
    assert m.server.requested_qps == 200 and m.server.target_qps == 200
    assert m.server.latency_bound_s == 0.01
    assert m.server.achieved_qps >= 0.9 * m.server.scheduled_qps
    assert m.verdict.valid, m.verdict.reasons
    assert (m.latencies_ns >= m.queue_ns + m.predict_ns).all()
    assert m.duration_s >= 0.05 and m.queries >= 50
    # the same seed replays the same arrivals: identical window sizes and latencies
    clock2 = VirtualClock()
    again = run(sc, Sleepy(MS // 5, clock=clock2), clock=clock2)
    assert [w.queries for w in again.windows] == [w.queries for w in m.windows]
    np.testing.assert_array_equal(again.latencies_ns, m.latencies_ns)
    other = run(sc.model_copy(update={"seed": 1}), Sleepy(MS // 5, clock=clock2), clock=clock2)
    assert not np.array_equal(other.latencies_ns, m.latencies_ns)


def test_server_counts_queueing_and_fails_a_slow_backend() -> None:
    clock = VirtualClock()
    sc = scenario(type="Server", targetQPS=400, latencyBound="20ms", minQueryCount=30)
    m = run(sc, Sleepy(5 * MS, clock=clock), clock=clock)  # serves 200 QPS at best
    assert m.server is not None and m.queue_ns is not None
    assert not m.server.bound_met
    assert not m.verdict.valid
    reasons = " | ".join(m.verdict.reasons)
    assert "latency bound missed: p99 = " in reasons and "> bound 20 ms" in reasons
    assert "achieved QPS below target" in reasons
    assert m.server.achieved_qps < 0.9 * m.server.scheduled_qps
    assert m.server.achieved_qps <= 200
    assert (m.latencies_ns >= m.queue_ns + m.predict_ns).all()
    assert m.queue_ns.max() > 20 * MS  # later queries waited behind earlier ones
    assert m.server.queue.max_s > 0.02
    assert m.latency.percentile(99) > 0.02


def test_server_on_the_real_clock() -> None:
    sc = scenario(type="Server", targetQPS=100, latencyBound="1s", minQueryCount=10)
    m = run(sc, Sleepy(MS // 5))
    assert m.server is not None and m.queue_ns is not None
    assert (m.queue_ns >= 0).all()
    assert (m.latencies_ns >= m.queue_ns + m.predict_ns).all()
    assert (m.predict_ns >= MS // 5).all()
    assert m.duration_s >= 0.05
    assert m.server.achieved_qps <= m.server.scheduled_qps


def test_server_auto_finds_the_peak_near_the_service_rate() -> None:
    clock = VirtualClock()
    service_ns = 2 * MS  # one worker serves at most 500 QPS
    sc = scenario(type="Server", targetQPS="auto", latencyBound="30ms", minQueryCount=40)
    m = run(sc, Sleepy(service_ns, clock=clock), clock=clock, search_budget_s=5.0)
    assert m.server is not None
    assert m.server.requested_qps is None
    assert m.server.estimated_peak_qps == pytest.approx(1e9 / service_ns, rel=0.01)
    trials = m.server.search
    assert trials and any(t.met for t in trials) and not all(t.met for t in trials)
    assert all(t.queries >= 10 for t in trials)  # >= minQueryCount / 4
    assert m.server.target_qps == max(t.qps for t in trials if t.met)
    assert 1e9 / service_ns / 2 <= m.server.target_qps <= 1e9 / service_ns
    doc = m.to_dict()
    assert doc["server"]["auto"] is True
    assert len(doc["server"]["search"]) == len(trials)


def test_server_auto_search_on_the_real_clock() -> None:
    service_ns = 2 * MS
    sc = scenario(type="Server", targetQPS="auto", latencyBound="30ms", minQueryCount=40)
    started = time.perf_counter()
    m = run(sc, Sleepy(service_ns), search_budget_s=2.0)
    assert time.perf_counter() - started < 20  # bounded even on a loaded machine
    assert m.server is not None and m.server.estimated_peak_qps is not None
    assert m.server.estimated_peak_qps <= 1e9 / service_ns  # a 2 ms spin is never faster
    assert 0 < m.server.target_qps <= m.server.estimated_peak_qps
    assert m.server.search


def test_server_auto_with_an_impossible_bound_reports_invalid() -> None:
    clock = VirtualClock()
    sc = scenario(type="Server", targetQPS="auto", latencyBound="1ms", minQueryCount=16, warmup=0)
    m = run(sc, Sleepy(3 * MS, clock=clock), clock=clock, search_budget_s=2.0)
    assert m.server is not None
    assert m.server.search and not any(t.met for t in m.server.search)
    assert m.server.target_qps == min(t.qps for t in m.server.search)
    assert any(r.startswith("latency bound missed") for r in m.verdict.reasons)
    expected = sum(t.queries / t.qps for t in m.server.search)
    assert expected < 2.0 + 16 / m.server.search[-1].qps  # the budget bounds the search


# ---------------------------------------------------------------------------------- Offline


def test_offline_throughput_is_samples_over_wall_time() -> None:
    clock = VirtualClock()
    sc = scenario(type="Offline", minQueryCount=10)
    m = run(sc, Sleepy(MS, clock=clock), batch_size=4, clock=clock)
    assert m.samples == 4 * m.queries
    assert m.throughput_samples_per_s == pytest.approx(m.samples / m.duration_s)
    assert m.throughput_samples_per_s == pytest.approx(4 / 0.001, rel=0.01)
    busy_s = m.latencies_ns.sum() / 1e9
    assert busy_s <= m.duration_s <= busy_s * 1.01  # back-to-back: batches fill the wall time
    assert m.latencies_ns.shape == (m.queries,)

    real = run(sc, Sleepy(MS), batch_size=4)
    assert real.throughput_samples_per_s <= 4 / 0.001  # each batch takes >= 1 ms
    assert real.latencies_ns.sum() / 1e9 <= real.duration_s


def test_offline_stability_follows_throughput() -> None:
    clock = VirtualClock()
    sc = scenario(type="Offline", warmup=0, stability={"tolerancePercent": 10, "maxWindows": 2})
    m = run(sc, PerWindowSUT([MS, 3 * MS], clock), clock=clock)
    assert any(r.startswith("unstable: throughput moved") for r in m.verdict.reasons)


# ------------------------------------------------------------------------------ repetitions


@pytest.mark.parametrize("kind", ["SingleStream", "Offline"])
def test_repetitions_are_kept_and_the_median_summarized(kind: str) -> None:
    # maxWindows 2 and warmup 0: repetition r runs windows 2r and 2r+1
    clock = VirtualClock()
    sc = scenario(type=kind, warmup=0, repetitions=3, minQueryCount=5, minDuration="20ms")
    m = run(sc, PerWindowSUT([3 * MS, 3 * MS, MS, MS, 2 * MS, 2 * MS], clock), clock=clock)
    assert len(m.repetitions) == 3
    assert [r.repetition for r in m.repetitions] == [0, 1, 2]
    assert m.repetition == 2  # p50s 3, 1, 2 ms (throughputs in reverse): the median is #2
    assert m.latency.percentile(50) == m.repetitions[2].latency.percentile(50)
    p50s = [r.latency.percentile(50) for r in m.repetitions]
    assert p50s[0] > p50s[2] > p50s[1]


def test_even_repetitions_pick_the_conservative_middle() -> None:
    clock = VirtualClock()
    sc = scenario(warmup=0, repetitions=2, minQueryCount=5, minDuration="20ms")
    m = run(sc, PerWindowSUT([MS, MS, 3 * MS, 3 * MS], clock), clock=clock)
    assert m.repetition == 1  # the higher p50 of the two


def test_repetitions_get_a_spread_of_their_own_figures() -> None:
    clock = VirtualClock()
    sc = scenario(warmup=0, repetitions=3, minQueryCount=5, minDuration="20ms", seed=4)
    m = run(sc, PerWindowSUT([3 * MS, 3 * MS, MS, MS, 2 * MS, 2 * MS], clock), clock=clock)
    assert m.spread is not None
    figures = [r.figures() for r in m.repetitions]
    assert m.spread.figures == tuple(figures)
    assert [f.p50_s for f in figures] == [r.latency.percentile(50) for r in m.repetitions]
    assert [f.queries for f in figures] == [r.queries for r in m.repetitions]
    assert m.spread.bootstrap.seed == 4
    p50 = m.spread.p50_s
    assert p50.estimate == pytest.approx(np.mean([f.p50_s for f in figures]))
    assert p50.low is not None and p50.high is not None
    assert min(f.p50_s for f in figures) <= p50.low <= p50.estimate <= p50.high
    assert m.to_dict()["spread"]["repetitions"] == 3


def test_repetitions_the_time_limit_cut_make_the_summary_invalid() -> None:
    """The first repetition is valid, but the time limit ends the sequence during the second
    (two 20 ms windows each): the summary says how many of the repetitions asked for ran,
    and is INVALID."""
    clock = VirtualClock()
    sc = scenario(warmup=0, repetitions=3, minQueryCount=5, minDuration="20ms")
    m = run(sc, PerWindowSUT([MS] * 6, clock), clock=clock, time_limit_s=0.045)
    assert len(m.repetitions) < 3
    assert m.repetitions[0].verdict.valid
    assert not m.verdict.valid
    assert f"time limit: {len(m.repetitions)} of 3 repetitions ran" in m.verdict.reasons
    clock = VirtualClock()
    alone = run(sc, PerWindowSUT([MS] * 2, clock), clock=clock, repetition=1)
    assert alone.verdict.valid  # one repetition asked for, one ran


def test_one_repetition_has_no_spread() -> None:
    m = run(scenario(warmup=0), NullBackend())
    assert m.spread is None
    assert "spread" not in m.to_dict()


def test_one_repetition_of_several_runs_alone_as_in_the_sequence() -> None:
    """What a fresh process runs: only the repetition asked for, its Server arrivals drawn
    from its own index's seed, so alone it measures what it measures in the sequence."""
    sc = scenario(type="Server", targetQPS=2000, repetitions=3, minQueryCount=30, warmup=0)
    clock = VirtualClock()
    sequence = run(sc, Sleepy(MS // 2, clock=clock), clock=clock)
    clock = VirtualClock()
    alone = run(sc, Sleepy(MS // 2, clock=clock), clock=clock, repetition=2)
    assert [r.repetition for r in alone.repetitions] == [2] and alone.spread is None
    assert np.array_equal(alone.latencies_ns, sequence.repetitions[2].latencies_ns)
    assert not np.array_equal(alone.latencies_ns, sequence.repetitions[0].latencies_ns)


def test_repetitions_run_apart_summarize_as_those_run_together() -> None:
    clock = VirtualClock()
    sc = scenario(warmup=0, repetitions=3, minQueryCount=5, minDuration="20ms", seed=4)
    windows = [3 * MS, 3 * MS, MS, MS, 2 * MS, 2 * MS]
    together = run(sc, PerWindowSUT(windows, clock), clock=clock)
    apart = []
    for r in range(3):
        clock = VirtualClock()
        sut = PerWindowSUT(windows[2 * r : 2 * r + 2], clock)
        apart.append(run(sc, sut, clock=clock, repetition=r).repetitions[0])
    summary = scenarios.summarize_repetitions(sc, apart)
    assert summary.repetition == together.repetition == 2
    assert summary.repetitions == tuple(apart)
    assert summary.spread == together.spread


# ---------------------------------------------------------------------------------- harness


@pytest.mark.parametrize("kind", list(ScenarioType))
def test_harness_overhead_is_measured(kind: ScenarioType) -> None:
    sc = scenario(type=kind.value, **({"targetQPS": 10} if kind == ScenarioType.SERVER else {}))
    ring = BatchRing.for_scenario(sc, dataset(), 3)
    stats = measure_harness_overhead(kind, ring, n=500)
    assert stats.count == 500
    assert stats.min_s > 0
    assert stats.mean_s > 0
    assert stats.percentile(50) < 0.01  # microseconds in practice; generous on a busy machine
