"""Task metrics against the libraries the field trusts: our path (box conversion, confusion
matrix, layouts) must give what pycocotools, torchmetrics, scikit-learn and scikit-image give
when called directly on the same predictions."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import numpy as np
import pytest

from mlmodelscope.agent.tasks.detection import (
    Detections,
    box_iou,
    class_wise_nms,
    coco_map,
    coco_results,
    to_xyxy,
)
from mlmodelscope.agent.tasks.restoration import restoration_metrics
from mlmodelscope.agent.tasks.segmentation import confusion_matrix, segmentation_metrics
from mlmodelscope.agent.tasks.text import classification_metrics

EXACT = 1e-6

# ------------------------------------------------------------------------------- detection


def coco_ground_truth(rng: np.random.Generator, images: int = 24) -> dict[str, Any]:
    """A COCO annotation document: images of 320x240 with up to 5 boxes of 3 categories, of
    every COCO size class (small < 32², medium, large > 96²)."""
    doc: dict[str, Any] = {
        "images": [{"id": i + 1, "width": 320, "height": 240} for i in range(images)],
        "categories": [{"id": c, "name": f"c{c}"} for c in (1, 2, 3)],
        "annotations": [],
    }
    for image in doc["images"]:
        for _ in range(int(rng.integers(1, 6))):
            w, h = rng.uniform(8, 150, size=2)
            x, y = rng.uniform(0, 320 - w), rng.uniform(0, 240 - h)
            doc["annotations"].append(
                {
                    "id": len(doc["annotations"]) + 1,
                    "image_id": image["id"],
                    "category_id": int(rng.integers(1, 4)),
                    "bbox": [x, y, w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
    return doc


def model_outputs(
    truth: dict[str, Any], rng: np.random.Generator
) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """What a detector with normalised cx,cy,w,h outputs and 0-based classes might say: each
    object found with jitter (some missed, some mislabelled), plus false positives."""
    found: dict[int, list[tuple[list[float], float, int]]] = {i["id"]: [] for i in truth["images"]}
    for ann in truth["annotations"]:
        if rng.random() < 0.15:
            continue
        x, y, w, h = np.array(ann["bbox"]) + rng.normal(0, 3, size=4)
        label = ann["category_id"] - 1 if rng.random() > 0.1 else int(rng.integers(0, 3))
        box = [(x + w / 2) / 320, (y + h / 2) / 240, w / 320, h / 240]
        found[ann["image_id"]].append((box, float(rng.uniform(0.3, 1.0)), label))
    for image_id in found:
        for _ in range(int(rng.integers(0, 3))):
            box = [*rng.uniform(0.2, 0.8, size=2), *rng.uniform(0.05, 0.3, size=2)]
            found[image_id].append((box, float(rng.uniform(0.0, 0.6)), int(rng.integers(0, 3))))
    return {
        i: (
            np.array([b for b, _, _ in f], dtype=np.float32).reshape(-1, 4),
            np.array([s for _, s, _ in f], dtype=np.float32),
            np.array([c for _, _, c in f], dtype=np.int64),
        )
        for i, f in found.items()
    }


def pycocotools_directly(truth: dict[str, Any], results: list[dict[str, Any]]) -> np.ndarray:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = truth
        gt.createIndex()
        evaluation = COCOeval(gt, gt.loadRes(results), iouType="bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return np.array(evaluation.stats)


def test_coco_map_through_our_path_equals_pycocotools_on_the_same_detections() -> None:
    rng = np.random.default_rng(7)
    truth = coco_ground_truth(rng)
    outputs = model_outputs(truth, rng)
    ids = sorted(outputs)
    ours = [
        Detections(to_xyxy(boxes, "cxcywh", normalized=True, height=240, width=320), scores, labels)
        for boxes, scores, labels in (outputs[i] for i in ids)
    ]
    metrics = coco_map(truth, coco_results(ids, ours, category_of={0: 1, 1: 2, 2: 3}))

    direct = []  # the same detections, converted by hand to COCO's pixel x,y,w,h
    for image_id in ids:
        for (cx, cy, w, h), score, label in zip(*outputs[image_id], strict=True):
            bbox = [(cx - w / 2) * 320, (cy - h / 2) * 240, w * 320, h * 240]
            direct.append(
                {
                    "image_id": image_id,
                    "category_id": int(label) + 1,
                    "bbox": bbox,
                    "score": float(score),
                }
            )
    stats = pycocotools_directly(truth, direct)
    got = metrics.as_dict()
    names = ["map", "ap50", "ap75", "ap_small", "ap_medium", "ap_large",
             "ar1", "ar10", "ar100", "ar_small", "ar_medium", "ar_large"]  # fmt: skip
    for name, reference in zip(names, stats, strict=True):
        assert got[name] == pytest.approx(reference, abs=EXACT), name
    assert 0.2 < metrics.map < 0.9 and metrics.primary == "map"
    assert metrics.images == len(ids) and metrics.detections == len(direct)


def test_no_detections_score_zero_and_no_ground_truth_is_refused() -> None:
    truth = coco_ground_truth(np.random.default_rng(1), images=3)
    assert coco_map(truth, []).map == 0.0
    with pytest.raises(ValueError, match="no annotations"):
        coco_map({**truth, "annotations": []}, [])


def test_box_formats_convert_to_pixel_xyxy() -> None:
    expected = np.array([[10.0, 20.0, 50.0, 80.0]])
    assert to_xyxy(expected, "xyxy", normalized=False, height=1, width=1).tolist() == [
        [10, 20, 50, 80]
    ]
    assert to_xyxy(np.array([[10, 20, 40, 60]]), "xywh", normalized=False, height=1, width=1) == (
        pytest.approx(expected)
    )
    normalised_center = np.array([[30 / 100, 50 / 200, 40 / 100, 60 / 200]])
    assert to_xyxy(normalised_center, "cxcywh", normalized=True, height=200, width=100) == (
        pytest.approx(expected)
    )
    with pytest.raises(ValueError, match="box format 'yxyx'"):
        to_xyxy(expected, "yxyx", normalized=False, height=1, width=1)  # type: ignore[arg-type]


def test_class_wise_nms_keeps_exactly_what_its_definition_keeps() -> None:
    """Checked against the definition, not a second implementation: kept boxes of one class
    overlap by at most the threshold, every dropped box overlaps a better kept one of its
    class by more, boxes under the score threshold are gone, and the best come first."""
    rng = np.random.default_rng(3)
    centers = rng.uniform(50, 250, size=(200, 2))
    sizes = rng.uniform(20, 60, size=(200, 2))
    boxes = np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=1)
    scores = rng.permutation(200).astype(np.float64) / 200  # distinct
    labels = rng.integers(0, 3, size=200)
    found = Detections(boxes, scores, labels)
    kept = class_wise_nms(found, iou_threshold=0.5, score_threshold=0.1)
    assert np.all(np.diff(kept.scores) <= 0) and np.all(kept.scores >= 0.1)
    kept_rows = {tuple(b) for b in kept.boxes}
    for label in range(3):
        mine = kept.boxes[kept.labels == label]
        iou = box_iou(mine, mine)
        assert np.all(iou[~np.eye(len(mine), dtype=bool)] <= 0.5)
    for box, score, label in zip(boxes, scores, labels, strict=True):
        if score < 0.1 or tuple(box) in kept_rows:
            continue
        better = kept.boxes[(kept.labels == label) & (kept.scores > score)]
        assert (box_iou(box[None], better) > 0.5).any()
    assert 10 < len(kept.scores) < 200
    assert len(class_wise_nms(found, iou_threshold=0.5, max_detections=5).scores) == 5


# ---------------------------------------------------------------------------- segmentation


def test_miou_and_pixel_accuracy_equal_torchmetrics_with_an_ignored_label() -> None:
    import torch
    from torchmetrics.classification import MulticlassAccuracy, MulticlassJaccardIndex

    rng = np.random.default_rng(5)
    target = rng.integers(0, 5, size=(6, 40, 30))
    predicted = np.where(rng.random(target.shape) < 0.7, target, rng.integers(0, 5, target.shape))
    target[:, :3] = 255  # VOC's "void" border
    confusion = sum(
        confusion_matrix(p, t, num_classes=5, ignore_index=255)
        for p, t in zip(predicted, target, strict=True)
    )
    ours = segmentation_metrics(confusion)
    p, t = torch.from_numpy(predicted), torch.from_numpy(target)
    jaccard = MulticlassJaccardIndex(num_classes=5, average="macro", ignore_index=255)
    accuracy = MulticlassAccuracy(num_classes=5, average="micro", ignore_index=255)
    assert ours.miou == pytest.approx(float(jaccard(p, t)), abs=EXACT)
    assert ours.pixel_accuracy == pytest.approx(float(accuracy(p, t)), abs=EXACT)
    per_class = MulticlassJaccardIndex(num_classes=5, average="none", ignore_index=255)(p, t)
    assert ours.class_iou == pytest.approx(per_class.tolist(), abs=EXACT)
    assert ours.pixels == int((target != 255).sum()) and ours.primary == "miou"


def test_a_mask_of_the_wrong_size_or_an_unknown_class_is_refused() -> None:
    with pytest.raises(ValueError, match=r"prediction \(4, 4\) and mask \(4, 5\) differ"):
        confusion_matrix(np.zeros((4, 4)), np.zeros((4, 5)), num_classes=2)
    with pytest.raises(ValueError, match=r"mask holds class 7, outside 0\.\.2"):
        confusion_matrix(np.zeros((2, 2)), np.full((2, 2), 7), num_classes=3)


def test_a_class_in_neither_masks_nor_predictions_is_left_out_of_the_mean() -> None:
    confusion = confusion_matrix(np.array([0, 1, 1]), np.array([0, 1, 0]), num_classes=3)
    metrics = segmentation_metrics(confusion)
    assert metrics.class_iou == (0.5, 0.5, None) and metrics.miou == 0.5


# ---------------------------------------------------------------------- text classification


def test_accuracy_and_macro_f1_equal_scikit_learn_and_torchmetrics() -> None:
    import torch
    from sklearn.metrics import accuracy_score, f1_score
    from torchmetrics.classification import MulticlassF1Score

    rng = np.random.default_rng(11)
    labels = rng.integers(0, 4, size=500)
    scores = rng.normal(size=(500, 4)) + 1.5 * np.eye(4)[labels]
    ours = classification_metrics(scores, labels, num_classes=4)
    predicted = scores.argmax(axis=1)
    assert ours.accuracy == pytest.approx(accuracy_score(labels, predicted), abs=EXACT)
    assert ours.macro_f1 == pytest.approx(f1_score(labels, predicted, average="macro"), abs=EXACT)
    f1 = MulticlassF1Score(num_classes=4, average="macro")
    torch_f1 = float(f1(torch.from_numpy(predicted), torch.from_numpy(labels)))
    assert ours.macro_f1 == pytest.approx(torch_f1, abs=EXACT)
    assert ours.samples == 500 and ours.primary == "accuracy"


# ------------------------------------------------------------------------- image to image


def test_psnr_and_ssim_equal_scikit_image_per_image_means() -> None:
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    rng = np.random.default_rng(13)
    references = rng.random((3, 3, 48, 40))  # NCHW, floats in [0, 1]
    outputs = np.clip(references + rng.normal(0, 0.05, references.shape), 0, 1)
    ours = restoration_metrics(outputs, references, data_range=1.0, layout="NCHW")
    hwc = [
        (o.transpose(1, 2, 0), r.transpose(1, 2, 0))
        for o, r in zip(outputs, references, strict=True)
    ]
    psnr = np.mean([peak_signal_noise_ratio(r, o, data_range=1.0) for o, r in hwc])
    ssim = np.mean(
        [
            structural_similarity(
                r,
                o,
                data_range=1.0,
                channel_axis=-1,
                gaussian_weights=True,
                sigma=1.5,
                use_sample_covariance=False,
            )
            for o, r in hwc
        ]
    )
    assert ours.psnr == pytest.approx(psnr, abs=EXACT)
    assert ours.ssim == pytest.approx(ssim, abs=EXACT)
    assert 20 < ours.psnr < 35 and 0.5 < ours.ssim < 1 and ours.images == 3
    with pytest.raises(ValueError, match="need one NCHW/NHWC shape"):
        restoration_metrics(outputs, references[:2], data_range=1.0)


def test_an_image_equal_to_its_reference_is_counted_not_averaged_as_infinite_psnr() -> None:
    """Infinite PSNR (an exact output) stays out of the PSNR mean and is counted; its SSIM is
    1 in the SSIM mean. Grey [H, W] images score as scikit-image scores them."""
    from skimage.metrics import peak_signal_noise_ratio

    from mlmodelscope.agent.tasks.restoration import RestorationMetrics, image_quality

    rng = np.random.default_rng(5)
    references = rng.integers(0, 256, size=(2, 24, 24)).astype(np.float64)
    noisy = np.clip(references[1] + rng.normal(0, 8, size=(24, 24)), 0, 255)
    found = RestorationMetrics.of(
        [
            image_quality(references[0], references[0], data_range=255),
            image_quality(noisy, references[1], data_range=255),
        ]
    )
    want = peak_signal_noise_ratio(references[1], noisy, data_range=255)
    assert found.psnr == pytest.approx(want, abs=EXACT) and found.identical == 1
    assert found.images == 2 and 0.5 < found.ssim < 1
    assert RestorationMetrics.of([image_quality(noisy, noisy, data_range=255)]).psnr is None
    with pytest.raises(ValueError, match="no image was scored"):
        RestorationMetrics.of([])


@pytest.mark.parametrize("data_range", [1.0, 255.0])
def test_y_channel_psnr_and_ssim_after_a_border_crop_equal_scikit_image(data_range: float) -> None:
    """Super-resolution's scoring (BasicSR's ``test_y_channel`` and ``crop_border``): the
    luma of MATLAB's rgb2ycbcr, in 16..235 of 255, with ``crop`` pixels cut off every side,
    computed directly with scikit-image; the metrics record the options."""
    from skimage.color import rgb2ycbcr
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    from mlmodelscope.agent.tasks.restoration import Scoring

    rng = np.random.default_rng(21)
    references = rng.random((3, 40, 36, 3)) * data_range  # NHWC
    outputs = np.clip(references + rng.normal(0, 0.05 * data_range, references.shape), 0, None)
    outputs = np.minimum(outputs, data_range)
    crop = 4
    ours = restoration_metrics(
        outputs, references, data_range=data_range, layout="NHWC", scoring=Scoring(crop, "y")
    )

    def luma(image: np.ndarray) -> np.ndarray:
        y = rgb2ycbcr(image / data_range)[crop:-crop, crop:-crop, 0]  # 16..235
        return np.asarray(y / 255.0 * data_range)

    pairs = [(luma(o), luma(r)) for o, r in zip(outputs, references, strict=True)]
    psnr = np.mean([peak_signal_noise_ratio(r, o, data_range=data_range) for o, r in pairs])
    ssim = np.mean(
        [
            structural_similarity(
                r, o, data_range=data_range, gaussian_weights=True, sigma=1.5,
                use_sample_covariance=False,
            )
            for o, r in pairs
        ]
    )  # fmt: skip
    assert ours.psnr == pytest.approx(psnr, abs=1e-9)
    assert ours.ssim == pytest.approx(ssim, abs=1e-9)
    assert (ours.crop_border, ours.channels, ours.images) == (crop, "y", 3)
    assert ours.as_dict()["crop_border"] == crop and ours.as_dict()["channels"] == "y"
    rgb = restoration_metrics(outputs, references, data_range=data_range, layout="NHWC")
    assert rgb.psnr != pytest.approx(ours.psnr) and (rgb.crop_border, rgb.channels) == (0, "rgb")
    # The luma is BT.601's, as MATLAB's rgb2ycbcr weighs R, G and B in [0, 1].
    r, g, b = (references[0, ..., i] / data_range for i in range(3))
    bt601 = (16 + 65.481 * r + 128.553 * g + 24.966 * b) / 255.0 * data_range
    assert np.allclose(luma(references[0]), bt601[crop:-crop, crop:-crop], atol=1e-12)
