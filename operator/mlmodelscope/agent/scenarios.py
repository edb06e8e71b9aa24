"""The load generator: MLPerf LoadGen's four scenarios, kept apart from the system under test.

The harness only ever calls ``SystemUnderTest.issue(batch)``; what happens inside (a framework's
``predict`` plus postprocessing) is the SUT's business, and the SUT times its own parts so a
query's latency can be broken down. What the harness guarantees, so the numbers can be trusted:

* one monotonic nanosecond clock (``time.perf_counter_ns``), read once right before each query
  (Server: once its arrival is due) and once right after; the timed region holds the SUT call
  and nothing else;
* batches are built before timing (``BatchRing``: a few pre-built, contiguous batches cycled
  through), so no slicing, copying or allocation happens in the hot loop;
* latencies go into preallocated int64 arrays (grown by doubling between queries, never inside
  a timed region), and every latency of the reported window is kept: percentiles, mean, trimmed
  mean, stdev, min and max all come from the full distribution (``mlmodelscope.agent.stats``);
* warm-up queries run through the same code path, are reported, and are never mixed in;
* a measurement window runs until it has ``minQueryCount`` queries *and* lasts ``minDuration``;
  windows repeat until p50 settles (perf_analyzer's rule), and the verdict says why a run is
  INVALID rather than hiding it;
* the cyclic garbage collector is paused during timed windows and run between them (as
  ``timeit`` does), so a collection triggered by the harness's own objects cannot land in a query;
* ``measure_harness_overhead`` runs the same loops against ``NullBackend``, so the harness's own
  per-query cost is reported next to the results it affects.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from mlmodelscope.agent.backends.base import Backend, NullBackend
from mlmodelscope.agent.energy import Counters, EnergyMeter, WindowEnergy
from mlmodelscope.agent.spread import Bootstrap, RepetitionFigures, Spread, spread_of
from mlmodelscope.agent.stats import (
    PERCENTILE_METHOD,
    LatencyStats,
    Verdict,
    is_stable,
    percentile_key,
    percentile_of_sorted,
    relative_change,
    summarize_latencies,
)
from mlmodelscope.spec.base import parse_duration
from mlmodelscope.spec.evaluation import Scenario, ScenarioType

Clock = Callable[[], int]
"""A monotonic clock in integer nanoseconds."""
Progress = Callable[[int, int], None]
"""Called with (queries done in the current window, queries the window needs at least)."""
Batch = tuple[np.ndarray, ...]
"""One batch: one contiguous array per model input, batch first."""
Query = tuple[Batch, ...]
"""The batches one query issues back-to-back (one, except in MultiStream)."""
Int64Array = npt.NDArray[np.int64]

SPIN_NS = 200_000
"""Server: sleep until this close to a scheduled arrival, then spin (sleep overshoots)."""
PROGRESS_INTERVAL_NS = 200_000_000
"""The progress callback runs at most this often."""
MIN_ACHIEVED_FRACTION = 0.9
"""Server: achieved QPS below this fraction of the scheduled QPS makes the run INVALID."""
MIN_TRIAL_QUERIES = 16
"""Server auto search: the fewest queries in one trial."""
MAX_SEARCH_TRIALS = 12
"""Server auto search: the most trials."""
SEARCH_RESOLUTION = 0.05
"""Server auto search stops when the passing and failing QPS are within 5 % of each other."""
MAX_INITIAL_CAPACITY = 1 << 22
"""Most latencies preallocated for a window up front (32 MiB); beyond, arrays double."""
DEFAULT_RING_QUERIES = 16
DEFAULT_RING_BYTES = 256 * 1024 * 1024
_NO_DEADLINE = 2**62


# ----------------------------------------------------------------------------------- batches


class BatchRing:
    """Queries built before timing: up to ``max_queries`` of them, cycled through in the loop.

    Sample order is a permutation of the dataset drawn from ``seed`` and walked cyclically, so
    a run is reproducible. Each batch is a fresh C-contiguous array (``np.take``), never a view
    into the dataset, so the timed region never pays for a gather or a copy. The ring stops
    growing at ``max_bytes`` (at least one query is always built), which keeps large image
    batches from exhausting memory; it also holds no more queries than the dataset needs.

    ``samples_per_query`` (MultiStream) splits each query into ``ceil(spq / batch_size)``
    batches, the last one possibly smaller; otherwise a query is one batch of ``batch_size``.
    """

    def __init__(
        self,
        samples: Sequence[np.ndarray],
        batch_size: int,
        *,
        samples_per_query: int | None = None,
        seed: int = 0,
        max_queries: int = DEFAULT_RING_QUERIES,
        max_bytes: int = DEFAULT_RING_BYTES,
    ) -> None:
        if not samples:
            raise ValueError("need at least one model input")
        num_samples = int(samples[0].shape[0])
        if num_samples == 0:
            raise ValueError("the dataset has no samples")
        if any(int(a.shape[0]) != num_samples for a in samples):
            raise ValueError("every model input needs the same number of samples")
        if batch_size <= 0:
            raise ValueError("batch_size must be > 0")
        spq = batch_size if samples_per_query is None else samples_per_query
        if spq <= 0:
            raise ValueError("samples_per_query must be > 0")
        full, rest = divmod(spq, batch_size)
        sizes = [batch_size] * full + ([rest] if rest else [])
        sample_bytes = sum(a.itemsize * math.prod(a.shape[1:]) for a in samples)
        by_memory = max_bytes // max(spq * sample_bytes, 1)
        count = max(1, min(max_queries, math.ceil(num_samples / spq), by_memory))

        order = np.random.default_rng(seed).permutation(num_samples)
        position = 0
        queries: list[Query] = []
        indices: list[tuple[np.ndarray, ...]] = []
        for _ in range(count):
            batches: list[Batch] = []
            batch_indices: list[np.ndarray] = []
            for size in sizes:
                idx = order[(position + np.arange(size)) % num_samples]
                position += size
                batches.append(
                    tuple(np.ascontiguousarray(np.take(a, idx, axis=0)) for a in samples)
                )
                batch_indices.append(idx)
            queries.append(tuple(batches))
            indices.append(tuple(batch_indices))

        self.queries: tuple[Query, ...] = tuple(queries)
        """The pre-built queries, in issue order."""
        self.sample_indices: tuple[tuple[np.ndarray, ...], ...] = tuple(indices)
        """Dataset indices of every batch of every query (for reports and tests)."""
        self.batch_size = batch_size
        self.samples_per_query = spq
        self.batches_per_query = len(sizes)
        self.num_samples = num_samples

    @classmethod
    def for_scenario(
        cls, scenario: Scenario, samples: Sequence[np.ndarray], batch_size: int, **kwargs: Any
    ) -> BatchRing:
        """The ring ``run_scenario`` expects for ``scenario`` (MultiStream splits queries)."""
        spq = scenario.samples_per_query if scenario.type == ScenarioType.MULTI_STREAM else None
        kwargs.setdefault("seed", scenario.seed)
        return cls(samples, batch_size, samples_per_query=spq, **kwargs)

    def __len__(self) -> int:
        return len(self.queries)


# -------------------------------------------------------------------------- system under test


class SystemUnderTest(Protocol):
    """What the load generator drives. ``issue`` runs one batch synchronously; the SUT records
    how long its parts took for each ``issue`` since ``reset``, in call order."""

    def issue(self, batch: Batch) -> None:
        """Run one batch to completion."""

    def reset(self) -> None:
        """Forget the recorded timings (a new window starts)."""

    def reserve(self, calls: int) -> None:
        """Make room to record ``calls`` issues without allocating during them."""

    def breakdown(self) -> tuple[Int64Array, Int64Array]:
        """(predict_ns, postprocess_ns) of every ``issue`` since ``reset``."""


class BackendSUT:
    """A backend's ``predict`` plus optional postprocessing, timing each part per batch."""

    def __init__(
        self,
        backend: Backend,
        postprocess: Callable[[list[np.ndarray]], Any] | None = None,
        *,
        clock: Clock = time.perf_counter_ns,
        capacity: int = 1024,
    ) -> None:
        self._predict = backend.predict
        self._postprocess = postprocess
        self._clock = clock
        self._predict_ns: Int64Array = np.empty(max(capacity, 1), dtype=np.int64)
        self._postprocess_ns: Int64Array = np.empty(max(capacity, 1), dtype=np.int64)
        self._count = 0

    def issue(self, batch: Batch) -> None:
        clock = self._clock
        t0 = clock()
        outputs = self._predict(batch)
        t1 = clock()
        if self._postprocess is not None:
            self._postprocess(outputs)
        t2 = clock()
        i = self._count
        if i == self._predict_ns.shape[0]:  # only when the harness did not reserve enough
            self.reserve(2 * i)
        self._predict_ns[i] = t1 - t0
        self._postprocess_ns[i] = t2 - t1
        self._count = i + 1

    def reset(self) -> None:
        self._count = 0

    def reserve(self, calls: int) -> None:
        if calls > self._predict_ns.shape[0]:
            self._predict_ns = _grown(self._predict_ns, calls, self._count)
            self._postprocess_ns = _grown(self._postprocess_ns, calls, self._count)

    def breakdown(self) -> tuple[Int64Array, Int64Array]:
        n = self._count
        return self._predict_ns[:n].copy(), self._postprocess_ns[:n].copy()


