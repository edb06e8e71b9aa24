"""`mlms compare`: several runs side by side, with what differs in their HW/SW stack and spec.

Runs come from result documents (the JSON files `mlms run` writes, or a folder of them) or from
the results store (by run UUID). Every document is validated with the contract's
:class:`~mlmodelscope.contract.result.ResultDocument` first, so a file that is not a result
document fails with its name rather than with a ``KeyError`` somewhere below.

The first run is the reference: each row carries its relative difference from the reference's
row of the same scenario and batch size, and each run that evaluated the reference's dataset
its numerical agreement with the reference, sample by sample (:class:`NumericalAgreement`),
and, when asked, whether each difference is significant (:mod:`mlmodelscope.report.verdicts`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from mlmodelscope.contract.metric import primary_metric, scoring_of
from mlmodelscope.contract.result import ResultDocument, SamplePredictions
from mlmodelscope.report.verdicts import MetricVerdict, all_verdicts
from mlmodelscope.spec.status import BatchResult

NOT_RESULTS = ("comparison.json",)
"""Files `mlms run` writes next to the result documents that are not result documents."""
NOT_RESULT_SUFFIXES = (".trace.json",)


class CompareError(ValueError):
    """A source that cannot be compared: the message names it."""


@dataclass(frozen=True)
class LoadedRun:
    """One validated result document and where it came from (a path or ``store:<run id>``)."""

    source: str
    document: ResultDocument


# ------------------------------------------------------------------------------ loading


def result_files(folder: Path) -> list[Path]:
    """The result documents of a folder: every ``*.json`` but span lists and comparisons,
    by name."""
    return sorted(
        path
        for path in folder.glob("*.json")
        if path.is_file()
        and path.name not in NOT_RESULTS
        and not path.name.endswith(NOT_RESULT_SUFFIXES)
    )


def parse_result(data: Any, source: str) -> LoadedRun:
    """Validate ``data`` as a result document; :class:`CompareError` naming ``source``
    otherwise."""
    if not isinstance(data, dict) or data.get("kind") != "EvaluationResult":
        kind = data.get("kind") if isinstance(data, dict) else type(data).__name__
        raise CompareError(
            f"{source}: not an mlmodelscope result document "
            f"(kind: {kind!r}, expected 'EvaluationResult')"
        )
    try:
        document = ResultDocument.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or '(document)'}: {error['msg']}"
            for error in exc.errors()[:5]
        )
        raise CompareError(f"{source}: not a valid result document: {problems}") from None
    return LoadedRun(source=source, document=document)


def load_result(path: Path) -> LoadedRun:
    """Read and validate one result document file."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise CompareError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CompareError(f"{path}: not JSON: {exc}") from None
    return parse_result(data, str(path))


class RunStore(Protocol):
    """What compare needs of the results store: one stored result document by run UUID."""

    def get(self, run_id: str) -> dict[str, Any] | None: ...


def load_runs(sources: Sequence[str], store: RunStore | None = None) -> list[LoadedRun]:
    """Each source in order: a result document file, a folder of them, or a run UUID looked
    up in ``store``."""
    runs: list[LoadedRun] = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            files = result_files(path)
            if not files:
                raise CompareError(f"{source}: no result documents (*.json) in this folder")
            runs.extend(load_result(file) for file in files)
        elif path.exists():
            runs.append(load_result(path))
        elif store is None:
            raise CompareError(
                f"{source}: no such file or folder (a run id needs a results store: "
                "--store URL or $MLMS_STORE_URL)"
            )
        else:
            data = store.get(source)
            if data is None:
                raise CompareError(f"{source}: no such file, folder or run in the results store")
            runs.append(parse_result(data, f"store:{source}"))
    return runs


# ------------------------------------------------------------------------------ comparing


@dataclass(frozen=True)
class RunInfo:
    """One compared run."""

    label: str
    """The evaluation's name, made unique among the compared runs."""
    source: str
    run_id: str | None
    evaluation: str | None
    status: str
    framework: str
    """Framework, version and device, e.g. ``onnxruntime 1.31.1 cpu``."""
    error: str | None = None


