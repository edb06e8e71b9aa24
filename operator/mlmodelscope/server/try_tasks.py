"""Which task a try answers for a catalog Model, and the ``spec.task`` and dataset it runs with.

A Model's ``task`` is a label (docs/spec.md): a try reads it as classification (no label,
``classification``, ``image-classification``), detection (``detection``, ``object-detection``)
or segmentation (``segmentation``, ``semantic-segmentation``, ``image-segmentation``), and
refuses any other, naming ``model``. As a launch gives ``spec.task`` itself, a try takes the
task's options from its form (:class:`TryOptions`); the dataset is a placeholder of the type
the spec pairs with the task, never read: the upload takes its place.
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
}
"""The dataset a try's spec names, of the type its task goes with: never read."""


class TryOptions(BaseModel):
    """The task's options a try takes from its form (the API's and the page's), as a launch
    takes ``spec.task``; each field is used by its task only."""

    model_config = ConfigDict(extra="ignore")

    output: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        description="segmentation: the output of class scores (spec.task.output); default "
        "the first.",
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


class TaskRefusedError(ValueError):
    """The Model cannot be tried as it is: ``field`` (``model``, ``output`` or ``classes``)
    says why."""

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
            f"{resolved.name}'s task is {label!r}: a try answers classification, detection "
            f"and segmentation Models (task labels {labels}, or none)",
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


def try_task(resolved: ResolvedModel, options: TryOptions) -> TryTask:
    """The task, ``spec.task`` and placeholder dataset a try of ``resolved`` runs with."""
    kind = task_of(resolved)
    dataset = dict(PLACEHOLDER_DATASETS[kind])
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
        names = [o.name for o in resolved.model.outputs]
        if options.output is not None and names and options.output not in names:
            raise TaskRefusedError(
                "output", f"{options.output!r} is none of the Model's outputs ({', '.join(names)})"
            )
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
        task: dict[str, Any] = {"type": kind.value, "numClasses": classes}
        if options.output is not None:
            task["output"] = options.output
        return TryTask(kind, task, dataset)
    return TryTask(kind, None, dataset)
