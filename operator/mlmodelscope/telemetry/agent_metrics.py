"""The agent's metrics, pushed to a Prometheus Pushgateway (``MLMS_PUSHGATEWAY_URL``).

An evaluation job is short-lived, so Prometheus cannot scrape it; it pushes instead, under the
grouping key ``{job="mlmodelscope-agent", namespace, evaluation}``. The first push of a run is
a PUT, which deletes whatever an earlier run of the same evaluation left in the group, so
reruns replace rather than pile up; progress pushes at stage boundaries are POSTs (they replace
only the progress metrics); the final push is a PUT of everything: results, accuracy, GPU
metrics and tracing overhead. Pushes happen only between stages, never while a measurement
window runs, and a Pushgateway that is down costs a warning, never the evaluation.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

JOB = "mlmodelscope-agent"
PUSH_TIMEOUT_S = 3.0
MAX_FAILURES = 2
"""After this many failed progress pushes in a row, only the final push is tried."""
GPU_UNITS = {
    "utilization_ratio": "gpu_utilization_ratio",
    "memory_used_bytes": "gpu_memory_used_bytes",
    "power_watts": "gpu_power_watts",
    "sm_clock_hertz": "gpu_sm_clock_hertz",
    "temperature_celsius": "gpu_temperature_celsius",
}
"""nvml summary field -> metric name suffix (mlmodelscope_agent_<suffix>)."""


def quantile_label(key: str) -> str | None:
    """'p99.9' -> '0.999' (Prometheus' quantile label is a fraction)."""
    if not key.startswith("p"):
        return None
    try:
        return format(float(key[1:]) / 100.0, "g")
    except ValueError:
        return None


def _registry() -> Any:
    from prometheus_client import CollectorRegistry

    return CollectorRegistry()


def progress_registry(stage: str, done: int, total: int, started: float) -> Any:
    """The metrics that describe a run in progress."""
    from prometheus_client import Gauge

    reg = _registry()
    Gauge("mlmodelscope_agent_stage_info", "Current stage of the run (value 1).", ["stage"],
          registry=reg).labels(stage).set(1)  # fmt: skip
    Gauge(
        "mlmodelscope_agent_progress_ratio",
        "Progress of the current stage, 0..1 (measurement: queries of the window's minimum).",
        registry=reg,
    ).set(min(done / total, 1.0) if total > 0 else 0.0)
    Gauge(
        "mlmodelscope_agent_start_time_seconds",
        "When the run started (Unix time).",
        registry=reg,
    ).set(started)
    return reg


def result_registry(document: Mapping[str, Any], started: float) -> Any:
    """Every result of a finished run (Succeeded or Failed) as metrics."""
    from prometheus_client import Gauge

    reg = progress_registry("finished", 1, 1, started)
    labels = _run_labels(document)
    names = list(labels)
    succeeded = document.get("status") == "Succeeded"
    Gauge("mlmodelscope_agent_success", "1 when the run succeeded, 0 when it failed.", names,
          registry=reg).labels(**labels).set(1.0 if succeeded else 0.0)  # fmt: skip
    Gauge(
        "mlmodelscope_agent_run_duration_seconds",
        "Wall-clock duration of the whole run.",
        names,
        registry=reg,
    ).labels(**labels).set(float(document.get("duration_s") or 0.0))
    Gauge(
        "mlmodelscope_agent_last_completion_time_seconds",
        "When the run finished (Unix time).",
        names,
        registry=reg,
    ).labels(**labels).set(time.time())
    per_batch = [*names, "scenario", "batch_size"]
    latency = Gauge(
        "mlmodelscope_agent_latency_seconds",
        "Query latency quantiles of the untraced measurement.",
        [*per_batch, "quantile"],
        registry=reg,
    )
    mean = Gauge("mlmodelscope_agent_latency_mean_seconds", "Mean query latency.", per_batch,
                 registry=reg)  # fmt: skip
    throughput = Gauge(
        "mlmodelscope_agent_throughput_samples_per_second",
        "Samples per second.",
        per_batch,
        registry=reg,
    )
    qps = Gauge("mlmodelscope_agent_queries_per_second", "Queries per second.", per_batch,
                registry=reg)  # fmt: skip
    valid = Gauge("mlmodelscope_agent_valid", "1 when the measurement is VALID.", per_batch,
                  registry=reg)  # fmt: skip
    for m in document.get("measurements") or []:
        row = {**labels, "scenario": str(m["scenario"]), "batch_size": str(m["batch_size"])}
        for key, value in m["latency"]["percentiles_s"].items():
            q = quantile_label(key)
            if q is not None:
                latency.labels(**row, quantile=q).set(float(value))
        mean.labels(**row).set(float(m["latency"]["mean_s"]))
        throughput.labels(**row).set(float(m["throughput_samples_per_s"]))
        qps.labels(**row).set(float(m["qps"]))
        valid.labels(**row).set(1.0 if m["verdict"]["valid"] else 0.0)
    accuracy = document.get("accuracy")
    if accuracy:
        acc = Gauge(
            "mlmodelscope_agent_accuracy_ratio",
            "Accuracy of the separate accuracy pass, 0..1.",
            [*names, "metric"],
            registry=reg,
        )
        for metric in ("top1", "top5"):
            if accuracy.get(metric) is not None:
                acc.labels(**labels, metric=metric).set(float(accuracy[metric]))
    _tracing_metrics(reg, document.get("tracing"), labels)
    _gpu_metrics(reg, document.get("gpu_metrics"), labels)
    return reg


def _run_labels(document: Mapping[str, Any]) -> dict[str, str]:
    spec = document.get("spec") or {}
    backend = document.get("backend") or {}
    hardware = spec.get("hardware") or {}
    return {
        "model": str((spec.get("model") or {}).get("name", "")),
        "framework": str((spec.get("framework") or {}).get("name", "")),
        "device": str(hardware.get("device", "cpu")),
        "gpu_product": str(hardware.get("gpuProduct") or backend.get("details", {}).get("gpu", "")),
    }


def _tracing_metrics(reg: Any, tracing: Mapping[str, Any] | None, labels: dict[str, str]) -> None:
    if not tracing:
        return
    from prometheus_client import Gauge

    overhead = Gauge(
        "mlmodelscope_agent_tracing_overhead_ratio",
        "Per-query latency added by tracing at each level (p50 traced / p50 untraced - 1).",
        [*labels, "level", "batch_size"],
        registry=reg,
    )
    for entry in tracing.get("by_batch_size") or []:
        for level, result in (entry.get("levels") or {}).items():
            value = result.get("overhead_vs_untraced")
            if value is not None:
                overhead.labels(**labels, level=level, batch_size=str(entry["batch_size"])).set(
                    float(value)
                )


def _gpu_metrics(reg: Any, gpu: Mapping[str, Any] | None, labels: dict[str, str]) -> None:
    if not gpu:
        return
    from prometheus_client import Gauge

    gauges = {
        field: Gauge(
            f"mlmodelscope_agent_{suffix}",
            f"GPU {field.rsplit('_', 1)[0].replace('_', ' ')} during the measurement (NVML).",
            [*labels, "gpu", "gpu_name", "stat"],
            registry=reg,
        )
        for field, suffix in GPU_UNITS.items()
    }
    for device in gpu.get("devices") or []:
        for field, gauge in gauges.items():
            summary = device.get(field)
            if not summary:
                continue
            for stat in ("mean", "max"):
                gauge.labels(
                    **labels, gpu=str(device["index"]), gpu_name=str(device["name"]), stat=stat
                ).set(float(summary[stat]))


class AgentMetrics:
    """Pushes one run's progress and results to the Pushgateway; every push is best effort."""

    def __init__(self, url: str, namespace: str, evaluation: str) -> None:
        self.url = url.rstrip("/")
        self.grouping_key = {"namespace": namespace, "evaluation": evaluation}
        self.started = time.time()
        self.stage_name = "starting"
        self.done = 0
        self.total = 0
        self._pushed_once = False
        self._failures = 0
        self.errors: list[str] = []

    @classmethod
    def from_env(
        cls, namespace: str | None, evaluation: str, environ: Mapping[str, str] | None = None
    ) -> AgentMetrics | None:
        """None when ``MLMS_PUSHGATEWAY_URL`` is unset; an error naming the extra when it is
        set but prometheus-client is missing."""
        env = os.environ if environ is None else environ
        url = env.get("MLMS_PUSHGATEWAY_URL", "").strip()
        if not url:
            return None
        try:
            import prometheus_client  # noqa: F401
        except ImportError as exc:
            from mlmodelscope.contract.otel import TELEMETRY_EXTRA_HINT
            from mlmodelscope.telemetry.tracing import TelemetryMissingError

            raise TelemetryMissingError(
                f"MLMS_PUSHGATEWAY_URL is set but prometheus-client is not installed; "
                f"install it with: {TELEMETRY_EXTRA_HINT}"
            ) from exc
        ns = namespace or env.get("MLMS_NAMESPACE") or "default"
        return cls(url, ns, evaluation)

    def stage(self, name: str) -> None:
        """A new stage began (between measurements): push progress."""
        self.stage_name, self.done, self.total = name, 0, 0
        if self._failures < MAX_FAILURES:
            self._push(progress_registry(name, 0, 0, self.started), replace=not self._pushed_once)

    def progress(self, done: int, total: int) -> None:
        """Called from inside measurement loops: records only, never does I/O."""
        self.done, self.total = done, total

    def finish(self, document: Mapping[str, Any]) -> bool:
        """PUT every result of the run, replacing the group; True when it was accepted."""
        return self._push(result_registry(document, self.started), replace=True)

    def _push(self, registry: Any, replace: bool) -> bool:
        from prometheus_client import push_to_gateway, pushadd_to_gateway

        push = push_to_gateway if replace else pushadd_to_gateway
        try:
            push(
                self.url,
                job=JOB,
                registry=registry,
                grouping_key=self.grouping_key,
                timeout=PUSH_TIMEOUT_S,
            )
        except Exception as exc:  # the gateway is optional infrastructure
            self._failures += 1
            message = f"push to {self.url} failed: {exc}"
            self.errors.append(message)
            log.warning("%s", message)
            return False
        self._failures = 0
        self._pushed_once = True
        return True
