"""Metrics without servers: the NVML summarizer on a fake source, the agent's Pushgateway
registries, and the Jaeger build's bookkeeping (the operator's metrics are tested in
tests/controller/test_operator_metrics.py)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from metric_text import samples_of, value
from mlmodelscope.devtools import jaeger as tools
from mlmodelscope.devtools.telemetry_servers import jaeger_config
from mlmodelscope.telemetry.agent_metrics import AgentMetrics, quantile_label, result_registry
from mlmodelscope.telemetry.nvml import (
    GpuDevice,
    GpuSample,
    GpuSampler,
    _visible,
    nvml_source,
    summarize,
)

# ------------------------------------------------------------------------------------- NVML


class FakeSource:
    """Two GPUs; the second has no power sensor (NVML NotSupported reads as None)."""

    def __init__(self) -> None:
        self.calls = 0

    def devices(self) -> Sequence[GpuDevice]:
        return [
            GpuDevice(0, "NVIDIA H100", "GPU-a", 80 * 2**30),
            GpuDevice(1, "NVIDIA T4", "GPU-b"),
        ]

    def sample(self) -> list[GpuSample]:
        self.calls += 1
        u = 0.5 if self.calls % 2 else 1.0
        return [
            GpuSample(0, time.time(), {"utilization_ratio": u, "power_watts": 300.0 + self.calls}),
            GpuSample(1, time.time(), {"utilization_ratio": 0.25, "power_watts": None}),
        ]

    def close(self) -> None:
        pass


def test_summarize_mean_and_max_per_device() -> None:
    source = FakeSource()
    samples = [s for _ in range(4) for s in source.sample()]
    summary = summarize(source.devices(), samples, 0.1, 0.4)
    first, second = summary["devices"]
    assert first["samples"] == 4
    assert first["utilization_ratio"] == {"mean": 0.75, "max": 1.0}
    assert first["power_watts"] == {"mean": 302.5, "max": 304.0}
    assert first["memory_total_bytes"] == 80 * 2**30
    assert second["utilization_ratio"] == {"mean": 0.25, "max": 0.25}
    assert "power_watts" not in second  # never read: omitted, not zero
    assert summary["interval_s"] == 0.1


def test_sampler_thread_samples_until_stopped() -> None:
    source = FakeSource()
    sampler = GpuSampler(source, interval_s=0.01)
    sampler.start()
    time.sleep(0.15)
    summary = sampler.stop()
    assert source.calls >= 3
    assert summary["devices"][0]["samples"] == source.calls
    assert summary["duration_s"] > 0.1


def test_no_gpu_means_no_source() -> None:
    """This machine has no NVIDIA driver: the source is None, never an exception."""
    import shutil

    if shutil.which("nvidia-smi"):
        pytest.skip("a GPU driver is present")
    assert nvml_source() is None


def test_cuda_visible_devices_selects_nvml_devices() -> None:
    assert _visible(4, {}) == [0, 1, 2, 3]
    assert _visible(4, {"CUDA_VISIBLE_DEVICES": "2,0"}) == [2, 0]
    assert _visible(4, {"CUDA_VISIBLE_DEVICES": "GPU-abc,1"}) == ["GPU-abc", 1]
    assert _visible(4, {"CUDA_VISIBLE_DEVICES": "1,x,2"}) == [1]
    assert _visible(4, {"CUDA_VISIBLE_DEVICES": ""}) == []


# ---------------------------------------------------------------------------- agent metrics

DOCUMENT: dict[str, Any] = {
    "status": "Succeeded",
    "duration_s": 12.5,
    "spec": {"model": {"name": "digits"}, "framework": {"name": "onnxruntime"}},
    "backend": {"device": "cpu", "details": {}},
    "measurements": [
        {
            "scenario": "SingleStream",
            "batch_size": 1,
            "latency": {"percentiles_s": {"p50": 1e-4, "p99.9": 3e-4}, "mean_s": 1.2e-4},
            "throughput_samples_per_s": 8000.0,
            "qps": 8000.0,
            "verdict": {"valid": True, "reasons": []},
        }
    ],
    "accuracy": {"top1": 0.97, "top5": 1.0},
    "tracing": {
        "by_batch_size": [
            {"batch_size": 1, "levels": {"model": {"overhead_vs_untraced": 0.2}, "library": {}}}
        ]
    },
    "gpu_metrics": {
        "devices": [
            {"index": 0, "name": "NVIDIA H100", "samples": 3,
             "utilization_ratio": {"mean": 0.5, "max": 0.9}}
        ]
    },
}  # fmt: skip


def test_result_registry_carries_latency_accuracy_gpu_and_overhead() -> None:
    from prometheus_client import generate_latest

    text = generate_latest(result_registry(DOCUMENT, time.time())).decode()
    assert value(text, "mlmodelscope_agent_latency_seconds", quantile="0.5", batch_size="1") == 1e-4
    assert value(text, "mlmodelscope_agent_latency_seconds", quantile="0.999") == 3e-4
    assert value(text, "mlmodelscope_agent_accuracy_ratio", metric="top1") == 0.97
    assert value(text, "mlmodelscope_agent_success") == 1
    assert value(text, "mlmodelscope_agent_gpu_utilization_ratio", stat="max", gpu="0") == 0.9
    assert value(text, "mlmodelscope_agent_tracing_overhead_ratio", level="model") == 0.2
    assert value(text, "mlmodelscope_agent_progress_ratio") == 1
    assert quantile_label("p50") == "0.5" and quantile_label("p99.9") == "0.999"
    assert quantile_label("mean") is None


def test_push_failures_never_raise() -> None:
    pusher = AgentMetrics("http://127.0.0.1:9", "ns", "e")  # nothing listens on port 9
    pusher.stage("load model")
    pusher.stage("measure")
    pusher.stage("measure batch 8")  # given up after two failures: no third attempt
    pusher.progress(5, 10)
    assert len(pusher.errors) == 2
    assert pusher.finish(DOCUMENT) is False
    assert len(pusher.errors) == 3
    assert AgentMetrics.from_env(None, "e", {}) is None
    env = {"MLMS_PUSHGATEWAY_URL": "http://pgw:9091/", "MLMS_NAMESPACE": "ns1"}
    made = AgentMetrics.from_env(None, "e", env)
    assert made is not None and made.url == "http://pgw:9091"
    assert made.grouping_key == {"namespace": "ns1", "evaluation": "e"}


# ------------------------------------------------------------------------------------ tools


def test_jaeger_stamp_and_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLMS_CACHE_DIR", str(tmp_path))
    assert tools.jaeger_dir() == tmp_path / "tools" / f"jaeger-{tools.JAEGER_VERSION}"
    assert not tools.is_built()
    tools.jaeger_binary().parent.mkdir(parents=True)
    tools.jaeger_binary().write_text("#!/bin/sh\n")
    (tools.jaeger_dir() / "stamp.json").write_text(json.dumps({"fingerprint": "old"}))
    assert not tools.is_built()
    (tools.jaeger_dir() / "stamp.json").write_text(
        json.dumps({"fingerprint": tools._fingerprint()})
    )
    assert tools.is_built()
    assert tools.main(["path"]) == 0
    assert tools.main(["nonsense"]) == 2
    config = jaeger_config(1, 2, 3)
    assert "endpoint: 127.0.0.1:1" in config and "memory:" in config


def test_agent_samples_gpus_around_the_measurement_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a (fake) GPU the document gains gpu_metrics; traced passes pause the sampler."""
    from mlmodelscope.telemetry import nvml
    from mlmodelscope.telemetry.agent import AgentTelemetry

    source = FakeSource()
    monkeypatch.setattr(nvml, "nvml_source", lambda environ=None: source)
    monkeypatch.setattr(nvml, "DEFAULT_INTERVAL_S", 0.01)
    telemetry = AgentTelemetry.off()
    with telemetry.gpu_sampling("cpu"):
        pass
    assert telemetry.gpu_metrics is None and source.calls == 0  # a CPU run samples nothing
    with telemetry.gpu_sampling("cuda:0"):
        assert telemetry._sampler is not None
        telemetry._sampler.interval_s = 0.01
        time.sleep(0.1)
        telemetry._sampler.pause()
        paused_at = source.calls
        time.sleep(0.1)
        assert source.calls <= paused_at + 1
        telemetry._sampler.resume()
        time.sleep(0.05)
    assert telemetry.gpu_metrics is not None
    assert telemetry.gpu_metrics["devices"][0]["samples"] == source.calls
    document: dict[str, Any] = {}
    telemetry.finish(document, None)
    assert document["gpu_metrics"]["devices"][1]["name"] == "NVIDIA T4"


