"""Semantic segmentation: a model's output as a class map (per-pixel argmax), one confusion
matrix over every pixel of the dataset, and from it the dataset-level IoU per class, mIoU and
pixel accuracy (the PASCAL VOC and Cityscapes way, as torchmetrics' MulticlassJaccardIndex and
MulticlassAccuracy compute them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from mlmodelscope.agent.tasks.record import TaskMetrics
from mlmodelscope.spec.base import SpecError


def class_map(out: np.ndarray, num_classes: int) -> np.ndarray:
    """Class ids [N, H, W] from scores [N, classes, H, W] or [N, H, W, classes] (per-pixel
    argmax), or the ids themselves; a :class:`SpecError` on ``spec.task.output`` otherwise."""
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


def resize_classes(classes: np.ndarray, height: int, width: int) -> np.ndarray:
    """A class map [H, W] at another size by nearest neighbour (class ids do not blend)."""
    if classes.shape == (height, width):
        return classes
    from PIL import Image

    resized = Image.fromarray(classes.astype(np.int32), mode="I").resize(
        (width, height), Image.Resampling.NEAREST
    )
    return np.asarray(resized)


def confusion_matrix(
    predicted: np.ndarray, target: np.ndarray, num_classes: int, ignore_index: int | None = None
) -> np.ndarray:
    """(num_classes, num_classes) int64 counts, rows the target class, columns the predicted
    one, over pixels whose target is not ``ignore_index``. Shapes must match."""
    if predicted.shape != target.shape:
        raise ValueError(f"prediction {predicted.shape} and mask {target.shape} differ in size")
    t = np.asarray(target, dtype=np.int64).ravel()
    p = np.asarray(predicted, dtype=np.int64).ravel()
    counted = t != ignore_index if ignore_index is not None else np.ones_like(t, dtype=bool)
    t, p = t[counted], p[counted]
    for name, values in (("mask", t), ("prediction", p)):
        if values.size and (values.min() < 0 or values.max() >= num_classes):
            raise ValueError(
                f"{name} holds class {int(values.min() if values.min() < 0 else values.max())}, "
                f"outside 0..{num_classes - 1}"
            )
    return np.bincount(t * num_classes + p, minlength=num_classes**2).reshape(
        num_classes, num_classes
    )


@dataclass(frozen=True)
class SegmentationMetrics(TaskMetrics):
    """IoU per class (None for a class in neither the masks nor the predictions), their mean
    over the classes that occur, and the fraction of counted pixels labelled right."""

    miou: float
    pixel_accuracy: float
    class_iou: tuple[float | None, ...]
    pixels: int
    primary: ClassVar[str] = "miou"


def segmentation_metrics(confusion: np.ndarray) -> SegmentationMetrics:
    """mIoU and pixel accuracy from a :func:`confusion_matrix` (summed over the dataset)."""
    c = np.asarray(confusion, dtype=np.float64)
    true_positive = np.diag(c)
    union = c.sum(axis=0) + c.sum(axis=1) - true_positive
    pixels = int(c.sum())
    if pixels == 0:
        raise ValueError("no pixel was counted: every mask pixel is the ignored class")
    iou = [float(tp / u) if u > 0 else None for tp, u in zip(true_positive, union, strict=True)]
    present = [v for v in iou if v is not None]
    return SegmentationMetrics(
        miou=float(np.mean(present)),
        pixel_accuracy=float(true_positive.sum() / pixels),
        class_iou=tuple(iou),
        pixels=pixels,
    )
