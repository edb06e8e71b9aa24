"""The EvaluationSweep: a matrix of ModelEvaluations (models x frameworks x hardware x
scenarios x batch sizes, each combination ``repeats`` times) that the operator creates, runs
``parallelism`` at a time, and sums up.

This module is the whole spec side of a sweep: the models (whose docstrings become the CRD's
descriptions), the admission rules (CEL for the API server, the same predicates here), and
:func:`expand`, the pure function that turns a sweep into its child ModelEvaluation documents.
The operator only creates what :func:`expand` returns, so ``mlms validate`` sees exactly the
children the cluster would run.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from mlmodelscope.spec.base import Duration, Rule, SpecModel, exactly_one_of
from mlmodelscope.spec.document import (
    API_VERSION_FULL,
    KIND,
    ModelEvaluation,
    ModelEvaluationResource,
    ObjectMeta,
    Problem,
    SpecValidationError,
    check_kind,
    problems_from_validation_error,
    semantic_problems,
)
from mlmodelscope.spec.evaluation import (
    EXPORT_RULES,
    FORMATS_BY_FRAMEWORK,
    NODE_SELECTOR_KEYS,
    Dataset,
    Device,
    FrameworkName,
    Hardware,
    ModelExport,
    ModelReference,
    ModelSource,
    PostprocessStep,
    PreprocessStep,
    Scenario,
    ScenarioType,
    Task,
    Tracing,
)
from mlmodelscope.spec.manifest import (
    ModelLookup,
    ResolvedModel,
    UnresolvedModelError,
    framework_mismatch,
    resolve_evaluation,
    resolve_model,
)
from mlmodelscope.spec.status import Condition, IntervalMs, Phase

SWEEP_KIND: Final = "EvaluationSweep"
SWEEP_PLURAL: Final = "evaluationsweeps"
SWEEP_SHORT_NAME: Final = "sweep"
LABEL_SWEEP: Final = "mlmodelscope.io/sweep"
"""Label on every child ModelEvaluation; its value is the sweep's name."""
LABEL_MODEL: Final = "mlmodelscope.io/sweep-model"
"""Label on every child: the name of its ``spec.matrix.models`` entry."""
LABEL_FRAMEWORK: Final = "mlmodelscope.io/framework"
LABEL_DEVICE: Final = "mlmodelscope.io/device"
LABEL_GPU_PRODUCT: Final = "mlmodelscope.io/gpu-product"
"""Only on children whose hardware names a GPU product."""
LABEL_SCENARIO: Final = "mlmodelscope.io/scenario"
LABEL_BATCH_SIZE: Final = "mlmodelscope.io/batch-size"
"""Only when the sweep has a ``batchSizes`` axis (otherwise a child measures several)."""
LABEL_CELL: Final = "mlmodelscope.io/sweep-cell"
"""Only with ``spec.repeats`` > 1: the child's cell (its matrix combination), named as the
child would be without repeats; the cell's repeats share it."""
LABEL_REPEAT: Final = "mlmodelscope.io/sweep-repeat"
"""Only with ``spec.repeats`` > 1: which repeat of its cell the child is, 1 to repeats."""

MAX_CHILDREN: Final = 200
"""The most ModelEvaluations one sweep may create; larger matrices are refused at admission."""
MAX_CHILD_NAME: Final = 63
"""A child's name also names its Job (a pod label value, <= 63) and ConfigMaps."""
HASH_LENGTH: Final = 8

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
LABEL_VALUE_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"

CAP_MESSAGE = (
    f"the matrix has more than {MAX_CHILDREN} combinations (models x frameworks x hardware x "
    f"scenarios x batchSizes); a sweep creates at most {MAX_CHILDREN} ModelEvaluations: split "
    "it into several sweeps, e.g. one per model or per framework"
)
REPEATS_CAP_MESSAGE = (
    f"the matrix's combinations times repeats make more than {MAX_CHILDREN} ModelEvaluations, "
    f"and a sweep creates at most {MAX_CHILDREN}: lower repeats, or split the sweep into "
    "several, e.g. one per model or per framework"
)


class FailurePolicy(StrEnum):
    CONTINUE = "Continue"
    STOP = "Stop"


class SweepPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPED = "Stopped"


# ------------------------------------------------------------------------------------- matrix


