"""The accuracy pass: every sample once, in dataset order, apart from the latency measurement.

Classification reads top-1 and top-5 from the postprocessed outputs; any other task runs its
own pass (:mod:`mlmodelscope.agent.tasks.passes`) and reports its metrics. Both give the
result document's ``accuracy`` section as the contract types it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from mlmodelscope.agent.backends import Backend
from mlmodelscope.agent.hooks import ProgressHook
from mlmodelscope.contract.result import (
    PREDICTIONS_LIMIT,
    AccuracyResult,
    SamplePredictions,
    TaskResult,
)
from mlmodelscope.spec.evaluation import EvaluationSpec, TaskType

if TYPE_CHECKING:
    from mlmodelscope.agent.datasets import Samples

PROBABILITY_TOLERANCE = 1e-3
"""How far from 1 a row of probabilities may sum (float32 softmax outputs sum to 1 +- 1e-6)."""


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
) -> tuple[AccuracyResult, np.ndarray]:
    """Every sample once, in dataset order, at a fixed batch size: deterministic, so the same
    spec on the same stack gives the same outputs bit for bit (``outputs_sha256`` shows it).
    ``predictions`` keeps each sample's top-1 class and raw score (the first
    :data:`~mlmodelscope.contract.result.PREDICTIONS_LIMIT` samples), so `mlms compare` can
    say where two runs disagree and by how much. Also returns the first output, stacked."""
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
    recorded = sample_predictions(stacked)
    result = AccuracyResult(
        samples=count,
        batch_size=batch_size,
        duration_s=elapsed,
        outputs_sha256=hashlib.sha256(np.ascontiguousarray(stacked).tobytes()).hexdigest(),
        top1=None if labels is None else top1_hits / count,
        top5=None if labels is None else top5_hits / count,
        **({"predictions": recorded} if recorded is not None else {}),
    )
    return result, stacked


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


def task_accuracy(
    spec: EvaluationSpec,
    backend: Backend,
    feeds: Sequence[np.ndarray],
    samples: Samples,
    progress: ProgressHook,
) -> tuple[AccuracyResult, TaskResult]:
    """The accuracy pass of a task other than classification: the ``accuracy`` section (how
    the pass ran, top-1 where the task has one) and the ``task`` section (its metrics)."""
    from mlmodelscope.agent.tasks.passes import (
        detection_outputs,
        detection_pass,
        fed_bgr,
        image_size,
        image_to_image_pass,
        output_index,
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
        named = detection_outputs(spec)
        index = named[0]
        done = detection_pass(
            backend.predict, feeds, samples.coco, task, named, image_size(feeds[0]), batch_size,
            progress,
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
        done = image_to_image_pass(
            backend.predict, feeds, samples.targets, task, index,
            spec.model.outputs[index].layout if spec.model.outputs else None,
            fed_bgr(spec), batch_size, progress,
            samples.scale or Fraction(1),
        )  # fmt: skip
    else:
        assert samples.y is not None
        done = text_classification_pass(
            backend.predict, feeds, samples.y, task, index, batch_size, progress
        )
    name, value = primary(done.metrics)
    accuracy = AccuracyResult(
        samples=done.samples,
        batch_size=done.batch_size,
        duration_s=done.duration_s,
        outputs_sha256=done.outputs_sha256,
        top1=value if name == "accuracy" else None,
        top5=None,
    )
    section = TaskResult(
        type=task.type.value,
        output=spec.model.outputs[index].name if spec.model.outputs else None,
        primary=name,
        metrics=done.metrics.as_dict(),
        skipped=samples.skipped,
        postprocessing_per_sample_s=done.postprocessing_s / done.samples,
        metrics_s=done.metrics_s,
    )
    return accuracy, section
