"""The agent's system under test driven by MLPerf LoadGen (``spec.scenario.driver: loadgen``).

For users who need MLPerf-style runs and logs: the very SUT, batches and postprocessing of the
built-in driver (:mod:`mlmodelscope.agent.scenarios`), with queries issued, timed and judged by
``mlperf_loadgen`` (PyPI ``mlcommons-loadgen``, imported lazily: the rest of the agent never
needs it). How the agent's notions map onto LoadGen's:

* **A LoadGen sample is one pre-built batch** of the agent's ``BatchRing`` (batch 1: one
  dataset sample, as in MLPerf). The query sample library is the ring's batches, already in
  memory, so loading and unloading do nothing and the SUT never gathers or copies in a query.
  SingleStream and Server queries are one sample; a MultiStream query is
  ``samplesPerQuery / batchSize`` samples (every batch size must divide it); LoadGen's one
  Offline query holds every sample, and the agent reports each of them as a query.
* **Timing is LoadGen's**: a query's latency runs from LoadGen's issue timestamp (Server: the
  scheduled arrival) to the ``QuerySamplesComplete`` call, both taken by LoadGen in its own
  threads with its own clock, so it includes LoadGen's dispatch, the call into Python and the
  response objects. Percentiles, mean, min, max, throughput and validity are read back from
  ``mlperf_log_detail.txt``; LoadGen reports no spread and keeps no per-query latencies, so a
  measurement has no ``stdev_s``, ``trimmed_mean_s`` or raw latencies. ``predict`` and
  ``postprocess`` still come from ``BackendSUT``'s own timings of every batch.
* **Warm-up** runs before the LoadGen test through the same SUT, timed by the agent
  (``warmup.latency``); LoadGen has none. Its latencies also size LoadGen's pre-generated
  schedule (its "expected latency" / "expected QPS"): half the warm-up's fastest query, so a
  SUT that speeds up after the warm-up still gets enough queries.
* The cyclic GC is paused during the warm-up and the test, as the built-in driver pauses it.
* **Energy** is the meter's counters read right before ``StartTestWithLogSettings`` and right
  after it returns, outside LoadGen's timed region, so the metered window is LoadGen's whole
  test: its setup (settings, the query schedule), every query with LoadGen's own issue and
  completion overhead and the SUT's work, the wait for the last completion and its result and
  log writing. The agent's warm-up and the null-backend test are outside it. Joules per
  inference = those joules / the samples LoadGen completed (the measurement's ``samples``).
* ``harness_overhead`` is a LoadGen test of the same scenario (Server and Offline:
  SingleStream) driving a null backend through the same SUT wrapper: LoadGen's own cost per
  query plus the agent's callback, the floor under every latency it reports.

LoadGen writes ``mlperf_log_summary.txt`` and ``mlperf_log_detail.txt`` into the log folder
the caller gives (``mlms run``: ``<name>.loadgen/batch-<b>`` beside the result document).
"""

from __future__ import annotations

import contextlib
import json
import math
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from mlmodelscope.agent.backends.base import NullBackend
from mlmodelscope.agent.energy import EnergyMeter, MeterReads, metered
from mlmodelscope.agent.scenarios import (
    BackendSUT,
    Batch,
    BatchRing,
    Int64Array,
    SystemUnderTest,
    gc_paused,
)
from mlmodelscope.agent.stats import (
    PERCENTILE_METHOD,
    percentile_key,
    summarize_latencies,
)
from mlmodelscope.spec.base import SpecError, parse_duration
from mlmodelscope.spec.evaluation import Scenario, ScenarioType

INSTALL_HINT = "pip install 'mlmodelscope[loadgen]'"
DRIVER_FIELD = "spec.scenario.driver"
SUMMARY_FILE = "mlperf_log_summary.txt"
DETAIL_FILE = "mlperf_log_detail.txt"
OVERHEAD_QUERIES = 2000
"""Queries of the null-backend LoadGen test that measures LoadGen's own per-query cost."""
MIN_EXPECTED_NS = 1_000
"""The lowest expected latency given to LoadGen (its own per-query cost is about 1 µs)."""
WARMUP_MARGIN = 0.5
"""LoadGen's expected latency as a fraction of the fastest warm-up query."""
MAX_RESERVED_CALLS = 1 << 22
"""Most SUT calls whose timings are preallocated up front (beyond, BackendSUT doubles)."""
_MLLOG = ":::MLLOG "