class SweepModel(SpecModel):
    """One model of the matrix, inline (model) or a Model manifest (modelRef), with optional
    processing that replaces the template's (or the Model's)."""

    name: Annotated[str, Field(min_length=1, max_length=40, pattern=DNS_LABEL_PATTERN)]
    """Short name of this entry (a DNS label: lower-case letters, digits, '-'), used in child
    names and the mlmodelscope.io/sweep-model label; unique within the sweep. Two entries may
    use the same model with different processing."""

    model: ModelSource | None = None
    """The model and where to fetch it (the same fields as a ModelEvaluation's spec.model);
    or name a Model with modelRef instead."""

    model_ref: ModelReference | None = None
    """A Model in the sweep's namespace: each child names it in its own spec.modelRef and
    resolves it when it starts (the Model's exports cover the other frameworks)."""

    exports: Annotated[list[ModelExport], Field(max_length=4)] = []
    """The same model in other formats: each child uses model.uri when its framework loads
    model.format, otherwise the first export in a format the framework loads (inline models
    only: a Model keeps its own exports)."""

    preprocessing: Annotated[list[PreprocessStep] | None, Field(max_length=32)] = None
    """Per-sample steps for this model, replacing spec.template.preprocessing (unset: the
    template's if set there, otherwise the Model's for a modelRef)."""

    postprocessing: Annotated[list[PostprocessStep] | None, Field(max_length=16)] = None
    """Steps from model output to predictions for this model, replacing
    spec.template.postprocessing (unset: the template's if set there, otherwise the
    Model's for a modelRef)."""

    dataset: Dataset | None = None
    """The evaluation data of this model's children, replacing spec.template.dataset (unset:
    the template's). With task, one sweep spans tasks: a detector on a coco dataset next to
    a classifier on a text one."""

    task: Task | None = None
    """What this model does, replacing spec.template.task (unset: the template's). Each
    child's task and dataset must go together as in a ModelEvaluation."""

    rules: ClassVar[tuple[Rule, ...]] = (
        exactly_one_of("model", "modelRef"),
        Rule(
            cel="!has(self.exports) || has(self.model)",
            message="exports go with an inline model; for a modelRef, list them in the Model",
            field="exports",
            check=lambda m: not m.exports or m.model is not None,
        ),
        *EXPORT_RULES,
    )


class SweepHardware(SpecModel):
    """One hardware target of the matrix: a device, and for gpu optionally a GPU product.
    The other hardware settings (gpus, nodeSelector, tolerations, resources, runtimeClassName)
    come from spec.template.hardware; cpu targets use no GPUs."""

    device: Device
    """cpu or gpu."""

    gpu_product: Annotated[str | None, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)] = None
    """GPU model as GPU Feature Discovery labels it (nvidia.com/gpu.product), e.g.
    NVIDIA-A100-SXM4-80GB; needs device gpu. Unset: any GPU."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="!has(self.gpuProduct) || self.device == 'gpu'",
            message="gpuProduct needs device: gpu",
            field="gpuProduct",
            check=lambda m: m.gpu_product is None or m.device == Device.GPU,
        ),
    )


def _axis(self: Any, name: str) -> int:
    value = getattr(self, name)
    return 1 if value is None else len(value)


def _combinations(matrix: SweepMatrix) -> int:
    return (
        len(matrix.models)
        * len(matrix.frameworks)
        * _axis(matrix, "hardware")
        * _axis(matrix, "scenarios")
        * _axis(matrix, "batch_sizes")
    )


def _combinations_cel(matrix: str) -> str:
    """CEL for the number of combinations of the matrix at ``matrix`` (the axes multiplied)."""
    return (
        f"size({matrix}.models) * size({matrix}.frameworks)"
        f" * (has({matrix}.hardware) ? size({matrix}.hardware) : 1)"
        f" * (has({matrix}.scenarios) ? size({matrix}.scenarios) : 1)"
        f" * (has({matrix}.batchSizes) ? size({matrix}.batchSizes) : 1)"
    )


def _unique_cel(field: str, key: str = "") -> str:
    member = f"x.{key}" if key else "x"
    other = f"y.{key}" if key else "y"
    unique = f"self.{field}.all(x, self.{field}.exists_one(y, {other} == {member}))"
    return f"!has(self.{field}) || {unique}"


class SweepMatrix(SpecModel):
    """The axes of the sweep. Every combination of one entry per axis becomes one child
    ModelEvaluation, in the order models x frameworks x hardware x scenarios x batchSizes. An
    axis that is not set takes its value from spec.template. At most 200 combinations."""

    models: Annotated[list[SweepModel], Field(min_length=1, max_length=MAX_CHILDREN)]
    """The models to evaluate (at least one), each under a unique name."""

    frameworks: Annotated[list[FrameworkName], Field(min_length=1, max_length=3)]
    """The frameworks to run every model in (at least one): pytorch, tensorflow, onnxruntime.
    A model needs a format each framework loads, as model.format or among its exports."""

    hardware: Annotated[list[SweepHardware] | None, Field(min_length=1, max_length=16)] = None
    """Hardware targets (unset: spec.template.hardware alone)."""

    scenarios: Annotated[list[ScenarioType] | None, Field(min_length=1, max_length=4)] = None
    """Scenario types, each with the settings of spec.template.scenario (unset: the template's
    type alone). targetQPS applies to Server children only."""

    batch_sizes: Annotated[list[StrictInt] | None, Field(min_length=1, max_length=32)] = None
    """Batch sizes, one per child (unset: each child measures all of
    spec.template.scenario.batchSizes)."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel=_unique_cel("models", "name"),
            message="model names must be unique; rename one of the entries",
            field="models",
            check=lambda m: len({x.name for x in m.models}) == len(m.models),
        ),
        Rule(
            cel=_unique_cel("frameworks"),
            message="frameworks must be unique",
            field="frameworks",
            check=lambda m: len(set(m.frameworks)) == len(m.frameworks),
        ),
        Rule(
            cel="!has(self.hardware) || self.hardware.all(x, self.hardware.exists_one(y, "
            "y.device == x.device && (has(y.gpuProduct) ? y.gpuProduct.lowerAscii() : '') == "
            "(has(x.gpuProduct) ? x.gpuProduct.lowerAscii() : '')))",
            message="hardware entries must be unique (device and gpuProduct, ignoring case)",
            field="hardware",
            check=lambda m: (
                m.hardware is None
                or len({(h.device, (h.gpu_product or "").lower()) for h in m.hardware})
                == len(m.hardware)
            ),
        ),
        Rule(
            cel=_unique_cel("scenarios"),
            message="scenarios must be unique",
            field="scenarios",
            check=lambda m: m.scenarios is None or len(set(m.scenarios)) == len(m.scenarios),
        ),
        Rule(
            cel="!has(self.batchSizes) || self.batchSizes.all(b, b > 0)",
            message="every batch size must be > 0",
            field="batchSizes",
            check=lambda m: m.batch_sizes is None or all(b > 0 for b in m.batch_sizes),
        ),
        Rule(
            cel=_unique_cel("batchSizes"),
            message="batch sizes must be unique",
            field="batchSizes",
            check=lambda m: m.batch_sizes is None or len(set(m.batch_sizes)) == len(m.batch_sizes),
        ),
        Rule(
            cel=f"{_combinations_cel('self')} <= {MAX_CHILDREN}",
            message=CAP_MESSAGE,
            field="",
            check=lambda m: _combinations(m) <= MAX_CHILDREN,
            reason="FieldValueForbidden",
        ),
    )


