"""Trying an image on a detection or a segmentation Model (``POST /api/v1/try`` and ``/try``),
with the examples/tasks detector and segmenter built by ``ensure_task_models`` and one of the
rendered shapes images they were made for: the detector's boxes (the Model's outputs read as
the form says, above the threshold, in the image's pixels) match the image's COCO box and
agree in ONNX Runtime, PyTorch and TensorFlow; the segmenter's class map is a PNG of the
image's size whose pixels are the argmax of the ONNX model's scores run directly, with each
class's pixel count; the page draws the boxes and shows the class map; a text Model, a
segmenter without classes to read and each wrong option are refused on their field."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest
from launch_fixtures import CATALOG, WRITE, launch_client, task_catalog
from serve_fixtures import WRITE_TOKEN
from try_fixtures import FRAMEWORKS, try_form

DETECTOR: Final = {"box_format": "cxcywh", "normalized": "true", "nms_iou": "0.5"}
"""examples/tasks/detection.yaml's box reading, as the form gives it."""


@pytest.fixture(scope="module")
def build() -> Path:
    """The reference task models and their shapes data, built once per machine."""
    from mlmodelscope.agent.tasks.reference import ensure_task_models

    return ensure_task_models()


@pytest.fixture
def catalog(build: Path, tmp_path: Path) -> tuple[str, str]:
    return (str(CATALOG), str(task_catalog(tmp_path, build)))


def shapes_image(build: Path, number: int) -> bytes:
    return (build / "shapes" / "images" / f"{number:05d}.png").read_bytes()


def true_boxes(build: Path, number: int) -> list[tuple[int, list[float]]]:
    """The image's (category id, pixel xyxy) from the COCO instances file."""
    document = json.loads((build / "shapes" / "instances.json").read_text())
    return [
        (a["category_id"], [a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2],
                            a["bbox"][1] + a["bbox"][3]])
        for a in document["annotations"]
        if a["image_id"] == number + 1
    ]  # fmt: skip


def iou(a: list[float], b: list[float]) -> float:
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = width * height
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def post(client: Any, image: bytes, model: str, frameworks: list[str], **options: str) -> Any:
    form = try_form(image, model=model, frameworks=frameworks, name="shapes.png")
    form["data"] = {**form["data"], **options}
    return client.post("/api/v1/try", headers=WRITE, **form)


@pytest.mark.slow
@pytest.mark.frameworks
def test_a_detector_answers_its_boxes_in_three_frameworks(
    sqlite_url: str, build: Path, catalog: tuple[str, str]
) -> None:
    [(category, truth)] = true_boxes(build, 0)
    with launch_client(sqlite_url, workers=0, catalog=catalog) as client:
        answer = post(client, shapes_image(build, 0), "shapes-detector", FRAMEWORKS, **DETECTOR)
        assert answer.status_code == 200, answer.text
        found = answer.json()
        lenient = post(client, shapes_image(build, 0), "shapes-detector", ["onnxruntime"],
                       **{**DETECTOR, "score_threshold": "0.01"}).json()  # fmt: skip
    assert found["task"] == "detection" and found["agree"] is True
    assert found["image"]["width"] == 48 and found["image"]["height"] == 48
    for result in found["results"]:
        assert result["ok"], result["error"]
        assert result["top"] == [] and result["class_map"] is None
        [box] = result["boxes"]  # one object, one box above 0.5 once NMS has run
        assert box["index"] == category and box["label"] == str(category)
        assert 0.5 <= box["score"] <= 1
        assert iou(box["box"], truth) > 0.7, (box, truth)
        assert all(0 <= v <= 48 for v in box["box"])
    first = found["results"][0]["boxes"][0]["box"]
    for result in found["results"][1:]:
        assert result["boxes"][0]["box"] == pytest.approx(first, abs=1e-3)
    [loose] = lenient["results"]
    assert len(loose["boxes"]) > 1  # the threshold is the form's
    assert [b["score"] for b in loose["boxes"]] == sorted(
        (b["score"] for b in loose["boxes"]), reverse=True
    )
    assert all(b["score"] >= 0.01 for b in loose["boxes"])