def _grown(array: Int64Array, capacity: int, keep: int) -> Int64Array:
    bigger = np.empty(capacity, dtype=np.int64)
    bigger[:keep] = array[:keep]
    return bigger


# ----------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class WindowRecord:
    """One measurement window: enough to see how the metric settled."""

    index: int
    queries: int
    duration_s: float
    p50_s: float
    throughput_samples_per_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "queries": self.queries,
            "duration_s": self.duration_s,
            "p50_s": self.p50_s,
            "throughput_samples_per_s": self.throughput_samples_per_s,
        }


@dataclass(frozen=True)
class SearchTrial:
    """One Server trial of the peak-QPS search."""

    qps: float
    queries: int
    scheduled_qps: float
    achieved_qps: float
    percentile_latency_s: float
    met: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "qps": self.qps,
            "queries": self.queries,
            "scheduled_qps": self.scheduled_qps,
            "achieved_qps": self.achieved_qps,
            "percentile_latency_s": self.percentile_latency_s,
            "met": self.met,
        }


@dataclass(frozen=True)
class ServerDetails:
    """What a Server run offered, achieved, and whether it met its latency bound.

    ``target_qps`` is the Poisson rate used (the searched one for 'auto'); ``scheduled_qps`` is
    the rate the drawn schedule actually offers (queries / last arrival), which a finite Poisson
    sample misses by about 1/sqrt(n); the 90 % rule compares ``achieved_qps`` with it, so a
    perfect SUT is never failed for the dice. ``queue`` is the delay from scheduled arrival to
    issue (latency = queue + service).
    """

    requested_qps: float | None
    """The spec's targetQPS; None for 'auto'."""
    target_qps: float
    scheduled_qps: float
    achieved_qps: float
    latency_bound_s: float
    latency_bound_percentile: float
    percentile_latency_s: float
    bound_met: bool
    queue: LatencyStats
    estimated_peak_qps: float | None = None
    """'auto': 1 / mean back-to-back latency, the search's upper end."""
    search: tuple[SearchTrial, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "requested_qps": self.requested_qps,
            "auto": self.requested_qps is None,
            "target_qps": self.target_qps,
            "scheduled_qps": self.scheduled_qps,
            "achieved_qps": self.achieved_qps,
            "latency_bound_s": self.latency_bound_s,
            "latency_bound_percentile": self.latency_bound_percentile,
            "percentile_latency_s": self.percentile_latency_s,
            "bound_met": self.bound_met,
            "queue": self.queue.to_dict(),
            "estimated_peak_qps": self.estimated_peak_qps,
            "search": [t.to_dict() for t in self.search],
        }