# ----------------------------------------------------------------------------------- template


class TemplateScenario(Scenario):
    """How queries are issued (the fields of a ModelEvaluation's spec.scenario). type is
    replaced by spec.matrix.scenarios when set; targetQPS then reaches Server children only."""

    rules: ClassVar[tuple[Rule, ...]] = tuple(
        r for r in Scenario.rules if r.field != "targetQPS" or "'auto'" in r.cel
    )
    """Scenario's rules, less the two that tie targetQPS to type Server: the scenarios axis
    decides the type, and every child is checked with all of them."""


class TemplateHardware(Hardware):
    """Where the children run (the fields of a ModelEvaluation's spec.hardware). device and
    gpuProduct are replaced by spec.matrix.hardware when set; cpu targets then use no GPUs."""

    rules: ClassVar[tuple[Rule, ...]] = (NODE_SELECTOR_KEYS,)
    """The nodeSelector's keys only: device and gpus are checked on every child, where the
    hardware axis has been applied."""


class SweepTemplate(SpecModel):
    """What every child shares: every field of a ModelEvaluation's spec except model and
    framework, which come from the matrix."""

    preprocessing: Annotated[list[PreprocessStep], Field(max_length=32)] = []
    """Per-sample steps from dataset sample to model input, in order (a models entry may
    replace them)."""

    postprocessing: Annotated[list[PostprocessStep], Field(max_length=16)] = []
    """Steps from model output to predictions, in order (a models entry may replace them)."""

    dataset: Dataset | None = None
    """The evaluation data (a models entry may replace it); required unless every
    spec.matrix.models entry sets its own dataset."""

    task: Task = Task()
    """What the models do, and so which metrics the accuracy pass computes (a models entry
    may replace it)."""

    scenario: TemplateScenario = TemplateScenario()
    """How queries are issued and measured (spec.matrix.scenarios and batchSizes replace type
    and batchSizes)."""

    hardware: TemplateHardware = TemplateHardware()
    """Where the children run (spec.matrix.hardware replaces device and gpuProduct)."""

    tracing: Tracing = Tracing()
    """Across-stack tracing."""

    timeout: Duration = "1h"
    """Wall-clock limit of each child's evaluation job (activeDeadlineSeconds)."""

    retries: Annotated[StrictInt, Field(ge=0, le=10)] = 0
    """Times a failed evaluation pod is retried (each child Job's backoffLimit)."""

    ttl_after_finished: Duration | None = None
    """Delete each finished child Job (not the results) after this long, e.g. '24h'."""


# --------------------------------------------------------------------------------------- spec


