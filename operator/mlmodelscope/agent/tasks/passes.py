"""The accuracy pass of a task other than image classification: every sample once, in dataset
order, at a fixed batch size, the task's metrics computed from the output the task names."""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from mlmodelscope.agent.tasks.data import CocoDataset, DatasetError
from mlmodelscope.agent.tasks.detection import (
    Detections,
    check_detection_outputs,
    coco_map,
    coco_results,
    image_detections,
)
from mlmodelscope.agent.tasks.record import TaskMetrics
from mlmodelscope.agent.tasks.restoration import (
    SSIM_WINDOW,
    ImageQuality,
    RestorationMetrics,
    Scoring,
    image_quality,
)
from mlmodelscope.agent.tasks.segmentation import (
    class_map,
    confusion_matrix,
    resize_classes,
    segmentation_metrics,
)
from mlmodelscope.agent.tasks.text import classification_metrics
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import ChannelOrder, EvaluationSpec, Layout, Task, TensorSpec

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
    postprocessing_s: float = 0.0
    """Time spent turning the outputs into what the metric reads (class maps, boxes, NMS),
    over every sample: outside every timed query."""
    metrics_s: float = 0.0
    """Time the metric itself took (COCOeval, the confusion matrix's IoU, scikit-learn)."""


def output_named(name: str, outputs: Sequence[TensorSpec], field: str) -> int:
    """The position of output ``name`` among ``spec.model.outputs`` (the backend's order)."""
    names = [o.name for o in outputs]
    if name not in names:
        raise SpecError(
            field,
            f"{name!r} is not one of spec.model.outputs ({', '.join(names) or 'none'}); "
            "declare the model's outputs by name there",
        )
    return names.index(name)


def detection_outputs(spec: EvaluationSpec) -> tuple[int, int, int]:
    """Where the boxes, scores and classes outputs ``spec.task.detection`` names are among
    ``spec.model.outputs``; a :class:`SpecError` for a name that is none of them, or for a
    centerCrop in the preprocessing (boxes map back to the image through a resize only)."""
    if any(step.center_crop is not None for step in spec.preprocessing):
        raise SpecError(
            "spec.preprocessing",
            "detection maps boxes back to the image through a resize only; a centerCrop "
            "cuts the image and would shift them: remove it",
        )
    options, outputs = spec.task.detection, spec.model.outputs
    boxes, scores, classes = (
        output_named(getattr(options, key), outputs, f"spec.task.detection.{key}")
        for key in ("boxes", "scores", "classes")
    )
    return boxes, scores, classes


def output_index(task: Task, outputs: Sequence[TensorSpec]) -> int:
    """Where the output ``task.output`` names is in what the backend returns (the order of
    ``spec.model.outputs``); the first output when the task names none."""
    if task.output is None:
        return 0
    return output_named(task.output, outputs, "spec.task.output")


def _batches(count: int, size: int) -> list[slice]:
    return [slice(s, min(s + size, count)) for s in range(0, count, size)]


@dataclass(frozen=True)
class PassRun:
    samples: int
    seconds: float
    outputs_sha256: str
    postprocessing_s: float


def run_pass(
    predict: Predict,
    feeds: Sequence[np.ndarray],
    indices: Sequence[int],
    batch_size: int,
    consume: Callable[[slice, list[np.ndarray]], None],
    progress: Progress,
) -> PassRun:
    """Feed every sample once; ``consume`` gets each batch's slice and the outputs at
    ``indices``, which the digest covers too. ``consume``'s own time is kept apart."""
    count = len(feeds[0])
    digest = hashlib.sha256()
    consuming = 0
    start = time.perf_counter_ns()
    for part in _batches(count, batch_size):
        outputs = predict([f[part] for f in feeds])
        if max(indices) >= len(outputs):
            raise SpecError(
                "spec.task.output",
                f"the model returned {len(outputs)} outputs; output {max(indices)} does not exist",
            )
        chosen = [np.asarray(outputs[i]) for i in indices]
        for array in chosen:
            digest.update(np.ascontiguousarray(array).tobytes())
        began = time.perf_counter_ns()
        consume(part, chosen)
        consuming += time.perf_counter_ns() - began
        progress(part.stop, count)
    seconds = (time.perf_counter_ns() - start) / 1e9
    return PassRun(count, seconds, digest.hexdigest(), consuming / 1e9)


