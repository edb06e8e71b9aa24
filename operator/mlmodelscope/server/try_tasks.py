"""Which task a try answers for a catalog Model, and the ``spec.task`` and dataset it runs with.

A Model's ``task`` is a label (docs/spec.md): a try reads it as classification (no label,
``classification``, ``image-classification``), detection (``detection``, ``object-detection``),
segmentation (``segmentation``, ``semantic-segmentation``, ``image-segmentation``), text
classification (``text-classification``) or image-to-image (``image-to-image``,
``super-resolution``), and refuses any other, naming ``model``. As a launch gives
``spec.task`` itself, a try takes the task's options from its form (:class:`TryOptions`); the
dataset is a placeholder of the type the spec pairs with the task, never read (the upload
takes its place) but for a text dataset's tokenizer and maxLength, which make the text the
model's inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from mlmodelscope.spec.evaluation import Layout, TaskType
from mlmodelscope.spec.manifest import ResolvedModel

TASK_LABELS: Final = {
    "classification": TaskType.CLASSIFICATION,
    "image-classification": TaskType.CLASSIFICATION,
    "detection": TaskType.DETECTION,
    "object-detection": TaskType.DETECTION,
    "segmentation": TaskType.SEGMENTATION,
    "semantic-segmentation": TaskType.SEGMENTATION,
    "image-segmentation": TaskType.SEGMENTATION,
    "text-classification": TaskType.TEXT_CLASSIFICATION,
    "image-to-image": TaskType.IMAGE_TO_IMAGE,
    "super-resolution": TaskType.IMAGE_TO_IMAGE,
}
"""Model task labels a try answers, and the task each is."""
MAX_CLASSES: Final = 65536
"""The most classes a class map's PNG holds (16-bit values)."""
TRY_SCORE_THRESHOLD: Final = 0.5
"""A try's default detection threshold: it shows the boxes a person would call found (an
evaluation keeps every box from 0.05 on, as COCO AP counts them)."""
PLACEHOLDER_DATASETS: Final[dict[TaskType, dict[str, Any]]] = {
    TaskType.CLASSIFICATION: {"type": "imagefolder", "path": "upload"},
    TaskType.DETECTION: {"type": "coco", "path": "upload", "annotations": "upload"},
    TaskType.SEGMENTATION: {"type": "masks", "path": "upload", "masks": "upload"},
    TaskType.TEXT_CLASSIFICATION: {"type": "text", "path": "upload"},
    TaskType.IMAGE_TO_IMAGE: {"type": "pairs", "path": "upload", "targets": "upload"},
}
"""The dataset a try's spec names, of the type its task goes with: its files never read (a
text dataset's tokenizer comes from the form)."""
TEXT_TASKS: Final = (TaskType.TEXT_CLASSIFICATION,)
"""The tasks whose Models take a text, not an image."""


class TryOptions(BaseModel):
    """The task's options a try takes from its form (the API's and the page's), as a launch
    takes ``spec.task``; each field is used by its task only."""

    model_config = ConfigDict(extra="ignore")

    output: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        description="segmentation, text-classification, image-to-image: the output the task "
        "reads (spec.task.output); default the first.",
    )
    classes: int | None = Field(
        None,
        gt=0,
        le=MAX_CLASSES,
        description="segmentation: the number of classes (spec.task.numClasses); default "
        "the class axis of that output's declared shape.",
    )
    box_format: Literal["xyxy", "xywh", "cxcywh"] = Field(
        "xyxy", description="detection: how a box's four numbers read (boxFormat)."
    )
    normalized: bool = Field(
        False, description="detection: boxes are fractions of the model input's size."
    )
    score_threshold: float = Field(
        TRY_SCORE_THRESHOLD,
        ge=0,
        le=1,
        description="detection: boxes scoring less are not shown (scoreThreshold).",
    )
    nms_iou: float | None = Field(
        None,
        gt=0,
        le=1,
        description="detection: class-wise NMS at this IoU (nmsIou); none: the graph does it.",
    )
    tokenizer: str | None = Field(
        None,
        min_length=1,
        max_length=2048,
        description="text-classification: the tokenizer.json the Model's texts go through "
        "(spec.dataset.tokenizer): a path, file:// or pvc:// URI this server reads.",
    )
    max_length: int | None = Field(
        None,
        gt=0,
        le=8192,
        description="text-classification: tokens per text (spec.dataset.maxLength); default "
        "the sequence length of the Model's first input, else 128.",
    )
    data_range: float | None = Field(
        None,
        gt=0,
        le=65535,
        description="image-to-image: the output's range, 0..dataRange (spec.task.dataRange; "
        "default 1.0), shown as 0..255.",
    )