class SweepSpec(SpecModel):
    """A matrix of evaluations: which combinations to run, what they share, how many at once."""

    matrix: SweepMatrix
    """The axes. Every combination of one entry per axis becomes one child ModelEvaluation,
    in the order models x frameworks x hardware x scenarios x batchSizes; an axis that is not
    set takes its value from template. At most 200 combinations."""

    template: SweepTemplate
    """The settings every child shares (a ModelEvaluation spec without model and framework)."""

    parallelism: Annotated[StrictInt, Field(ge=1, le=MAX_CHILDREN)] = 1
    """The most children running (created and not finished) at once."""

    failure_policy: FailurePolicy = FailurePolicy.CONTINUE
    """Continue: run every child whatever happens to the others (the sweep ends Failed if any
    failed). Stop: create no further children after the first failure (the sweep ends Stopped;
    children already running finish)."""

    suspend: StrictBool = False
    """true: create no further children (running ones finish); false again resumes the sweep."""

    repeats: Annotated[StrictInt, Field(ge=1, le=MAX_CHILDREN)] = 1
    """Children per matrix combination (cell), each its own ModelEvaluation and pod, named
    <cell>-r1 to <cell>-rN, so the spread between pods (start-up state included) is measured;
    status.cells then holds each cell's median over its repeats with a bootstrap interval.
    1: one child per cell, named as without this field. Combinations x repeats: at most 200."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel=f"{_combinations_cel('self.matrix')} > {MAX_CHILDREN} || "
            f"{_combinations_cel('self.matrix')} * (has(self.repeats) ? self.repeats : 1) "
            f"<= {MAX_CHILDREN}",
            message=REPEATS_CAP_MESSAGE,
            field="repeats",
            check=lambda m: (
                _combinations(m.matrix) > MAX_CHILDREN
                or _combinations(m.matrix) * m.repeats <= MAX_CHILDREN
            ),
            reason="FieldValueForbidden",
        ),
        Rule(
            cel="has(self.template.dataset) || self.matrix.models.all(m, has(m.dataset))",
            message="required unless every spec.matrix.models entry sets its own dataset",
            field="template.dataset",
            check=lambda m: (
                m.template.dataset is not None
                or all(x.dataset is not None for x in m.matrix.models)
            ),
            reason="FieldValueRequired",
        ),
    )


# ------------------------------------------------------------------------------------- status


class SweepChildStatus(SpecModel):
    """One row of the sweep's table: a child ModelEvaluation and its headline numbers."""

    name: str
    """Name of the child ModelEvaluation."""
    phase: Phase | None = None
    """The child's phase; unset while it is not created yet."""
    model: str | None = None
    """The spec.matrix.models entry."""
    framework: str | None = None
    """Framework name."""
    device: str | None = None
    """cpu or gpu."""
    gpu_product: str | None = None
    """GPU product the child is pinned to, if any."""
    scenario: str | None = None
    """Scenario type."""
    batch_size: int | None = None
    """Batch size of the headline numbers."""
    p50_ms: float | None = None
    """Median latency (ms) of that batch size."""
    p99_ms: float | None = None
    """99th percentile latency (ms)."""
    p50_interval_ms: IntervalMs | None = None
    """With the child's scenario.repetitions 2 or more: its repetitions' mean p50 and the
    bootstrap interval of that mean, inside its one pod (its status.results[0])."""
    throughput: float | None = None
    """Samples per second."""
    top1: float | None = None
    """Top-1 accuracy of the accuracy pass, 0..1 (classification children)."""
    metric: str | None = None
    """The name of the child's primary metric (its status.summary.metric): top1, map, miou,
    accuracy, psnr, ... A sweep over tasks has several in one table."""
    metric_value: float | None = None
    """Its value from the accuracy pass (psnr in dB, the others 0..1)."""
    run_id: str | None = None
    """UUID of the child's run."""
    cell: str | None = None
    """The cell (status.cells[].name) this child is a repeat of; only with spec.repeats > 1."""
    repeat: int | None = None
    """Which repeat of its cell, 1 to spec.repeats; only with spec.repeats > 1."""
    message: Annotated[str, Field(max_length=4096)] = ""
    """Why the child failed, or what it waits for."""


class CellEstimate(SpecModel):
    """One figure of a cell over its repeats that succeeded: their median and a bootstrap
    confidence interval of that median (status.interval says how it is drawn)."""

    median: float
    """The median over the repeats."""
    low: float | None = None
    """Lower end of the interval; absent with fewer than 2 repeats (one value has no
    interval, and none is made up) or when the operator has no scipy (the cell's message
    says which)."""
    high: float | None = None
    """Upper end of the interval; absent when low is."""
    repeats: int
    """How many repeats the figure is over: those that succeeded and report it."""