def _finished(metrics: Callable[[], TaskMetrics], run: PassRun, batch_size: int) -> TaskPass:
    """The pass's record, with the metric's own computing time measured."""
    began = time.perf_counter_ns()
    computed = metrics()
    took = (time.perf_counter_ns() - began) / 1e9
    return TaskPass(
        computed, run.samples, batch_size, run.seconds, run.outputs_sha256,
        run.postprocessing_s, took,
    )  # fmt: skip


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

    def consume(part: slice, chosen: list[np.ndarray]) -> None:
        (out,) = chosen
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

    run = run_pass(predict, feeds, [index], batch_size, consume, progress)
    return _finished(
        lambda: classification_metrics(predicted, labels, task.num_classes), run, batch_size
    )


def read_mask(path: Path) -> np.ndarray:
    """A mask's class index per pixel (mode L, or a palette's indices)."""
    from PIL import Image

    try:
        with Image.open(path) as mask:
            return np.asarray(mask)
    except OSError as exc:
        raise DatasetError(f"{path}: cannot be read as a mask ({exc})") from None


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

    def consume(part: slice, chosen: list[np.ndarray]) -> None:
        nonlocal confusion
        for offset, classes in enumerate(class_map(chosen[0], num_classes)):
            path = masks[part.start + offset]
            mask = read_mask(path)
            predicted = resize_classes(classes, *mask.shape[:2])
            try:
                confusion += confusion_matrix(predicted, mask, num_classes, task.ignore_index)
            except ValueError as exc:
                raise DatasetError(f"{path}: {exc}") from None

    run = run_pass(predict, feeds, [index], batch_size, consume, progress)
    return _finished(lambda: segmentation_metrics(confusion), run, batch_size)


def output_images(out: np.ndarray, layout: Layout | None) -> np.ndarray:
    """Images [N, H, W, C] from an output [N, C, H, W] or [N, H, W, C] (C of 1 or 3; the
    output's declared layout decides, else where a channel axis of that size is) or grey
    images [N, H, W]."""
    if out.ndim == 3:
        return out[..., None]
    first = out.ndim == 4 and out.shape[1] in (1, 3)
    last = out.ndim == 4 and out.shape[3] in (1, 3)
    if last and (layout == Layout.NHWC or (layout is None and not first)):
        return out
    if first and layout != Layout.NHWC:
        return out.transpose(0, 2, 3, 1)
    raise SpecError(
        "spec.task.output",
        f"image-to-image reads images [batch, C, H, W] or [batch, H, W, C] of 1 or 3 channels, "
        f"or [batch, H, W]; the output is {list(out.shape)} {out.dtype.name}"
        + (f" (declared {layout.value})" if layout is not None else ""),
    )


def fed_bgr(spec: EvaluationSpec) -> bool:
    """Whether the model takes its images in BGR (the preprocessing's last channelOrder
    says so): its output images are BGR too."""
    orders = [s.channel_order.order for s in spec.preprocessing if s.channel_order]
    return bool(orders) and orders[-1] == ChannelOrder.BGR