class TaskRefusedError(ValueError):
    """The Model cannot be tried as it is: ``field`` (``model``, ``output``, ``classes`` or
    ``tokenizer``) says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class TryTask:
    """What a try of one Model runs: its task, ``spec.task`` (None: classification, the
    spec's default) and the placeholder dataset."""

    type: TaskType
    task: dict[str, Any] | None
    dataset: dict[str, Any]


def task_of(resolved: ResolvedModel) -> TaskType:
    """The task a try answers for the Model's label; :class:`TaskRefusedError` on ``model`` for
    a label it does not answer."""
    label = resolved.task
    if label is None:
        return TaskType.CLASSIFICATION
    found = TASK_LABELS.get(label)
    if found is None:
        labels = ", ".join(TASK_LABELS)
        raise TaskRefusedError(
            "model",
            f"{resolved.name}'s task is {label!r}: a try answers classification, detection, "
            f"segmentation, text-classification and image-to-image Models (task labels "
            f"{labels}, or none)",
        )
    return found


def declared_classes(resolved: ResolvedModel, output: str | None) -> int | None:
    """The class axis of the output's declared shape ([N, C, H, W], or [N, H, W, C] when
    declared NHWC), when the Model declares it."""
    outputs = resolved.model.outputs
    chosen = [o for o in outputs if o.name == output] if output else outputs[:1]
    if not chosen or len(chosen[0].shape) != 4:
        return None
    axis = 3 if chosen[0].layout == Layout.NHWC else 1
    size = chosen[0].shape[axis]
    return size if size > 0 else None


def declared_length(resolved: ResolvedModel) -> int | None:
    """The sequence length of the first input's declared shape [batch, length], when the
    Model declares it."""
    inputs = resolved.model.inputs
    if not inputs or len(inputs[0].shape) != 2 or inputs[0].shape[1] <= 0:
        return None
    return inputs[0].shape[1]


def _check_output(resolved: ResolvedModel, output: str | None) -> None:
    names = [o.name for o in resolved.model.outputs]
    if output is not None and names and output not in names:
        raise TaskRefusedError(
            "output", f"{output!r} is none of the Model's outputs ({', '.join(names)})"
        )


def _with_output(task: dict[str, Any], output: str | None) -> dict[str, Any]:
    return task if output is None else {**task, "output": output}


def try_task(resolved: ResolvedModel, options: TryOptions) -> TryTask:
    """The task, ``spec.task`` and placeholder dataset a try of ``resolved`` runs with."""
    kind = task_of(resolved)
    dataset = dict(PLACEHOLDER_DATASETS[kind])
    if kind == TaskType.TEXT_CLASSIFICATION:
        _check_output(resolved, options.output)
        if options.tokenizer is None:
            raise TaskRefusedError(
                "tokenizer",
                "give the tokenizer.json this Model's texts are tokenized with (a text "
                "dataset's tokenizer): a path, file:// or pvc:// URI this server reads",
            )
        dataset["tokenizer"] = options.tokenizer
        length = options.max_length or declared_length(resolved)
        if length is not None:
            dataset["maxLength"] = length
        return TryTask(kind, _with_output({"type": kind.value}, options.output), dataset)
    if kind == TaskType.IMAGE_TO_IMAGE:
        _check_output(resolved, options.output)
        task: dict[str, Any] = {"type": kind.value}
        if options.data_range is not None:
            task["dataRange"] = float(options.data_range)
        return TryTask(kind, _with_output(task, options.output), dataset)
    if kind == TaskType.DETECTION:
        detection: dict[str, Any] = {
            "boxFormat": options.box_format,
            "normalized": options.normalized,
            "scoreThreshold": options.score_threshold,
        }
        if options.nms_iou is not None:
            detection["nmsIou"] = options.nms_iou
        return TryTask(kind, {"type": kind.value, "detection": detection}, dataset)
    if kind == TaskType.SEGMENTATION:
        _check_output(resolved, options.output)
        classes = options.classes or declared_classes(resolved, options.output)
        if classes is None:
            raise TaskRefusedError(
                "classes",
                "give the number of classes: the Model declares no output shape "
                "[batch, classes, H, W] to read it from",
            )
        if classes > MAX_CLASSES:
            raise TaskRefusedError(
                "classes", f"the Model declares {classes} classes; a try shows at most "
                f"{MAX_CLASSES} (a 16-bit PNG)",
            )  # fmt: skip
        segmentation = {"type": kind.value, "numClasses": classes}
        return TryTask(kind, _with_output(segmentation, options.output), dataset)
    return TryTask(kind, None, dataset)
