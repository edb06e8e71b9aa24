"""Reading what the agent published and turning it into ModelEvaluation status fields.

The agent publishes one :class:`~mlmodelscope.contract.result.EvaluationSummary` twice: in the
results ConfigMap (key ``summary.json``, beside the full ``result.json`` kept for people and
stores) and in its container's termination message. Both parse with the contract's type, and
its rows are ``status.results`` rows already (dumped by alias). A summary for another
generation is ignored, so a run can never be credited with an earlier run's numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from mlmodelscope.contract.result import EvaluationSummary, SummaryStartup
from mlmodelscope.contract.wire import CONTAINER_NAME, SUMMARY_KEY, unix_time
from mlmodelscope.spec.status import BatchResult, StartupStatus, Summary

MAX_RESULTS = 32
MAX_STACK = 64


@dataclass(frozen=True)
class Outcome:
    """The agent's verdict on one run, ready for the status."""

    status: str
    """Succeeded or Failed, as the agent saw it."""
    run_id: str | None = None
    generation: int | None = None
    rows: list[BatchResult] = field(default_factory=list)
    stack: dict[str, str] = field(default_factory=dict)
    trace_id: str | None = None
    error: str | None = None
    """The agent's error, prefixed with the field it names (if any)."""
    error_field: str | None = None
    source: str = ""
    """Where it was read from: the ConfigMap or the termination message."""
    startup: SummaryStartup | None = None
    job_created_at: str | None = None
    """The Job's creationTimestamp, when the Job was there to read (see :attr:`startup_status`)."""

    @property
    def succeeded(self) -> bool:
        return self.status == "Succeeded"

    @property
    def results(self) -> list[dict[str, Any]]:
        """``status.results``: the rows as the CRD has them (camelCase)."""
        return [r.model_dump(mode="json", by_alias=True, exclude_none=True) for r in self.rows]

    @property
    def startup_status(self) -> dict[str, Any] | None:
        """``status.startup``: agent start and (with the Job's creation) Job creation to the
        first timed query."""
        if self.startup is None:
            return None
        first = self.startup.first_timed_query_at
        queried = unix_time(first)
        if queried is None:
            return None  # not a timestamp: nothing to report, nothing to fail on
        created = unix_time(self.job_created_at)
        job_s = None if created is None else round(queried - created, 3)
        value = StartupStatus(
            first_timed_query_at=first,
            agent_seconds=self.startup.to_first_timed_query_s,
            job_seconds=job_s if job_s is None or job_s >= 0 else None,
        )
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)

    @property
    def summary(self) -> Summary:
        """``status.summary``: the first batch size, flattened for the printer columns."""
        if not self.rows:
            return Summary()
        first = self.rows[0]
        return Summary(
            batch_size=first.batch_size,
            p50_ms=first.latency_ms.p50,
            throughput=first.throughput,
            top1=first.top1,
            metric=first.metric,
            metric_value=first.metric_value,
        )


def outcome_from_summary(summary: EvaluationSummary, source: str = "") -> Outcome:
    """The status-ready Outcome of an agent's summary."""
    error = summary.error
    error_text = None
    if error is not None:
        message = error.message or error.type or "unknown error"
        error_text = f"{error.field}: {message}" if error.field else message
    return Outcome(
        status=summary.status,
        run_id=summary.run_id,
        generation=summary.evaluation.generation,
        rows=summary.results[:MAX_RESULTS],
        stack=dict(list(summary.stack_summary.items())[:MAX_STACK]),
        trace_id=summary.trace_id,
        error=error_text,
        error_field=error.field if error is not None else None,
        source=source,
        startup=summary.startup,
    )


def parse_summary(text: str | None) -> EvaluationSummary | None:
    """The summary in ``text``, or None when it is not one (empty, not JSON, off contract)."""
    if not text:
        return None
    try:
        return EvaluationSummary.model_validate_json(text)
    except ValidationError:
        return None


def outcome_from_configmap(configmap: Mapping[str, Any] | None, generation: int) -> Outcome | None:
    """The Outcome in the results ConfigMap, if it holds one for ``generation``."""
    data = (configmap or {}).get("data") or {}
    summary = parse_summary(data.get(SUMMARY_KEY))
    if summary is None:
        return None
    outcome = outcome_from_summary(summary, source=f"configmap {SUMMARY_KEY}")
    return outcome if _same_generation(outcome, generation) else None


def _same_generation(outcome: Outcome, generation: int) -> bool:
    return outcome.generation is None or outcome.generation == generation


def termination_messages(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """Termination messages of the agent container, newest pod first."""
    found: list[tuple[str, str]] = []
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") != CONTAINER_NAME:
                continue
            terminated = (status.get("state") or {}).get("terminated") or {}
            message = terminated.get("message")
            if message:
                stamp = str(terminated.get("finishedAt") or "")
                found.append((stamp, str(message)))
    return [message for _, message in sorted(found, reverse=True)]


def outcome_from_pods(pods: Sequence[Mapping[str, Any]], generation: int) -> Outcome | None:
    """The Outcome in the newest agent termination message; a message that is not a summary
    (FallbackToLogsOnError put the log tail there) becomes a Failed outcome whose error is
    that text, so the user still sees why the agent died."""
    for message in termination_messages(pods):
        summary = parse_summary(message)
        if summary is not None:
            outcome = outcome_from_summary(summary, source="termination message")
            if _same_generation(outcome, generation):
                return outcome
            continue
        return Outcome(status="Failed", error=message.strip()[-4000:], source="container log")
    return None
