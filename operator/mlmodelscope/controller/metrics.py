"""The operator's Prometheus metrics, served on ``/metrics`` (prometheus-client).

All names carry the ``mlmodelscope_`` prefix and base units; label sets stay bounded:

* ``mlmodelscope_operator_reconcile_duration_seconds{handler,outcome}`` (histogram): one
  observation per handler invocation; ``handler`` is the Kopf handler id, ``outcome`` one of
  :data:`OUTCOMES`, and the histogram's ``_count`` is the reconcile counter.
* ``mlmodelscope_operator_jobs_created_total{namespace}``: evaluation Jobs created.
* ``mlmodelscope_operator_results_collected_total{namespace}``: finished runs whose results
  the operator read back into ``.status.results``.
* ``mlmodelscope_operator_records_total{outcome}``: finished runs the operator tried to record in
  the results store (``MLMS_OPERATOR_STORE_URL``), by :data:`RECORD_OUTCOMES`: ``recorded``
  (a new row), ``already_recorded`` (the run was there: a retried write), ``store_error`` (kept
  for a retry), ``not_recordable`` (no full result document, or one the store rejects).
* ``mlmodelscope_operator_api_requests_total{verb,resource,code}``: requests of the operator's
  own client by verb (``get``, ``list``, ``create``, ``patch``, ``delete``), resource
  (``modelevaluations/status`` for a subresource) and status class; Kopf's watches are not.
* ``mlmodelscope_operator_records_pending``: results waiting for the store (outbox ConfigMaps
  seen by the last retry pass).
* ``mlmodelscope_evaluations{namespace,phase}``: evaluations in each phase, every phase present
  (0 when empty) for each namespace that has evaluations.
* ``mlmodelscope_operator_queue_depth``: evaluations waiting for a slot (phase Queued).
* the results in each evaluation's ``.status.results``, one series per batch size: latency
  quantiles, mean, throughput, QPS, accuracy, the VALID verdict, and the completion time.

The last three are rendered at scrape time from the evaluations as the operator last saw them
on its watch (:meth:`OperatorMetrics.observe` gets every event, the initial listing included).
So they are level-based like the handlers: they say what the API server holds, a restarted
operator rebuilds them from its first listing, a rerun replaces its series, and a deleted
evaluation's series vanish at the next scrape.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import ValidationError

from mlmodelscope.contract.wire import unix_time
from mlmodelscope.spec.status import BatchResult, Phase

log = logging.getLogger(__name__)

PHASES: Final = tuple(phase.value for phase in Phase)
"""Always exported (0 when empty), so a phase that empties reads 0, not 'no data'."""
OUTCOMES: Final = ("success", "temporary_error", "permanent_error", "error")
RECORD_OUTCOMES: Final = ("recorded", "already_recorded", "store_error", "not_recordable")
RESULT_LABELS: Final = (
    "namespace",
    "evaluation",
    "model",
    "framework",
    "device",
    "gpu_product",
    "scenario",
    "batch_size",
)
RECONCILE_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0
)  # fmt: skip
QUANTILES: Final = {"p50": "0.5", "p90": "0.9", "p99": "0.99"}
"""LatencySummary field -> Prometheus quantile label."""
OPERATOR_HINT: Final = "pip install 'mlmodelscope[operator]'"


@dataclass(frozen=True)
class EvaluationLabels:
    """The identity labels every result series of one evaluation carries."""

    namespace: str
    evaluation: str
    model: str = ""
    framework: str = ""
    device: str = "cpu"
    gpu_product: str = ""

    @classmethod
    def from_resource(cls, body: Mapping[str, Any]) -> EvaluationLabels:
        """From a ModelEvaluation as the operator sees it (camelCase dict, Kopf body)."""
        meta = body.get("metadata") or {}
        spec = body.get("spec") or {}
        hardware = spec.get("hardware") or {}
        return cls(
            namespace=str(meta.get("namespace") or "default"),
            evaluation=str(meta.get("name", "")),
            model=str((spec.get("model") or {}).get("name", "")),
            framework=str((spec.get("framework") or {}).get("name", "")),
            device=str(hardware.get("device") or "cpu"),
            gpu_product=str(hardware.get("gpuProduct") or ""),
        )

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.evaluation)


@dataclass(frozen=True)
class EvaluationState:
    """What the metrics need of one evaluation: its phase and the results in its status."""

    labels: EvaluationLabels
    phase: str
    rows: tuple[BatchResult, ...] = ()
    completion_time: float | None = None
    """Unix time of ``.status.completionTime`` once the run has ended."""

    @classmethod
    def from_resource(cls, body: Mapping[str, Any]) -> EvaluationState:
        """A ModelEvaluation with no status yet counts as Pending (the status' default)."""
        labels = EvaluationLabels.from_resource(body)
        status = body.get("status") or {}
        phase = str(status.get("phase") or Phase.PENDING.value)
        rows = []
        for row in status.get("results") or []:
            try:
                rows.append(BatchResult.model_validate(row))
            except ValidationError as exc:
                log.warning("%s/%s: skipping a result row: %s", *labels.key, exc)
        ended = phase in (Phase.SUCCEEDED.value, Phase.FAILED.value)
        completion = unix_time(status.get("completionTime")) if ended else None
        return cls(labels, phase, tuple(rows), completion)


class _EvaluationCollector:
    """Renders phase counts, queue depth and result gauges from the evaluations at scrape time."""

    def __init__(self, owner: OperatorMetrics) -> None:
        self._owner = owner

    def describe(self) -> Iterable[Any]:
        return []  # rendered on demand; nothing to check for name clashes up front

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        evaluations = self._owner.snapshot()
        phases = GaugeMetricFamily(
            "mlmodelscope_evaluations", "ModelEvaluations by phase.", labels=["namespace", "phase"]
        )
        counts = {(e.labels.namespace, p): 0 for e in evaluations for p in PHASES}
        for e in evaluations:
            key = (e.labels.namespace, e.phase)
            counts[key] = counts.get(key, 0) + 1
        for (namespace, phase), count in sorted(counts.items()):
            phases.add_metric([namespace, phase], count)
        yield phases
        yield GaugeMetricFamily(
            "mlmodelscope_operator_queue_depth",
            "Evaluations waiting for a Job slot (phase Queued).",
            value=sum(1 for e in evaluations if e.phase == Phase.QUEUED.value),
        )
        yield from _result_families(evaluations)


def _result_families(evaluations: list[EvaluationState]) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    names = list(RESULT_LABELS)
    latency = GaugeMetricFamily(
        "mlmodelscope_evaluation_latency_seconds",
        "Query latency quantiles of the run in .status.results (untraced measurement).",
        labels=[*names, "quantile"],
    )
    mean = GaugeMetricFamily(
        "mlmodelscope_evaluation_latency_mean_seconds",
        "Mean query latency of the run in .status.results.",
        labels=names,
    )
    throughput = GaugeMetricFamily(
        "mlmodelscope_evaluation_throughput_samples_per_second",
        "Samples per second of the run in .status.results.",
        labels=names,
    )
    qps = GaugeMetricFamily(
        "mlmodelscope_evaluation_queries_per_second",
        "Queries per second of the run in .status.results (Server: achieved).",
        labels=names,
    )
    accuracy = GaugeMetricFamily(
        "mlmodelscope_evaluation_accuracy_ratio",
        "Accuracy of the run in .status.results, 0..1 (metric: top1 or top5).",
        labels=[*names, "metric"],
    )
    valid = GaugeMetricFamily(
        "mlmodelscope_evaluation_valid",
        "1 when the measurement is VALID, 0 when INVALID.",
        labels=names,
    )
    completion = GaugeMetricFamily(
        "mlmodelscope_evaluation_completion_time_seconds",
        "When the evaluation's run ended (.status.completionTime, Unix time).",
        labels=["namespace", "evaluation"],
    )
    for e in evaluations:
        lab = e.labels
        if e.completion_time is not None:
            completion.add_metric([lab.namespace, lab.evaluation], e.completion_time)
        for row in e.rows:
            values = [lab.namespace, lab.evaluation, lab.model, lab.framework, lab.device,
                      lab.gpu_product, row.scenario, str(row.batch_size)]  # fmt: skip
            for key, quantile in QUANTILES.items():
                ms = getattr(row.latency_ms, key)
                if ms is not None:
                    latency.add_metric([*values, quantile], ms / 1e3)
            if row.latency_ms.mean is not None:
                mean.add_metric(values, row.latency_ms.mean / 1e3)
            if row.throughput is not None:
                throughput.add_metric(values, row.throughput)
            if row.qps is not None:
                qps.add_metric(values, row.qps)
            for metric, ratio in (("top1", row.top1), ("top5", row.top5)):
                if ratio is not None:
                    accuracy.add_metric([*values, metric], ratio)
            if row.valid is not None:
                valid.add_metric(values, 1.0 if row.valid else 0.0)
    yield from (latency, mean, throughput, qps, accuracy, valid, completion)


class OperatorMetrics:
    """Metrics state and its registry (one per operator process; tests make their own)."""

    def __init__(self, registry: Any = None, *, process_metrics: bool = False) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        except ImportError as exc:
            raise RuntimeError(
                f"the operator's metrics need prometheus-client; install it with: "
                f"{OPERATOR_HINT}, or set MLMS_OPERATOR_METRICS_PORT=0 ({exc})"
            ) from exc

        self.registry = registry if registry is not None else CollectorRegistry()
        if process_metrics:
            from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR

            for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
                self.registry.register(collector)
        self._lock = threading.Lock()
        self._evaluations: dict[tuple[str, str], EvaluationState] = {}
        self.reconcile_seconds = Histogram(
            "mlmodelscope_operator_reconcile_duration_seconds",
            "How long one handler invocation took, by Kopf handler id and outcome.",
            ["handler", "outcome"],
            buckets=RECONCILE_BUCKETS,
            registry=self.registry,
        )
        self.jobs_created = Counter(
            "mlmodelscope_operator_jobs_created",
            "Evaluation Jobs the operator created.",
            ["namespace"],
            registry=self.registry,
        )
        self.results_collected = Counter(
            "mlmodelscope_operator_results_collected",
            "Finished runs whose results the operator wrote into .status.results.",
            ["namespace"],
            registry=self.registry,
        )
        self.records = Counter(
            "mlmodelscope_operator_records",
            "Finished runs the operator tried to record in the results store, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in RECORD_OUTCOMES:
            self.records.labels(outcome)
        self.api_requests = Counter(
            "mlmodelscope_operator_api_requests",
            "Requests the operator's own client sent to the API server, by verb, resource and "
            "HTTP status class (2xx, 4xx, 5xx; 0xx: no answer). Kopf's watches and peering "
            "are not counted.",
            ["verb", "resource", "code"],
            registry=self.registry,
        )
        self.records_pending = Gauge(
            "mlmodelscope_operator_records_pending",
            "Results waiting for the results store (outbox ConfigMaps at the last retry pass).",
            registry=self.registry,
        )
        self.registry.register(_EvaluationCollector(self))

    # ------------------------------------------------------------------------- updates

    def observe_reconcile(self, handler: str, seconds: float, outcome: str = "success") -> None:
        """One handler invocation; ``outcome`` is one of :data:`OUTCOMES` (others -> error)."""
        if outcome not in OUTCOMES:
            outcome = "error"
        self.reconcile_seconds.labels(handler, outcome).observe(max(seconds, 0.0))

    def api_request(self, verb: str, resource: str, status: int) -> None:
        """One request of the operator's client (:class:`..contract.kube.Kube` observer)."""
        self.api_requests.labels(verb, resource, f"{status // 100}xx").inc()

    def job_created(self, namespace: str) -> None:
        self.jobs_created.labels(namespace).inc()

    def result_collected(self, namespace: str) -> None:
        self.results_collected.labels(namespace).inc()

    def record_attempted(self, outcome: str) -> None:
        """One write to the results store; ``outcome`` is one of :data:`RECORD_OUTCOMES`."""
        self.records.labels(outcome if outcome in RECORD_OUTCOMES else "store_error").inc()

    def pending_records(self, count: int) -> None:
        self.records_pending.set(count)

    def observe(self, body: Mapping[str, Any]) -> None:
        """An evaluation as the watch delivered it: its phase and results replace the last."""
        state = EvaluationState.from_resource(body)
        with self._lock:
            self._evaluations[state.labels.key] = state

    def forget(self, namespace: str, name: str) -> None:
        """The evaluation was deleted: its series vanish at the next scrape."""
        with self._lock:
            self._evaluations.pop((namespace, name), None)

    def snapshot(self) -> list[EvaluationState]:
        with self._lock:
            return list(self._evaluations.values())

    # ------------------------------------------------------------------------- serving

    def render(self) -> bytes:
        """The exposition text (what /metrics serves)."""
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry))

    def serve(self, port: int, addr: str = "0.0.0.0") -> MetricsServer:
        """Serve /metrics on ``addr:port`` in a daemon thread (port 0: any free port)."""
        from prometheus_client import start_http_server

        server, thread = start_http_server(port, addr=addr, registry=self.registry)
        return MetricsServer(server, thread)


@dataclass
class MetricsServer:
    """prometheus-client's HTTP server and its thread."""

    server: Any
    thread: threading.Thread
    port: int = field(init=False)

    def __post_init__(self) -> None:
        self.port = int(self.server.server_address[1])

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
