"""The result document and the compact summary, as the one typed contract of both sides.

The agent writes a :class:`ResultDocument` (JSON, snake_case field names) for every run, and
publishes an :class:`EvaluationSummary` (what the operator needs for ``.status``) in the results
ConfigMap and its termination message. The operator reads only :class:`EvaluationSummary`.
The per-batch-size row is :class:`~mlmodelscope.spec.status.BatchResult`, the same type as a
``status.results`` entry: the document and the summary dump it by field name, the status by
alias (camelCase), so no code between the agent's measurement and ``kubectl get`` reshapes it.

``result.schema.json`` beside this module is generated from these models by ``mlms crd``
(``mlms crd --check`` fails when it is stale), as the CRDs are generated from the spec
models. Unknown keys are allowed (``extra="allow"``), so a newer agent's document still parses
in an older operator.
"""

from __future__ import annotations

import array
import base64
import json
import sys
from collections.abc import Sequence
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from mlmodelscope.spec.status import BatchResult

RESULT_API_VERSION: Final = "mlmodelscope.io/results/v1alpha1"
RESULT_KIND: Final = "EvaluationResult"
SUMMARY_KIND: Final = "EvaluationSummary"
ERROR_MESSAGE_LIMIT: Final = 1500
"""Characters of the agent's error message kept in a summary."""

Sha256 = Annotated[str, Field(pattern=r"^[a-f0-9]{64}$")]
Status = Literal["Succeeded", "Failed"]
Scenario = Literal["SingleStream", "MultiStream", "Server", "Offline"]
Seconds = Annotated[float, Field(ge=0)]


class ContractModel(BaseModel):
    """Base of the contract's models: snake_case JSON, docstrings as schema descriptions."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    def to_json_dict(self) -> dict[str, Any]:
        """JSON-ready dict by field name (snake_case), with the fields that were given."""
        value: dict[str, Any] = json.loads(self.model_dump_json(exclude_unset=True))
        return value


class ResultError(ContractModel):
    """Why a run failed."""

    type: str
    """The exception type, e.g. SpecError, FetchError."""
    message: str
    field: str | None = None
    """The spec field at fault, when the spec is (then retrying cannot help)."""


class ManifestVersion(ContractModel):
    """One Model manifest as it was read: which object, at which version."""

    name: str
    uid: str | None = None
    resource_version: str | None = None
    """The Model's metadata.resourceVersion when it was read (cluster runs)."""
    source: str | None = None
    """The file it was read from (local runs)."""


class ModelManifestRef(ContractModel):
    """The Model a ModelEvaluation's ``spec.modelRef`` named, resolved when the run started:
    the model, processing and labels in the document's ``spec`` are those of these versions,
    so a later edit of the Model does not rewrite this run's history."""

    name: str
    """The Model that spec.modelRef named."""
    namespace: str | None = None
    chain: list[ManifestVersion]
    """That Model first, then the Models it is basedOn, in order."""
    task: str | None = None
    dataset: str | None = None


class EvaluationRef(ContractModel):
    """Which ModelEvaluation, and which generation of its spec, this run evaluated."""

    name: str | None = None
    namespace: str | None = None
    generation: int | None = None
    """The metadata.generation evaluated: the operator credits results only to it."""
    source: str | None = None
    """The spec file (local runs) or ConfigMap file it was read from."""
    labels: dict[str, str] | None = None
    """The ModelEvaluation's ``metadata.labels`` (absent when it has none), e.g.
    ``mlmodelscope.io/sweep: <sweep>`` on a child of an EvaluationSweep: the store keeps them
    with the run."""
    model_manifest: ModelManifestRef | None = None
    """The Model manifest the spec's modelRef resolved to (absent for an inline model)."""


class ModelInfo(ContractModel):
    """The model that was evaluated: exactly which bytes."""

    name: str
    version: str | None = None
    format: Literal["onnx", "torchscript", "torch-export", "savedmodel"]
    uri: str
    sha256: Sha256
    """Computed, never copied from the spec (`mlms hash` prints the same digest)."""
    sha256_verified: bool = False
    """The spec pinned a digest and it matched."""
    source: str
    cached: bool


class LatencyStats(ContractModel):
    """A distribution summarized from every sample (no sampling, no reservoir)."""

    count: Annotated[int, Field(ge=0)]
    mean_s: float
    stdev_s: Seconds | None = None
    """Absent where MLPerf LoadGen computed the figures (it reports no spread)."""
    min_s: float
    max_s: float
    trimmed_mean_s: float | None = None
    """Absent where MLPerf LoadGen computed the figures (it reports no trimmed mean)."""
    percentiles_s: dict[str, float]
    """Percentile label (p50, p90, p99, ...) -> seconds, LoadGen's nearest-rank estimator."""


