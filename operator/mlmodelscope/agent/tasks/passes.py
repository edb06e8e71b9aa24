"""The accuracy pass of a task other than image classification: every sample once, in dataset
order, at a fixed batch size, the task's metrics computed from the output the task names."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlmodelscope.agent.tasks.data import DatasetError
from mlmodelscope.agent.tasks.record import TaskMetrics
from mlmodelscope.agent.tasks.segmentation import confusion_matrix, segmentation_metrics
from mlmodelscope.agent.tasks.text import classification_metrics
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import Task, TensorSpec

Predict = Callable[[Sequence[np.ndarray]], list[np.ndarray]]
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class TaskPass:
    """What the pass measured: the metrics and how they were reached."""

    metrics: TaskMetrics
    samples: int
    batch_size: int
    duration_s: float
    outputs_sha256: str
    """SHA-256 of the task's output for every sample in dataset order (as the classification
    pass's ``outputs_sha256``: equal digests mean bit-identical outputs)."""


def output_index(task: Task, outputs: Sequence[TensorSpec]) -> int:
    """Where the output ``task.output`` names is in what the backend returns (the order of
    ``spec.model.outputs``); the first output when the task names none."""
    if task.output is None:
        return 0
    names = [o.name for o in outputs]
    if task.output not in names:
        raise SpecError(
            "spec.task.output",
            f"{task.output!r} is not one of spec.model.outputs ({', '.join(names) or 'none'}); "
            "declare the model's outputs by name there",
        )
    return names.index(task.output)


def _batches(count: int, size: int) -> list[slice]:
    return [slice(s, min(s + size, count)) for s in range(0, count, size)]


def run_pass(
    predict: Predict,
    feeds: Sequence[np.ndarray],
    index: int,
    batch_size: int,
    consume: Callable[[slice, np.ndarray], None],
    progress: Progress,
) -> tuple[int, float, str]:
    """Feed every sample once; ``consume`` gets each batch's slice and chosen output."""
    count = len(feeds[0])
    digest = hashlib.sha256()
    start = time.perf_counter_ns()
    for part in _batches(count, batch_size):
        outputs = predict([f[part] for f in feeds])
        if index >= len(outputs):
            raise SpecError(
                "spec.task.output",
                f"the model returned {len(outputs)} outputs; output {index} does not exist",
            )
        chosen = np.asarray(outputs[index])
        digest.update(np.ascontiguousarray(chosen).tobytes())
        consume(part, chosen)
        progress(part.stop, count)
    return count, (time.perf_counter_ns() - start) / 1e9, digest.hexdigest()


def text_classification_pass(
    predict: Predict,
    feeds: Sequence[np.ndarray],
    labels: np.ndarray,
    task: Task,
    index: int,
    batch_size: int,
    progress: Progress,
) -> TaskPass:
    """Accuracy and macro-F1 (scikit-learn) of the class scores (N, classes) or ids (N,)."""
    predicted = np.empty(len(labels), dtype=np.int64)

    def consume(part: slice, out: np.ndarray) -> None:
        if out.ndim == 2:
            predicted[part] = out.argmax(axis=1)
        elif out.ndim == 1 and np.issubdtype(out.dtype, np.integer):
            predicted[part] = out
        else:
            raise SpecError(
                "spec.task.output",
                f"text-classification reads class scores [batch, classes] or class ids "
                f"[batch]; the output is {list(out.shape)} {out.dtype.name}",
            )

    count, seconds, digest = run_pass(predict, feeds, index, batch_size, consume, progress)
    metrics = classification_metrics(predicted, labels, task.num_classes)
    return TaskPass(metrics, count, batch_size, seconds, digest)


def _class_map(out: np.ndarray, num_classes: int) -> np.ndarray:
    """Class ids [N, H, W] from scores [N, classes, H, W] or [N, H, W, classes], or ids."""
    if out.ndim == 3 and np.issubdtype(out.dtype, np.integer):
        return out
    if out.ndim == 4 and out.shape[1] == num_classes:
        return np.asarray(out.argmax(axis=1))
    if out.ndim == 4 and out.shape[3] == num_classes:
        return np.asarray(out.argmax(axis=3))
    raise SpecError(
        "spec.task.output",
        f"segmentation reads scores [batch, {num_classes}, H, W] (or channels last) or class "
        f"ids [batch, H, W]; the output is {list(out.shape)} {out.dtype.name} "
        "(task.numClasses must match the scores' class axis)",
    )


def read_mask(path: Path) -> np.ndarray:
    """A mask's class index per pixel (mode L, or a palette's indices)."""
    from PIL import Image

    try:
        with Image.open(path) as mask:
            return np.asarray(mask)
    except OSError as exc:
        raise DatasetError(f"{path}: cannot be read as a mask ({exc})") from None


def _to_size(classes: np.ndarray, height: int, width: int) -> np.ndarray:
    """A class map resized to a mask's size by nearest neighbour (class ids do not blend)."""
    if classes.shape == (height, width):
        return classes
    from PIL import Image

    resized = Image.fromarray(classes.astype(np.int32), mode="I").resize(
        (width, height), Image.Resampling.NEAREST
    )
    return np.asarray(resized)


def segmentation_pass(
    predict: Predict,
    feeds: Sequence[np.ndarray],
    masks: Sequence[Path],
    task: Task,
    index: int,
    batch_size: int,
    progress: Progress,
) -> TaskPass:
    """mIoU and pixel accuracy over one confusion matrix of the whole dataset; a prediction
    of another size than its mask is resized to it (nearest) before counting."""
    assert task.num_classes is not None  # the spec requires it for segmentation
    num_classes = task.num_classes
    confusion = np.zeros((num_classes, num_classes), dtype=np.int64)

    def consume(part: slice, out: np.ndarray) -> None:
        nonlocal confusion
        for offset, classes in enumerate(_class_map(out, num_classes)):
            path = masks[part.start + offset]
            mask = read_mask(path)
            predicted = _to_size(classes, *mask.shape[:2])
            try:
                confusion += confusion_matrix(predicted, mask, num_classes, task.ignore_index)
            except ValueError as exc:
                raise DatasetError(f"{path}: {exc}") from None

    count, seconds, digest = run_pass(predict, feeds, index, batch_size, consume, progress)
    return TaskPass(segmentation_metrics(confusion), count, batch_size, seconds, digest)


def primary(metrics: TaskMetrics) -> tuple[str, float]:
    """The metric a leaderboard sorts by, and its value."""
    value: Any = getattr(metrics, metrics.primary)
    return metrics.primary, float(value)
