"""The operator's Prometheus metrics without a server: what /metrics renders from the watched
evaluations, the reconcile histogram and counters, and the metrics-port setting."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from metric_text import samples_of, value
from mlmodelscope.controller.metrics import EvaluationState, OperatorMetrics
from mlmodelscope.controller.settings import OperatorSettings, SettingsError


def names_in(text: str) -> set[str]:
    return {name for name, _ in samples_of(text)}


def result_series(text: str, evaluation: str) -> list[str]:
    """Names of the per-batch-size result samples of one evaluation."""
    return [
        name
        for name, labels in samples_of(text)
        if ("evaluation", evaluation) in labels and ("batch_size" in dict(labels))
    ]


STATUS_ROWS = [
    {
        "batchSize": 1,
        "scenario": "SingleStream",
        "latencyMs": {"p50": 1.5, "p90": 2.0, "p99": 3.0, "mean": 1.6},
        "throughput": 650.0,
        "qps": 650.0,
        "top1": 0.76,
        "top5": 0.93,
        "valid": True,
    },
    {
        "batchSize": 8,
        "scenario": "SingleStream",
        "latencyMs": {"p50": 4.0, "p90": 5.0, "p99": 6.0, "mean": 4.2},
        "throughput": 2000.0,
        "qps": 250.0,
        "top1": 0.76,
        "top5": 0.93,
        "valid": False,
        "invalidReasons": ["too few queries"],
    },
]


def body(
    name: str = "resnet-a100",
    namespace: str = "team-a",
    phase: str | None = "Succeeded",
    results: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A ModelEvaluation as the watch delivers it."""
    doc: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"name": "resnet50"},
            "framework": {"name": "pytorch"},
            "hardware": {"device": "gpu", "gpuProduct": "NVIDIA-A100-SXM4-80GB"},
        },
    }
    if phase is not None:
        doc["status"] = {"phase": phase, "results": copy.deepcopy(results or [])}
        if phase in ("Succeeded", "Failed"):
            doc["status"]["completionTime"] = "2026-11-22T08:00:00Z"
    return doc


def test_results_in_status_render_in_base_units() -> None:
    m = OperatorMetrics()
    m.observe(body(results=STATUS_ROWS))
    text = m.render().decode()
    labels = {
        "evaluation": "resnet-a100",
        "batch_size": "8",
        "gpu_product": "NVIDIA-A100-SXM4-80GB",
        "model": "resnet50",
        "framework": "pytorch",
        "device": "gpu",
        "scenario": "SingleStream",
    }
    assert (
        value(text, "mlmodelscope_evaluation_latency_seconds", quantile="0.99", **labels) == 0.006
    )
    assert value(text, "mlmodelscope_evaluation_latency_mean_seconds", **labels) == pytest.approx(
        0.0042
    )
    assert value(text, "mlmodelscope_evaluation_throughput_samples_per_second", **labels) == 2000
    assert value(text, "mlmodelscope_evaluation_queries_per_second", **labels) == 250
    assert value(text, "mlmodelscope_evaluation_valid", **labels) == 0
    acc = value(text, "mlmodelscope_evaluation_accuracy_ratio", metric="top1", batch_size="1")
    assert acc == 0.76
    completion = value(text, "mlmodelscope_evaluation_completion_time_seconds")
    assert completion == 1795334400.0  # 2026-11-22T08:00:00Z
    assert value(text, "mlmodelscope_evaluations", namespace="team-a", phase="Succeeded") == 1
    assert value(text, "mlmodelscope_evaluations", namespace="team-a", phase="Running") == 0


def test_status_rows_and_result_document_rows_are_one_type() -> None:
    """BatchResult reads the status' camelCase and the document's snake_case alike."""
    snake = [
        {"batch_size": 1, "scenario": "SingleStream",
         "latency_ms": {"p50": 1.5, "p90": 2.0, "p99": 3.0, "mean": 1.6},
         "throughput": 650.0, "qps": 650.0, "top1": 0.76, "top5": 0.93, "valid": True}
    ]  # fmt: skip
    from_status = EvaluationState.from_resource(body(results=STATUS_ROWS[:1]))
    from_document = EvaluationState.from_resource(body(results=snake))
    assert from_status == from_document
    [row] = from_status.rows
    assert (row.batch_size, row.latency_ms.p99, row.top5) == (1, 3.0, 0.93)