@dataclass(frozen=True)
class ProcessInfo:
    """The fresh process one repetition ran in (``repetitionProcess: fresh``): its id, and how
    long importing the framework and loading the model took there. Both came before its
    warm-up, so neither is in a timed window."""

    pid: int
    framework_import_s: float
    model_load_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "framework_import_s": self.framework_import_s,
            "model_load_s": self.model_load_s,
        }


@dataclass(frozen=True, eq=False)
class Measurement:
    """One repetition of one scenario at one batch size: the final window's full data.

    Latencies are per query (MultiStream: until the query's last batch completes; Server: from
    scheduled arrival, so queueing counts). ``predict_ns``/``postprocess_ns`` are per query too
    (summed over a MultiStream query's batches); latency minus both is harness overhead (plus
    queueing for Server). Throughput is samples / (last completion - first issue).
    """

    scenario: str
    batch_size: int
    samples_per_query: int
    batches_per_query: int
    queries: int
    samples: int
    duration_s: float
    latencies_ns: Int64Array
    predict_ns: Int64Array
    postprocess_ns: Int64Array
    latency: LatencyStats
    predict: LatencyStats
    postprocess: LatencyStats
    throughput_samples_per_s: float
    qps: float
    windows: tuple[WindowRecord, ...]
    stable: bool
    warmup_queries: int
    warmup: LatencyStats | None
    verdict: Verdict
    server: ServerDetails | None = None
    queue_ns: Int64Array | None = None
    """Server: per-query delay from scheduled arrival to issue."""
    repetition: int = 0
    repetitions: tuple[Measurement, ...] = field(default=())
    """On the summarized measurement ``run_scenario`` returns: every repetition, itself included."""
    first_window_start_ns: int | None = None
    """``run_scenario``'s result: the clock at the start of the first timed window (the first
    timed query is issued right after; warm-up and the Server search came before)."""
    first_query_latency_ns: int | None = None
    """``run_scenario``'s result: the latency of that first timed query."""
    spread: Spread | None = None
    """``run_scenario``'s result with two repetitions or more: each headline figure's mean over
    them and its bootstrap interval."""
    energy: WindowEnergy | None = None
    """The final window's energy, when ``run_scenario`` was given a meter."""
    process: ProcessInfo | None = None
    """The fresh process this repetition ran in; None when it ran in the caller's."""

    def figures(self) -> RepetitionFigures:
        """This repetition's headline figures; p50 and p99 from the full latency array, so
        they exist whichever percentiles the scenario reports."""
        ordered = np.sort(self.latencies_ns)
        return RepetitionFigures(
            repetition=self.repetition,
            queries=self.queries,
            samples=self.samples,
            p50_s=percentile_of_sorted(ordered, 50.0) / 1e9,
            p99_s=percentile_of_sorted(ordered, 99.0) / 1e9,
            throughput_samples_per_s=self.throughput_samples_per_s,
        )

    def to_dict(self, include_raw: bool = False) -> dict[str, Any]:
        """JSON-ready; raw arrays (int nanoseconds) only with ``include_raw``."""
        doc: dict[str, Any] = {
            "scenario": self.scenario,
            "batch_size": self.batch_size,
            "samples_per_query": self.samples_per_query,
            "batches_per_query": self.batches_per_query,
            "queries": self.queries,
            "samples": self.samples,
            "duration_s": self.duration_s,
            "throughput_samples_per_s": self.throughput_samples_per_s,
            "qps": self.qps,
            "percentile_method": PERCENTILE_METHOD,
            "latency": self.latency.to_dict(),
            "predict": self.predict.to_dict(),
            "postprocess": self.postprocess.to_dict(),
            "windows": [w.to_dict() for w in self.windows],
            "stable": self.stable,
            "warmup": {
                "queries": self.warmup_queries,
                "latency": self.warmup.to_dict() if self.warmup else None,
            },
            "server": self.server.to_dict() if self.server else None,
            "verdict": self.verdict.to_dict(),
            "repetition": self.repetition,
        }
        if self.repetitions:
            doc["repetitions"] = [r.to_dict(include_raw=False) for r in self.repetitions]
        if self.spread is not None:
            doc["spread"] = self.spread.to_dict()
        if self.energy is not None:
            doc["energy"] = self.energy.to_dict()
        if self.process is not None:
            doc["process"] = self.process.to_dict()
        if include_raw:
            doc["raw"] = {
                "latencies_ns": self.latencies_ns.tolist(),
                "predict_ns": self.predict_ns.tolist(),
                "postprocess_ns": self.postprocess_ns.tolist(),
                "queue_ns": None if self.queue_ns is None else self.queue_ns.tolist(),
            }
        return doc