def import_loadgen() -> ModuleType:
    """``mlperf_loadgen``, or a SpecError naming the field and the fix when it is missing."""
    try:
        import mlperf_loadgen
    except ImportError as exc:
        raise SpecError(
            DRIVER_FIELD,
            "driver loadgen needs MLPerf LoadGen (the mlperf_loadgen module), which is not "
            f"installed here: {INSTALL_HINT}, or set driver: builtin",
        ) from exc
    module: ModuleType = mlperf_loadgen
    return module


# ------------------------------------------------------------------------------ the detail log


@dataclass
class DetailLog:
    """What LoadGen's ``mlperf_log_detail.txt`` says: the last value of every key, and every
    error and warning message in order."""

    values: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path) -> DetailLog:
        log = cls()
        for line in path.read_text(errors="replace").splitlines():
            if not line.startswith(_MLLOG):
                continue
            try:
                record = json.loads(line[len(_MLLOG) :])
            except ValueError:
                continue
            key, value = record.get("key"), record.get("value")
            meta = record.get("metadata") or {}
            if meta.get("is_error"):
                log.errors.append(f"{key}: {value}")
            elif meta.get("is_warning"):
                log.warnings.append(f"{key}: {value}")
            if isinstance(key, str):
                log.values[key] = value
        return log

    def prefixed(self, prefix: str) -> dict[str, Any]:
        """The keys starting with ``prefix``, prefix dropped."""
        n = len(prefix)
        return {k[n:]: v for k, v in self.values.items() if k.startswith(prefix)}

    def number(self, key: str, default: float = 0.0) -> float:
        value = self.values.get(key, default)
        return float(value) if isinstance(value, int | float) else default


def latency_key(p: float) -> str:
    """The detail-log key of LoadGen's percentile ``p``: 99.9 -> result_99.90_percentile_..."""
    return f"result_{p:.2f}_percentile_latency_ns"


# ------------------------------------------------------------------------------------ the test


@dataclass
class _Span:
    """First issue and last completion on the agent's clock (perf_counter_ns)."""

    first_ns: int = 0
    last_ns: int = 0

    @property
    def seconds(self) -> float:
        return max(self.last_ns - self.first_ns, 0) / 1e9


@dataclass(frozen=True)
class LoadGenRun:
    """One LoadGen test: its parsed detail log and the SUT-side facts the agent adds."""

    detail: DetailLog
    log_dir: Path
    sut_calls: int
    span: _Span
    settings: Any
    reads: MeterReads
    """The energy meter around the whole test (``StartTestWithLogSettings``)."""


def _target_qps(scenario: Scenario) -> float:
    qps = scenario.target_qps
    if isinstance(qps, str) or qps is None:
        raise SpecError(
            "spec.scenario.targetQPS", "driver loadgen needs a number of queries per second"
        )
    return float(qps)


def _settings(
    lg: ModuleType,
    scenario: Scenario,
    samples_per_query: int,
    expected_ns: int,
    time_limit_s: float | None,
) -> Any:
    """LoadGen's TestSettings for ``scenario``: PerformanceOnly, the spec's counts and seeds."""
    settings = lg.TestSettings()
    kind = scenario.type
    settings.scenario = getattr(lg.TestScenario, kind.value)
    settings.mode = lg.TestMode.PerformanceOnly
    min_duration_s = parse_duration(scenario.min_duration)
    settings.min_query_count = scenario.min_query_count
    settings.min_duration_ms = math.ceil(min_duration_s * 1000)
    if time_limit_s is not None:
        settings.max_duration_ms = max(1, math.floor(time_limit_s * 1000))
    for seed in ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed"):
        setattr(settings, seed, scenario.seed)
    if kind == ScenarioType.SINGLE_STREAM:
        settings.single_stream_expected_latency_ns = expected_ns
    elif kind == ScenarioType.MULTI_STREAM:
        settings.multi_stream_samples_per_query = samples_per_query
        settings.multi_stream_expected_latency_ns = expected_ns
    elif kind == ScenarioType.SERVER:
        settings.server_target_qps = _target_qps(scenario)
        settings.server_target_latency_ns = round(parse_duration(scenario.latency_bound) * 1e9)
        settings.server_target_latency_percentile = scenario.latency_bound_percentile / 100
    else:
        # LoadGen's Offline query holds expected_qps * minDuration * 1.1 samples; enough for
        # minQueryCount samples (each one of the agent's queries) too.
        by_speed = 1e9 / expected_ns
        by_count = scenario.min_query_count / (1.1 * min_duration_s) if min_duration_s else 0.0
        settings.offline_expected_qps = max(by_speed, by_count, 1.0)
    return settings