def read_target(path: Path, channels: int, data_range: float, bgr: bool) -> np.ndarray:
    """A target image as float64 [H, W, channels] (grey for 1, RGB, or BGR when the model's
    input was), its 8-bit values scaled to 0..``data_range``."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("L" if channels == 1 else "RGB"))
    except OSError as exc:
        raise SpecError(
            "spec.dataset.targets", f"{path}: cannot be read as an image ({exc})"
        ) from None
    if channels == 1:
        pixels = pixels[..., None]
    elif bgr:
        pixels = pixels[..., ::-1]
    return pixels.astype(np.float64) * (data_range / 255.0)


def scoring_of(task: Task, scale: Fraction) -> Scoring:
    """``task.cropBorder`` and ``task.channels`` as a :class:`Scoring`: 'scale' becomes the
    pairs dataset's scale factor, which must then be a whole number."""
    crop = task.crop_border
    if crop == "scale":
        if scale.denominator != 1:
            raise SpecError(
                "spec.task.cropBorder",
                f"'scale' cuts the set's scale factor, but its targets are {scale}x their "
                "inputs, not a whole number: give the pixels to cut",
            )
        crop = int(scale)
    return Scoring(crop, task.channels)


def _check_scoring(scoring: Scoring, image: np.ndarray, path: Path) -> None:
    """Refuse options an output image [H, W, C] cannot be scored under, naming the option."""
    height, width, channels = image.shape
    if scoring.channels == "y" and channels != 3:
        raise SpecError(
            "spec.task.channels",
            f"y scores the luma of RGB images, but the model's output for {path} is grey "
            "(one channel): score it with channels: rgb",
        )
    border = scoring.crop_border
    left = (max(width - 2 * border, 0), max(height - 2 * border, 0))
    if border and min(left) < SSIM_WINDOW:
        raise SpecError(
            "spec.task.cropBorder",
            f"cutting {border} pixels off every border of {path} ({width}x{height}) leaves "
            f"{left[0]}x{left[1]}; SSIM needs at least {SSIM_WINDOW}x{SSIM_WINDOW}",
        )


def image_to_image_pass(
    predict: Predict,
    feeds: Sequence[np.ndarray],
    targets: Sequence[Path],
    task: Task,
    index: int,
    layout: Layout | None,
    bgr: bool,
    batch_size: int,
    progress: Progress,
    scale: Fraction = Fraction(1),
) -> TaskPass:
    """Mean PSNR (dB) and SSIM (scikit-image) of each output image, clipped to 0..dataRange,
    against its target at the target's own size: an output of another size is an error
    naming the target. ``task.cropBorder`` and ``task.channels`` say which part is scored
    (BGR images are turned to RGB for the luma). The metric's own time is kept apart from
    reading the targets."""
    data_range = task.data_range
    scoring = scoring_of(task, scale)
    qualities: list[ImageQuality] = []
    scoring_ns = 0

    def consume(part: slice, chosen: list[np.ndarray]) -> None:
        nonlocal scoring_ns
        for offset, image in enumerate(output_images(chosen[0], layout)):
            path = targets[part.start + offset]
            target = read_target(path, image.shape[2], data_range, bgr)
            if target.shape[:2] != image.shape[:2]:
                raise SpecError(
                    "spec.dataset.targets",
                    f"{path}: {target.shape[1]}x{target.shape[0]} pixels, but the model's "
                    f"output for it is {image.shape[1]}x{image.shape[0]}",
                )
            _check_scoring(scoring, image, path)
            began = time.perf_counter_ns()
            clipped = np.clip(image.astype(np.float64), 0.0, data_range)
            if bgr and scoring.channels == "y":
                clipped, target = clipped[..., ::-1], target[..., ::-1]
            qualities.append(image_quality(clipped, target, data_range=data_range, scoring=scoring))
            scoring_ns += time.perf_counter_ns() - began

    run = run_pass(predict, feeds, [index], batch_size, consume, progress)
    done = _finished(lambda: RestorationMetrics.of(qualities, scoring), run, batch_size)
    scoring_s = scoring_ns / 1e9
    return dataclasses.replace(
        done,
        postprocessing_s=run.postprocessing_s - scoring_s,
        metrics_s=done.metrics_s + scoring_s,
    )