class DatasetInfo(ContractModel):
    """The samples evaluated."""

    name: str
    type: str
    samples: Annotated[int, Field(ge=1)]
    labelled: bool
    preprocessing: LatencyStats
    """Per-sample preprocessing time (text: tokenizing), measured before the latency runs."""
    skipped: Annotated[int, Field(ge=0)] = 0
    """Samples left out because their mask was missing (``dataset.skipMissing``)."""
    truncated: Annotated[int, Field(ge=0)] | None = None
    """Text datasets: texts longer than ``dataset.maxLength`` tokens, cut to it."""

    def identity(self) -> str:
        """Which data the numbers came from, as the store, the leaderboard and comparisons
        name it: the agent's name for the dataset (its type and path, or split) and how many
        samples were evaluated (``limit`` applied), e.g. ``digits/test (360 samples)``."""
        return f"{self.name} ({self.samples} samples)"


class BackendInfo(ContractModel):
    """The framework as loaded."""

    framework: str
    framework_version: str
    device: str
    details: dict[str, str] = {}


class StackInfo(ContractModel):
    """Provenance: host, CPU, memory, OS, Python, library versions, GPU (when present),
    container image, backend."""

    host: dict[str, Any] | None = None
    cpu: dict[str, Any]
    memory: dict[str, Any] | None = None
    os: dict[str, Any]
    python: dict[str, Any]
    libraries: dict[str, str]
    gpu: dict[str, Any] | None = None
    container: dict[str, Any] | None = None
    backend: dict[str, Any] | None = None


PREDICTIONS_LIMIT: Final = 4096
"""Samples whose predictions the accuracy pass records (the first ones, in dataset order):
at most 4096 x 8 bytes, 44 KB of base64, so a result document still fits its ConfigMap."""
Base64 = Annotated[str, Field(pattern=r"^[A-Za-z0-9+/]*={0,2}$")]


def _pack(typecode: str, values: Sequence[float] | Sequence[int]) -> str:
    packed = array.array(typecode, values)
    if sys.byteorder == "big":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def _unpack(typecode: str, text: str, count: int) -> array.array[Any]:
    unpacked = array.array(typecode)
    unpacked.frombytes(base64.b64decode(text, validate=True))
    if sys.byteorder == "big":
        unpacked.byteswap()
    if len(unpacked) != count:
        raise ValueError(f"{len(unpacked)} values encoded, but count says {count}")
    return unpacked


class SamplePredictions(ContractModel):
    """What the model answered for each of the first ``count`` samples of the accuracy pass, in
    dataset order, compactly: enough for `mlms compare` to say where two runs of the same
    dataset disagree and by how much, not only whether (``outputs_sha256``). Read the arrays
    with :meth:`classes_list` and :meth:`scores_list`."""

    count: Annotated[int, Field(ge=0)]
    """Samples recorded: the first ``min(samples, 4096)`` of the pass."""
    output_dtype: str
    """The numpy dtype of the raw first output, e.g. ``float32``."""
    classes: Annotated[int, Field(ge=1)] | None = None
    """Classes per sample: the size of the first output's last axis; null when the model
    outputs class indices itself."""
    score_scale: Literal["probability", "logit", "none"]
    """What ``top1_score`` is: ``probability`` when every recorded output row lies in [0, 1] and
    sums to 1 (within 1e-3: the model ends in a softmax), ``logit`` for any other real-valued
    output, ``none`` when the model outputs class indices (no scores)."""
    top1_class: Base64
    """Base64 of little-endian int32, one per sample: the index of the largest value of the raw
    first output (the lower index on ties); the output itself for a model that outputs class
    indices."""
    top1_score: Base64 | None = None
    """Base64 of little-endian float32, one per sample: the raw first output's value at
    ``top1_class``, i.e. the model's own score of its choice as the model outputs it (a logit
    or a probability, see ``score_scale``), before any postprocessing step; float64 outputs
    are rounded to float32. Null when the model outputs class indices."""

    @classmethod
    def of(
        cls,
        top1_class: Sequence[int],
        top1_score: Sequence[float] | None,
        *,
        output_dtype: str,
        classes: int | None,
        score_scale: Literal["probability", "logit", "none"],
    ) -> SamplePredictions:
        """Encode per-sample top-1 classes (and their scores) as the document carries them."""
        if top1_score is not None and len(top1_score) != len(top1_class):
            raise ValueError(f"{len(top1_class)} classes but {len(top1_score)} scores")
        return cls(
            count=len(top1_class),
            output_dtype=output_dtype,
            classes=classes,
            score_scale=score_scale,
            top1_class=_pack("i", top1_class),
            top1_score=None if top1_score is None else _pack("f", top1_score),
        )

    def classes_list(self) -> list[int]:
        """The top-1 class of each recorded sample, in dataset order."""
        return _unpack("i", self.top1_class, self.count).tolist()

    def scores_list(self) -> list[float] | None:
        """The raw output's value at the top-1 class of each recorded sample (as float32
        values), in dataset order; None when the model outputs class indices."""
        if self.top1_score is None:
            return None
        return _unpack("f", self.top1_score, self.count).tolist()


