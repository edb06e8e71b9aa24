"""The operator's Prometheus metrics, served on ``/metrics`` (prometheus-client).

Three kinds, all prefixed ``mlmodelscope_``, in base units:

* reconcile activity: ``mlmodelscope_operator_reconcile_total{handler,outcome}`` and
  ``mlmodelscope_operator_reconcile_duration_seconds{handler}`` (histogram);
* ``mlmodelscope_evaluations{namespace,phase}``: how many evaluations are in each phase;
* results of every finished evaluation, one series per batch size: latency quantiles,
  throughput, QPS, accuracy and the VALID verdict, labelled by namespace, evaluation, model,
  framework, device, gpu_product, scenario and batch_size.

Evaluation series are rendered by a custom collector from a dict of current evaluations, so
:func:`forget` (called when an evaluation is deleted) makes its series disappear at the next
scrape instead of lingering with stale values, and a rerun simply overwrites. Label sets stay
bounded: one entry per existing evaluation, a handful of batch sizes each.

The operator calls the module-level functions (``observe_reconcile``, ``set_phase``,
``record_results``, ``forget``, ``start_metrics_server``); tests create their own
:class:`OperatorMetrics` with a private registry.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PHASES = ("Pending", "Queued", "Running", "Succeeded", "Failed")
"""Always exported (0 when empty) so a phase that empties reads 0, not 'no data'."""
OUTCOMES = ("success", "temporary_error", "permanent_error", "error")
RESULT_LABELS = (
    "namespace",
    "evaluation",
    "model",
    "framework",
    "device",
    "gpu_product",
    "scenario",
    "batch_size",
)
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
QUANTILES = {"p50": "0.5", "p90": "0.9", "p99": "0.99"}
"""status.results latencyMs keys -> Prometheus quantile label."""


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
class ResultRow:
    """One batch size of ``status.results`` (or the result document's ``results``), in base
    units: seconds, samples per second, ratios."""

    scenario: str
    batch_size: int
    latency_s: dict[str, float] = field(default_factory=dict)
    """quantile label ('0.5', '0.9', '0.99') -> seconds."""
    latency_mean_s: float | None = None
    throughput: float | None = None
    qps: float | None = None
    top1: float | None = None
    top5: float | None = None
    valid: bool | None = None

    @classmethod
    def parse(cls, row: Mapping[str, Any] | Any) -> ResultRow:
        """Accept status.results entries (camelCase, ``accuracy.top1``), result-document rows
        (snake_case, ``top1``) or the pydantic BatchResult model."""
        if hasattr(row, "model_dump"):
            row = row.model_dump(by_alias=True)
        latency = row.get("latencyMs") or row.get("latency_ms") or {}
        accuracy = row.get("accuracy") or {}
        quantiles = {
            q: float(latency[k]) / 1e3 for k, q in QUANTILES.items() if latency.get(k) is not None
        }
        mean = latency.get("mean")
        return cls(
            scenario=str(row.get("scenario", "")),
            batch_size=int(row.get("batchSize", row.get("batch_size", 0))),
            latency_s=quantiles,
            latency_mean_s=None if mean is None else float(mean) / 1e3,
            throughput=_float(row.get("throughput")),
            qps=_float(row.get("qps")),
            top1=_float(accuracy.get("top1", row.get("top1"))),
            top5=_float(accuracy.get("top5", row.get("top5"))),
            valid=row.get("valid"),
        )


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass
class _Evaluation:
    labels: EvaluationLabels
    phase: str | None = None
    rows: list[ResultRow] = field(default_factory=list)
    completion_time: float | None = None


class _EvaluationCollector:
    """Renders phase counts and result gauges from the current evaluations at scrape time."""

    def __init__(self, owner: OperatorMetrics) -> None:
        self._owner = owner

    def describe(self) -> Iterable[Any]:
        return []  # rendered on demand; nothing to check for name clashes up front

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        evaluations, explicit = self._owner.snapshot()
        phases = GaugeMetricFamily(
            "mlmodelscope_evaluations",
            "ModelEvaluations by phase.",
            labels=["namespace", "phase"],
        )
        counts: dict[tuple[str, str], float] = {}
        if explicit is not None:
            counts = {k: float(v) for k, v in explicit.items()}
        else:
            namespaces = {e.labels.namespace for e in evaluations}
            for ns in namespaces:
                for phase in PHASES:
                    counts[(ns, phase)] = 0.0
            for e in evaluations:
                if e.phase is not None:
                    key = (e.labels.namespace, e.phase)
                    counts[key] = counts.get(key, 0.0) + 1.0
        for (ns, phase), value in sorted(counts.items()):
            phases.add_metric([ns, phase], value)
        yield phases

        names = list(RESULT_LABELS)
        latency = GaugeMetricFamily(
            "mlmodelscope_evaluation_latency_seconds",
            "Query latency quantiles of the latest finished run (untraced measurement).",
            labels=[*names, "quantile"],
        )
        mean = GaugeMetricFamily(
            "mlmodelscope_evaluation_latency_mean_seconds",
            "Mean query latency of the latest finished run.",
            labels=names,
        )
        throughput = GaugeMetricFamily(
            "mlmodelscope_evaluation_throughput_samples_per_second",
            "Samples per second of the latest finished run.",
            labels=names,
        )
        qps = GaugeMetricFamily(
            "mlmodelscope_evaluation_queries_per_second",
            "Queries per second of the latest finished run (Server: achieved).",
            labels=names,
        )
        accuracy = GaugeMetricFamily(
            "mlmodelscope_evaluation_accuracy_ratio",
            "Accuracy of the latest finished run, 0..1 (metric: top1 or top5).",
            labels=[*names, "metric"],
        )
        valid = GaugeMetricFamily(
            "mlmodelscope_evaluation_valid",
            "1 when the measurement is VALID, 0 when INVALID.",
            labels=names,
        )
        completion = GaugeMetricFamily(
            "mlmodelscope_evaluation_completion_time_seconds",
            "When the latest run of the evaluation finished (Unix time).",
            labels=["namespace", "evaluation"],
        )
        for e in evaluations:
            lab = e.labels
            if e.completion_time is not None:
                completion.add_metric([lab.namespace, lab.evaluation], e.completion_time)
            for row in e.rows:
                values = [
                    lab.namespace,
                    lab.evaluation,
                    lab.model,
                    lab.framework,
                    lab.device,
                    lab.gpu_product,
                    row.scenario,
                    str(row.batch_size),
                ]
                for q, seconds in row.latency_s.items():
                    latency.add_metric([*values, q], seconds)
                if row.latency_mean_s is not None:
                    mean.add_metric(values, row.latency_mean_s)
                if row.throughput is not None:
                    throughput.add_metric(values, row.throughput)
                if row.qps is not None:
                    qps.add_metric(values, row.qps)
                for metric in ("top1", "top5"):
                    value = getattr(row, metric)
                    if value is not None:
                        accuracy.add_metric([*values, metric], value)
                if row.valid is not None:
                    valid.add_metric(values, 1.0 if row.valid else 0.0)
        yield from (latency, mean, throughput, qps, accuracy, valid, completion)


class OperatorMetrics:
    """Metrics state and its registry (one per operator process; tests make their own)."""

    def __init__(self, registry: Any = None, *, process_metrics: bool = False) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = registry if registry is not None else CollectorRegistry()
        if process_metrics:
            from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR

            for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
                self.registry.register(collector)
        self._lock = threading.Lock()
        self._evaluations: dict[tuple[str, str], _Evaluation] = {}
        self._phase_counts: dict[tuple[str, str], int] | None = None
        self.reconciles = Counter(
            "mlmodelscope_operator_reconcile",
            "Handler invocations by outcome (success, temporary_error, permanent_error, error).",
            ["handler", "outcome"],
            registry=self.registry,
        )
        self.reconcile_seconds = Histogram(
            "mlmodelscope_operator_reconcile_duration_seconds",
            "How long one handler invocation took.",
            ["handler"],
            buckets=RECONCILE_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_EvaluationCollector(self))

    # ------------------------------------------------------------------------- updates

    def observe_reconcile(self, handler: str, seconds: float, outcome: str = "success") -> None:
        """One handler invocation; ``outcome`` is one of :data:`OUTCOMES` (others -> error)."""
        if outcome not in OUTCOMES:
            outcome = "error"
        self.reconciles.labels(handler, outcome).inc()
        self.reconcile_seconds.labels(handler).observe(max(seconds, 0.0))

    def set_phase(self, labels: EvaluationLabels | Mapping[str, Any], phase: str | None) -> None:
        """Record one evaluation's current phase (counted into ``mlmodelscope_evaluations``)."""
        lab = _labels(labels)
        with self._lock:
            entry = self._evaluations.setdefault(lab.key, _Evaluation(lab))
            entry.labels, entry.phase = lab, phase

    def set_phase_counts(self, counts: Mapping[tuple[str, str], int] | Mapping[str, int]) -> None:
        """Replace the per-evaluation phase tracking with explicit counts, keyed by
        (namespace, phase) or by phase alone (namespace ''); for an operator that counts
        from its own index. Missing known phases read 0."""
        explicit: dict[tuple[str, str], int] = {}
        namespaces: set[str] = set()
        for key, value in counts.items():
            ns, phase = key if isinstance(key, tuple) else ("", key)
            explicit[(ns, phase)] = int(value)
            namespaces.add(ns)
        for ns in namespaces:
            for phase in PHASES:
                explicit.setdefault((ns, phase), 0)
        with self._lock:
            self._phase_counts = explicit

    def record_results(
        self,
        labels: EvaluationLabels | Mapping[str, Any],
        results: Sequence[Mapping[str, Any] | Any],
        *,
        phase: str | None = "Succeeded",
        completion_time: float | None = None,
    ) -> None:
        """Replace one evaluation's result series with ``results`` (status.results or the
        document's results); ``labels`` is an EvaluationLabels or the ModelEvaluation body."""
        lab = _labels(labels)
        rows = [ResultRow.parse(r) for r in results]
        import time

        with self._lock:
            entry = self._evaluations.setdefault(lab.key, _Evaluation(lab))
            entry.labels, entry.rows = lab, rows
            entry.completion_time = time.time() if completion_time is None else completion_time
            if phase is not None:
                entry.phase = phase

    def forget(self, namespace: str | EvaluationLabels | Mapping[str, Any], name: str = "") -> None:
        """The evaluation was deleted: its series vanish at the next scrape."""
        key = (namespace, name) if isinstance(namespace, str) else _labels(namespace).key
        with self._lock:
            self._evaluations.pop(key, None)

    def snapshot(self) -> tuple[list[_Evaluation], dict[tuple[str, str], int] | None]:
        with self._lock:
            counts = None if self._phase_counts is None else dict(self._phase_counts)
            return list(self._evaluations.values()), counts

    def render(self) -> bytes:
        """The exposition text (what /metrics serves)."""
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry))

    def serve(self, port: int, addr: str = "0.0.0.0") -> tuple[Any, Any]:
        """Serve /metrics on ``addr:port`` in a daemon thread; returns (server, thread)."""
        from prometheus_client import start_http_server

        server, thread = start_http_server(port, addr=addr, registry=self.registry)
        return server, thread


