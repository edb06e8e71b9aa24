"""Object detection: the postprocessing detectors need when their graph leaves it out (box
formats, score threshold, class-wise NMS), and COCO AP computed by pycocotools' own COCOeval.

Boxes are float arrays of shape (N, 4) in one of three formats, normalised to [0, 1] or in
pixels; everything converts to pixel ``xyxy`` first, and to COCO's pixel ``xywh`` only for the
evaluation.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal

import numpy as np

from mlmodelscope.agent.tasks.record import TaskMetrics
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import Detection

BoxFormat = Literal["xyxy", "xywh", "cxcywh"]
BOX_FORMATS: Final = ("xyxy", "xywh", "cxcywh")


@dataclass(frozen=True)
class Detections:
    """One image's detections: ``boxes`` (N, 4) pixel xyxy, ``scores`` (N,), ``labels`` (N,)
    class ids as the model numbers them."""

    boxes: np.ndarray
    scores: np.ndarray
    labels: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.scores)
        if self.boxes.shape != (n, 4) or self.labels.shape != (n,) or self.scores.ndim != 1:
            raise ValueError(
                f"detections need boxes (N, 4), scores (N,) and labels (N,); got "
                f"{self.boxes.shape}, {self.scores.shape} and {self.labels.shape}"
            )

    def take(self, keep: np.ndarray) -> Detections:
        return Detections(self.boxes[keep], self.scores[keep], self.labels[keep])


def to_xyxy(
    boxes: np.ndarray, fmt: BoxFormat, *, normalized: bool, height: int, width: int
) -> np.ndarray:
    """``boxes`` (N, 4) in ``fmt`` as float64 pixel xyxy; normalised coordinates are scaled by
    the image's ``width`` and ``height``."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if fmt == "xyxy":
        out = b.copy()
    elif fmt == "xywh":
        out = np.concatenate([b[:, :2], b[:, :2] + b[:, 2:]], axis=1)
    elif fmt == "cxcywh":
        half = b[:, 2:] / 2
        out = np.concatenate([b[:, :2] - half, b[:, :2] + half], axis=1)
    else:
        raise ValueError(f"box format {fmt!r}; expected one of {', '.join(BOX_FORMATS)}")
    if normalized:
        out *= np.array([width, height, width, height], dtype=np.float64)
    return out


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of xyxy boxes: (len(a), len(b)); boxes of no area overlap nothing."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area_a = np.prod(np.clip(a[:, 2:] - a[:, :2], 0, None), axis=1)
    area_b = np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    iou: np.ndarray = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    return iou


def class_wise_nms(
    detections: Detections,
    *,
    iou_threshold: float,
    score_threshold: float = 0.0,
    max_detections: int | None = None,
) -> Detections:
    """Greedy non-maximum suppression within each class: below ``score_threshold`` dropped,
    then, highest score first (ties by position), a box is dropped when it overlaps a kept box
    of its class by IoU > ``iou_threshold``; at most ``max_detections`` kept, best first."""
    candidates = np.flatnonzero(detections.scores >= score_threshold)
    order = candidates[np.argsort(-detections.scores[candidates], kind="stable")]
    kept: list[int] = []
    for label in np.unique(detections.labels[order]):
        mine = order[detections.labels[order] == label]
        iou = box_iou(detections.boxes[mine], detections.boxes[mine])
        alive = np.ones(len(mine), dtype=bool)
        for i in range(len(mine)):
            if alive[i]:
                kept.append(int(mine[i]))
                alive[i + 1 :] &= iou[i, i + 1 :] <= iou_threshold
    keep = np.array(kept, dtype=np.int64)
    keep = keep[np.argsort(-detections.scores[keep], kind="stable")]
    if max_detections is not None:
        keep = keep[:max_detections]
    return detections.take(keep)