class AccuracyResult(ContractModel):
    """The separate accuracy pass: every sample once, in dataset order."""

    samples: Annotated[int, Field(ge=1)]
    batch_size: Annotated[int, Field(ge=1)]
    duration_s: float | None = None
    outputs_sha256: Sha256
    """SHA-256 of the raw first output of every sample (with a task, the output the task
    reads), in dataset order: equal digests mean bit-identical results."""
    top1: Annotated[float, Field(ge=0, le=1)] | None
    top5: Annotated[float, Field(ge=0, le=1)] | None
    predictions: SamplePredictions | None = None
    """Each sample's top-1 class and its raw score, for the first 4096 samples (absent in
    documents of older agents)."""


class TaskResult(ContractModel):
    """A task's metrics from the accuracy pass (``spec.task``, other than classification)."""

    type: str
    """detection, text-detection, segmentation, text-classification or image-to-image."""
    output: str | None = None
    """The model output the metrics read (null: the first, unnamed)."""
    primary: str
    """The metric a leaderboard sorts by (map, miou, accuracy, psnr): a key of ``metrics``."""
    metrics: dict[str, Any]
    """Every metric of the task, computed by the library its field trusts (docs/tasks.md),
    beside the options they were computed under (image-to-image: crop_border, channels)."""
    skipped: Annotated[int, Field(ge=0)] = 0
    """Samples left out of the metrics (a missing mask with ``dataset.skipMissing``)."""
    postprocessing_per_sample_s: Annotated[float, Field(ge=0)] | None = None
    """Per sample, the time spent turning the outputs into what the metric reads (class maps,
    boxes mapped to the image, thresholds, NMS), in the accuracy pass: never inside a timed
    query, whose region is the model and spec.postprocessing only."""
    metrics_s: Annotated[float, Field(ge=0)] | None = None
    """The time the metric itself took over the whole set (COCOeval, IoU, scikit-learn)."""


class TracingLevelResult(ContractModel):
    """What one tracing level cost."""

    batch_size: int | None = None
    p50_s: float | None = None
    """p50 of predict+postprocess of traced queries at this level."""
    overhead_vs_untraced: float | None = None
    """p50 / untraced p50 - 1 (0.05 = 5 % slower)."""
    traced_queries: Annotated[int, Field(ge=0)] | None = None
    profiled_spans: int | None = None
    skipped: str | None = None
    """Why this level did not run here (e.g. library level without a GPU)."""


class UntracedBaseline(ContractModel):
    p50_s: float | None = None
    queries: int | None = None
    predict_p50_s: float | None = None
    """p50 of the predict calls alone (no postprocess): the latency the correction keeps."""


class CorrectedLayer(ContractModel):
    """One layer (a top-level operator, nested operators included) of the corrected table."""

    name: str
    op_type: str
    occurrence: Annotated[int, Field(ge=0)] = 0
    """Which same-named layer of a call this is (torch names layers by op: aten::linear)."""
    order: Annotated[int, Field(ge=0)] = 0
    """Position in the call (median over calls): execution order."""
    calls: Annotated[int, Field(ge=0)] = 0
    raw_s: Seconds
    """Mean over the central traced calls of the profiler's duration."""
    corrected_s: Seconds
    """Mean of its share of each call's budget (the untraced latency, see ``correction``)."""
    share: float | None = None
    """corrected_s / untraced_predict_p50_s."""