class RepeatInterval(SpecModel):
    """How the cells' intervals are drawn with scipy.stats.bootstrap, so a reader can
    recompute them from the children's rows."""

    statistic: Literal["median"] = "median"
    """What the interval is of: the median of the repeats' figures."""
    method: Literal["percentile"] = "percentile"
    """percentile: with a handful of repeats BCa estimates its bias and acceleration from the
    same few values (where the middle values tie, its jackknife is flat and BCa undefined), and
    the percentile interval never leaves the range the repeats span."""
    confidence_level: float = 0.95
    """The interval's confidence level."""
    resamples: int = 9999
    """Bootstrap resamples."""
    seed: int = 0
    """The resampling's fixed seed: the same repeats give the same interval at every
    reconcile."""


class SweepCellStatus(SpecModel):
    """One matrix combination of a sweep with spec.repeats > 1, over its repeats."""

    name: str
    """The cell's name: the name its one child would have without repeats (its children's
    mlmodelscope.io/sweep-cell label)."""
    model: str | None = None
    """The spec.matrix.models entry."""
    framework: str | None = None
    """Framework name."""
    device: str | None = None
    """cpu or gpu."""
    gpu_product: str | None = None
    """GPU product the cell is pinned to, if any."""
    scenario: str | None = None
    """Scenario type."""
    batch_size: int | None = None
    """Batch size of the figures."""
    repeats: int
    """Repeats asked for (spec.repeats)."""
    succeeded: int = 0
    """Repeats that succeeded: the figures are over these."""
    failed: int = 0
    """Repeats that failed."""
    p50_ms: CellEstimate | None = None
    """Median latency (ms) over the repeats."""
    throughput: CellEstimate | None = None
    """Samples per second over the repeats."""
    metric: str | None = None
    """The name of the children's primary metric (top1, map, miou, ...)."""
    metric_value: float | None = None
    """Its median over the repeats."""
    message: Annotated[str, Field(max_length=4096)] = ""
    """How many of the repeats succeeded, and why there is no interval when there is none."""


class SweepStatus(SpecModel):
    """Observed state of an EvaluationSweep, written by the operator."""

    observed_generation: int | None = None
    """The metadata.generation the status describes."""
    phase: SweepPhase = SweepPhase.PENDING
    """Pending: no child created yet. Running: children are being created or run. Suspended:
    spec.suspend is true, no child is created (running ones finish). Succeeded: every child
    succeeded. Failed: every child finished and at least one failed (failurePolicy Continue),
    or the sweep cannot be expanded (see conditions). Stopped: a child failed under
    failurePolicy Stop, so no further children were created."""
    total: int = 0
    """Children the matrix defines."""
    created: int = 0
    """Children created so far."""
    succeeded: int = 0
    """Children that succeeded."""
    failed: int = 0
    """Children that failed."""
    active: int = 0
    """Children created and not finished."""
    progress: Annotated[str, Field(max_length=64)] = ""
    """Succeeded out of total, e.g. '7/12 Succeeded'."""
    children: Annotated[list[SweepChildStatus], Field(max_length=MAX_CHILDREN)] = []
    """Per child: phase and headline numbers, in matrix order (with spec.repeats > 1, repeat
    by repeat: every cell's first repeat, then every cell's second, ...)."""
    cells: Annotated[list[SweepCellStatus] | None, Field(max_length=MAX_CHILDREN)] = None
    """Only with spec.repeats > 1: per matrix combination, in matrix order, its figures over
    its repeats."""
    interval: RepeatInterval | None = None
    """How the cells' intervals are drawn; present with cells."""
    conditions: Annotated[list[Condition], Field(max_length=16)] = []
    """Standard conditions (metav1.Condition)."""
    message: Annotated[str, Field(max_length=32768)] = ""
    """Latest human-readable message."""