def check_detection_outputs(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> None:
    """Refuse outputs that are not a batch's boxes [batch, n, 4], scores and classes
    [batch, n], naming ``spec.task.detection``."""
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.shape != boxes.shape[:2]:
        raise SpecError(
            "spec.task.detection",
            f"detection reads boxes [batch, n, 4] and scores and classes [batch, n]; the "
            f"outputs are {list(boxes.shape)}, {list(scores.shape)} and "
            f"{list(classes.shape)}",
        )


def image_detections(
    boxes: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray,
    options: Detection,
    input_size: tuple[int, int],
    image_size: tuple[int, int],
) -> Detections:
    """One image's boxes [n, 4], scores and classes [n] as ``spec.task.detection`` reads
    them: in its box format, from the model input's pixels (``input_size``, height and width)
    or fractions of it to the image's pixel xyxy (``image_size``), below ``scoreThreshold``
    dropped, suppressed per class when ``nmsIou`` is set, at most ``maxDetections``, best
    first."""
    height, width = image_size
    if options.normalized:
        xyxy = to_xyxy(boxes, options.box_format, normalized=True, height=height, width=width)
    else:
        in_height, in_width = input_size
        scale = np.array([width / in_width, height / in_height] * 2)
        xyxy = to_xyxy(boxes, options.box_format, normalized=False,
                       height=in_height, width=in_width) * scale  # fmt: skip
    labels = np.rint(classes).astype(np.int64)
    return class_wise_nms(
        Detections(xyxy, np.asarray(scores, dtype=np.float64), labels),
        iou_threshold=1.0 if options.nms_iou is None else options.nms_iou,
        score_threshold=options.score_threshold,
        max_detections=options.max_detections,
    )


# ----------------------------------------------------------------------------- COCO metrics


@dataclass(frozen=True)
class DetectionMetrics(TaskMetrics):
    """COCOeval's twelve summary numbers for bounding boxes (None where the ground truth has
    no object of that size, which COCOeval writes as -1)."""

    map: float
    """AP averaged over IoU 0.50:0.95 and categories, at most 100 detections per image."""
    ap50: float
    ap75: float
    ap_small: float | None
    ap_medium: float | None
    ap_large: float | None
    ar1: float
    ar10: float
    ar100: float
    ar_small: float | None
    ar_medium: float | None
    ar_large: float | None
    images: int
    detections: int
    primary: ClassVar[str] = "map"


def coco_results(
    image_ids: Sequence[int],
    per_image: Sequence[Detections],
    category_of: Mapping[int, int] | None = None,
) -> list[dict[str, Any]]:
    """Detections in COCO's results format (pixel xywh); ``category_of`` maps the model's class
    ids to the annotation file's category ids (identity when None)."""
    if len(image_ids) != len(per_image):
        raise ValueError(f"{len(image_ids)} image ids for {len(per_image)} images' detections")
    results = []
    for image_id, found in zip(image_ids, per_image, strict=True):
        xywh = np.concatenate([found.boxes[:, :2], found.boxes[:, 2:] - found.boxes[:, :2]], 1)
        for box, score, label in zip(xywh, found.scores, found.labels, strict=True):
            category = int(label) if category_of is None else category_of[int(label)]
            results.append(
                {
                    "image_id": int(image_id),
                    "category_id": category,
                    "bbox": [float(v) for v in box],
                    "score": float(score),
                }
            )
    return results


def coco_map(
    ground_truth: Mapping[str, Any], results: Sequence[Mapping[str, Any]]
) -> DetectionMetrics:
    """COCO bounding-box AP/AR of ``results`` against ``ground_truth`` (a COCO annotation
    document, as loaded from its JSON), by pycocotools' COCOeval over every image of the
    ground truth. pycocotools' progress prints are kept off standard output."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    if not ground_truth.get("annotations"):
        raise ValueError("the ground truth holds no annotations: COCO AP is undefined")
    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO()
        truth.dataset = {"info": {}, **dict(ground_truth)}
        truth.createIndex()
        if results:
            found = truth.loadRes(list(results))
        else:  # loadRes refuses an empty list: no detections score zero
            found = COCO()
            found.dataset = {**truth.dataset, "annotations": []}
            found.createIndex()
        evaluation = COCOeval(truth, found, iouType="bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    stats = [float(s) for s in evaluation.stats]

    def sized(value: float) -> float | None:
        return None if value < 0 else value

    return DetectionMetrics(
        map=stats[0],
        ap50=stats[1],
        ap75=stats[2],
        ap_small=sized(stats[3]),
        ap_medium=sized(stats[4]),
        ap_large=sized(stats[5]),
        ar1=stats[6],
        ar10=stats[7],
        ar100=stats[8],
        ar_small=sized(stats[9]),
        ar_medium=sized(stats[10]),
        ar_large=sized(stats[11]),
        images=len(truth.getImgIds()),
        detections=len(results),
    )