class CorrectedOperator(ContractModel):
    """Self time of every operator of one type, per call."""

    op_type: str
    count_per_call: float = 0
    raw_s: Seconds
    corrected_s: Seconds
    share: float | None = None


class LeveledCorrection(ContractModel):
    """XSP's leveled correction of one batch size (see :mod:`mlmodelscope.analysis.xsp`):
    each call's operators share that call's model-level predict time, itself corrected to the
    untraced run, so the corrected layers add up to the untraced latency; ``residual`` says
    how closely (``skipped`` says why there is no correction)."""

    skipped: str | None = None
    method: str | None = None
    level: str | None = None
    calls: int | None = None
    """Central traced calls the tables average (budget within its 25th-75th percentiles,
    operator time within its 10th-90th)."""
    paired_calls: int | None = None
    """Traced calls present in the model and framework passes, with operators."""
    tolerance: float | None = None
    """The stated bound on ``residual`` (0.05 = 5 %)."""
    untraced_predict_p50_s: float | None = None
    model_level_predict_p50_s: float | None = None
    framework_level_predict_p50_s: float | None = None
    model_overhead_s: float | None = None
    """Model-level p50 - untraced p50: what the model-level spans cost per call."""
    profiler_overhead_s: float | None = None
    """Framework-level p50 - model-level p50: what the profiler costs per call."""
    profiler_overhead_per_event_s: float | None = None
    """That cost over the events the profiler records per call (operators + the call)."""
    outside_operators_share_raw: float | None = None
    """Median share of a profiled call not inside any operator (gaps)."""
    scale_p50: float | None = None
    """Median of budget / raw operator time per call."""
    raw_sum_s: float | None = None
    corrected_sum_s: float | None = None
    raw_residual: float | None = None
    """|raw_sum_s - untraced| / untraced: how far the uncorrected profile is."""
    residual: float | None = None
    """|corrected_sum_s - untraced| / untraced."""
    within_tolerance: bool | None = None
    layers: list[CorrectedLayer] = []
    """Execution order."""
    operators: list[CorrectedOperator] = []
    """By corrected time, largest first."""


class TracingBatch(ContractModel):
    """The leveled passes of one batch size."""

    batch_size: Annotated[int, Field(ge=1)]
    measured_p50_s: float | None = None
    untraced: UntracedBaseline
    levels: dict[str, TracingLevelResult]
    correction: LeveledCorrection | None = None
    """From framework level on: the operators attributed inside the untraced latency."""


class TracingInfo(ContractModel):
    """Leveled tracing (XSP): reported latencies come from the untraced measurement; short
    traced passes after it measure what each level costs."""

    level: Literal["none", "model", "framework", "library"]
    enabled: bool
    reason: str | None = None
    sampling: Annotated[float, Field(ge=0, le=1)] | None = None
    queries_per_level: Annotated[int, Field(ge=1)] | None = None
    exported: bool | None = None
    """Spans were also sent over OTLP (OTEL_EXPORTER_OTLP_*)."""
    sampled: bool | None = None
    trace_file: str | None = None
    """The span list written next to this document."""
    trace_file_error: str | None = None
    export_error: str | None = None
    untraced_p50_s: float | None = None
    levels: dict[str, TracingLevelResult] = {}
    """First batch size: p50 and overhead per level."""
    by_batch_size: list[TracingBatch] = []


class MeanMax(ContractModel):
    mean: float
    max: float


class GpuDevice(ContractModel):
    """One GPU's NVML samples during the measurement."""

    index: int
    name: str
    uuid: str | None = None
    samples: Annotated[int, Field(ge=0)]
    memory_total_bytes: int | None = None
    utilization_ratio: MeanMax | None = None
    memory_used_bytes: MeanMax | None = None
    power_watts: MeanMax | None = None
    sm_clock_hertz: MeanMax | None = None
    temperature_celsius: MeanMax | None = None


class GpuMetrics(ContractModel):
    """NVML samples (10 Hz) during the measurement, mean and max per GPU; absent without a GPU."""

    source: str | None = None
    interval_s: float | None = None
    duration_s: float | None = None
    devices: list[GpuDevice]


class Verdict(ContractModel):
    """MLPerf-style: VALID when every rule of the scenario held."""

    valid: bool
    reasons: list[str]


class Warmup(ContractModel):
    """Queries run before measuring, excluded from every statistic and reported here."""

    queries: Annotated[int, Field(ge=0)]
    latency: LatencyStats | None = None