def run_test(
    lg: ModuleType,
    scenario: Scenario,
    sut: SystemUnderTest,
    batches: Sequence[Batch],
    samples_per_query: int,
    log_dir: Path,
    *,
    expected_ns: int,
    time_limit_s: float | None = None,
    thread_context: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
    clock: Callable[[], int] = time.perf_counter_ns,
    meter: EnergyMeter | None = None,
) -> LoadGenRun:
    """One LoadGen PerformanceOnly test of ``sut`` over ``batches`` (one LoadGen sample each).

    SingleStream, MultiStream and Offline run the SUT inside LoadGen's IssueQuery callback, on
    LoadGen's issuing thread (the caller's), and complete a query when its last batch is done
    (Offline: each sample as its batch is done). Server hands queries to one worker thread,
    FIFO, as the built-in driver's single worker serves them; LoadGen's latency then counts
    from the scheduled arrival, queueing included. ``thread_context`` is entered on that worker
    (a backend's per-thread ``measuring`` state). ``meter`` is read right before LoadGen
    starts the test and right after it returns (see the module's docstring).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    kind = scenario.type
    settings = _settings(lg, scenario, samples_per_query, expected_ns, time_limit_s)
    response = lg.QuerySampleResponse
    complete = lg.QuerySamplesComplete
    issue = sut.issue
    span = _Span()
    calls = [0]

    def run_samples(samples: Sequence[Any], each: bool) -> None:
        if not span.first_ns:
            span.first_ns = clock()
        if each:
            for s in samples:
                issue(batches[s.index])
                complete([response(s.id, 0, 0)])
        else:
            for s in samples:
                issue(batches[s.index])
            complete([response(s.id, 0, 0) for s in samples])
        calls[0] += len(samples)
        span.last_ns = clock()

    work: queue.SimpleQueue[Sequence[Any] | None] = queue.SimpleQueue()

    def worker() -> None:
        with thread_context():
            while (samples := work.get()) is not None:
                run_samples(samples, False)

    offline = kind == ScenarioType.OFFLINE
    if kind == ScenarioType.SERVER:
        issue_query: Callable[[Sequence[Any]], None] = work.put
    else:

        def issue_query(samples: Sequence[Any]) -> None:
            run_samples(samples, offline)

    expected_calls = scenario.min_query_count * samples_per_query
    duration_calls = parse_duration(scenario.min_duration) * 1e9 / max(expected_ns, 1)
    sut.reset()
    sut.reserve(min(max(expected_calls, math.ceil(2 * duration_calls)), MAX_RESERVED_CALLS))
    thread = threading.Thread(target=worker, name="loadgen-server-sut", daemon=True)
    if kind == ScenarioType.SERVER:
        thread.start()
    log = lg.LogSettings()
    log.enable_trace = False  # per-sample trace events: MLPerf's debug option, ~640 B a query
    log.log_output.outdir = str(log_dir)
    log.log_output.copy_summary_to_stdout = False
    count = len(batches)
    sut_handle = lg.ConstructSUT(issue_query, lambda: None)
    qsl_handle = lg.ConstructQSL(count, count, lambda _: None, lambda _: None)
    try:
        # A named, absent audit file: an audit.config left in the working directory (MLPerf's
        # compliance tests) must not change the test silently.
        reads = metered(
            meter or EnergyMeter(None),
            lambda: lg.StartTestWithLogSettings(
                sut_handle, qsl_handle, settings, log, str(log_dir / "audit.config")
            ),
            clock,
        )
    finally:
        if kind == ScenarioType.SERVER:
            work.put(None)
            thread.join()
        lg.DestroyQSL(qsl_handle)
        lg.DestroySUT(sut_handle)
    trace = log_dir / "mlperf_log_trace.json"
    if trace.exists() and trace.stat().st_size == 0:
        trace.unlink()
    detail = DetailLog.read(log_dir / DETAIL_FILE)
    return LoadGenRun(detail, log_dir, calls[0], span, settings, reads)


# ------------------------------------------------------------------------------- measurements


def _latency_stats(detail: DetailLog, percentiles: Sequence[float]) -> dict[str, Any]:
    """LatencyStats' JSON shape from LoadGen's own figures (no stdev or trimmed mean)."""
    return {
        "count": int(detail.number("result_query_count")),
        "mean_s": detail.number("result_mean_latency_ns") / 1e9,
        "min_s": detail.number("result_min_latency_ns") / 1e9,
        "max_s": detail.number("result_max_latency_ns") / 1e9,
        "percentiles_s": {
            percentile_key(p): detail.number(latency_key(p)) / 1e9 for p in percentiles
        },
    }


def _reasons(detail: DetailLog, summary: str) -> list[str]:
    """Why LoadGen said INVALID, in its words: the summary's unmet checks ("Early stopping
    satisfied: NO", which the detail log has no key for, with LoadGen's explanation), its
    recommendations, its invalid reason and its errors."""
    unmet: list[str] = []
    early: list[str] = []
    advice: list[str] = []
    section = ""
    for line in summary.split("Additional Stats")[0].splitlines():
        text = " ".join(line.split())
        if text.endswith(":") and not text.startswith("*"):
            section = text
        elif text.lower().endswith(": no"):
            unmet.append(text)
        elif text.startswith("* "):
            (early if section.startswith("Early Stopping") else advice).append(text[2:])
    reasons = []
    for text in unmet:
        if text.lower().startswith("early stopping") and early:
            text += " (" + " ".join(early) + ")"
        reasons.append(f"LoadGen: {text}")
    invalid = str(detail.values.get("result_invalid_reason") or "").strip()
    for text in [*advice, *([invalid] if invalid else [])]:
        if f"LoadGen: {text}" not in reasons:
            reasons.append(f"LoadGen: {text}")
    reasons.extend(f"LoadGen error: {e}" for e in detail.errors)
    return reasons or ["LoadGen: INVALID (see mlperf_log_summary.txt)"]


def _per_query(values: Int64Array, per_query: int) -> Int64Array:
    whole = values.shape[0] - values.shape[0] % per_query
    summed: Int64Array = values[:whole].reshape(-1, per_query).sum(axis=1)
    return summed


def _stats(values: Int64Array, percentiles: Sequence[float]) -> dict[str, Any]:
    if values.shape[0] == 0:
        values = np.zeros(1, dtype=np.int64)
    return summarize_latencies(values, percentiles).to_dict()


def _expected_ns(warmup_ns: Int64Array | None, scenario: Scenario) -> int:
    """What LoadGen is told to expect per query: :data:`WARMUP_MARGIN` of the warm-up's fastest
    query, else (no warm-up) minDuration / minQueryCount. LoadGen sizes its query schedule from
    it and ends with an error when the measured queries outrun the schedule before
    minDuration; a few warm-up queries slowed by a busy machine can all be slower than the
    measured ones, so the schedule is sized for queries twice as fast as the fastest seen."""
    if warmup_ns is not None and warmup_ns.shape[0]:
        value = float(np.min(warmup_ns)) * WARMUP_MARGIN
    else:
        value = parse_duration(scenario.min_duration) * 1e9 / scenario.min_query_count
    return max(int(value), MIN_EXPECTED_NS)


def _warmup(
    sut: SystemUnderTest, queries: Sequence[Sequence[Batch]], count: int
) -> Int64Array | None:
    """``count`` queries back to back through the same SUT, timed as the built-in driver
    times them (a clock read right before and right after)."""
    if count == 0:
        return None
    clock = time.perf_counter_ns
    latencies: Int64Array = np.empty(count, dtype=np.int64)
    sut.reset()
    sut.reserve(count * len(queries[0]))
    for i in range(count):
        query = queries[i % len(queries)]
        t0 = clock()
        for batch in query:
            sut.issue(batch)
        latencies[i] = clock() - t0
    return latencies


def _percentiles(scenario: Scenario) -> tuple[float, ...]:
    wanted = list(scenario.latency_percentiles)
    extra = [50.0]
    if scenario.type == ScenarioType.SERVER:
        extra.append(scenario.latency_bound_percentile)
    for p in extra:
        if p not in wanted:
            wanted.append(p)
    return tuple(wanted)


def _relative(path: Path, base: Path | None) -> str:
    if base is not None:
        with contextlib.suppress(ValueError):
            return str(path.resolve().relative_to(base.resolve()))
    return str(path.resolve())


def null_overhead(
    lg: ModuleType,
    scenario: Scenario,
    ring: BatchRing,
    *,
    sut: SystemUnderTest | None = None,
    queries: int = OVERHEAD_QUERIES,
) -> dict[str, Any]:
    """LoadGen's own per-query cost: ``queries`` queries of the scenario (Server and Offline:
    SingleStream) driving ``sut`` (default: a null backend in the agent's SUT wrapper), in a
    throwaway log folder. LatencyStats' JSON shape, LoadGen's figures."""
    kind = scenario.type
    if kind not in (ScenarioType.SINGLE_STREAM, ScenarioType.MULTI_STREAM):
        kind = ScenarioType.SINGLE_STREAM
    null_scenario = scenario.model_copy(
        update={"type": kind, "min_query_count": queries, "min_duration": "0s", "warmup": 0}
    )
    target = sut or BackendSUT(NullBackend(), capacity=queries * ring.batches_per_query)
    batches = [batch for query in ring.queries for batch in query]
    with tempfile.TemporaryDirectory(prefix="mlms-loadgen-null-") as tmp, gc_paused(True):
        run = run_test(
            lg,
            null_scenario,
            target,
            batches,
            ring.batches_per_query if kind == ScenarioType.MULTI_STREAM else 1,
            Path(tmp),
            expected_ns=MIN_EXPECTED_NS,
        )
    return _latency_stats(run.detail, (50.0, 90.0, 99.0))


def run_loadgen(
    scenario: Scenario,
    sut: SystemUnderTest,
    ring: BatchRing,
    log_dir: Path,
    *,
    relative_to: Path | None = None,
    time_limit_s: float | None = None,
    include_raw: bool = False,
    thread_context: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
    meter: EnergyMeter | None = None,
) -> dict[str, Any]:
    """Measure ``sut`` under ``scenario`` with MLPerf LoadGen; the measurement in the result
    document's shape (``driver: loadgen``, a ``loadgen`` block, LoadGen's log folder given
    relative to ``relative_to`` when that is an ancestor of it, and with a ``meter`` the
    test's ``energy``)."""
    lg = import_loadgen()
    kind = scenario.type
    if (
        kind == ScenarioType.MULTI_STREAM
        and len({b[0].shape[0] for q in ring.queries for b in q}) != 1
    ):
        raise SpecError(
            "spec.scenario.batchSizes",
            "driver loadgen issues a MultiStream query as whole batches: every batch size "
            "must divide samplesPerQuery",
        )
    if kind == ScenarioType.SERVER:
        _target_qps(scenario)
    per_query = ring.batches_per_query if kind == ScenarioType.MULTI_STREAM else 1
    batches = [batch for query in ring.queries for batch in query]
    percentiles = _percentiles(scenario)
    overhead = null_overhead(lg, scenario, ring)
    with gc_paused(True):
        warm = _warmup(sut, ring.queries, scenario.warmup)
        expected = _expected_ns(warm, scenario)
        run = run_test(
            lg,
            scenario,
            sut,
            batches,
            per_query,
            log_dir,
            expected_ns=expected,
            time_limit_s=time_limit_s,
            thread_context=thread_context,
            meter=meter,
        )
    detail = run.detail
    results = detail.prefixed("result_")
    predict_ns, post_ns = sut.breakdown()
    predict = _per_query(predict_ns, per_query)
    post = _per_query(post_ns, per_query)

    batch_size = ring.batch_size
    if kind == ScenarioType.OFFLINE:
        queries = run.sut_calls
    else:
        queries = int(detail.number("result_query_count"))
    samples = queries * ring.samples_per_query
    if kind == ScenarioType.SINGLE_STREAM:
        throughput = detail.number("result_qps_with_loadgen_overhead") * ring.samples_per_query
        source = "LoadGen: result_qps_with_loadgen_overhead x samples per query"
    elif kind == ScenarioType.SERVER:
        throughput = detail.number("result_completed_samples_per_sec") * batch_size
        source = "LoadGen: result_completed_samples_per_sec x batch size"
    elif kind == ScenarioType.OFFLINE:
        throughput = detail.number("result_samples_per_second") * batch_size
        source = "LoadGen: result_samples_per_second x batch size"
    else:  # LoadGen reports no MultiStream throughput
        throughput = samples / run.span.seconds if run.span.seconds > 0 else 0.0
        source = "agent: samples / (last completion - first issue), LoadGen reports none"
    duration = samples / throughput if throughput > 0 else run.span.seconds
    latency = _latency_stats(detail, percentiles)
    p50 = latency["percentiles_s"][percentile_key(50.0)]
    summary_path = run.log_dir / SUMMARY_FILE
    summary = summary_path.read_text(errors="replace") if summary_path.exists() else ""
    validity = "VALID" if results.get("validity") == "VALID" else "INVALID"
    verdict = {
        "valid": validity == "VALID",
        "result": validity,
        "reasons": [] if validity == "VALID" else _reasons(detail, summary),
    }
    server: dict[str, Any] | None = None
    if kind == ScenarioType.SERVER:
        qps = _target_qps(scenario)
        bound_p = scenario.latency_bound_percentile
        server = {
            "requested_qps": qps,
            "auto": False,
            "target_qps": qps,
            "scheduled_qps": detail.number("result_scheduled_samples_per_sec"),
            "achieved_qps": detail.number("result_completed_samples_per_sec"),
            "latency_bound_s": parse_duration(scenario.latency_bound),
            "latency_bound_percentile": bound_p,
            "percentile_latency_s": detail.number(latency_key(bound_p)) / 1e9,
            "bound_met": results.get("perf_constraints_met") is True,
            "overlatency_queries": int(detail.number("result_overlatency_query_count")),
        }
    entry: dict[str, Any] = {
        "driver": "loadgen",
        "scenario": kind.value,
        "batch_size": batch_size,
        "samples_per_query": ring.samples_per_query,
        "batches_per_query": ring.batches_per_query,
        "queries": queries,
        "samples": samples,
        "duration_s": duration,
        "throughput_samples_per_s": throughput,
        "qps": queries / duration if duration > 0 else 0.0,
        "percentile_method": f"{PERCENTILE_METHOD}, computed by MLPerf LoadGen",
        "latency": latency,
        "predict": _stats(predict, percentiles),
        "postprocess": _stats(post, percentiles),
        "windows": [
            {
                "index": 0,
                "queries": queries,
                "duration_s": duration,
                "p50_s": p50,
                "throughput_samples_per_s": throughput,
            }
        ],
        "stable": False,  # one LoadGen test: stability across windows is not checked
        "warmup": {
            "queries": 0 if warm is None else int(warm.shape[0]),
            "latency": None if warm is None else _stats(warm, percentiles),
        },
        "server": server,
        "verdict": verdict,
        "repetition": 0,
        "harness_overhead": overhead,
        "loadgen": {
            "version": str(detail.values.get("loadgen_version", "")),
            "scenario": kind.value,
            "mode": "PerformanceOnly",
            "validity": validity,
            "sample_batch_size": batch_size,
            "performance_sample_count": len(batches),
            "throughput_source": source,
            "settings": detail.prefixed("effective_"),
            "results": results,
            "errors": detail.errors,
            "warnings": detail.warnings,
            "sut_span_s": run.span.seconds,
            "logs": {
                "dir": _relative(run.log_dir, relative_to),
                "summary": SUMMARY_FILE,
                "detail": DETAIL_FILE,
            },
            "summary_text": summary,
        },
    }
    if meter is not None:
        reads = run.reads
        energy = meter.window(reads.before, reads.after, reads.seconds, samples)
        entry["energy"] = energy.to_dict()
    if include_raw:
        entry["raw"] = {
            "latencies_ns": [],
            "predict_ns": predict.tolist(),
            "postprocess_ns": post.tolist(),
            "queue_ns": None,
        }
    return entry