@dataclass(frozen=True)
class Row:
    """The headline numbers of one run and batch size, and their relative difference from
    the reference run's row of the same scenario and batch size (``None`` when it has none,
    or for the reference itself)."""

    run: str
    scenario: str
    batch_size: int
    p50_ms: float | None
    p99_ms: float | None
    throughput: float | None
    top1: float | None
    valid: bool | None
    invalid_reasons: list[str] = field(default_factory=list)
    p90_ms: float | None = None
    mean_ms: float | None = None
    p50_rel: float | None = None
    p99_rel: float | None = None
    throughput_rel: float | None = None
    top1_rel: float | None = None
    metric: str | None = None
    """The name of the run's primary metric: top1 (classification), miou, accuracy."""
    metric_value: float | None = None
    metric_rel: float | None = None
    """Against the reference's primary metric, only when it has the same name."""
    metric_note: str | None = None
    """Why ``metric_rel`` is missing although both have a value: ``not comparable: miou vs
    accuracy`` (runs of different tasks)."""
    joules_per_inference: float | None = None
    """Energy per inference (J); ``None``: not measured."""
    energy_method: str | None = None
    """The counter it was read from: nvml or rapl."""
    cost_per_1000: float | None = None
    """USD per 1,000 inferences; ``None``: no price per node-hour was given."""


@dataclass(frozen=True)
class Difference:
    """A dotted key whose values differ across the runs: one value per run, in run order
    (``None`` where a run lacks the key)."""

    key: str
    values: list[Any]


@dataclass(frozen=True)
class SampleDifference:
    """One sample whose top-1 class differs between the reference and a run."""

    index: int
    """The sample's position in dataset order (0-based)."""
    reference_class: int
    run_class: int


@dataclass(frozen=True)
class Agreement:
    """How one run's per-sample outputs agree with the reference run's, on the same dataset.

    The counts and score differences cover the samples both documents recorded predictions of
    (``samples``); they are ``None`` when either document has none (``note`` says why)."""

    run: str
    bit_identical: bool | None
    """Equal ``outputs_sha256``: the raw first output of every sample is the same bit for bit
    (``None`` when a run has no accuracy pass)."""
    samples: int | None = None
    """Samples compared: those both runs recorded predictions of."""
    top1_agree: int | None = None
    top1_differ: int | None = None
    top1_agreement: float | None = None
    """``top1_agree / samples``."""
    first_differences: list[SampleDifference] = field(default_factory=list)
    """The first samples (at most :data:`FIRST_DIFFERENCES`) whose top-1 class differs."""
    same_class_samples: int | None = None
    """Samples where both picked the same class: what the score differences are over."""
    max_abs_score_diff: float | None = None
    """Max |run's score - reference's score| of the chosen class, over ``same_class_samples``
    (``None`` when the scores are not comparable)."""
    mean_abs_score_diff: float | None = None
    score_scale: str | None = None
    """``logit`` or ``probability``: what the scores are (the run's, when both agree)."""
    note: str | None = None
    """Why something is not compared, or why the scores are not comparable."""


@dataclass(frozen=True)
class NumericalAgreement:
    """Where the runs that evaluated the reference's dataset disagree with it numerically,
    pairwise against the reference, from the accuracy pass each run recorded."""

    reference: str
    dataset: str
    """The dataset and its sample count, e.g. ``digits/test (360 samples)``."""
    pairs: list[Agreement]
    """One per other run on the same dataset, in run order."""
    other_datasets: list[str] = field(default_factory=list)
    """Runs left out: they evaluated another dataset (or none)."""