class RawLatencies(ContractModel):
    """Every measured query, in issue order (nanoseconds). Driver loadgen: ``latencies_ns``
    is empty (LoadGen keeps its latencies to itself); ``predict_ns`` and ``postprocess_ns``
    hold every batch the SUT ran."""

    latencies_ns: list[int] = []
    predict_ns: list[int] = []
    postprocess_ns: list[int] = []
    queue_ns: list[int] | None = None
    sample_of: int | None = None
    """Set in a published (cluster) document: ``latencies_ns`` is an evenly spaced sample of
    this many queries' latencies, and the other arrays are left out."""


class LoadGenLogs(ContractModel):
    """Where MLPerf LoadGen's own log files of one measurement are."""

    dir: str
    """Their folder: relative to the result document's folder when the run wrote a document
    (``mlms run``: ``<name>.loadgen/batch-<b>``), else absolute."""
    summary: str
    """mlperf_log_summary.txt (its text is also in ``summary_text``)."""
    detail: str
    """mlperf_log_detail.txt: every setting and result key, one JSON record per line."""


class LoadGenInfo(ContractModel):
    """What MLPerf LoadGen reported for a ``driver: loadgen`` measurement, as it reported it."""

    version: str
    scenario: Scenario
    mode: str
    """Always PerformanceOnly."""
    validity: Literal["VALID", "INVALID"]
    """LoadGen's own verdict (``result_validity``), copied into ``verdict``."""
    sample_batch_size: Annotated[int, Field(ge=1)]
    """Samples of the dataset in one LoadGen sample: each LoadGen sample is one pre-built
    batch of the agent's (batch 1: one dataset sample, as in MLPerf)."""
    performance_sample_count: Annotated[int, Field(ge=1)]
    """LoadGen samples (pre-built batches) in the query sample library."""
    settings: dict[str, Any]
    """LoadGen's effective settings (``effective_*`` keys of the detail log, prefix dropped)."""
    results: dict[str, Any]
    """LoadGen's result keys (``result_*`` of the detail log, prefix dropped), raw units."""
    errors: list[str] = []
    """LoadGen's error messages (each also makes the verdict INVALID)."""
    warnings: list[str] = []
    sut_span_s: Seconds
    """The agent's own clock: first query issued to the SUT until the last one completed."""
    logs: LoadGenLogs
    summary_text: str
    """mlperf_log_summary.txt as LoadGen wrote it (in a cluster the files stay in the pod)."""


class RepetitionFigures(ContractModel):
    """One repetition's headline figures: what the spread's intervals are computed over."""

    repetition: Annotated[int, Field(ge=0)]
    queries: Annotated[int, Field(ge=0)]
    samples: Annotated[int, Field(ge=0)]
    p50_s: Seconds
    """From the repetition's full latency distribution."""
    p99_s: Seconds
    throughput_samples_per_s: Seconds


class FigureInterval(ContractModel):
    """One figure over the repetitions: its point estimate and confidence interval."""

    estimate: float
    """The mean of the repetitions' figures."""
    low: float | None = None
    """Null when no interval could be drawn (``note`` says why)."""
    high: float | None = None


class Spread(ContractModel):
    """Each headline figure over a measurement's repetitions (two or more; one repetition has
    no spread, never a made-up interval): the mean over them and a bootstrap confidence
    interval of that mean, drawn by ``scipy.stats.bootstrap``. With ``repetition_process``
    same the repetitions ran in one process after one warm-up, so the interval does not cover
    start-up variation; with fresh each ran in its own process after its own model load and
    warm-up, so it does."""

    repetitions: Annotated[int, Field(ge=2)]
    statistic: Literal["mean"]
    method: Literal["percentile", "BCa"]
    """scipy.stats.bootstrap's interval method."""
    confidence_level: Annotated[float, Field(gt=0, lt=1)]
    resamples: Annotated[int, Field(ge=1)]
    seed: Annotated[int, Field(ge=0)]
    """The resampling seed (the scenario's seed), so the interval can be recomputed."""
    p50_s: FigureInterval
    p99_s: FigureInterval
    throughput_samples_per_s: FigureInterval
    figures: list[RepetitionFigures]
    """Every repetition's figures, in the order they ran."""
    note: str | None = None
    """Why the intervals are absent, when they are (scipy is not installed)."""


class ProcessInfo(ContractModel):
    """The fresh process one repetition ran in (``repetition_process`` fresh). Importing the
    framework and loading the model there came before its warm-up: in no timed window."""

    pid: Annotated[int, Field(ge=1)]
    framework_import_s: Seconds
    model_load_s: Seconds