# ------------------------------------------------------------------------------- hot loops


@dataclass
class _Window:
    """What one timed loop produced (internal)."""

    latencies_ns: Int64Array
    start_ns: int
    end_ns: int
    predict_ns: Int64Array
    postprocess_ns: Int64Array
    queue_ns: Int64Array | None = None
    scheduled_s: float = 0.0
    counters: tuple[Counters | None, Counters | None] | None = None
    """The energy meter's reads right before and right after the window."""

    @property
    def queries(self) -> int:
        return int(self.latencies_ns.shape[0])

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def _back_to_back(
    queries: Sequence[Query],
    sut: SystemUnderTest,
    *,
    min_queries: int,
    min_duration_ns: int = 0,
    max_queries: int | None = None,
    deadline_ns: int = _NO_DEADLINE,
    clock: Clock,
    progress: Progress | None = None,
    capacity: int = 0,
) -> _Window:
    """Issue queries one after another until ``min_queries`` and ``min_duration_ns`` are both
    reached (or ``max_queries`` / the deadline). SingleStream, MultiStream and Offline."""
    limit = max_queries if max_queries is not None else 2**62
    capacity = max(capacity, min(min_queries, limit), 1)
    capacity = min(capacity, limit)
    per_query = len(queries[0])
    latencies: Int64Array = np.empty(capacity, dtype=np.int64)
    sut.reset()
    sut.reserve(capacity * per_query)
    issue = sut.issue
    singles = [q[0] for q in queries]
    ring_size = len(queries)
    single = per_query == 1
    k = 0
    i = 0
    start = clock()
    min_end = start + min_duration_ns
    next_report = start + PROGRESS_INTERVAL_NS if progress is not None else _NO_DEADLINE
    t1 = start
    while True:
        if single:
            batch = singles[k]
            t0 = clock()
            issue(batch)
            t1 = clock()
        else:
            query = queries[k]
            t0 = clock()
            for batch in query:
                issue(batch)
            t1 = clock()
        latencies[i] = t1 - t0
        i += 1
        k += 1
        if k == ring_size:
            k = 0
        if (i >= min_queries and t1 >= min_end) or i >= limit or t1 >= deadline_ns:
            break
        if i == capacity:  # between queries, never inside a timed region
            capacity = min(2 * capacity, limit)
            latencies = _grown(latencies, capacity, i)
            sut.reserve(capacity * per_query)
        if t1 >= next_report and progress is not None:
            progress(i, min_queries)
            next_report = t1 + PROGRESS_INTERVAL_NS
    predict, post = sut.breakdown()
    return _Window(latencies[:i].copy(), start, t1, predict, post)


def _server(
    queries: Sequence[Query],
    sut: SystemUnderTest,
    schedule_ns: Int64Array,
    *,
    deadline_ns: int = _NO_DEADLINE,
    clock: Clock,
    progress: Progress | None = None,
    sleep: Callable[[float], None] = time.sleep,
    spin_ns: int = SPIN_NS,
) -> _Window:
    """One worker serving Poisson arrivals FIFO in real time (Server).

    Query i arrives at ``start + schedule_ns[i]``; if the worker is idle it waits for it (sleep,
    then spin for the last ``spin_ns``, since sleep overshoots), otherwise it is already late.
    Latency runs from the *scheduled* arrival to completion, as LoadGen measures, so queueing
    behind slow queries counts.
    """
    n = int(schedule_ns.shape[0])
    offsets: list[int] = schedule_ns.tolist()  # Python ints: no numpy scalars in the loop
    per_query = len(queries[0])
    latencies: Int64Array = np.empty(n, dtype=np.int64)
    queue: Int64Array = np.empty(n, dtype=np.int64)
    sut.reset()
    sut.reserve(n * per_query)
    issue = sut.issue
    ring_size = len(queries)
    k = 0
    done = 0
    start = clock()
    next_report = start + PROGRESS_INTERVAL_NS if progress is not None else _NO_DEADLINE
    t1 = start
    for i in range(n):
        arrival = start + offsets[i]
        query = queries[k]
        k += 1
        if k == ring_size:
            k = 0
        t0 = clock()
        if t0 < arrival:
            remaining = arrival - t0
            if remaining > spin_ns:
                sleep((remaining - spin_ns) * 1e-9)
            while clock() < arrival:
                pass
            t0 = clock()
        for batch in query:
            issue(batch)
        t1 = clock()
        latencies[i] = t1 - arrival
        queue[i] = t0 - arrival
        done = i + 1
        if t1 >= deadline_ns:
            break
        if t1 >= next_report and progress is not None:
            progress(done, n)
            next_report = t1 + PROGRESS_INTERVAL_NS
    predict, post = sut.breakdown()
    last_arrival_s = offsets[done - 1] / 1e9 if done else 0.0
    return _Window(
        latencies[:done].copy(), start, t1, predict, post, queue[:done].copy(), last_arrival_s
    )


