"""What one sample's model outputs answer, by the evaluation's task: the best classes
(classification, text-classification), the boxes (detection), the class map (segmentation) or
the output image (image-to-image).

Each reads the outputs with the postprocessing the task's accuracy pass uses, so a try shows
what an evaluation would score: the classification Postprocessor and top-k (of the output
``spec.task.output`` names, for a text Model), the detection box format, threshold and
class-wise NMS (:func:`~mlmodelscope.agent.tasks.detection.image_detections`), the per-pixel
argmax of segmentation (:func:`~mlmodelscope.agent.tasks.segmentation.class_map`), resized to
the image by nearest neighbour, and the image-to-image output read as images
(:func:`~mlmodelscope.agent.tasks.passes.output_images`), clipped to ``dataRange`` and turned
RGB as PSNR scores it, then made 8-bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mlmodelscope.agent.processing import Postprocessor, topk
from mlmodelscope.agent.tasks.detection import check_detection_outputs, image_detections
from mlmodelscope.agent.tasks.passes import (
    detection_outputs,
    fed_bgr,
    output_images,
    output_index,
)
from mlmodelscope.agent.tasks.segmentation import class_map, resize_classes
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import EvaluationSpec


def label_of(names: Sequence[str] | None, index: int) -> str:
    """A class's name from the Model's labels, else its index."""
    return names[index] if names is not None and 0 <= index < len(names) else str(index)


@dataclass(frozen=True)
class ClassScore:
    """One of the best classes: its index, its name (the index when none is known), its
    score (a probability when the postprocessing has a softmax, else the raw output)."""

    index: int
    label: str
    score: float | None
    """None when the model outputs class indices, not scores."""


def top_classes(post: Postprocessor, outputs: Sequence[np.ndarray], k: int) -> list[ClassScore]:
    """The ``k`` best classes of the first (only) sample, best first (ties to the lower
    index), through the Model's postprocessing."""
    predictions = post(outputs)
    if predictions.scores is None:  # the model outputs class indices
        best = predictions.topk_indices[0, :k]
        scores: list[float | None] = [None] * len(best)
    else:
        row = predictions.scores[:1]
        best = topk(row, k)[0]
        scores = row[0, best].astype(np.float64).tolist()
    names = predictions.names(best)
    return [
        ClassScore(int(index), name, score)
        for index, name, score in zip(best.tolist(), names, scores, strict=True)
    ]


def text_top_classes(
    spec: EvaluationSpec, post: Postprocessor, outputs: Sequence[np.ndarray], k: int
) -> list[ClassScore]:
    """A text Model's ``k`` best classes: :func:`top_classes` of the output
    ``spec.task.output`` names (default the first), as the text-classification pass reads."""
    return top_classes(post, [outputs[output_index(spec.task, spec.model.outputs)]], k)


@dataclass(frozen=True)
class FoundBox:
    """One detection: its class, score and box (x0, y0, x1, y1) in the image's pixels."""

    index: int
    label: str
    score: float
    box: tuple[float, float, float, float]


def found_boxes(
    spec: EvaluationSpec,
    outputs: Sequence[np.ndarray],
    names: Sequence[str] | None,
    input_size: tuple[int, int],
    image_size: tuple[int, int],
) -> list[FoundBox]:
    """The first sample's detections as ``spec.task.detection`` reads them, best first; the
    model input is ``input_size`` and the image ``image_size`` (height, width)."""
    boxes, scores, classes = (np.asarray(outputs[i]) for i in detection_outputs(spec))
    check_detection_outputs(boxes, scores, classes)
    found = image_detections(
        boxes[0], scores[0], classes[0], spec.task.detection, input_size, image_size
    )
    answer = []
    for box, score, label in zip(
        found.boxes.tolist(), found.scores.tolist(), found.labels.tolist(), strict=True
    ):
        x0, y0, x1, y1 = box
        answer.append(FoundBox(label, label_of(names, label), score, (x0, y0, x1, y1)))
    return answer


@dataclass(frozen=True)
class ClassPixels:
    """How many of the image's pixels a class holds."""

    index: int
    label: str
    pixels: int


@dataclass(frozen=True)
class ClassMap:
    """The class of each pixel of the image, and the classes present with their pixel
    counts (by class index)."""

    classes: np.ndarray
    """[H, W] int64 class ids, at the image's size."""
    num_classes: int
    pixels: tuple[ClassPixels, ...]


def class_map_of(
    spec: EvaluationSpec,
    outputs: Sequence[np.ndarray],
    names: Sequence[str] | None,
    image_size: tuple[int, int],
) -> ClassMap:
    """The first sample's class map from the output ``spec.task.output`` names (per-pixel
    argmax of scores, or class ids), resized to ``image_size`` (height, width)."""
    task = spec.task
    assert task.num_classes is not None  # the spec requires it for segmentation
    out = np.asarray(outputs[output_index(task, spec.model.outputs)])
    classes = resize_classes(class_map(out[:1], task.num_classes)[0], *image_size)
    classes = classes.astype(np.int64)
    if classes.size and (classes.min() < 0 or classes.max() >= task.num_classes):
        raise SpecError(
            "spec.task.numClasses",
            f"the model's class ids reach {int(classes.max())} (from {int(classes.min())}); "
            f"numClasses is {task.num_classes}",
        )
    counts = np.bincount(classes.ravel(), minlength=task.num_classes)
    pixels = tuple(
        ClassPixels(index, label_of(names, index), int(count))
        for index, count in enumerate(counts.tolist())
        if count
    )
    return ClassMap(classes, task.num_classes, pixels)


@dataclass(frozen=True)
class OutputImage:
    """The first sample's output image, 8-bit: the output's 0..dataRange scaled to 0..255."""

    pixels: np.ndarray
    """[H, W, C] uint8: RGB (C 3) or grey (C 1)."""


def output_image_of(spec: EvaluationSpec, outputs: Sequence[np.ndarray]) -> OutputImage:
    """The first sample's image from the output ``spec.task.output`` names (channels first or
    last, as the image-to-image pass reads it), clipped to 0..``spec.task.dataRange`` as PSNR
    scores it, BGR turned RGB when the model takes BGR, rounded to 8 bits."""
    task = spec.task
    index = output_index(task, spec.model.outputs)
    layout = spec.model.outputs[index].layout if spec.model.outputs else None
    image = output_images(np.asarray(outputs[index])[:1], layout)[0]
    clipped = np.clip(image.astype(np.float64), 0.0, task.data_range)
    if fed_bgr(spec) and clipped.shape[2] == 3:
        clipped = clipped[..., ::-1]
    pixels = np.rint(clipped * (255.0 / task.data_range)).astype(np.uint8)
    return OutputImage(np.ascontiguousarray(pixels))