@dataclass(frozen=True)
class Comparison:
    reference: str
    """The label of the first run, which the relative differences are against."""
    runs: list[RunInfo]
    rows: list[Row]
    stack: list[Difference]
    """HW/SW stack keys (``stack.*``, ``image``, ``agent_version``) that differ."""
    spec: list[Difference]
    """Spec keys (``spec.*``, camelCase) that differ."""
    agreement: NumericalAgreement | None = None
    """Numerical agreement with the reference; ``None`` when no other run evaluated the
    reference's dataset (or the reference has no accuracy pass)."""
    verdicts: list[MetricVerdict] | None = None
    """Per run, metric, scenario and batch size: whether it differs from the reference, how
    sure that is, and by which method (:mod:`mlmodelscope.report.verdicts`); ``None`` when
    not asked for."""

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)


def relative(value: float | None, reference: float | None) -> float | None:
    """``value / reference - 1`` (0.05: 5 % more); ``None`` when either is missing or the
    reference is 0."""
    if value is None or reference is None or reference == 0:
        return None
    return value / reference - 1


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys (``cpu.model``); lists of dicts by index
    (``preprocessing[0].scale.factor``); other lists (``batchSizes``) stay one value."""
    flat: dict[str, Any] = {}
    if isinstance(value, Mapping):
        if not value and prefix:
            flat[prefix] = {}
        for key, item in value.items():
            flat.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(value, list) and any(isinstance(v, Mapping | list) for v in value):
        for index, item in enumerate(value):
            flat.update(flatten(item, f"{prefix}[{index}]"))
    else:
        flat[prefix] = value
    return flat


def differences(flats: Sequence[Mapping[str, Any]]) -> list[Difference]:
    """The keys whose values are not the same in every one of ``flats`` (a key missing from
    some counts as different), sorted by key: the same order whether a document came from a
    file or from PostgreSQL's JSONB, which keeps object keys in its own order."""
    keys: dict[str, None] = {}
    for flat in flats:
        keys.update(dict.fromkeys(flat))
    missing = object()
    found = []
    for key in sorted(keys):
        values = [flat.get(key, missing) for flat in flats]
        if any(v != values[0] for v in values[1:]):
            found.append(Difference(key, [None if v is missing else v for v in values]))
    return found


def run_labels(runs: Sequence[LoadedRun]) -> list[str]:
    """Each run's evaluation name (else its file's stem), made unique: the run id's first
    8 characters where names repeat, else a number."""
    names = [run.document.evaluation.name or Path(run.source).stem for run in runs]
    labels = []
    for index, name in enumerate(names):
        if names.count(name) > 1:
            run_id = runs[index].document.run_id
            name = f"{name}@{run_id[:8]}" if run_id else f"{name}#{index + 1}"
        labels.append(name)
    # still equal (same run twice, or one run id prefix): number them
    return [
        f"{label}#{index + 1}" if labels.count(label) > 1 else label
        for index, label in enumerate(labels)
    ]


def _info(run: LoadedRun, label: str) -> RunInfo:
    doc = run.document
    backend = doc.backend
    framework = (
        " ".join(f"{backend.framework} {backend.framework_version} {backend.device}".split())
        if backend is not None
        else str(doc.spec.get("framework", {}).get("name", "?"))
    )
    return RunInfo(
        label=label,
        source=run.source,
        run_id=doc.run_id,
        evaluation=doc.evaluation.name,
        status=doc.status,
        framework=framework,
        error=None if doc.error is None else f"{doc.error.type}: {doc.error.message}",
    )


def _stack(doc: ResultDocument) -> dict[str, Any]:
    flat = flatten(doc.stack.to_json_dict() if doc.stack is not None else {}, "stack")
    flat["image"] = doc.image
    flat["agent_version"] = doc.agent_version
    return flat


FIRST_DIFFERENCES = 5
"""Samples with a different top-1 class listed per run."""
NOT_RECORDED = "per-sample predictions not recorded by this agent version"


def _dataset_key(doc: ResultDocument) -> tuple[str, Any, int] | None:
    if doc.dataset is None:
        return None
    split = (doc.spec.get("dataset") or {}).get("split")
    return doc.dataset.name, split, doc.dataset.samples


_PLURAL = {"logit": "logits", "probability": "probabilities"}