class EvaluationSweep(BaseModel):
    """An EvaluationSweep resource, as stored in the cluster or written in a file."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: Literal["mlmodelscope.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["EvaluationSweep"]
    metadata: ObjectMeta
    spec: SweepSpec
    status: SweepStatus | None = None


# ------------------------------------------------------------------------------------ parsing


_EMPTY_AXIS = {
    "models": "an empty axis creates no ModelEvaluations: list at least one model",
    "frameworks": "an empty axis creates no ModelEvaluations: list at least one framework",
    "hardware": "an empty axis creates no ModelEvaluations: list a target, or remove "
    "hardware to use spec.template.hardware",
    "scenarios": "an empty axis creates no ModelEvaluations: list a scenario type, or "
    "remove scenarios to use spec.template.scenario.type",
    "batchSizes": "an empty axis creates no ModelEvaluations: list a batch size, or remove "
    "batchSizes to measure spec.template.scenario.batchSizes in each child",
}


def _explain(problem: Problem) -> Problem:
    """pydantic's words for an empty axis, in the sweep's terms."""
    axis = problem.path.removeprefix("spec.matrix.")
    if axis in _EMPTY_AXIS and problem.message.startswith("List should have at least 1 item"):
        return Problem(problem.path, _EMPTY_AXIS[axis])
    if axis in _EMPTY_AXIS and problem.message.startswith("List should have at most"):
        return Problem(
            problem.path,
            f"{problem.message}; a sweep creates at most {MAX_CHILDREN} ModelEvaluations: "
            "split it into several sweeps, e.g. one per model or per framework",
        )
    return problem


def parse_sweep(
    document: Any, source: str = "<document>", models: ModelLookup | None = None
) -> EvaluationSweep:
    """Validate one parsed document, raising SpecValidationError that names every bad field,
    including every child the matrix would create (an axis combination that is invalid).
    ``models`` resolves modelRef entries (see :func:`expand`)."""
    document = check_kind(document, source, SWEEP_KIND)
    try:
        sweep = EvaluationSweep.model_validate(document)
    except ValidationError as exc:
        problems = [_explain(p) for p in problems_from_validation_error(exc, EvaluationSweep)]
        raise SpecValidationError(source, problems, SWEEP_KIND) from None
    _, problems = _expand(sweep, models)
    if problems:
        raise SpecValidationError(source, problems, SWEEP_KIND)
    return sweep


# ---------------------------------------------------------------------------------- expansion


@dataclass(frozen=True)
class SweepChild:
    """One child of a sweep: its name, its axis values (keys as in SweepChildStatus: model,
    framework, device, gpuProduct, scenario, batchSize; gpuProduct and batchSize only when the
    child has one), the complete ModelEvaluation document (no namespace, no owner), its cell
    (its name without the repeat's suffix; ``name`` itself without repeats) and which repeat
    of that cell it is (None without repeats)."""

    name: str
    axes: dict[str, str]
    document: dict[str, Any]
    cell: str
    repeat: int | None = None


@dataclass(frozen=True)
class _Pick:
    """Indices of one combination, to point problems at the axis entries."""

    model: int
    framework: int
    hardware: int | None
    scenario: int | None
    batch: int | None


def _segment(text: str) -> str:
    """A DNS-label-safe piece of a child name."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", text.lower())).strip("-")


def _gpu_segment(product: str) -> str:
    return _segment(product).removeprefix("nvidia-") or _segment(product)


def _child_name(sweep: str, parts: list[str]) -> str:
    """``<sweep>-<part>-...``; when longer than MAX_CHILD_NAME, the sweep's name is cut
    (then the parts') and a hash of the full name keeps it unique."""
    base = _segment(sweep) or "sweep"
    rest = "-".join(p for p in parts if p)
    full = f"{base}-{rest}"
    if len(full) <= MAX_CHILD_NAME:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:HASH_LENGTH]
    room = MAX_CHILD_NAME - len(rest) - HASH_LENGTH - 2
    head = base[:room].rstrip("-") if room > 0 else ""
    if head:
        return f"{head}-{rest}-{digest}"
    return f"{full[: MAX_CHILD_NAME - HASH_LENGTH - 1].rstrip('-')}-{digest}"


def _model_for(entry: SweepModel, framework: FrameworkName) -> dict[str, Any] | None:
    """The model document for a framework: model itself, or the first export it can load."""
    assert entry.model is not None, "called for inline models only"
    loads = FORMATS_BY_FRAMEWORK[framework]
    model = entry.model.model_dump(mode="json", by_alias=True, exclude_unset=True)
    if entry.model.format in loads:
        return model
    for export in entry.exports:
        if export.format in loads:
            model.pop("sha256", None)
            return {**model, **export.model_dump(mode="json", by_alias=True, exclude_unset=True)}
    return None


def _sweep_path(child_path: str, pick: _Pick, entry: SweepModel) -> str:
    """Where a problem of a child's spec lives in the sweep."""
    rest = child_path.removeprefix("spec")
    field, _, tail = rest.lstrip(".").partition(".")
    field = field.split("[", 1)[0]
    sub = rest[len(field) + 1 :]
    models = f"spec.matrix.models[{pick.model}]"
    if field == "model" and entry.model_ref is not None:
        return f"{models}.modelRef.name"
    if field in ("model", "modelRef"):
        return f"{models}.{field}{sub}"
    if field == "framework":
        return f"spec.matrix.frameworks[{pick.framework}]"
    if field in ("preprocessing", "postprocessing", "dataset", "task"):
        if getattr(entry, field) is not None:
            return f"{models}.{field}{sub}"
        if field == "task" and not sub and entry.dataset is not None:
            return f"{models}.dataset"  # the template's task does not fit the entry's dataset
    hardware_axis = field == "hardware" and pick.hardware is not None
    if hardware_axis and tail.split(".")[0] in ("device", "gpuProduct", "gpus"):
        return f"spec.matrix.hardware[{pick.hardware}]"
    if field == "scenario":
        if tail.startswith("type") and pick.scenario is not None:
            return f"spec.matrix.scenarios[{pick.scenario}]"
        if tail.startswith("batchSizes") and pick.batch is not None:
            return f"spec.matrix.batchSizes[{pick.batch}]"
    return f"spec.template{rest}"


