"""Reading the agent's output: ConfigMap, termination message, generation check, fallbacks.

Fixtures come from the contract's types (result_docs), and what the agent side publishes is
produced by the agent's own publishing code, so both ends of the wire are exercised."""

from __future__ import annotations

import json
from typing import Any

from result_docs import document, summary

from mlmodelscope.agent.pod import compact_summary, configmap_patch
from mlmodelscope.contract.result import EvaluationSummary, ResultDocument, ResultError
from mlmodelscope.contract.wire import RESULT_KEY, SUMMARY_KEY, TERMINATION_LIMIT
from mlmodelscope.controller import results
from mlmodelscope.controller.handlers.handle_job import failure
from mlmodelscope.spec.status import BatchResult, Summary


def test_the_fixture_documents_hold_to_the_contract() -> None:
    ResultDocument.model_validate(document())
    ResultDocument.model_validate(document(status="Failed"))


def test_a_summary_becomes_status_fields_without_reshaping() -> None:
    published = compact_summary(document())
    outcome = results.outcome_from_summary(published)
    assert outcome.succeeded and outcome.run_id == "5d2c" and outcome.generation == 1
    assert outcome.summary == Summary(batch_size=1, p50_ms=0.123457, throughput=8100.5, top1=0.9722)
    first = outcome.results[0]
    assert first["latencyMs"]["p99"] == 0.3
    assert first["top1"] == 0.9722 and first["top5"] == 1.0
    assert first["valid"] is True
    # the status rows are the contract's rows, dumped by alias: they parse straight back
    assert [BatchResult.model_validate(r) for r in outcome.results] == outcome.rows
    assert outcome.rows == published.results
    assert outcome.stack["framework"] == "onnxruntime"
    assert outcome.stack["frameworkVersion"] == "1.31.1"
    assert outcome.stack["modelSha256"] == "f" * 64
    assert outcome.stack["image"].endswith("-cpu")


def test_configmap_round_trip_and_generation_check() -> None:
    patch = configmap_patch(document(generation=3))
    stored = json.loads(patch["data"][RESULT_KEY])
    raw = stored["measurements"][0]["raw"]  # a sample of the query latencies, at most 2,000
    assert set(raw) == {"latencies_ns", "sample_of"} and len(raw["latencies_ns"]) <= 2000
    ResultDocument.model_validate(stored)
    configmap = {"data": patch["data"]}
    outcome = results.outcome_from_configmap(configmap, 3)
    assert outcome is not None and outcome.source == f"configmap {SUMMARY_KEY}"
    assert outcome.summary.top1 == 0.9722
    assert results.outcome_from_configmap(configmap, 4) is None
    assert results.outcome_from_configmap({"data": {}}, 3) is None
    assert results.outcome_from_configmap(None, 3) is None
    assert results.outcome_from_configmap({"data": {SUMMARY_KEY: "{not json"}}, 3) is None


def pod(message: str, finished: str = "2026-11-22T08:00:00Z") -> dict[str, Any]:
    terminated = {"exitCode": 0, "message": message, "finishedAt": finished}
    return {
        "status": {"containerStatuses": [{"name": "agent", "state": {"terminated": terminated}}]}
    }


def test_termination_message_fallback_uses_the_newest_pod() -> None:
    old = compact_summary(document(status="Failed")).to_wire()
    new = compact_summary(document()).to_wire()
    assert len(new.encode()) <= TERMINATION_LIMIT
    pods = [pod(old, "2026-11-22T08:00:00Z"), pod(new, "2026-11-22T08:05:00Z")]
    outcome = results.outcome_from_pods(pods, 1)
    assert outcome is not None and outcome.succeeded
    assert outcome.source == "termination message"
    assert results.outcome_from_pods([], 1) is None


def test_a_summary_for_another_generation_is_skipped() -> None:
    pods = [pod(summary(generation=2).to_wire())]
    assert results.outcome_from_pods(pods, 3) is None
    assert results.outcome_from_pods(pods, 2) is not None


def test_log_tail_in_the_termination_message_becomes_the_error() -> None:
    outcome = results.outcome_from_pods([pod("Traceback ...\nMemoryError\n")], 1)
    assert outcome is not None and not outcome.succeeded
    assert outcome.error is not None and outcome.error.endswith("MemoryError")


def test_agent_errors_name_their_field() -> None:
    error = ResultError(type="SpecError", field="spec.model.uri", message="not found")
    outcome = results.outcome_from_summary(
        EvaluationSummary.model_validate_json(
            compact_summary(document(status="Failed", error=error)).to_wire()
        )
    )
    assert outcome.error == "spec.model.uri: not found"
    assert outcome.error_field == "spec.model.uri"
    assert outcome.results == [] and outcome.summary == Summary()


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


def test_start_up_reaches_the_status_from_the_job_creation_and_the_agent_start() -> None:
    """The summary carries the first timed query's time; with the Job's creationTimestamp
    the status says how long from Job creation (scheduling, image pull, container start) and
    from the agent's own start to the first timed query."""
    from dataclasses import replace

    def replace_model(model: Any, **changes: Any) -> Any:
        return model.model_copy(update=changes)

    from mlmodelscope.contract.result import StartupInfo
    from mlmodelscope.controller import status
    from mlmodelscope.controller.status import Observed

    startup = StartupInfo(
        process_started_at="2026-11-22T08:00:03.100Z",
        first_timed_query_at="2026-11-22T08:00:07.350Z",
        to_first_timed_query_s=4.2501,
        phases_s={"interpreter": 0.05, "warmup": 4.2001},
        warmup_queries=10,
        first_timed_query_s=0.001,
    )
    doc = document() | {"startup": startup.model_dump(mode="json")}
    ResultDocument.model_validate(doc)
    published = compact_summary(doc)
    outcome = results.outcome_from_summary(
        EvaluationSummary.model_validate_json(published.to_wire())
    )
    assert outcome.startup_status == {
        "firstTimedQueryAt": "2026-11-22T08:00:07.350Z",
        "agentSeconds": 4.25,
    }
    with_job = replace(outcome, job_created_at="2026-11-22T08:00:00Z")
    assert with_job.startup_status is not None and with_job.startup_status["jobSeconds"] == 7.35
    running = {"observedGeneration": 1, "phase": "Running", "jobName": "e-g1"}
    change = status.succeeded(Observed.of(running), 1, "e-g1", with_job, "2026-11-22T08:00:09Z")
    assert change.patch["startup"]["jobSeconds"] == 7.35
    # a later generation's run starts without the earlier run's start-up
    new_run = status.job_created(
        Observed.of({**running, **change.patch}), 2, "e-g2", "e-results", None, "t"
    )
    assert new_run.patch["startup"] is None
    # a timestamp that is not one reports nothing rather than failing the handler
    garbled = replace(
        with_job, startup=replace_model(with_job.startup, first_timed_query_at="soon")
    )
    assert garbled.startup_status is None
    # a run that never reached a timed query has none
    assert results.outcome_from_summary(compact_summary(document())).startup_status is None