def _score_note(reference: SamplePredictions, run: SamplePredictions) -> tuple[bool, str | None]:
    """(whether the chosen-class scores can be subtracted, a note about them)."""
    if reference.score_scale == "none" or run.score_scale == "none":
        return False, "no scores: a model outputs class indices"
    if reference.score_scale != run.score_scale:
        return False, (
            f"scores not comparable: the reference outputs {_PLURAL[reference.score_scale]}, "
            f"this run {_PLURAL[run.score_scale]}"
        )
    if reference.output_dtype != run.output_dtype:
        return True, (
            f"output dtypes differ ({reference.output_dtype} vs {run.output_dtype}): "
            "Δ score includes the narrower type's rounding"
        )
    return True, None


def agreement_of(reference: ResultDocument, run: ResultDocument, label: str) -> Agreement:
    """``run``'s per-sample agreement with ``reference`` (both evaluated the same dataset)."""
    ref_acc, run_acc = reference.accuracy, run.accuracy
    if ref_acc is None or run_acc is None:
        which = "the reference" if ref_acc is None else "this run"
        return Agreement(label, None, note=f"no accuracy pass in {which}")
    identical = ref_acc.outputs_sha256 == run_acc.outputs_sha256
    ref_pred, run_pred = ref_acc.predictions, run_acc.predictions
    if ref_pred is None or run_pred is None:
        which = "the reference" if ref_pred is None else "this run"
        return Agreement(label, identical, note=f"{NOT_RECORDED} ({which})")
    count = min(ref_pred.count, run_pred.count)
    ref_classes, run_classes = ref_pred.classes_list()[:count], run_pred.classes_list()[:count]
    differ = [i for i in range(count) if ref_classes[i] != run_classes[i]]
    same = [i for i in range(count) if ref_classes[i] == run_classes[i]]
    comparable, note = _score_note(ref_pred, run_pred)
    max_diff = mean_diff = None
    ref_scores, run_scores = ref_pred.scores_list(), run_pred.scores_list()
    if comparable and ref_scores is not None and run_scores is not None and same:
        deltas = [abs(run_scores[i] - ref_scores[i]) for i in same]
        finite = [d for d in deltas if math.isfinite(d)]
        if len(finite) < len(deltas):
            note = f"{len(deltas) - len(finite)} samples with a non-finite score left out" + (
                f"; {note}" if note else ""
            )
        if finite:
            max_diff, mean_diff = max(finite), math.fsum(finite) / len(finite)
    if count < min(ref_acc.samples, run_acc.samples):
        extra = f"the first {count} samples compared (only they were recorded)"
        note = f"{extra}; {note}" if note else extra
    return Agreement(
        run=label,
        bit_identical=identical,
        samples=count,
        top1_agree=count - len(differ),
        top1_differ=len(differ),
        top1_agreement=(count - len(differ)) / count if count else None,
        first_differences=[
            SampleDifference(i, ref_classes[i], run_classes[i]) for i in differ[:FIRST_DIFFERENCES]
        ],
        same_class_samples=len(same),
        max_abs_score_diff=max_diff,
        mean_abs_score_diff=mean_diff,
        score_scale=run_pred.score_scale if comparable else None,
        note=note,
    )


def numerical_agreement(
    runs: Sequence[LoadedRun], labels: Sequence[str]
) -> NumericalAgreement | None:
    """Each run that evaluated the reference's dataset (same name, split and sample count)
    against the reference; ``None`` when there is none, or the reference has no accuracy
    pass."""
    reference = runs[0].document
    key = _dataset_key(reference)
    if key is None or reference.dataset is None or reference.accuracy is None:
        return None
    pairs: list[Agreement] = []
    others: list[str] = []
    for run, label in zip(runs[1:], labels[1:], strict=True):
        if _dataset_key(run.document) == key:
            pairs.append(agreement_of(reference, run.document, label))
        else:
            others.append(label)
    if not pairs:
        return None
    return NumericalAgreement(
        reference=labels[0],
        dataset=reference.dataset.identity(),
        pairs=pairs,
        other_datasets=others,
    )