def image_size(batch: np.ndarray) -> tuple[int, int]:
    """(height, width) of a batch of images, channels first [N, C, H, W] (C of 1, 3 or 4)
    or last [N, H, W, C]."""
    if batch.ndim != 4:
        raise SpecError(
            "spec.model.inputs[0].shape",
            f"detection takes a batch of images [N, C, H, W] or [N, H, W, C]; the input is "
            f"{list(batch.shape)}",
        )
    if batch.shape[1] in (1, 3, 4):
        return int(batch.shape[2]), int(batch.shape[3])
    return int(batch.shape[1]), int(batch.shape[2])


def detection_pass(
    predict: Predict,
    feeds: Sequence[np.ndarray],
    coco: CocoDataset,
    task: Task,
    indices: tuple[int, int, int],
    input_size: tuple[int, int],
    batch_size: int,
    progress: Progress,
) -> TaskPass:
    """COCO box AP (pycocotools) of the boxes, scores and classes outputs: read in the spec's
    box format, mapped from the model input's pixels (or fractions of it) to the image's,
    thresholded, suppressed per class when ``nmsIou`` is set, at most ``maxDetections``."""
    options = task.detection
    category_of = dict(enumerate(options.category_ids)) if options.category_ids else None
    found: list[Detections] = []

    def consume(part: slice, chosen: list[np.ndarray]) -> None:
        boxes, scores, classes = chosen
        check_detection_outputs(boxes, scores, classes)
        for offset in range(len(boxes)):
            image = coco.images[part.start + offset]
            found.append(
                image_detections(
                    boxes[offset], scores[offset], classes[offset], options, input_size,
                    (image.height, image.width),
                )
            )  # fmt: skip

    run = run_pass(predict, feeds, indices, batch_size, consume, progress)
    unknown = sorted(
        {int(c) for d in found for c in d.labels} - set(category_of or coco.categories)
    )
    if unknown:
        raise SpecError(
            "spec.task.detection.categoryIds",
            f"the model predicts class ids {unknown[:10]} that "
            + (
                "categoryIds does not map"
                if category_of
                else f"are no category of the COCO file ({sorted(coco.categories)}); map them "
                "with categoryIds"
            ),
        )
    results = coco_results([image.id for image in coco.images], found, category_of)
    return _finished(lambda: coco_map(coco.ground_truth, results), run, batch_size)


def text_detection_pass(
    predict: Predict,
    feeds: Sequence[np.ndarray],
    coco: CocoDataset,
    task: Task,
    index: int,
    batch_size: int,
    progress: Progress,
) -> TaskPass:
    """Precision, recall and h-mean of the DB boxes of each probability map [batch, 1, H, W]
    (scaled to the image's size) against the coco dataset's boxes, matched one to one."""
    from mlmodelscope.agent.tasks import textdet

    options = task.text_detection
    found: dict[str, list[textdet.Box]] = {}

    def consume(part: slice, chosen: list[np.ndarray]) -> None:
        (maps,) = chosen
        if maps.ndim != 4 or maps.shape[1] != 1:
            raise SpecError(
                "spec.task.output",
                f"text-detection reads a probability map [batch, 1, H, W]; the output is "
                f"{list(maps.shape)}",
            )
        for offset in range(len(maps)):
            image = coco.images[part.start + offset]
            found[str(image.id)], _ = textdet.db_boxes(
                maps[offset, 0], (image.height, image.width), thresh=options.thresh,
                box_thresh=options.box_thresh, unclip_ratio=options.unclip_ratio,
            )  # fmt: skip

    run = run_pass(predict, feeds, [index], batch_size, consume, progress)
    truths = {
        str(image.id): [(x, y, x + w, y + h) for x, y, w, h in image.boxes] for image in coco.images
    }
    return _finished(
        lambda: textdet.TextDetectionMetrics.of(
            textdet.hmean(found, truths, options.iou_threshold)
        ),
        run,
        batch_size,
    )


def primary(metrics: TaskMetrics) -> tuple[str, float | None]:
    """The metric a leaderboard sorts by, and its value (None where the task has none: the
    PSNR of outputs all equal to their targets)."""
    value: Any = getattr(metrics, metrics.primary)
    return metrics.primary, None if value is None else float(value)