@pytest.mark.slow
@pytest.mark.frameworks
def test_a_segmenter_answers_its_class_map(
    sqlite_url: str, build: Path, catalog: tuple[str, str]
) -> None:
    import onnxruntime
    from PIL import Image

    image = shapes_image(build, 3)
    with launch_client(sqlite_url, workers=0, catalog=catalog) as client:
        answer = post(client, image, "shapes-segmenter", ["onnxruntime", "pytorch"])
    assert answer.status_code == 200, answer.text
    found = answer.json()
    assert found["task"] == "segmentation" and found["agree"] is True
    pixels = np.asarray(Image.open(io.BytesIO(image)).convert("RGB"), dtype=np.float32) / 255
    session = onnxruntime.InferenceSession(str(build / "segmenter.onnx"))
    [scores] = session.run(None, {"input": pixels.transpose(2, 0, 1)[np.newaxis]})
    want = scores[0].argmax(axis=0)
    for result in found["results"]:
        assert result["ok"], result["error"]
        assert result["top"] == [] and result["boxes"] == []
        classes = result["class_map"]
        assert (classes["width"], classes["height"], classes["num_classes"]) == (48, 48, 4)
        with Image.open(io.BytesIO(base64.b64decode(classes["png"]))) as png:
            assert png.size == (48, 48)
            got = np.asarray(png)
        np.testing.assert_array_equal(got, want)
        counts = np.bincount(want.ravel(), minlength=4)
        assert [(c["index"], c["pixels"]) for c in classes["classes"]] == [
            (index, int(count)) for index, count in enumerate(counts) if count
        ]
        assert sum(c["pixels"] for c in classes["classes"]) == 48 * 48


@pytest.mark.parametrize(
    ("model", "options", "loc", "says"),
    [
        ("topic-classifier", {}, ["body", "model"],
         "task is 'text-classification': a try answers classification, detection and "
         "segmentation Models"),
        ("shapes-denoiser", {}, ["body", "model"], "task is 'image-to-image'"),
        ("shapes-segmenter", {"output": "nope"}, ["body", "output"],
         "'nope' is none of the Model's outputs (logits)"),
        ("shapes-segmenter", {"classes": "0"}, ["body", "classes"], "greater than 0"),
        ("shapes-detector", {"nms_iou": "1.5"}, ["body", "nms_iou"], "less than or equal to 1"),
        ("shapes-detector", {"score_threshold": "-1"}, ["body", "score_threshold"],
         "greater than or equal to 0"),
        ("shapes-detector", {"box_format": "yxyx"}, ["body", "box_format"], "'cxcywh'"),
    ],
)  # fmt: skip
def test_a_model_or_option_a_try_cannot_use_is_refused_on_its_field(
    sqlite_url: str,
    catalog: tuple[str, str],
    model: str,
    options: dict[str, str],
    loc: list[str],
    says: str,
) -> None:
    from try_fixtures import digit_png

    image, _ = digit_png()
    with launch_client(sqlite_url, workers=0, catalog=catalog) as client:
        answer = post(client, image, model, ["onnxruntime"], **options)
    assert answer.status_code == 422, answer.text
    [problem] = answer.json()["detail"]
    assert problem["loc"] == loc
    assert says in problem["msg"]


@pytest.mark.slow
@pytest.mark.frameworks
def test_the_page_draws_the_boxes_and_shows_the_class_map(
    sqlite_url: str, build: Path, catalog: tuple[str, str]
) -> None:
    with launch_client(sqlite_url, workers=0, catalog=catalog) as client:
        page = client.get("/try").text
        assert "shapes-detector (detection)</option>" in page
        for field in ("box_format", "normalized", "score_threshold", "nms_iou", "classes"):
            assert f'name="{field}"' in page
        ort = ["onnxruntime"]
        form = try_form(shapes_image(build, 0), model="shapes-detector", frameworks=ort)
        form["data"] = {**form["data"], **DETECTOR, "token": WRITE_TOKEN}
        detected = client.post("/try", **form)
        form = try_form(shapes_image(build, 3), model="shapes-segmenter", frameworks=ort)
        form["data"] = {**form["data"], "token": WRITE_TOKEN, "classes": "0"}
        refused = client.post("/try", **form)
        form["data"]["classes"] = "4"
        segmented = client.post("/try", **form)
    assert detected.status_code == 200, detected.text
    text = detected.text
    assert '<div class="overlay"><img alt="the uploaded image" src="data:image/png;base64,' in text
    assert text.count('<g class="box" data-label="2"') == 1
    assert '<svg viewBox="0 0 48 48"' in text
    assert 'value="cxcywh" selected' in text and 'name="normalized" value="true" checked' in text
    assert "The one framework that ran found the boxes' classes: 2." in text
    assert refused.status_code == 422
    assert "greater than 0" in refused.text.split('data-errors-for="classes">')[1][:200]
    assert segmented.status_code == 200, segmented.text
    shown = '<img class="class-map" alt="the class map" src="data:image/png;base64,'
    assert shown in segmented.text
    assert segmented.text.count('<tr class="class">') >= 2