class EnergyResult(ContractModel):
    """The energy of a measurement's reported window: the hardware's counter read right
    before and right after it (the whole GPU board or CPU packages, idle power and other
    processes included)."""

    method: Literal["nvml", "rapl"] | None = None
    """nvml: the GPU's board counter; rapl: the CPU packages' powercap counters; null: not
    measured (``reason``)."""
    source: str | None = None
    """What was read, e.g. ``GPU 0`` or ``package-0, package-1``."""
    joules: float | None = None
    seconds: Seconds | None = None
    """The window's duration."""
    samples: Annotated[int, Field(ge=0)] | None = None
    """Samples processed in the window."""
    joules_per_inference: float | None = None
    """``joules / samples``; null when not measured or refused (``reason``)."""
    mean_power_w: float | None = None
    reason: str | None = None
    """Why ``joules_per_inference`` is null, starting ``not measured:``."""


class CostInfo(ContractModel):
    """The price the rows' ``cost_per_1000`` is computed from (price / 3600 / samples per
    second * 1000), or why there is none."""

    price_per_node_hour: Annotated[float, Field(ge=0)] | None = None
    currency: str = "USD"
    source: str | None = None
    """Where the price came from: ``mlms run --price-per-node-hour``, ``$MLMS_PRICE_PER_NODE_HOUR``
    or what ``$MLMS_PRICE_SOURCE`` names."""
    reason: str | None = None
    """Why there is no price, starting ``not measured:``."""


class Measurement(ContractModel):
    """One batch size's scenario run."""

    driver: Literal["builtin", "loadgen"] = "builtin"
    """Which load generator produced the numbers (``spec.scenario.driver``)."""

    scenario: Scenario
    batch_size: Annotated[int, Field(ge=1)]
    samples_per_query: Annotated[int, Field(ge=1)] | None = None
    batches_per_query: Annotated[int, Field(ge=1)] | None = None
    queries: Annotated[int, Field(ge=0)]
    samples: Annotated[int, Field(ge=0)]
    duration_s: Seconds
    throughput_samples_per_s: Seconds
    qps: Seconds
    percentile_method: str
    latency: LatencyStats
    """Per query; Server counts from scheduled arrival (queueing included)."""
    predict: LatencyStats
    postprocess: LatencyStats
    windows: list[dict[str, Any]]
    stable: bool
    warmup: Warmup
    server: dict[str, Any] | None = None
    verdict: Verdict
    repetition: Annotated[int, Field(ge=0)] | None = None
    repetitions: list[dict[str, Any]] | None = None
    repetition_process: Literal["same", "fresh"] | None = None
    """Driver builtin: whether the repetitions ran one after another in the agent's process
    (same) or each in a fresh process (fresh; each entry of ``repetitions`` then says which
    in ``process``). Absent in documents of older agents."""
    process: ProcessInfo | None = None
    """Fresh: the process the summarized (median) repetition ran in."""
    spread: Spread | None = None
    """With two repetitions or more: each headline figure's interval over them. The
    top-level figures stay those of the median repetition."""
    harness_overhead: LatencyStats
    """The harness's own cost per query (the same loop with a null backend; driver loadgen:
    a LoadGen test of the same scenario driving the null backend)."""
    raw: RawLatencies | None = None
    loadgen: LoadGenInfo | None = None
    """Driver loadgen: what LoadGen reported and where its logs are."""
    energy: EnergyResult | None = None
    """The reported window's energy (absent in documents of older agents)."""


_SUCCEEDED_NEEDS = (
    "model",
    "dataset",
    "backend",
    "stack",
    "accuracy",
    "measurements",
    "results",
    "spec_sha256",
)
_STATUS_RULES: list[JsonValue] = [
    {
        "if": {"properties": {"status": {"const": "Succeeded"}}},
        "then": {"required": list(_SUCCEEDED_NEEDS)},
    },
    {
        "if": {"properties": {"status": {"const": "Failed"}}},
        "then": {"required": ["error"], "not": {"required": ["results"]}},
    },
]