def _labels(value: EvaluationLabels | Mapping[str, Any]) -> EvaluationLabels:
    if isinstance(value, EvaluationLabels):
        return value
    if "metadata" in value:
        return EvaluationLabels.from_resource(value)
    return EvaluationLabels(**{k: str(v) for k, v in value.items() if v is not None})


# ------------------------------------------------------------------ the process-wide instance

_default: OperatorMetrics | None = None
_default_lock = threading.Lock()


def metrics() -> OperatorMetrics:
    """The operator process's metrics (created on first use, with process/GC collectors)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = OperatorMetrics(process_metrics=True)
        return _default


def observe_reconcile(handler: str, seconds: float, outcome: str = "success") -> None:
    """Count one handler run and its duration (call it from a try/finally around the handler)."""
    metrics().observe_reconcile(handler, seconds, outcome)


def set_phase(labels: EvaluationLabels | Mapping[str, Any], phase: str | None) -> None:
    """Track an evaluation's phase (from its body or EvaluationLabels)."""
    metrics().set_phase(labels, phase)


def set_phase_counts(counts: Mapping[tuple[str, str], int] | Mapping[str, int]) -> None:
    """Set the evaluations-by-phase gauge from explicit counts instead."""
    metrics().set_phase_counts(counts)


def record_results(
    evaluation_meta: EvaluationLabels | Mapping[str, Any],
    status_results: Sequence[Mapping[str, Any] | Any],
    *,
    phase: str | None = "Succeeded",
) -> None:
    """Publish a finished evaluation's results (replacing an earlier run's)."""
    metrics().record_results(evaluation_meta, status_results, phase=phase)


def forget(namespace: str | EvaluationLabels | Mapping[str, Any], name: str = "") -> None:
    """Drop a deleted evaluation's series."""
    metrics().forget(namespace, name)


def start_metrics_server(port: int, addr: str = "0.0.0.0") -> tuple[Any, Any]:
    """Serve the operator's /metrics; returns prometheus-client's (server, thread)."""
    return metrics().serve(port, addr)
