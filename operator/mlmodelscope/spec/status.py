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


class RecordState(StrEnum):
    RECORDED = "Recorded"
    PENDING = "Pending"
    NOT_RECORDED = "NotRecorded"


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


class IntervalMs(SpecModel):
    """A latency over a measurement's repetitions (scenario.repetitions 2 or more): the mean
    of the repetitions' figures and its bootstrap confidence interval, in milliseconds."""

    estimate: float
    """The mean over the repetitions (ms)."""
    low: float | None = None
    """The interval's lower end (ms); absent when none could be drawn (no scipy)."""
    high: float | None = None
    """The interval's upper end (ms)."""
    confidence_level: float | None = None
    """The interval's confidence level (0.95 by default)."""
    repetitions: int | None = None
    """How many repetitions the mean and interval are over."""


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
    p50_interval_ms: IntervalMs | None = None
    """With scenario.repetitions 2 or more: the repetitions' mean p50 and its bootstrap
    confidence interval (the result document's measurements[].spread.p50_s, in ms)."""
    throughput: float | None = None
    """Samples per second."""
    qps: float | None = None
    """Queries per second (Server: achieved)."""
    top1: float | None = None
    """Top-1 accuracy of the separate accuracy pass, 0..1."""
    top5: float | None = None
    """Top-5 accuracy of the separate accuracy pass, 0..1."""
    metric: str | None = None
    """The name of the task's primary metric: top1 (classification), map (detection), hmean
    (text-detection), miou (segmentation), accuracy (text-classification), psnr in dB
    (image-to-image)."""
    metric_value: float | None = None
    """The task's primary metric from the accuracy pass."""
    valid: bool | None = None
    """MLPerf-style verdict: VALID (true) or INVALID (false)."""
    invalid_reasons: Annotated[list[str], Field(max_length=16)] = []
    """Why the measurement is INVALID."""
    joules_per_inference: float | None = None
    """Energy per inference (J per sample) of the reported window, from the hardware's
    counter; absent: not measured (the measurement's ``energy.reason`` says why)."""
    energy_method: Literal["nvml", "rapl"] | None = None
    """The counter read for ``joulesPerInference``: nvml (the GPU board) or rapl (the CPU
    packages)."""
    cost_per_1000: float | None = None
    """USD per 1,000 inferences at the measured throughput, from the price per node-hour
    given to the run (the result document's ``cost`` names it); absent: no price given."""


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
    metric: str | None = None
    """The task's primary metric: top1, miou or accuracy."""
    metric_value: float | None = None
    """Its value from the accuracy pass."""


class StartupStatus(SpecModel):
    """How long the run took to reach its first timed query (warm-up excluded from the
    measurement, included here: it is start-up)."""

    first_timed_query_at: str = Field(json_schema_extra={"format": "date-time"})
    """When the agent issued its first timed query (the node's clock, UTC)."""
    agent_seconds: float = Field(ge=0)
    """The agent process's start to its first timed query: imports, model fetch and load,
    dataset, warm-up."""
    job_seconds: float | None = None
    """The Job's creation to the first timed query: also scheduling, image pull and the
    container's start. From two clocks (the API server's, in whole seconds, and the node's),
    so good to about a second; absent when the Job was gone before its results were read."""


class RunRecord(SpecModel):
    """An earlier run, kept in status.history when the spec changed: finished, or replaced
    before it ended (then with the phase it had)."""

    generation: int
    """metadata.generation the run evaluated."""
    run_id: str | None = None
    """The agent's run UUID."""
    phase: Phase
    """How it ended, or the phase it had when a spec edit replaced it."""
    completion_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When it ended."""
    summary: Summary = Summary()
    """Its headline numbers."""


class RecordStatus(SpecModel):
    """Whether the run is in the operator's results store (present only when the operator has
    one: ``MLMS_OPERATOR_STORE_URL``)."""

    state: RecordState
    """Recorded (in the store), Pending (the store failed; the result waits in ConfigMap
    mlmodelscope-unrecorded-<runId> and is retried) or NotRecorded (there is no full result
    document to record, or the store rejected it; the message says why)."""
    run_id: str | None = None
    """The run UUID the record is about."""
    recorded_at: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When the store took it (or found it already there)."""
    attempts: int = 0
    """Writes to the store tried so far."""
    message: Annotated[str, Field(max_length=4096)] = ""
    """The last store error, or why the run is not recorded."""


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
    record: RecordStatus | None = None
    """Whether this run is recorded in the results store (absent without a store)."""
    startup: StartupStatus | None = None
    """Start-up of the run: Job creation and agent start to the first timed query."""