class StartupInfo(ContractModel):
    """From the agent process's start to its first timed query: consecutive phases on one
    monotonic clock, and two UTC anchors to set against e.g. a Job's ``creationTimestamp``
    (Job creation -> first timed query = ``first_timed_query_at`` - creationTimestamp)."""

    process_started_at: str | None = Field(None, json_schema_extra={"format": "date-time"})
    """When the process started (UTC), from ``process_start_source``; null where unknown."""
    process_start_source: str | None = None
    """Where the start was read: ``/proc/self/stat starttime`` (Linux); null where unknown
    (then the phases start at ``import mlmodelscope``)."""
    process_start_resolution_s: Seconds | None = None
    """The process start's resolution (a clock tick, usually 0.01 s)."""
    first_timed_query_at: str = Field(json_schema_extra={"format": "date-time"})
    """When the first timed query was issued (UTC): the first measured window's start,
    after warm-up (and Server's peak search)."""
    to_first_timed_query_s: Seconds
    """Process start (else ``import mlmodelscope``) to the first timed query: the phases' sum."""
    phases_s: dict[str, Seconds]
    """Consecutive phases, in order, each ending where the next begins: ``interpreter``
    (process start to ``import mlmodelscope``: Python start-up), ``cli`` (the CLI's imports
    and argument parsing, up to the command starting), ``command`` (the command's imports,
    reading and validating the spec; ``before_evaluation`` when no CLI command ran), then
    ``agent_imports``, ``fetch_model`` (fetch and sha256), ``dataset`` (load and
    preprocess), ``framework_import``, ``model_load`` (the backend's load, its checks and the
    postprocessor), ``provenance`` (the software stack), ``accuracy_pass`` (when it ran),
    ``measurement_setup`` (batches, the null-backend harness measurement), ``warmup``
    (warm-up queries and, for Server 'auto', the peak search)."""
    warmup_queries: Annotated[int, Field(ge=0)]
    first_timed_query_s: Seconds
    """The first timed query's own latency."""
    earlier_evaluations: Annotated[int, Field(ge=0)] = 0
    """Evaluations this process ran before this one (``mlms run`` with several): their time
    is inside ``command``, so only a process's first evaluation shows its start-up alone."""


class ResultDocument(ContractModel):
    """What one run of the mlmodelscope agent measured. Times are seconds unless a key ends
    in _ns (nanoseconds) or _ms (milliseconds); percentiles use LoadGen's nearest-rank
    estimator over the full distribution."""

    model_config = ConfigDict(
        extra="allow",
        use_attribute_docstrings=True,
        title=RESULT_KIND,
        json_schema_extra={"allOf": _STATUS_RULES},
    )

    api_version: Literal["mlmodelscope.io/results/v1alpha1"]
    kind: Literal["EvaluationResult"]
    run_id: str | None
    """UUID of the run; null only when the agent could not even read its spec."""
    status: Status
    """Failed documents carry ``error`` and never ``results``."""
    error: ResultError | None = None
    evaluation: EvaluationRef
    agent_version: str
    image: str | None = None
    """The container image the agent ran in ($MLMS_IMAGE)."""
    started_at: str = Field(json_schema_extra={"format": "date-time"})
    finished_at: str = Field(json_schema_extra={"format": "date-time"})
    duration_s: Seconds
    stage_durations_s: dict[str, Seconds]
    spec: dict[str, Any]
    """The full ModelEvaluation spec, camelCase, as validated."""
    spec_sha256: Sha256 | None = None
    model: ModelInfo | None = None
    dataset: DatasetInfo | None = None
    backend: BackendInfo | None = None
    stack: StackInfo | None = None
    accuracy: AccuracyResult | None = None
    task: TaskResult | None = None
    accuracy_skipped: str | None = None
    trace_id: Annotated[str, Field(pattern=r"^[a-f0-9]{32}$")] | None = None
    """OpenTelemetry trace id of the run (look it up in Jaeger; `mlms trace` breaks it down)."""
    tracing: TracingInfo | None = None
    gpu_metrics: GpuMetrics | None = None
    startup: StartupInfo | None = None
    """Where the time went from the process's start to the first timed query (absent in
    Failed documents and those of older agents)."""
    measurements: list[Measurement] | None = None
    cost: CostInfo | None = None
    """The price per node-hour the rows' cost per 1,000 inferences comes from (absent in
    documents of older agents)."""
    results: list[BatchResult] | None = None
    """Headline numbers per batch size (the rows of ``.status.results``)."""

    @model_validator(mode="after")
    def _status_rules(self) -> ResultDocument:
        if self.status == "Succeeded":
            missing = [k for k in _SUCCEEDED_NEEDS if k not in self.model_fields_set]
            if missing:
                raise ValueError(f"a Succeeded document needs {', '.join(missing)}")
        elif self.error is None or self.results is not None:
            raise ValueError("a Failed document carries error and no results")
        return self