def _child_problems(
    document: dict[str, Any],
    name: str,
    pick: _Pick,
    entry: SweepModel,
    models: ModelLookup | None,
) -> list[Problem]:
    found: list[Problem]
    if entry.model_ref is not None and models is None:
        try:  # the schema alone: the child resolves its Model when it starts
            ModelEvaluationResource.model_validate(document)
        except ValidationError as exc:
            found = problems_from_validation_error(exc, ModelEvaluationResource)
        else:
            found = []
    else:
        if models is not None:
            try:
                document = resolve_evaluation(document, models, name)
            except SpecValidationError as exc:
                found = exc.problems
                return [_in_child(p, name, pick, entry) for p in found]
        try:
            evaluation = ModelEvaluation.model_validate(document)
        except ValidationError as exc:
            found = problems_from_validation_error(exc)
        else:
            found = semantic_problems(evaluation.spec)
    return [_in_child(p, name, pick, entry) for p in found]


def _in_child(problem: Problem, name: str, pick: _Pick, entry: SweepModel) -> Problem:
    return Problem(_sweep_path(problem.path, pick, entry), f"{problem.message} (in child {name})")


def _dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _child(
    sweep: EvaluationSweep,
    pick: _Pick,
    model: dict[str, Any] | None,
    template: dict[str, Any],
    repeat: int | None = None,
) -> SweepChild:
    """The child ModelEvaluation of one combination of axis entries (of one of its repeats,
    when ``repeat`` is set); ``model`` is None for a modelRef entry, whose child names the
    Model itself."""
    matrix, defaults = sweep.spec.matrix, sweep.spec.template
    entry, framework = matrix.models[pick.model], matrix.frameworks[pick.framework]
    target = None if pick.hardware is None else (matrix.hardware or [])[pick.hardware]
    scenario = None if pick.scenario is None else (matrix.scenarios or [])[pick.scenario]
    batch = None if pick.batch is None else (matrix.batch_sizes or [])[pick.batch]

    source: dict[str, Any] = (
        {"model": model} if entry.model_ref is None else {"modelRef": _dump(entry.model_ref)}
    )
    spec: dict[str, Any] = {**source, **template, "framework": {"name": framework.value}}
    if entry.preprocessing is not None:
        spec["preprocessing"] = [_dump(s) for s in entry.preprocessing]
    if entry.postprocessing is not None:
        spec["postprocessing"] = [_dump(s) for s in entry.postprocessing]
    if entry.dataset is not None:
        spec["dataset"] = _dump(entry.dataset)
    if entry.task is not None:
        spec["task"] = _dump(entry.task)
    hardware = dict(template.get("hardware", {}))
    if target is not None:
        hardware["device"] = target.device.value
        hardware.pop("gpuProduct", None)
        if target.gpu_product is not None:
            hardware["gpuProduct"] = target.gpu_product
        if target.device == Device.CPU:
            hardware.pop("gpus", None)
    scenario_spec = dict(template.get("scenario", {}))
    if scenario is not None:
        scenario_spec["type"] = scenario.value
        if scenario != ScenarioType.SERVER:
            scenario_spec.pop("targetQPS", None)
    if batch is not None:
        scenario_spec["batchSizes"] = [batch]
    for key, value in (("hardware", hardware), ("scenario", scenario_spec)):
        spec.pop(key, None)
        if value:
            spec[key] = value

    device = target.device if target else defaults.hardware.device
    product = target.gpu_product if target else defaults.hardware.gpu_product
    scenario_type = scenario or defaults.scenario.type
    parts = [entry.name, framework.value]
    if target is not None:
        parts += [device.value, _gpu_segment(product) if product else ""]
    if scenario is not None:
        parts.append(_segment(scenario.value))
    if batch is not None:
        parts.append(f"b{batch}")
    cell = _child_name(sweep.metadata.name, parts)
    name = cell if repeat is None else _child_name(sweep.metadata.name, [*parts, f"r{repeat}"])
    axes = {
        "model": entry.name,
        "framework": framework.value,
        "device": device.value,
        "scenario": scenario_type.value,
    }
    labels = {
        LABEL_SWEEP: sweep.metadata.name,
        LABEL_MODEL: entry.name,
        LABEL_FRAMEWORK: framework.value,
        LABEL_DEVICE: device.value,
        LABEL_SCENARIO: scenario_type.value,
    }
    if product:
        axes["gpuProduct"] = labels[LABEL_GPU_PRODUCT] = product
    if batch is not None:
        axes["batchSize"] = labels[LABEL_BATCH_SIZE] = str(batch)
    if repeat is not None:
        labels[LABEL_CELL], labels[LABEL_REPEAT] = cell, str(repeat)
    document = {
        "apiVersion": API_VERSION_FULL,
        "kind": KIND,
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }
    return SweepChild(name, axes, document, cell, repeat)