def test_every_metric_the_docs_name_is_exposed() -> None:
    """Each `mlmodelscope_*` name in docs/observability.md is a sample family that the
    operator's /metrics or the agent's pushes really render (the operator after a reconcile,
    an API request, a Job and a result; the agent mid-run and after a run with a GPU and
    tracing)."""
    from prometheus_client import generate_latest

    from mlmodelscope.controller.metrics import OperatorMetrics
    from mlmodelscope.telemetry.agent_metrics import progress_registry

    operator = OperatorMetrics()
    operator.observe_reconcile("created", 0.01)
    operator.job_created("ns")
    operator.result_collected("ns")
    operator.api_request("get", "modelevaluations", 200)
    row = {"batchSize": 1, "scenario": "SingleStream", "latencyMs": {"p50": 1.0, "mean": 1.0},
           "throughput": 1.0, "qps": 1.0, "top1": 0.9, "valid": True}  # fmt: skip
    operator.observe(
        {
            "metadata": {"name": "e", "namespace": "ns"},
            "spec": {"model": {"name": "m"}, "framework": {"name": "onnxruntime"}},
            "status": {
                "phase": "Succeeded",
                "results": [row],
                "completionTime": "2026-11-22T08:00:00Z",
            },
        }
    )
    rendered = [
        operator.render().decode(),
        generate_latest(progress_registry("measure", 1, 2, time.time())).decode(),
        generate_latest(result_registry(DOCUMENT, time.time())).decode(),
    ]
    exposed = {name for text in rendered for name, _ in samples_of(text)}
    doc = (Path(__file__).parents[2] / "docs" / "observability.md").read_text()
    named = set(re.findall(r"`(mlmodelscope_[a-z_]*[a-z])", doc))
    assert named, "the docs name no metric"
    suffixes = ("", "_total", "_count", "_sum", "_bucket")
    missing = sorted(n for n in named if not any(n + s in exposed for s in suffixes))
    assert not missing, f"docs/observability.md names metrics nothing exposes: {missing}"