def test_a_row_the_status_type_rejects_is_skipped_not_fatal() -> None:
    m = OperatorMetrics()
    m.observe(body(results=[{"batchSize": "many"}, STATUS_ROWS[0]]))
    text = m.render().decode()
    assert value(text, "mlmodelscope_evaluation_throughput_samples_per_second") == 650


def test_phases_follow_the_watch_and_queue_depth_counts_queued() -> None:
    m = OperatorMetrics()
    m.observe(body("a", phase=None))  # not reconciled yet: the status' default, Pending
    m.observe(body("b", phase="Queued"))
    m.observe(body("c", phase="Queued"))
    m.observe(body("d", namespace="team-b", phase="Running"))
    text = m.render().decode()
    assert value(text, "mlmodelscope_evaluations", namespace="team-a", phase="Pending") == 1
    assert value(text, "mlmodelscope_evaluations", namespace="team-a", phase="Queued") == 2
    assert value(text, "mlmodelscope_evaluations", namespace="team-b", phase="Queued") == 0
    assert value(text, "mlmodelscope_operator_queue_depth") == 2
    m.observe(body("b", phase="Pending"))
    m.observe(body("c", phase="Failed"))
    text = m.render().decode()
    assert value(text, "mlmodelscope_operator_queue_depth") == 0
    assert value(text, "mlmodelscope_evaluations", namespace="team-a", phase="Pending") == 2
    assert value(text, "mlmodelscope_evaluations", namespace="team-a", phase="Failed") == 1
    # a Failed run without results has a completion time but no result series
    assert value(text, "mlmodelscope_evaluation_completion_time_seconds", evaluation="c")
    assert "mlmodelscope_evaluation_latency_seconds" not in names_in(text)


def test_a_rerun_replaces_results_and_deleting_forgets_everything() -> None:
    m = OperatorMetrics()
    m.observe(body(results=STATUS_ROWS))
    m.observe(body("other", results=STATUS_ROWS[:1]))
    m.observe(body(phase="Pending"))  # spec edited: the new run cleared status.results
    text = m.render().decode()
    assert not result_series(text, "resnet-a100")
    assert value(text, "mlmodelscope_evaluation_throughput_samples_per_second") == 650  # other
    m.observe(body(results=STATUS_ROWS[:1]))  # the rerun measured batch 1 only
    text = m.render().decode()
    assert 'batch_size="8"' not in text
    m.forget("team-a", "resnet-a100")
    m.forget("team-a", "other")
    text = m.render().decode()
    assert "resnet-a100" not in text and 'evaluation="other"' not in text
    assert "mlmodelscope_evaluations" not in names_in(text)  # no evaluations, no namespace
    assert value(text, "mlmodelscope_operator_queue_depth") == 0


def test_reconcile_histogram_by_handler_and_outcome_and_counters() -> None:
    m = OperatorMetrics()
    m.observe_reconcile("created", 0.02)
    m.observe_reconcile("created", 0.5, "temporary_error")
    m.observe_reconcile("job", 0.001, "weird")  # unknown outcomes are bounded to 'error'
    m.job_created("team-a")
    m.job_created("team-a")
    m.result_collected("team-b")
    text = m.render().decode()
    histogram = "mlmodelscope_operator_reconcile_duration_seconds"
    assert value(text, f"{histogram}_count", handler="created", outcome="success") == 1
    assert value(text, f"{histogram}_count", handler="created", outcome="temporary_error") == 1
    assert value(text, f"{histogram}_count", handler="job", outcome="error") == 1
    le = value(text, f"{histogram}_bucket", handler="created", outcome="success", le="0.025")
    assert le == 1
    assert value(text, "mlmodelscope_operator_jobs_created_total", namespace="team-a") == 2
    assert value(text, "mlmodelscope_operator_results_collected_total", namespace="team-b") == 1


def test_metrics_port_setting() -> None:
    assert OperatorSettings.from_env({}).metrics_port == 9090
    assert OperatorSettings.from_env({"MLMS_OPERATOR_METRICS_PORT": "0"}).metrics_port == 0
    assert OperatorSettings.from_env({"MLMS_OPERATOR_METRICS_PORT": "8443"}).metrics_port == 8443
    for bad in ("http", "-1", "65536"):
        with pytest.raises(SettingsError, match="MLMS_OPERATOR_METRICS_PORT"):
            OperatorSettings.from_env({"MLMS_OPERATOR_METRICS_PORT": bad})