def _repeats(sweep: EvaluationSweep) -> list[int | None]:
    """The repeat indices of each cell: [None] without repeats (names as before the field)."""
    count = sweep.spec.repeats
    return [None] if count == 1 else list(range(1, count + 1))


def _indices(axis: list[Any] | None) -> list[int | None]:
    return [None] if axis is None else list(range(len(axis)))


def _resolved(
    entry: SweepModel, index: int, models: ModelLookup | None
) -> tuple[ResolvedModel | None, Problem | None]:
    """The Model of a modelRef entry, when there are Models to resolve it against."""
    if entry.model_ref is None or models is None:
        return None, None
    try:
        field = f"spec.matrix.models[{index}].modelRef.name"
        return resolve_model(entry.model_ref.name, models, field), None
    except UnresolvedModelError as exc:
        return None, exc.problem


def _expand(
    sweep: EvaluationSweep, models: ModelLookup | None = None
) -> tuple[list[SweepChild], list[Problem]]:
    matrix = sweep.spec.matrix
    template = _dump(sweep.spec.template)
    repeats = _repeats(sweep)
    cells: list[list[SweepChild]] = []
    problems: dict[tuple[str, str], Problem] = {}

    def add(problem: Problem) -> None:
        """Keep the first of identical problems (many children share a template)."""
        problems.setdefault((problem.path, problem.message.split(" (in child ")[0]), problem)

    for mi, entry in enumerate(matrix.models):
        resolved, unresolved = _resolved(entry, mi, models)
        if unresolved is not None:
            add(unresolved)
            continue
        for fi, framework in enumerate(matrix.frameworks):
            if resolved is not None and resolved.model_for(framework) is None:
                add(framework_mismatch(resolved, framework, f"spec.matrix.models[{mi}]"))
                continue
            model = _model_for(entry, framework) if entry.model is not None else None
            if model is None and entry.model is not None:
                loads = ", ".join(sorted(f.value for f in FORMATS_BY_FRAMEWORK[framework]))
                add(
                    Problem(
                        f"spec.matrix.models[{mi}]",
                        f"framework {framework.value!r} (spec.matrix.frameworks[{fi}]) loads "
                        f"{loads}, and model {entry.name!r} has no such format; add one under "
                        f"exports, or sweep it in a separate sweep without {framework.value}",
                    )
                )
                continue
            for hi, si, bi in itertools.product(
                _indices(matrix.hardware), _indices(matrix.scenarios), _indices(matrix.batch_sizes)
            ):
                pick = _Pick(mi, fi, hi, si, bi)
                cell = [_child(sweep, pick, model, template, r) for r in repeats]
                first = cell[0]  # the repeats differ in name and labels only
                for problem in _child_problems(first.document, first.name, pick, entry, models):
                    add(problem)
                cells.append(cell)
    # Repeat by repeat: a cell's repeats spread over the sweep's run, so a drift in time
    # widens that cell's interval instead of biasing one cell against another.
    children = [cell[i] for i in range(len(repeats)) for cell in cells]
    repeated = collections.Counter(c.name for c in children)
    for name, count in repeated.items():
        if count > 1:  # only GPU products that differ in punctuation alone get here
            add(
                Problem(
                    "spec.matrix.hardware",
                    f"{count} children would be named {name}; make the gpuProduct entries "
                    "differ in more than punctuation",
                )
            )
    return children, list(problems.values())


def sweep_problems(sweep: EvaluationSweep, models: ModelLookup | None = None) -> list[Problem]:
    """Problems of the children the matrix makes (the CRD schema cannot see them); the
    operator ends such sweeps Failed with reason InvalidSpec."""
    return _expand(sweep, models)[1]


def expand(sweep: EvaluationSweep, models: ModelLookup | None = None) -> list[SweepChild]:
    """The sweep's children, in matrix order (models x frameworks x hardware x scenarios x
    batchSizes; with repeats, every cell's first repeat, then every cell's second, ...), each
    a complete ModelEvaluation document; raises SpecValidationError naming the axis entry at
    fault when a combination is invalid.

    A modelRef entry's children name the Model (each resolves it when it starts). With
    ``models``, those references are resolved here too, so an unknown Model, a basedOn
    cycle or a format no framework of the matrix loads is refused; without, only the schema
    of such children is checked."""
    children, problems = _expand(sweep, models)
    if problems:
        raise SpecValidationError(f"{SWEEP_KIND} {sweep.metadata.name}", problems, SWEEP_KIND)
    return children


def progress(succeeded: int, total: int) -> str:
    """The status.progress text, e.g. '7/12 Succeeded'."""
    return f"{succeeded}/{total} Succeeded"
