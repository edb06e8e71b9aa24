"""One evaluation, end to end: the agent's main path, shared by `mlms run` and the job image.

Order matters for honest numbers: every check that can fail on the spec (sources, dataset,
shapes, framework version) runs before anything is measured; samples are preprocessed into
memory before timing (MLPerf's sample library), and the accuracy pass runs separately from
the latency measurement. The result document is written atomically and only once: a failed
run writes a document whose status says Failed, never one that looks complete.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import ValidationError

from mlmodelscope import __version__
from mlmodelscope.agent.backends import Backend, create_backend
from mlmodelscope.agent.cost import NodePrice, cost_per_1000, cost_section
from mlmodelscope.agent.credentials import remember_evaluation_secrets
from mlmodelscope.agent.hooks import HooksFactory, ProgressHook, Reporter, RunHooks, no_hooks
from mlmodelscope.agent.startup import Timeline
from mlmodelscope.contract.redact import redact_text, redact_tree, redact_uri
from mlmodelscope.contract.result import (
    PREDICTIONS_LIMIT,
    RESULT_API_VERSION,
    RESULT_KIND,
    ModelManifestRef,
    ResultDocument,
    SamplePredictions,
)
from mlmodelscope.spec import LoadedEvaluation, SpecError, parse_duration
from mlmodelscope.spec.evaluation import (
    ChannelOrder,
    DatasetType,
    EvaluationSpec,
    ScenarioDriver,
    TaskType,
)
from mlmodelscope.spec.manifest import ANNOTATION_MANIFEST
from mlmodelscope.spec.status import BatchResult, LatencySummary

if TYPE_CHECKING:
    from mlmodelscope.agent.datasets import Samples

log = logging.getLogger(__name__)


class EvaluationError(RuntimeError):
    """The evaluation failed; ``document`` is the Failed result document (also on disk)."""

    def __init__(self, message: str, document: dict[str, Any], path: Path | None) -> None:
        super().__init__(message)
        self.document = document
        self.path = path


@dataclass(frozen=True)
class RunOutcome:
    """What one evaluation produced."""

    document: dict[str, Any]
    path: Path | None
    outputs: np.ndarray | None
    """First model output of the accuracy pass, in dataset order (for cross-framework checks)."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_document(document: dict[str, Any], path: Path) -> None:
    """Write JSON atomically: readers see the old file or the complete new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
    ) as tmp:
        json.dump(document, tmp, indent=1, allow_nan=False)
        tmp.write("\n")
    Path(tmp.name).replace(path)


def _check_framework_version(spec: EvaluationSpec, installed: str) -> None:
    if not spec.framework.version:
        return
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import Version

    try:
        wanted = SpecifierSet(spec.framework.version)
    except InvalidSpecifier:
        raise SpecError(
            "spec.framework.version",
            f"{spec.framework.version!r} is not a version constraint; write e.g. '>=2.4,<3'",
        ) from None
    local = Version(installed.split("+")[0])
    if local not in wanted:
        raise SpecError(
            "spec.framework.version",
            f"installed {spec.framework.name.value} {installed} does not satisfy "
            f"{spec.framework.version!r}; use an image with a matching version or relax it",
        )


def _batches(count: int, size: int) -> Iterator[slice]:
    for start in range(0, count, size):
        yield slice(start, min(start + size, count))


def accuracy_pass(
    backend: Backend,
    feeds: Sequence[np.ndarray],
    labels: np.ndarray | None,
    postprocess: Any,
    batch_size: int,
    progress: ProgressHook,
) -> tuple[dict[str, Any], np.ndarray]:
    """Every sample once, in dataset order, at a fixed batch size: deterministic, so the same
    spec on the same stack gives the same outputs bit for bit (``outputs_sha256`` shows it).
    ``predictions`` keeps each sample's top-1 class and raw score (the first
    :data:`~mlmodelscope.contract.result.PREDICTIONS_LIMIT` samples), so `mlms compare` can
    say where two runs disagree and by how much."""
    from mlmodelscope.agent.processing import Predictions, accuracy

    outputs: list[np.ndarray] = []
    top1_hits = top5_hits = 0.0
    start = time.perf_counter_ns()
    count = len(feeds[0])
    for done, part in enumerate(_batches(count, batch_size)):
        out = backend.predict([f[part] for f in feeds])[0]
        outputs.append(np.asarray(out))
        if labels is not None:
            predictions: Predictions = postprocess(out)
            top1, top5 = accuracy(predictions, labels[part])
            size = part.stop - part.start
            top1_hits += top1 * size
            top5_hits += top5 * size
        progress(min((done + 1) * batch_size, count), count)
    elapsed = (time.perf_counter_ns() - start) / 1e9
    stacked = np.concatenate(outputs)
    digest = hashlib.sha256(np.ascontiguousarray(stacked).tobytes()).hexdigest()
    result: dict[str, Any] = {
        "samples": count,
        "batch_size": batch_size,
        "duration_s": elapsed,
        "outputs_sha256": digest,
        "top1": None if labels is None else top1_hits / count,
        "top5": None if labels is None else top5_hits / count,
    }
    if (recorded := sample_predictions(stacked)) is not None:
        result["predictions"] = recorded.to_json_dict()
    return result, stacked


PROBABILITY_TOLERANCE = 1e-3
"""How far from 1 a row of probabilities may sum (float32 softmax outputs sum to 1 +- 1e-6)."""


def sample_predictions(
    outputs: np.ndarray, limit: int = PREDICTIONS_LIMIT
) -> SamplePredictions | None:
    """The first ``limit`` samples' top-1 class and the raw output's value there, from the
    accuracy pass's first output (``(N, classes)``, or ``(N,)`` class indices); None for an
    output with no sample axis."""
    if outputs.ndim == 0 or len(outputs) == 0:
        return None
    head = outputs[:limit]
    dtype = outputs.dtype.name
    if head.ndim == 1 and np.issubdtype(head.dtype, np.integer):
        return SamplePredictions.of(
            head.astype(np.int64).tolist(),
            None,
            output_dtype=dtype,
            classes=None,
            score_scale="none",
        )
    scores = head.reshape(len(head), -1)
    keyed = scores if np.issubdtype(scores.dtype, np.floating) else scores.astype(np.float64)
    best = np.argmax(keyed, axis=1)  # the first of equal maxima: the lower index
    chosen = np.take_along_axis(scores, best[:, np.newaxis], axis=1)[:, 0]
    finite = bool(np.all(np.isfinite(keyed)))
    probability = (
        finite
        and bool(np.all((keyed >= 0) & (keyed <= 1)))
        and bool(np.all(np.abs(keyed.sum(axis=1, dtype=np.float64) - 1) <= PROBABILITY_TOLERANCE))
    )
    return SamplePredictions.of(
        best.tolist(),
        chosen.astype(np.float32).tolist(),
        output_dtype=dtype,
        classes=scores.shape[1],
        score_scale="probability" if probability else "logit",
    )


def headline(
    measurement: dict[str, Any],
    accuracy: dict[str, Any] | None,
    task: dict[str, Any] | None = None,
    price: NodePrice | None = None,
) -> BatchResult:
    """One batch size's row: what the summary carries and the operator puts in .status. Its
    metric is the task's primary metric, or top-1 for classification; its efficiency the
    reported window's energy per inference and, given a price, the cost per 1,000."""
    pct = measurement["latency"]["percentiles_s"]
    if task is not None:
        metric, value = task["primary"], task["metrics"][task["primary"]]
    else:
        metric, value = "top1", None if accuracy is None else accuracy["top1"]
    energy = measurement.get("energy") or {}
    per_inference = energy.get("joules_per_inference")
    return BatchResult(
        batch_size=measurement["batch_size"],
        scenario=measurement["scenario"],
        latency_ms=LatencySummary(
            p50=pct.get("p50", 0.0) * 1e3,
            p90=pct.get("p90", 0.0) * 1e3,
            p99=pct.get("p99", 0.0) * 1e3,
            mean=measurement["latency"]["mean_s"] * 1e3,
        ),
        throughput=measurement["throughput_samples_per_s"],
        qps=measurement["qps"],
        top1=None if accuracy is None else accuracy["top1"],
        top5=None if accuracy is None else accuracy["top5"],
        metric=metric if value is not None else None,
        metric_value=value,
        valid=measurement["verdict"]["valid"],
        invalid_reasons=measurement["verdict"]["reasons"],
        joules_per_inference=per_inference,
        energy_method=energy.get("method") if per_inference is not None else None,
        cost_per_1000=cost_per_1000(price, measurement["throughput_samples_per_s"]),
    )