def row_metric(document: ResultDocument, result: BatchResult) -> tuple[str | None, float | None]:
    """A row's primary metric (name, value): the row's own, else (a document from before rows
    named it) the document's (:func:`~mlmodelscope.contract.metric.primary_metric`)."""
    if result.metric is not None:
        return result.metric, result.metric_value
    primary = primary_metric(document)
    return (primary.name, primary.value) if primary.value is not None else (None, None)


def metric_delta(
    name: str | None,
    value: float | None,
    ref_name: str | None,
    ref_value: float | None,
    *,
    scoring: str = "",
    ref_scoring: str = "",
) -> tuple[float | None, str | None]:
    """(relative difference, why there is none): primary metrics of different names (an mIoU
    and an accuracy), or of one name scored differently (a PSNR on the luma after a border
    crop and one over RGB: :func:`~mlmodelscope.contract.metric.scoring_of`), are not
    comparable."""
    if value is None or ref_value is None:
        return None, None
    if name != ref_name:
        return None, f"not comparable: {name} vs {ref_name}"
    if scoring != ref_scoring:
        return None, (
            f"not comparable: {name} scored {scoring or 'by default'} vs "
            f"{ref_scoring or 'by default'}"
        )
    return relative(value, ref_value), None


SIGNIFICANCE_RUNS = 10
"""`mlms compare` judges significance only for this many runs at most: it costs about a second
per run and batch size (a bootstrap per metric), too long for a sweep of hundreds."""


def compare(runs: Sequence[LoadedRun], *, significance: bool = False) -> Comparison:
    """Compare ``runs``; the first is the reference. ``significance`` adds the verdicts."""
    if not runs:
        raise CompareError("nothing to compare")
    labels = run_labels(runs)
    reference_rows = {(row.scenario, row.batch_size): row for row in runs[0].document.results or []}
    rows: list[Row] = []
    for index, (run, label) in enumerate(zip(runs, labels, strict=True)):
        for result in run.document.results or []:
            ref = None if index == 0 else reference_rows.get((result.scenario, result.batch_size))
            latency = result.latency_ms
            name, value = row_metric(run.document, result)
            metric_rel, metric_note = (
                (None, None)
                if ref is None
                else metric_delta(
                    name,
                    value,
                    *row_metric(runs[0].document, ref),
                    scoring=scoring_of(run.document),
                    ref_scoring=scoring_of(runs[0].document),
                )
            )
            rows.append(
                Row(
                    run=label,
                    scenario=result.scenario,
                    batch_size=result.batch_size,
                    p50_ms=latency.p50,
                    p99_ms=latency.p99,
                    throughput=result.throughput,
                    top1=result.top1,
                    valid=result.valid,
                    invalid_reasons=list(result.invalid_reasons),
                    p90_ms=latency.p90,
                    mean_ms=latency.mean,
                    p50_rel=None if ref is None else relative(latency.p50, ref.latency_ms.p50),
                    p99_rel=None if ref is None else relative(latency.p99, ref.latency_ms.p99),
                    throughput_rel=None
                    if ref is None
                    else relative(result.throughput, ref.throughput),
                    top1_rel=None if ref is None else relative(result.top1, ref.top1),
                    metric=name,
                    metric_value=value,
                    metric_rel=metric_rel,
                    metric_note=metric_note,
                    joules_per_inference=result.joules_per_inference,
                    energy_method=result.energy_method,
                    cost_per_1000=result.cost_per_1000,
                )
            )
    return Comparison(
        reference=labels[0],
        runs=[_info(run, label) for run, label in zip(runs, labels, strict=True)],
        rows=rows,
        stack=differences([_stack(run.document) for run in runs]),
        spec=differences([flatten(run.document.spec, "spec") for run in runs]),
        agreement=numerical_agreement(runs, labels),
        verdicts=all_verdicts([run.document for run in runs], labels) if significance else None,
    )