def poisson_schedule(
    qps: float, min_queries: int, min_duration_s: float, seed: int | Sequence[int]
) -> Int64Array:
    """Arrival offsets (ns from the start) of a Poisson process at ``qps``: exponential gaps
    from a seeded generator, as many as it takes to have ``min_queries`` arrivals *and* reach
    ``min_duration_s`` (LoadGen sizes its Server schedule the same way). Same seed, same
    schedule."""
    if qps <= 0:
        raise ValueError("qps must be > 0")
    rng = np.random.default_rng(seed)
    min_duration = max(min_duration_s, 0.0)
    expected = max(min_queries, math.ceil(qps * min_duration), 1)
    chunk = expected + 4 * math.isqrt(expected) + 16
    gaps: list[np.ndarray] = []
    total = 0.0
    count = 0
    while count < min_queries or total < min_duration:
        part = rng.exponential(1.0 / qps, size=chunk)
        gaps.append(part)
        total += float(part.sum())
        count += chunk
    arrivals = np.cumsum(np.concatenate(gaps))
    enough = (np.arange(1, arrivals.size + 1) >= min_queries) & (arrivals >= min_duration)
    n = int(np.argmax(enough)) + 1
    return np.rint(arrivals[:n] * 1e9).astype(np.int64)


# ---------------------------------------------------------------------------- orchestration


@contextmanager
def _gc_paused(enabled: bool) -> Iterator[None]:
    was_enabled = gc.isenabled()
    if enabled and was_enabled:
        gc.collect()
        gc.disable()
    try:
        yield
    finally:
        if enabled and was_enabled:
            gc.enable()


gc_paused = _gc_paused
"""The cyclic GC collected, then paused while the block runs (for other drivers)."""


@dataclass(frozen=True)
class _Plan:
    """A scenario's settings resolved into numbers once (internal)."""

    scenario: Scenario
    min_queries: int
    min_duration_ns: int
    percentiles: tuple[float, ...]
    bound_ns: int
    bound_percentile: float

    @classmethod
    def of(cls, scenario: Scenario) -> _Plan:
        percentiles = list(scenario.latency_percentiles)
        for p in (50.0, scenario.latency_bound_percentile):
            if p not in percentiles:
                percentiles.append(p)
        return cls(
            scenario=scenario,
            min_queries=scenario.min_query_count,
            min_duration_ns=round(parse_duration(scenario.min_duration) * 1e9),
            percentiles=tuple(percentiles),
            bound_ns=round(parse_duration(scenario.latency_bound) * 1e9),
            bound_percentile=scenario.latency_bound_percentile,
        )


