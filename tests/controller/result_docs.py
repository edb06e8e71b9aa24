"""Result documents and summaries for the operator tests, built from the contract's types.

Every fixture here validates against :mod:`mlmodelscope.contract.result`, so a test can never
hand the operator a shape the agent would not publish.
"""

from __future__ import annotations

from typing import Any

from mlmodelscope.contract.result import (
    RESULT_API_VERSION,
    RESULT_KIND,
    EvaluationRef,
    EvaluationSummary,
    LatencyStats,
    Measurement,
    ResultDocument,
    ResultError,
    Verdict,
    Warmup,
)
from mlmodelscope.spec.status import BatchResult, LatencySummary

SHA = "f" * 64


def row(batch_size: int = 1, **fields: Any) -> BatchResult:
    """One headline row (the status and summary row type)."""
    values: dict[str, Any] = {
        "batch_size": batch_size,
        "scenario": "SingleStream",
        "latency_ms": LatencySummary(p50=0.123456789, p90=0.2, p99=0.3, mean=0.15),
        "throughput": 8100.5,
        "qps": 8100.5,
        "top1": 0.9722,
        "top5": 1.0,
        "valid": True,
        "invalid_reasons": [],
        **fields,
    }
    return BatchResult(**values)


def latency(count: int = 1000) -> LatencyStats:
    return LatencyStats(
        count=count,
        mean_s=1.5e-4,
        stdev_s=1e-5,
        min_s=1e-4,
        max_s=3e-4,
        trimmed_mean_s=1.5e-4,
        percentiles_s={"p50": 1.2e-4, "p90": 2e-4, "p99": 3e-4},
    )


def measurement(batch_size: int = 1, samples: int = 1000, **fields: Any) -> Measurement:
    stats = latency(samples)
    values: dict[str, Any] = {
        "scenario": "SingleStream",
        "batch_size": batch_size,
        "queries": samples,
        "samples": samples * batch_size,
        "duration_s": 0.15,
        "throughput_samples_per_s": 8100.5,
        "qps": 8100.5,
        "percentile_method": "nearest-rank",
        "latency": stats,
        "predict": stats,
        "postprocess": stats,
        "windows": [{"index": i} for i in range(samples // 10)],
        "stable": True,
        "warmup": Warmup(queries=3, latency=stats),
        "verdict": Verdict(valid=True, reasons=[]),
        "harness_overhead": stats,
        "raw": {"latencies_ns": list(range(samples))},
        **fields,
    }
    return Measurement(**values)


def document(
    generation: int = 1,
    status: str = "Succeeded",
    rows: list[BatchResult] | None = None,
    error: ResultError | None = None,
    samples: int = 1000,
) -> dict[str, Any]:
    """A result document as ``runner.evaluate`` writes it (validated by the contract)."""
    rows = [row(1), row(8, throughput=30000.0)] if rows is None else rows
    base: dict[str, Any] = {
        "api_version": RESULT_API_VERSION,
        "kind": RESULT_KIND,
        "run_id": "5d2c",
        "status": status,
        "evaluation": EvaluationRef(name="e", namespace="ns", generation=generation),
        "agent_version": "0.1.0",
        "image": "ghcr.io/mlmodelscope/agent-onnxruntime:0.1.0-cpu",
        "started_at": "2026-11-22T08:00:00.000Z",
        "finished_at": "2026-11-22T08:00:05.000Z",
        "duration_s": 5.0,
        "stage_durations_s": {"measure": 4.0},
        "spec": {"model": {"name": "digits"}},
    }
    if status == "Succeeded":
        base |= {
            "spec_sha256": SHA,
            "model": {
                "name": "digits",
                "format": "onnx",
                "uri": "file:///m.onnx",
                "sha256": SHA,
                "source": "file",
                "cached": False,
            },
            "dataset": {
                "name": "digits/test",
                "type": "digits",
                "samples": 360,
                "labelled": True,
                "preprocessing": latency(360),
            },
            "backend": {"framework": "onnxruntime", "framework_version": "1.31.1", "device": "cpu"},
            "stack": {
                "backend": {
                    "framework": "onnxruntime",
                    "framework_version": "1.31.1",
                    "device": "cpu",
                },
                "cpu": {"model": "AMD EPYC", "logical_cores": 2},
                "os": {"kernel": "6.1"},
                "python": {"version": "3.11.9"},
                "libraries": {"numpy": "2.3.0"},
            },
            "accuracy": None,
            "measurements": [measurement(r.batch_size, samples) for r in rows],
            "results": rows,
        }
    else:
        base["error"] = error or ResultError(type="RuntimeError", message="boom")
    return ResultDocument(**base).to_json_dict()


def summary(generation: int = 1, **fields: Any) -> EvaluationSummary:
    """A compact summary as the agent publishes it."""
    values: dict[str, Any] = {
        "run_id": "5d2c",
        "status": "Succeeded",
        "evaluation": EvaluationRef(name="e", namespace="ns", generation=generation),
        "results": [row(1), row(8, throughput=30000.0)],
        "stack_summary": {"framework": "onnxruntime", "frameworkVersion": "1.31.1"},
        **fields,
    }
    return EvaluationSummary(**values)