def _tokenized(
    spec: EvaluationSpec, samples: Samples, base_dir: Path | None
) -> tuple[list[np.ndarray], np.ndarray, int]:
    """A text dataset through its tokenizer: the model's inputs from the token fields, each
    text's tokenizing time (its preprocessing) and how many texts were truncated."""
    from mlmodelscope.agent.sources import local_path
    from mlmodelscope.agent.tasks.data import DatasetError
    from mlmodelscope.agent.tasks.feeds import model_feeds
    from mlmodelscope.agent.tasks.tokens import load_tokenizer, tokenize

    field = "spec.dataset.tokenizer"
    assert spec.dataset.tokenizer is not None  # the spec requires it for text datasets
    path = local_path(spec.dataset.tokenizer, base_dir=base_dir, field=field)
    try:
        tokenizer = load_tokenizer(path)
    except DatasetError as exc:
        raise SpecError(field, str(exc)) from None
    texts = [str(x) for x in samples.x]
    tokens = tokenize(tokenizer, texts, spec.dataset.max_length)
    return model_feeds(spec.model.inputs, tokens.fields), tokens.latencies_ns, tokens.truncated


def task_accuracy(
    spec: EvaluationSpec,
    backend: Backend,
    feeds: Sequence[np.ndarray],
    samples: Samples,
    progress: ProgressHook,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The accuracy pass of a task other than classification: the ``accuracy`` section (how
    the pass ran, top-1 where the task has one) and the ``task`` section (its metrics)."""
    from mlmodelscope.agent.tasks.passes import (
        detection_pass,
        image_size,
        image_to_image_pass,
        output_index,
        output_named,
        primary,
        segmentation_pass,
        text_classification_pass,
        text_detection_pass,
    )

    task = spec.task
    batch_size = max(spec.scenario.batch_sizes)
    index = output_index(task, spec.model.outputs)
    if task.type == TaskType.DETECTION:
        assert samples.coco is not None  # coco datasets have it; the spec pairs the two
        if any(step.center_crop is not None for step in spec.preprocessing):
            raise SpecError(
                "spec.preprocessing",
                "detection maps boxes back to the image through a resize only; a centerCrop "
                "cuts the image and would shift them: remove it",
            )
        options, outputs = task.detection, spec.model.outputs
        field = "spec.task.detection"
        named = tuple(
            output_named(getattr(options, key), outputs, f"{field}.{key}")
            for key in ("boxes", "scores", "classes")
        )
        index = named[0]
        done = detection_pass(
            backend.predict, feeds, samples.coco, task, named,  # type: ignore[arg-type]
            image_size(feeds[0]), batch_size, progress,
        )  # fmt: skip
    elif task.type == TaskType.TEXT_DETECTION:
        assert samples.coco is not None
        done = text_detection_pass(
            backend.predict, feeds, samples.coco, task, index, batch_size, progress
        )
    elif task.type == TaskType.SEGMENTATION:
        assert samples.masks is not None  # masks datasets have them; the spec pairs the two
        done = segmentation_pass(
            backend.predict, feeds, samples.masks, task, index, batch_size, progress
        )
    elif task.type == TaskType.IMAGE_TO_IMAGE:
        assert samples.targets is not None  # pairs datasets have them; the spec pairs the two
        orders = [s.channel_order.order for s in spec.preprocessing if s.channel_order]
        done = image_to_image_pass(
            backend.predict, feeds, samples.targets, task, index,
            spec.model.outputs[index].layout if spec.model.outputs else None,
            bool(orders) and orders[-1] == ChannelOrder.BGR, batch_size, progress,
        )  # fmt: skip
    else:
        assert samples.y is not None
        done = text_classification_pass(
            backend.predict, feeds, samples.y, task, index, batch_size, progress
        )
    name, value = primary(done.metrics)
    accuracy = {
        "samples": done.samples,
        "batch_size": done.batch_size,
        "duration_s": done.duration_s,
        "outputs_sha256": done.outputs_sha256,
        "top1": value if name == "accuracy" else None,
        "top5": None,
    }
    section = {
        "type": task.type.value,
        "output": spec.model.outputs[index].name if spec.model.outputs else None,
        "primary": name,
        "metrics": done.metrics.as_dict(),
        "skipped": samples.skipped,
        "postprocessing_per_sample_s": done.postprocessing_s / done.samples,
        "metrics_s": done.metrics_s,
    }
    return accuracy, section


def _model_manifest(annotations: dict[str, str]) -> dict[str, Any]:
    """The Model manifest a modelRef resolved to, as the resolver recorded it (unreadable
    records are dropped, not fatal: the spec itself already holds the resolved model)."""
    text = annotations.get(ANNOTATION_MANIFEST)
    if not text:
        return {}
    try:
        record = ModelManifestRef.model_validate_json(text)
    except ValueError:
        log.warning("ignoring an unreadable %s annotation", ANNOTATION_MANIFEST)
        return {}
    return {"model_manifest": record.to_json_dict()}


def evaluate(
    loaded: LoadedEvaluation,
    *,
    output: Path | None = None,
    reporter: Reporter | None = None,
    include_raw: bool = True,
    cache_dir: Path | None = None,
    hooks: HooksFactory = no_hooks,
    price: NodePrice | None = None,
) -> RunOutcome:
    """Run one evaluation and write its result document to ``output`` (a .json path).

    ``price`` (per node-hour) gives each row its cost per 1,000 inferences.

    ``hooks`` creates the run's telemetry (``mlms run`` and ``mlms agent`` pass
    :meth:`mlmodelscope.telemetry.agent.AgentTelemetry.start`); the default does nothing.
    Raises :class:`EvaluationError` (with a Failed document written) on any failure.
    """
    startup = Timeline()
    report = reporter or Reporter()
    evaluation = loaded.evaluation
    spec = evaluation.spec
    remember_evaluation_secrets(spec.model_dump(mode="json", by_alias=True, exclude_none=True))
    run_id = str(uuid.uuid4())
    started = time.monotonic()
    timings: dict[str, float] = {}
    document: dict[str, Any] = {
        "api_version": RESULT_API_VERSION,
        "kind": RESULT_KIND,
        "run_id": run_id,
        "status": "Running",
        "evaluation": {
            "name": evaluation.metadata.name,
            "namespace": evaluation.metadata.namespace,
            "generation": evaluation.metadata.generation,
            "source": loaded.source,
            **({"labels": dict(labels)} if (labels := evaluation.metadata.labels) else {}),
            **_model_manifest(evaluation.metadata.annotations),
        },
        "agent_version": __version__,
        "started_at": _now(),
        # the spec as run, its URIs' credentials redacted (the submitted spec keeps them)
        "spec": redact_tree(spec.model_dump(mode="json", by_alias=True, exclude_none=True)),
    }

    @contextlib.contextmanager
    def timed(name: str) -> Iterator[None]:
        report.stage(name)
        t0 = time.perf_counter_ns()
        try:
            with telemetry.span(name):  # telemetry: one span per stage
                yield
        finally:
            timings[name] = (time.perf_counter_ns() - t0) / 1e9

    backend: Backend | None = None
    frozen = False
    telemetry: RunHooks = no_hooks(evaluation)
    try:
        # telemetry: evaluation span (TRACEPARENT), Pushgateway progress
        telemetry = hooks(evaluation)
        report = telemetry.wrap(report)
        from mlmodelscope.agent.datasets import load_dataset
        from mlmodelscope.agent.energy import LOADGEN_NOT_METERED, not_measured, open_meter
        from mlmodelscope.agent.processing import Postprocessor, Preprocessor, preprocess_all
        from mlmodelscope.agent.provenance import collect_stack, spec_hash
        from mlmodelscope.agent.scenarios import (
            BackendSUT,
            BatchRing,
            measure_harness_overhead,
            run_scenario,
        )
        from mlmodelscope.agent.sources import fetch_model
        from mlmodelscope.agent.stats import summarize_latencies

        document["spec_sha256"] = spec_hash(spec)
        loadgen = spec.scenario.driver == ScenarioDriver.LOADGEN
        if loadgen:  # before anything is fetched: a missing package is the spec's to fix
            from mlmodelscope.agent.loadgen_driver import import_loadgen, run_loadgen

            import_loadgen()
        startup.mark("agent_imports")
        with timed("fetch model"):
            fetched = fetch_model(spec.model, base_dir=loaded.base_dir, cache_dir=cache_dir)
        startup.mark("fetch_model")
        document["model"] = {
            "name": spec.model.name,
            "version": spec.model.version,
            "format": spec.model.format.value,
            "uri": redact_uri(spec.model.uri),
            "sha256": fetched.sha256,
            "sha256_verified": spec.model.sha256 is not None,
            "source": fetched.source,
            "cached": fetched.cached,
        }
        with timed("load dataset"):
            samples = load_dataset(spec.dataset, seed=spec.scenario.seed, base_dir=loaded.base_dir)
        pre: Preprocessor | None = None
        with timed("preprocess"):
            if spec.dataset.type == DatasetType.TEXT:
                feeds, pre_ns, truncated = _tokenized(spec, samples, loaded.base_dir)
            else:
                pre = Preprocessor(spec.preprocessing, layout=spec.dataset.layout)
                raw_shape = samples.x.shape[1:] if isinstance(samples.x, np.ndarray) else None
                raw_dtype = samples.x.dtype.name if isinstance(samples.x, np.ndarray) else None
                pre.check_model_input(spec.model.inputs[0], raw_shape, raw_dtype)
                if len(spec.model.inputs) > 1:
                    raise SpecError(
                        "spec.model.inputs",
                        "an image dataset feeds one model input; a model with several inputs "
                        "needs a dataset with several fields (dataset.type: text)",
                    )
                inputs, pre_ns = preprocess_all(pre, samples)
                feeds, truncated = [inputs], None
        document["dataset"] = {
            "name": samples.name,
            "type": spec.dataset.type.value,
            "samples": len(samples),
            "labelled": samples.has_labels,
            "preprocessing": summarize_latencies(pre_ns, (50.0, 90.0, 99.0)).to_dict(),
            **({"skipped": samples.skipped} if samples.skipped else {}),
            **({"truncated": truncated} if truncated is not None else {}),
        }
        startup.mark("dataset")
        backend = create_backend(spec.framework.name)
        with timed("import framework"):
            backend.import_framework()
        startup.mark("framework_import")
        with timed("load model"):
            backend.load(fetched.path, spec)
        info = backend.info()
        _check_framework_version(spec, info.framework_version)
        document["backend"] = {
            "framework": info.framework,
            "framework_version": info.framework_version,
            "device": info.device,
            "details": dict(info.details),
        }
        postprocess = Postprocessor(spec.postprocessing, base_dir=loaded.base_dir)
        startup.mark("model_load")
        document["stack"] = collect_stack(backend_info=document["backend"])
        startup.mark("provenance")

        outputs: np.ndarray | None = None
        document["accuracy"] = None
        if spec.scenario.accuracy and samples.has_labels:
            with timed("accuracy pass"), backend.measuring():
                if spec.task.type == TaskType.CLASSIFICATION:
                    document["accuracy"], outputs = accuracy_pass(
                        backend,
                        feeds,
                        samples.y,
                        postprocess,
                        max(spec.scenario.batch_sizes),
                        report.progress,
                    )
                else:
                    document["accuracy"], document["task"] = task_accuracy(
                        spec, backend, feeds, samples, report.progress
                    )
            startup.mark("accuracy_pass")
        elif spec.scenario.accuracy:
            document["accuracy_skipped"] = f"dataset {samples.name} has no labels"

        deadline = started + parse_duration(spec.timeout)
        measurements = []
        sut = BackendSUT(backend, postprocess.timed if spec.postprocessing else None)
        # Everything alive now (the framework, the model, the samples) lives until the end of
        # the run: frozen, the full collections before each measurement skip it, which took
        # 50-400 ms per collection after a framework import (docs/benchmarks.md, Start-up).
        gc.freeze()
        frozen = True
        meter = open_meter(info.device)
        with timed("measure"), telemetry.gpu_sampling(info.device):
            for batch_size in spec.scenario.batch_sizes:
                report.stage(f"measure {spec.scenario.type.value} batch {batch_size}")
                ring = BatchRing.for_scenario(spec.scenario, feeds, batch_size)
                time_left = max(deadline - time.monotonic(), 1.0)
                with telemetry.scenario(spec.scenario.type.value, batch_size):
                    if loadgen:
                        log_dir, base = loadgen_logs(output, batch_size)
                        with backend.measuring():
                            entry = run_loadgen(
                                spec.scenario,
                                sut,
                                ring,
                                log_dir,
                                relative_to=base,
                                time_limit_s=time_left,
                                include_raw=include_raw,
                                thread_context=backend.measuring,
                            )
                        entry["energy"] = not_measured(LOADGEN_NOT_METERED).to_dict()
                    else:
                        overhead = measure_harness_overhead(spec.scenario.type, ring)
                        setup_done = time.perf_counter_ns()
                        with backend.measuring():
                            measurement = run_scenario(
                                spec.scenario,
                                sut,
                                ring,
                                progress=report.progress,
                                time_limit_s=time_left,
                                meter=meter,
                            )
                        if "startup" not in document and measurement.first_window_start_ns:
                            document["startup"] = startup.document(
                                warmup_ns=setup_done,
                                first_query_ns=measurement.first_window_start_ns,
                                first_latency_ns=measurement.first_query_latency_ns or 0,
                                warmup_queries=measurement.warmup_queries,
                            )
                        entry = {"driver": "builtin"}
                        entry.update(measurement.to_dict(include_raw=include_raw))
                        entry["harness_overhead"] = overhead.to_dict()
                    measurements.append(entry)
                    # telemetry: traced passes per level run after, never inside, the
                    # measurement, so the latency reported above is untraced (XSP leveling)
                    telemetry.leveled_passes(
                        backend,
                        ring,
                        stage=report.stage,
                        raw_samples=samples.x,
                        preprocess=pre,
                        postprocess=postprocess.timed if spec.postprocessing else None,
                        scenario=spec.scenario.type.value,
                        measured=entry,
                    )
        document["measurements"] = measurements
        document["cost"] = cost_section(price)
        document["results"] = [
            headline(m, document["accuracy"], document.get("task"), price).model_dump(mode="json")
            for m in measurements
        ]
        document["status"] = "Succeeded"
    except Exception as exc:
        document["status"] = "Failed"
        field = exc.field if isinstance(exc, SpecError) else None
        message = redact_text(str(exc))
        document["error"] = {"type": type(exc).__name__, "message": message, "field": field}
        _finish(document, timings, started)
        telemetry.finish(document, output, error=exc)  # telemetry: trace, metrics push
        _redact(document)
        _check_contract(document)
        if output is not None:
            write_document(document, output)
        raise EvaluationError(message, document, output) from exc
    finally:
        if frozen:
            gc.unfreeze()  # collectable again once this run lets go of it
        if backend is not None:
            backend.close()
    _finish(document, timings, started)
    telemetry.finish(document, output)  # telemetry: trace_id, tracing, gpu_metrics, push
    _redact(document)
    _check_contract(document)
    if output is not None:
        write_document(document, output)
    return RunOutcome(document, output, outputs)


def loadgen_logs(output: Path | None, batch_size: int) -> tuple[Path, Path | None]:
    """Where LoadGen writes one batch size's logs, and the folder the document names them
    relative to: ``<name>.loadgen/batch-<b>`` beside the result document (emptied first, so
    no file of an earlier run is mistaken for this one's), else a fresh temporary folder."""
    if output is None:
        return Path(tempfile.mkdtemp(prefix="mlms-loadgen-")), None
    folder = output.parent / f"{output.stem}.loadgen" / f"batch-{batch_size}"
    if folder.is_dir():
        shutil.rmtree(folder)
    return folder, output.parent


def _finish(document: dict[str, Any], timings: dict[str, float], started: float) -> None:
    document["finished_at"] = _now()
    document["duration_s"] = time.monotonic() - started
    document["stage_durations_s"] = timings
    if image := os.environ.get("MLMS_IMAGE"):
        document.setdefault("image", image)


def _redact(document: dict[str, Any]) -> None:
    """Every string of the document redacted, in place: a library's text anywhere in it (an
    error, a warning, a telemetry failure) may quote a credential of the run."""
    document.update(redact_tree(document))


def _check_contract(document: dict[str, Any]) -> None:
    """Hold the document to :class:`~mlmodelscope.contract.result.ResultDocument` before it is
    written. A violation is this program's bug, not the user's: it is logged and recorded in
    the document (``contract_error``) rather than losing what was measured."""
    try:
        ResultDocument.model_validate(document)
    except ValidationError as exc:
        log.error("result document does not match the contract: %s", exc)
        document["contract_error"] = str(exc)[:2000]