class SummaryStartup(ContractModel):
    """The start-up figures the operator needs (:class:`StartupInfo` holds the phases)."""

    first_timed_query_at: str = Field(json_schema_extra={"format": "date-time"})
    to_first_timed_query_s: Seconds
    """The agent process's start (else ``import mlmodelscope``) to its first timed query."""


class EvaluationSummary(ContractModel):
    """What the operator needs for ``.status``, small enough for a termination message."""

    kind: Literal["EvaluationSummary"] = SUMMARY_KIND
    run_id: str | None = None
    status: Status
    evaluation: EvaluationRef = EvaluationRef()
    results: list[BatchResult] = []
    error: ResultError | None = None
    trace_id: str | None = None
    stack_summary: dict[str, str] = {}
    """Provenance in a few strings: framework and version, device, GPU, CPU, image, model
    sha256 (the keys of ``.status.stack``)."""
    startup: SummaryStartup | None = None
    """When the first timed query ran, so the operator can report Job creation -> first
    timed query; null for a run that never reached one."""
    truncated: bool = False
    """Rows or detail were dropped to fit the size limit."""

    @classmethod
    def of(cls, document: ResultDocument, stack_summary: dict[str, str]) -> EvaluationSummary:
        """The summary of a result document (rows rounded to 6 significant digits)."""
        error = document.error
        return cls(
            run_id=document.run_id,
            status=document.status,
            evaluation=EvaluationRef(
                name=document.evaluation.name,
                namespace=document.evaluation.namespace,
                generation=document.evaluation.generation,
            ),
            results=[_rounded(row) for row in document.results or []],
            error=None
            if error is None
            else ResultError(
                type=error.type, field=error.field, message=error.message[:ERROR_MESSAGE_LIMIT]
            ),
            trace_id=document.trace_id,
            stack_summary=stack_summary,
            startup=None
            if document.startup is None
            else SummaryStartup(
                first_timed_query_at=document.startup.first_timed_query_at,
                to_first_timed_query_s=round(document.startup.to_first_timed_query_s, 3),
            ),
        )

    def to_json_dict(self) -> dict[str, Any]:
        """JSON-ready dict by field name, empty fields left out (every byte counts here)."""
        value: dict[str, Any] = json.loads(self.model_dump_json(exclude_none=True))
        return value

    def encoded_size(self) -> int:
        return len(self.to_wire().encode())

    def to_wire(self) -> str:
        """Compact JSON, as published."""
        return json.dumps(self.to_json_dict(), separators=(",", ":"), allow_nan=False)

    def fit(self, limit: int) -> EvaluationSummary:
        """This summary in at most ``limit`` bytes of JSON: detail is dropped in order of
        usefulness (stack detail, all but one invalid reason, trailing rows, the error's tail)."""
        if self.encoded_size() <= limit:
            return self
        small = self.model_copy(deep=True)
        small.stack_summary = {
            k: v for k, v in small.stack_summary.items() if k in ("framework", "device", "gpu")
        }
        for row in small.results:
            row.invalid_reasons = row.invalid_reasons[:1]
        while small.encoded_size() > limit and len(small.results) > 1:
            small.results.pop()
            small.truncated = True
        if small.encoded_size() > limit and small.error is not None:
            small.error.message = small.error.message[:200]
        if small.encoded_size() > limit:
            small.stack_summary = {}
            small.results = []
            small.truncated = True
        return small


def _rounded(row: BatchResult) -> BatchResult:
    """6 significant digits: plenty for a summary, and a third of the bytes."""

    def r(value: float | None) -> float | None:
        return None if value is None else float(f"{value:.6g}")

    latency = row.latency_ms.model_copy(
        update={k: r(getattr(row.latency_ms, k)) for k in ("p50", "p90", "p99", "mean")}
    )
    interval = row.p50_interval_ms
    if interval is not None:
        interval = interval.model_copy(
            update={k: r(getattr(interval, k)) for k in ("estimate", "low", "high")}
        )
    return row.model_copy(
        update={
            "latency_ms": latency,
            "p50_interval_ms": interval,
            "throughput": r(row.throughput),
            "qps": r(row.qps),
            "top1": r(row.top1),
            "top5": r(row.top5),
            "metric_value": r(row.metric_value),
            "joules_per_inference": r(row.joules_per_inference),
            "cost_per_1000": r(row.cost_per_1000),
        }
    )