class _Runner:
    """Runs warm-up, windows, repetitions and (Server) the peak search for one scenario."""

    def __init__(
        self,
        plan: _Plan,
        sut: SystemUnderTest,
        ring: BatchRing,
        *,
        clock: Clock,
        progress: Progress | None,
        deadline_ns: int,
        sleep: Callable[[float], None],
        meter: EnergyMeter | None = None,
    ) -> None:
        self.plan = plan
        self.scenario = plan.scenario
        self.type = plan.scenario.type
        self.sut = sut
        self.ring = ring
        self.queries = ring.queries
        self.clock = clock
        self.progress = progress
        self.deadline_ns = deadline_ns
        self.sleep = sleep
        self.typical_latency_ns = 0.0
        """Median warm-up latency: sizes the first window's arrays so they need not grow."""
        self.first_window: _Window | None = None
        """The first timed window of the run (start-up timeline)."""
        self.meter = meter if meter is not None and meter.method is not None else None
        self.unmetered = meter if meter is not None and meter.method is None else None

    # ---- one window of the scenario's own loop, its energy counters read around it
    def window(self, qps: float | None, seed: Sequence[int], capacity: int) -> _Window:
        meter = self.meter
        if meter is None:
            return self._loop(qps, seed, capacity)
        before = meter.sample()
        win = self._loop(qps, seed, capacity)
        win.counters = (before, meter.sample())
        return win

    def _loop(self, qps: float | None, seed: Sequence[int], capacity: int) -> _Window:
        plan = self.plan
        if self.type == ScenarioType.SERVER:
            assert qps is not None
            schedule = poisson_schedule(
                qps, plan.min_queries, plan.min_duration_ns / 1e9, [self.scenario.seed, *seed]
            )
            return self._serve(schedule)
        return _back_to_back(
            self.queries,
            self.sut,
            min_queries=plan.min_queries,
            min_duration_ns=plan.min_duration_ns,
            deadline_ns=self.deadline_ns,
            clock=self.clock,
            progress=self.progress,
            capacity=capacity,
        )

    def _serve(self, schedule: Int64Array) -> _Window:
        return _server(
            self.queries,
            self.sut,
            schedule,
            deadline_ns=self.deadline_ns,
            clock=self.clock,
            progress=self.progress,
            sleep=self.sleep,
        )

    def fixed(self, count: int) -> _Window:
        """Exactly ``count`` queries back-to-back (warm-up, the search's estimate)."""
        return _back_to_back(
            self.queries, self.sut, min_queries=count, max_queries=count, clock=self.clock
        )

    # ---- warm-up
    def warmup(self, qps: float | None) -> tuple[int, LatencyStats | None]:
        count = self.scenario.warmup
        if count == 0:
            return 0, None
        if self.type == ScenarioType.SERVER and qps is not None:
            schedule = poisson_schedule(qps, count, 0.0, [self.scenario.seed, 0, 0])
            win = self._serve(schedule)
        else:
            win = self.fixed(count)
        self.typical_latency_ns = float(np.median(win.latencies_ns))
        return win.queries, summarize_latencies(win.latencies_ns, self.plan.percentiles)

    # ---- Server: FindPeakPerformance-like search
    def search(self, budget_s: float) -> tuple[float, float, tuple[SearchTrial, ...]]:
        """Highest QPS whose short trial meets the bound, found by halving then bisection.

        The upper end is 1 / mean back-to-back latency: one FIFO worker cannot serve faster.
        A trial fails on the latency bound or on achieved < 90 % of scheduled. When no trial
        passes, the lowest QPS tried is used and the final run reports why it is INVALID.
        """
        plan = self.plan
        trial_queries = max(MIN_TRIAL_QUERIES, math.ceil(plan.min_queries / 4))
        estimate = self.fixed(trial_queries)
        mean_ns = max(float(estimate.latencies_ns.mean()), 1.0)
        upper = 1e9 / mean_ns
        end = self.clock() + round(budget_s * 1e9)
        trials: list[SearchTrial] = []
        passing, failing = 0.0, math.inf
        qps = upper
        for t in range(MAX_SEARCH_TRIALS):
            if self.clock() + trial_queries / qps * 1e9 > end and trials:
                break
            schedule = poisson_schedule(qps, trial_queries, 0.0, [self.scenario.seed, 1, t])
            win = self._serve(schedule)
            latency, scheduled, achieved, bound_met, rate_kept = self._server_check(win)
            met = bound_met and rate_kept
            trials.append(SearchTrial(qps, win.queries, scheduled, achieved, latency, met))
            if met:
                passing = qps
            else:
                failing = qps
            if passing > 0 and failing / passing <= 1 + SEARCH_RESOLUTION:
                break
            qps = (passing + failing) / 2 if passing > 0 else qps / 2
            if math.isinf(failing):  # every trial passed, even at the upper end
                break
            if self.clock() >= self.deadline_ns:
                break
        chosen = passing if passing > 0 else min(t.qps for t in trials)
        return chosen, upper, tuple(trials)

    def _server_check(self, win: _Window) -> tuple[float, float, float, bool, bool]:
        """(percentile latency s, scheduled qps, achieved qps, bound met, rate kept)."""
        lat_ns = percentile_of_sorted(np.sort(win.latencies_ns), self.plan.bound_percentile)
        scheduled = win.queries / win.scheduled_s if win.scheduled_s > 0 else math.inf
        achieved = win.queries / (win.duration_ns / 1e9) if win.duration_ns > 0 else math.inf
        rate_kept = achieved >= MIN_ACHIEVED_FRACTION * scheduled
        return lat_ns / 1e9, scheduled, achieved, lat_ns <= self.plan.bound_ns, rate_kept

    # ---- one repetition: windows until stable
    def repetition(
        self,
        index: int,
        qps: float | None,
        warmup: tuple[int, LatencyStats | None],
        server_extra: tuple[float | None, tuple[SearchTrial, ...]],
    ) -> Measurement:
        plan = self.plan
        stability = self.scenario.stability
        offline = self.type == ScenarioType.OFFLINE
        windows: list[WindowRecord] = []
        metric: list[float] = []
        stable = False
        capacity = plan.min_queries
        if self.typical_latency_ns > 0:
            expected = plan.min_duration_ns / self.typical_latency_ns * 1.25
            capacity = max(capacity, min(int(expected), MAX_INITIAL_CAPACITY))
        last: _Window | None = None
        for w in range(stability.max_windows):
            if w:
                gc.collect(1)  # what the window left (it all sits in the young generations)
            last = self.window(qps, (2, index, w), capacity)
            if self.first_window is None:
                self.first_window = last
            capacity = max(capacity, last.queries + last.queries // 4 + 16)
            record = self._window_record(w, last)
            windows.append(record)
            metric.append(record.throughput_samples_per_s if offline else record.p50_s)
            if is_stable(metric, stability.tolerance_percent):
                stable = True
                break
            if self.clock() >= self.deadline_ns:
                break
        assert last is not None
        return self._measurement(
            index, last, tuple(windows), metric, stable, warmup, qps, server_extra
        )

    def _window_record(self, index: int, win: _Window) -> WindowRecord:
        p50 = percentile_of_sorted(np.sort(win.latencies_ns), 50.0) / 1e9 if win.queries else 0.0
        seconds = win.duration_ns / 1e9
        throughput = win.queries * self.ring.samples_per_query / seconds if seconds > 0 else 0.0
        return WindowRecord(index, win.queries, seconds, p50, throughput)

    def _measurement(
        self,
        index: int,
        win: _Window,
        windows: tuple[WindowRecord, ...],
        metric: list[float],
        stable: bool,
        warmup: tuple[int, LatencyStats | None],
        qps: float | None,
        server_extra: tuple[float | None, tuple[SearchTrial, ...]],
    ) -> Measurement:
        plan = self.plan
        scenario = self.scenario
        ring = self.ring
        percentiles = plan.percentiles
        per_query = ring.batches_per_query
        predict = win.predict_ns.reshape(-1, per_query).sum(axis=1)
        post = win.postprocess_ns.reshape(-1, per_query).sum(axis=1)
        seconds = win.duration_ns / 1e9
        samples = win.queries * ring.samples_per_query
        reasons: list[str] = []
        if win.queries < plan.min_queries:
            reasons.append(f"too few queries: {win.queries} < minQueryCount {plan.min_queries}")
        if win.duration_ns < plan.min_duration_ns:
            reasons.append(f"too short: {seconds:.3f} s < minDuration {scenario.min_duration}")
        if not stable and len(metric) < 2:
            reasons.append("unstable: only one window ran (time limit), stability unknown")
        elif not stable:
            name = "throughput" if self.type == ScenarioType.OFFLINE else "p50"
            moved = abs(relative_change(metric[-2], metric[-1])) * 100
            reasons.append(
                f"unstable: {name} moved {moved:.1f}% between the last windows "
                f"(tolerance {scenario.stability.tolerance_percent:g}%, {len(windows)} windows)"
            )
        server: ServerDetails | None = None
        if self.type == ScenarioType.SERVER:
            assert qps is not None and win.queue_ns is not None
            latency_s, scheduled, achieved, bound_met, rate_kept = self._server_check(win)
            bound_s = plan.bound_ns / 1e9
            if not bound_met:
                reasons.append(
                    f"latency bound missed: {percentile_key(plan.bound_percentile)} = "
                    f"{latency_s * 1e3:.3f} ms > bound {bound_s * 1e3:g} ms"
                )
            if not rate_kept:
                reasons.append(
                    f"achieved QPS below target: {achieved:.2f} < "
                    f"{MIN_ACHIEVED_FRACTION:.0%} of scheduled {scheduled:.2f} "
                    f"(target {qps:.2f})"
                )
            requested = scenario.target_qps
            server = ServerDetails(
                requested_qps=None if requested == "auto" else requested,
                target_qps=qps,
                scheduled_qps=scheduled,
                achieved_qps=achieved,
                latency_bound_s=bound_s,
                latency_bound_percentile=plan.bound_percentile,
                percentile_latency_s=latency_s,
                bound_met=bound_met,
                queue=summarize_latencies(win.queue_ns, percentiles),
                estimated_peak_qps=server_extra[0],
                search=server_extra[1],
            )
        return Measurement(
            scenario=str(self.type.value),
            batch_size=ring.batch_size,
            samples_per_query=ring.samples_per_query,
            batches_per_query=per_query,
            queries=win.queries,
            samples=samples,
            duration_s=seconds,
            latencies_ns=win.latencies_ns,
            predict_ns=predict,
            postprocess_ns=post,
            latency=summarize_latencies(win.latencies_ns, percentiles),
            predict=summarize_latencies(predict, percentiles),
            postprocess=summarize_latencies(post, percentiles),
            throughput_samples_per_s=samples / seconds if seconds > 0 else 0.0,
            qps=win.queries / seconds if seconds > 0 else 0.0,
            windows=windows,
            stable=stable,
            warmup_queries=warmup[0],
            warmup=warmup[1],
            verdict=Verdict.from_reasons(reasons),
            server=server,
            queue_ns=win.queue_ns,
            repetition=index,
            energy=self._energy(win, samples, seconds),
        )

    def _energy(self, win: _Window, samples: int, seconds: float) -> WindowEnergy | None:
        if self.meter is not None and win.counters is not None:
            return self.meter.window(*win.counters, seconds, samples)
        if self.unmetered is not None:
            return self.unmetered.window(None, None, seconds, samples)
        return None


def _check_ring(scenario: Scenario, ring: BatchRing) -> None:
    if scenario.type == ScenarioType.MULTI_STREAM:
        if ring.samples_per_query != scenario.samples_per_query:
            raise ValueError(
                f"MultiStream needs queries of samplesPerQuery={scenario.samples_per_query} "
                f"samples, the ring has {ring.samples_per_query}; build it with "
                "BatchRing.for_scenario"
            )
    elif ring.batches_per_query != 1 or ring.samples_per_query != ring.batch_size:
        raise ValueError(f"{scenario.type.value} issues one batch per query; use BatchRing(...)")


def select_median(measurements: Sequence[Measurement], by_throughput: bool) -> int:
    """Index of the median repetition: by p50, or by throughput (Offline).

    With an even count the more conservative middle one is taken (higher p50, lower
    throughput), so repetitions can never make a result look better.
    """
    if by_throughput:
        order = sorted(
            range(len(measurements)), key=lambda i: measurements[i].throughput_samples_per_s
        )
        return order[(len(order) - 1) // 2]
    order = sorted(range(len(measurements)), key=lambda i: measurements[i].latency.percentile(50))
    return order[len(order) // 2]


def summarize_repetitions(
    scenario: Scenario, reps: Sequence[Measurement], asked: int | None = None
) -> Measurement:
    """The median repetition, with every repetition in ``repetitions`` and, for two or more,
    their ``spread``: one summary whether the repetitions ran in one process or in several.
    Fewer repetitions than ``asked`` (default: the scenario's; the time limit ended them) make
    the summary INVALID, saying how many ran."""
    chosen = select_median(reps, by_throughput=scenario.type == ScenarioType.OFFLINE)
    median = reps[chosen]
    verdict = median.verdict
    wanted = scenario.repetitions if asked is None else asked
    if len(reps) < wanted:
        short = f"time limit: {len(reps)} of {wanted} repetitions ran"
        verdict = Verdict.from_reasons((*verdict.reasons, short))
    return replace(
        median,
        verdict=verdict,
        repetitions=tuple(reps),
        spread=spread_of([r.figures() for r in reps], Bootstrap(seed=scenario.seed)),
    )


def run_scenario(
    scenario: Scenario,
    sut: SystemUnderTest,
    ring: BatchRing,
    *,
    progress: Progress | None = None,
    clock: Clock = time.perf_counter_ns,
    time_limit_s: float | None = None,
    search_budget_s: float | None = None,
    pause_gc: bool = True,
    sleep: Callable[[float], None] = time.sleep,
    meter: EnergyMeter | None = None,
    repetition: int | None = None,
) -> Measurement:
    """Measure ``sut`` under ``scenario`` at the ring's batch size; returns the median repetition
    with every repetition in ``repetitions`` and, for two or more, their ``spread``.

    Order: one warm-up, then (Server 'auto') the peak-QPS search, then ``scenario.repetitions``
    repetitions, each repeating windows until stable; with ``repetition`` only that one (what
    a fresh process runs; its index seeds its Server arrivals as in the full sequence).
    ``time_limit_s`` bounds the measurement (a window stopped by it is reported too few / too
    short, never silently shortened); ``search_budget_s`` bounds the search (default:
    max(10 s, 10 x minDuration)). ``clock`` and ``sleep`` must share one time base (tests pass
    a virtual clock and its sleep to simulate exactly). ``meter``: its counters are read right
    before and right after every timed window, and each measurement carries its final
    window's ``energy``.
    """
    _check_ring(scenario, ring)
    plan = _Plan.of(scenario)
    start = clock()
    deadline = _NO_DEADLINE if time_limit_s is None else start + round(time_limit_s * 1e9)
    runner = _Runner(
        plan,
        sut,
        ring,
        clock=clock,
        progress=progress,
        deadline_ns=deadline,
        sleep=sleep,
        meter=meter,
    )
    is_server = scenario.type == ScenarioType.SERVER
    requested = scenario.target_qps
    qps: float | None = None
    if is_server:
        if requested is None:
            raise ValueError("Server needs targetQPS (a number or 'auto')")
        qps = None if requested == "auto" else float(requested)
    with _gc_paused(pause_gc):
        warmup = runner.warmup(qps)
        extra: tuple[float | None, tuple[SearchTrial, ...]] = (None, ())
        if is_server and qps is None:
            budget = search_budget_s
            if budget is None:
                budget = max(10.0, 10 * plan.min_duration_ns / 1e9)
            qps, upper, trials = runner.search(budget)
            extra = (upper, trials)
        indices = range(scenario.repetitions) if repetition is None else (repetition,)
        reps: list[Measurement] = []
        for r in indices:
            if reps:
                gc.collect(1)
            reps.append(runner.repetition(r, qps, warmup, extra))
            if clock() >= deadline:
                break
    first = runner.first_window
    return replace(
        summarize_repetitions(scenario, reps, asked=len(indices)),
        first_window_start_ns=None if first is None else first.start_ns,
        first_query_latency_ns=None
        if first is None or not first.queries
        else int(first.latencies_ns[0]),
    )


def measure_harness_overhead(
    scenario_type: ScenarioType,
    ring: BatchRing,
    n: int = 2000,
    *,
    clock: Clock = time.perf_counter_ns,
) -> LatencyStats:
    """The harness's own cost per query: the scenario's loop driving ``NullBackend``.

    Each value is what the timed region of one query costs when the model takes no time (the
    clock reads, the SUT wrapper and NullBackend's tiny zeros array), i.e. the floor under
    every measured latency. Server uses its own loop with every arrival already due, counting
    issue-to-completion (no waiting).
    """
    sut = BackendSUT(NullBackend(), clock=clock, capacity=n * ring.batches_per_query)
    percentiles = (50.0, 90.0, 99.0)
    with _gc_paused(True):
        if scenario_type == ScenarioType.SERVER:
            win = _server(ring.queries, sut, np.zeros(n, dtype=np.int64), clock=clock)
            assert win.queue_ns is not None
            return summarize_latencies(win.latencies_ns - win.queue_ns, percentiles)
        win = _back_to_back(ring.queries, sut, min_queries=n, max_queries=n, clock=clock)
    return summarize_latencies(win.latencies_ns, percentiles)
