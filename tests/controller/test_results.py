"""Reading the agent's output: ConfigMap, termination message, generation check, fallbacks."""

from __future__ import annotations

import json
from typing import Any

from mlmodelscope.agent.pod import compact_summary, configmap_patch
from mlmodelscope.controller import results
from mlmodelscope.controller.handlers.handle_job import failure
from mlmodelscope.spec.status import BatchResult


def document(generation: int = 1, status: str = "Succeeded", **extra: Any) -> dict[str, Any]:
    """A result document shaped like runner.evaluate's."""
    row = {
        "batch_size": 1,
        "scenario": "SingleStream",
        "latency_ms": {"p50": 0.123456789, "p90": 0.2, "p99": 0.3, "mean": 0.15},
        "throughput": 8100.5,
        "qps": 8100.5,
        "top1": 0.9722,
        "top5": 1.0,
        "valid": True,
        "invalid_reasons": [],
    }
    doc: dict[str, Any] = {
        "api_version": "mlmodelscope.io/results/v1alpha1",
        "kind": "EvaluationResult",
        "run_id": "5d2c",
        "status": status,
        "evaluation": {"name": "e", "namespace": "ns", "generation": generation},
        "model": {"sha256": "f" * 64},
        "image": "ghcr.io/mlmodelscope/agent-onnxruntime:0.1.0-cpu",
        "stack": {
            "backend": {"framework": "onnxruntime", "framework_version": "1.31.1", "device": "cpu"},
            "cpu": {"model": "AMD EPYC", "logical_cores": 2},
            "python": {"version": "3.11.9"},
        },
        "measurements": [{"batch_size": 1, "raw": {"latencies_ns": list(range(1000))}}],
        "results": [row, {**row, "batch_size": 8, "throughput": 30000.0}],
        **extra,
    }
    return doc


def test_full_document_becomes_status_fields() -> None:
    outcome = results.outcome_from_document(document())
    assert outcome.succeeded and outcome.run_id == "5d2c" and outcome.generation == 1
    assert outcome.summary == {
        "batchSize": 1,
        "p50Ms": 0.123457,
        "throughput": 8100.5,
        "top1": 0.9722,
    }
    first = outcome.results[0]
    assert first["latencyMs"]["p99"] == 0.3
    assert first["accuracy"] == {"top1": 0.9722, "top5": 1.0}
    assert first["valid"] is True
    for row in outcome.results:
        BatchResult.model_validate(row)
    assert outcome.stack["framework"] == "onnxruntime"
    assert outcome.stack["frameworkVersion"] == "1.31.1"
    assert outcome.stack["modelSha256"] == "f" * 64
    assert outcome.stack["image"].endswith("-cpu")


def test_configmap_round_trip_and_generation_check() -> None:
    patch = configmap_patch(document(generation=3))
    stored = json.loads(patch["data"]["result.json"])
    assert "raw" not in stored["measurements"][0]
    configmap = {"data": patch["data"]}
    assert results.outcome_from_configmap(configmap, 3) is not None
    assert results.outcome_from_configmap(configmap, 4) is None
    assert results.outcome_from_configmap({"data": {}}, 3) is None
    assert results.outcome_from_configmap(None, 3) is None
    only_summary = {"data": {"summary.json": patch["data"]["summary.json"]}}
    outcome = results.outcome_from_configmap(only_summary, 3)
    assert outcome is not None and outcome.summary["top1"] == 0.9722


def pod(message: str, finished: str = "2026-11-22T08:00:00Z") -> dict[str, Any]:
    terminated = {"exitCode": 0, "message": message, "finishedAt": finished}
    return {
        "status": {"containerStatuses": [{"name": "agent", "state": {"terminated": terminated}}]}
    }


def test_termination_message_fallback_uses_the_newest_pod() -> None:
    old = json.dumps(compact_summary(document(status="Failed", error={"message": "boom"})))
    new = json.dumps(compact_summary(document()))
    pods = [pod(old, "2026-11-22T08:00:00Z"), pod(new, "2026-11-22T08:05:00Z")]
    outcome = results.outcome_from_pods(pods, 1)
    assert outcome is not None and outcome.succeeded
    assert outcome.source == "termination message"
    assert results.outcome_from_pods([], 1) is None


def test_log_tail_in_the_termination_message_becomes_the_error() -> None:
    outcome = results.outcome_from_pods([pod("Traceback ...\nMemoryError\n")], 1)
    assert outcome is not None and not outcome.succeeded
    assert outcome.error is not None and outcome.error.endswith("MemoryError")


def test_agent_errors_name_their_field() -> None:
    doc = document(status="Failed")
    doc["results"] = []
    doc["error"] = {"type": "SpecError", "field": "spec.model.uri", "message": "not found"}
    outcome = results.outcome_from_document(doc)
    assert outcome.error == "spec.model.uri: not found"
    assert outcome.error_field == "spec.model.uri"
    assert outcome.results == [] and outcome.summary == {}


def test_job_failure_reasons() -> None:
    spec_error = results.Outcome(status="Failed", error="spec.model.uri: nope", error_field="x")
    generic = results.Outcome(status="Failed", error="CUDA out of memory")
    deadline = {"type": "Failed", "reason": "DeadlineExceeded", "message": "Job was active..."}
    reason, message = failure(deadline, None, "90s")
    assert reason == "DeadlineExceeded" and "spec.timeout 90s" in message
    backoff = {"type": "Failed", "reason": "BackoffLimitExceeded", "message": "reached limit"}
    assert failure(backoff, generic, None) == ("BackoffLimitExceeded", "CUDA out of memory")
    assert failure(backoff, None, None) == ("BackoffLimitExceeded", "reached limit")
    policy = {"type": "Failed", "reason": "PodFailurePolicy", "message": "exit code 3"}
    assert failure(policy, spec_error, None) == ("InvalidSpec", "spec.model.uri: nope")
    assert failure(policy, generic, None)[0] == "EvaluationFailed"
