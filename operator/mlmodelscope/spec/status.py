"""The ModelEvaluation status: the operator's API to users, GitOps tools and dashboards.

Conditions follow metav1.Condition so `kubectl wait --for=condition=Succeeded` and Argo CD's
health checks read them without special cases.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from mlmodelscope.spec.base import SpecModel


class Phase(StrEnum):
    PENDING = "Pending"
    QUEUED = "Queued"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class Condition(SpecModel):
    """A metav1.Condition: the latest observation of one aspect of the evaluation."""

    type: Annotated[str, Field(max_length=316)]
    """Condition type, e.g. Ready, Running, Succeeded, Failed, Valid."""
    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""
    reason: Annotated[str, Field(max_length=1024)] = ""
    """CamelCase reason, e.g. InvalidSpec, Unschedulable, DeadlineExceeded, ResultsMissing."""
    message: Annotated[str, Field(max_length=32768)] = ""
    """Human-readable detail, naming the field or the scheduler's message."""
    last_transition_time: str | None = Field(
        default=None, json_schema_extra={"format": "date-time"}
    )
    """When status last changed."""
    observed_generation: int | None = None
    """The metadata.generation this condition was set for."""


class LatencySummary(SpecModel):
    """Latency quantiles of one measurement, in milliseconds."""

    p50: float | None = None
    """Median latency (ms)."""
    p90: float | None = None
    """90th percentile latency (ms)."""
    p99: float | None = None
    """99th percentile latency (ms)."""
    mean: float | None = None
    """Mean latency (ms)."""


class BatchResult(SpecModel):
    """The headline numbers of one batch size: a row of the result document's ``results``
    (serialized by field name, snake_case), of the agent's compact summary, and of
    ``status.results`` (by alias, camelCase). One type on every path, so no side reshapes it.
    """

    batch_size: int
    """Batch size measured."""
    scenario: str
    """Scenario type."""
    latency_ms: LatencySummary = LatencySummary()
    """Query latency quantiles."""
    throughput: float | None = None
    """Samples per second."""
    qps: float | None = None
    """Queries per second (Server: achieved)."""
    top1: float | None = None
    """Top-1 accuracy of the separate accuracy pass, 0..1."""
    top5: float | None = None
    """Top-5 accuracy of the separate accuracy pass, 0..1."""
    valid: bool | None = None
    """MLPerf-style verdict: VALID (true) or INVALID (false)."""
    invalid_reasons: Annotated[list[str], Field(max_length=16)] = []
    """Why the measurement is INVALID."""


class Summary(SpecModel):
    """Headline numbers of the first batch size, flattened for printer columns."""

    batch_size: int | None = None
    """Batch size these numbers are for."""
    p50_ms: float | None = None
    """Median latency (ms)."""
    throughput: float | None = None
    """Samples per second."""
    top1: float | None = None
    """Top-1 accuracy, 0..1."""


class RunRecord(SpecModel):
    """A finished earlier run, kept in status.history when the spec changed."""

    generation: int
    """metadata.generation the run evaluated."""
    run_id: str | None = None
    """The agent's run UUID."""
    phase: Phase
    """How it ended."""
    completion_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When it ended."""
    summary: Summary = Summary()
    """Its headline numbers."""


class EvaluationStatus(SpecModel):
    """Observed state of a ModelEvaluation, written by the operator."""

    phase: Phase = Phase.PENDING
    """Pending, Queued, Running, Succeeded or Failed."""
    conditions: Annotated[list[Condition], Field(max_length=16)] = []
    """Standard conditions (metav1.Condition)."""
    observed_generation: int | None = None
    """The metadata.generation the status describes."""
    job_name: str | None = None
    """Name of the evaluation Job."""
    results_config_map: str | None = None
    """ConfigMap holding the full result document."""
    start_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the evaluation started running."""
    completion_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When it finished."""
    run_id: str | None = None
    """UUID of the agent's run."""
    results: Annotated[list[BatchResult], Field(max_length=32)] = []
    """Per batch size summary."""
    summary: Summary = Summary()
    """Headline numbers (first batch size)."""
    stack: Annotated[dict[str, str], Field(max_length=64)] = {}
    """Provenance summary: framework and version, device, GPU, CPU, image, model sha256."""
    trace_id: str | None = Field(default=None, alias="traceID")
    """OpenTelemetry trace ID of the run (look it up in Jaeger)."""
    message: Annotated[str, Field(max_length=32768)] = ""
    """Latest human-readable message."""
    history: Annotated[list[RunRecord], Field(max_length=10)] = []
    """Earlier runs of this evaluation (older generations), newest first."""
