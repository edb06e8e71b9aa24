"""Reading what the agent published and turning it into ModelEvaluation status fields.

The agent publishes twice (see :mod:`mlmodelscope.agent.pod`): the results ConfigMap holds
``result.json`` (the full document, raw arrays removed) and ``summary.json``; the container's
termination message holds the same compact summary. Both shapes parse into one
:class:`Outcome`. A document for another generation is ignored, so a run can never be
credited with an earlier run's numbers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from mlmodelscope.agent.pod import RESULT_KEY, SUMMARY_KEY, compact_summary
from mlmodelscope.controller import names
from mlmodelscope.spec.status import AccuracySummary, BatchResult, LatencySummary, Summary

MAX_RESULTS = 32
MAX_STACK = 64


@dataclass(frozen=True)
class Outcome:
    """The agent's verdict on one run, ready for the status."""

    status: str
    """Succeeded or Failed, as the agent saw it."""
    run_id: str | None = None
    generation: int | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    """BatchResult dicts, camelCase as in the CRD."""
    summary: dict[str, Any] = field(default_factory=dict)
    stack: dict[str, str] = field(default_factory=dict)
    trace_id: str | None = None
    error: str | None = None
    """The agent's error, prefixed with the field it names (if any)."""
    error_field: str | None = None
    source: str = ""
    """Where it was read from: the ConfigMap or the termination message."""

    @property
    def succeeded(self) -> bool:
        return self.status == "Succeeded"


def batch_result(row: Mapping[str, Any]) -> dict[str, Any]:
    """One headline row of the result document as a status BatchResult (camelCase)."""
    latency = row.get("latency_ms") or {}
    model = BatchResult(
        batch_size=int(row["batch_size"]),
        scenario=str(row["scenario"]),
        latency_ms=LatencySummary(**{k: latency.get(k) for k in ("p50", "p90", "p99", "mean")}),
        throughput=row.get("throughput"),
        qps=row.get("qps"),
        accuracy=AccuracySummary(top1=row.get("top1"), top5=row.get("top5")),
        valid=row.get("valid"),
        invalid_reasons=[str(r)[:1024] for r in (row.get("invalid_reasons") or [])][:16],
    )
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def headline_summary(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """status.summary: the first batch size, flattened for the printer columns."""
    if not rows:
        return {}
    first = rows[0]
    model = Summary(
        batch_size=int(first["batch_size"]),
        p50_ms=(first.get("latency_ms") or {}).get("p50"),
        throughput=first.get("throughput"),
        top1=first.get("top1"),
    )
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def outcome_from_document(document: Mapping[str, Any], source: str = "") -> Outcome:
    """An Outcome from a full result document or a compact summary (they share the keys the
    status needs; a full document is compacted first)."""
    doc = document if document.get("kind") == "EvaluationSummary" else compact_summary(document)
    rows = [r for r in doc.get("results") or [] if isinstance(r, Mapping)][:MAX_RESULTS]
    try:
        results = [batch_result(r) for r in rows]
        summary = headline_summary(rows)
    except (KeyError, TypeError, ValueError, ValidationError):
        results, summary = [], {}
    error = doc.get("error") if isinstance(doc.get("error"), Mapping) else None
    error_field = str(error["field"]) if error and error.get("field") else None
    error_text = None
    if error:
        message = str(error.get("message") or error.get("type") or "unknown error")
        error_text = f"{error_field}: {message}" if error_field else message
    generation = (doc.get("evaluation") or {}).get("generation")
    stack = doc.get("stack_summary") or {}
    return Outcome(
        status=str(doc.get("status") or "Failed"),
        run_id=doc.get("run_id"),
        generation=int(generation) if isinstance(generation, int) else None,
        results=results,
        summary=summary,
        stack={str(k): str(v) for k, v in list(stack.items())[:MAX_STACK]},
        trace_id=doc.get("trace_id"),
        error=error_text,
        error_field=error_field,
        source=source,
    )


def _load_json(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def outcome_from_configmap(configmap: Mapping[str, Any] | None, generation: int) -> Outcome | None:
    """The Outcome in the results ConfigMap, if it holds one for ``generation``."""
    data = (configmap or {}).get("data") or {}
    for key in (RESULT_KEY, SUMMARY_KEY):
        document = _load_json(data.get(key))
        if document is None:
            continue
        outcome = outcome_from_document(document, source=f"configmap {key}")
        if _same_generation(outcome, generation):
            return outcome
    return None


def _same_generation(outcome: Outcome, generation: int) -> bool:
    return outcome.generation is None or outcome.generation == generation


def termination_messages(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """Termination messages of the agent container, newest pod first."""
    found: list[tuple[str, str]] = []
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") != names.CONTAINER_NAME:
                continue
            terminated = (status.get("state") or {}).get("terminated") or {}
            message = terminated.get("message")
            if message:
                stamp = str(terminated.get("finishedAt") or "")
                found.append((stamp, str(message)))
    return [message for _, message in sorted(found, reverse=True)]


def outcome_from_pods(pods: Sequence[Mapping[str, Any]], generation: int) -> Outcome | None:
    """The Outcome in the newest agent termination message; a message that is not the JSON
    summary (FallbackToLogsOnError put the log tail there) becomes a Failed outcome whose
    error is that text, so the user still sees why the agent died."""
    for message in termination_messages(pods):
        document = _load_json(message)
        if document is not None:
            outcome = outcome_from_document(document, source="termination message")
            if _same_generation(outcome, generation):
                return outcome
            continue
        return Outcome(status="Failed", error=message.strip()[-4000:], source="container log")
    return None
