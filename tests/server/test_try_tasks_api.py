"""Trying an image on a detection, segmentation or image-to-image Model, and a text on a text
classification Model (``POST /api/v1/try`` and ``/try``), with the examples/tasks models built
by ``ensure_task_models`` and the data they were made for: the detector's boxes (the Model's
outputs read as the form says, above the threshold, in the image's pixels) match the image's
COCO box and agree in ONNX Runtime, PyTorch and TensorFlow; the segmenter's class map is a PNG
of the image's size whose pixels are the argmax of the ONNX model's scores run directly, with
each class's pixel count; the text classifier's top classes through its tokenizer are the ONNX
model's run directly, alike in the three frameworks, with the tokens it read; the denoiser's
output image is the ONNX model's run directly, 8-bit, and the three frameworks' are within
40 dB PSNR; a 2x upscaler's output is twice the upload's size; the page draws the boxes and
shows the class map, the text's classes and the output image beside the input; a Model of a
task a try does not answer, an upload the Model does not take (a text for an image Model, an
image for a text Model, an empty or too long text), a segmenter without classes to read, a
text Model without a tokenizer and each wrong option are refused on their field."""

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
from try_fixtures import FRAMEWORKS, TOPICS, rgb_png, text_form, try_form, try_models

from mlmodelscope.server.trials import MAX_TEXT_CHARS

DETECTOR: Final = {"box_format": "cxcywh", "normalized": "true", "nms_iou": "0.5"}
"""examples/tasks/detection.yaml's box reading, as the form gives it."""


@pytest.fixture(scope="module")
def build() -> Path:
    """The reference task models and their shapes data, built once per machine."""
    from mlmodelscope.agent.tasks.reference import ensure_task_models

    return ensure_task_models()


@pytest.fixture
def catalog(build: Path, tmp_path: Path) -> tuple[str, ...]:
    return (str(CATALOG), str(task_catalog(tmp_path, build)), str(try_models(tmp_path, build)))


def tokenizer(build: Path) -> str:
    return str(build / "text" / "tokenizer.json")


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
    sqlite_url: str, build: Path, catalog: tuple[str, ...]
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
    sqlite_url: str, build: Path, catalog: tuple[str, ...]
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
        ("word-boxes", {}, ["body", "model"],
         "task is 'text-detection': a try answers classification, detection, segmentation, "
         "text-classification and image-to-image Models"),
        ("topic-labels", {}, ["body", "tokenizer"], "give the tokenizer.json"),
        ("topic-labels", {"tokenizer": "{build}/no-such.json"}, ["body", "tokenizer"],
         "no such tokenizer file"),
        ("topic-labels", {"tokenizer": "{build}/text/eval.jsonl"}, ["body", "tokenizer"],
         "not a tokenizers tokenizer.json"),
        ("topic-labels", {"tokenizer": "{tokenizer}", "max_length": "16"}, ["body", "max_length"],
         "match dataset.maxLength to the model's sequence length"),
        ("topic-labels", {"tokenizer": "{tokenizer}", "max_length": "9000"},
         ["body", "max_length"], "less than or equal to 8192"),
        ("topic-labels", {"tokenizer": "{tokenizer}"}, ["body", "file"],
         "topic-labels is a text Model and takes no image: give it a text"),
        ("shapes-denoiser", {"data_range": "0"}, ["body", "data_range"], "greater than 0"),
        ("upscaler", {"output": "nope"}, ["body", "output"],
         "'nope' is none of the Model's outputs (upscaled)"),
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
    build: Path,
    catalog: tuple[str, ...],
    model: str,
    options: dict[str, str],
    loc: list[str],
    says: str,
) -> None:
    from try_fixtures import digit_png

    image, _ = digit_png()
    given = {k: v.format(build=build, tokenizer=tokenizer(build)) for k, v in options.items()}
    with launch_client(sqlite_url, workers=0, catalog=catalog) as client:
        answer = post(client, image, model, ["onnxruntime"], **given)
    assert answer.status_code == 422, answer.text
    [problem] = answer.json()["detail"]
    assert problem["loc"] == loc
    assert says in problem["msg"]


@pytest.mark.slow
@pytest.mark.frameworks
def test_the_page_draws_the_boxes_and_shows_the_class_map(
    sqlite_url: str, build: Path, catalog: tuple[str, ...]
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


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max())
    return np.asarray(shifted / shifted.sum())


def topic_logits(build: Path, text: str) -> tuple[np.ndarray, int]:
    """The text classifier's logits for ``text`` by ONNX Runtime directly, tokenized by the
    tokenizers library as the model was trained (32 tokens), and how many tokens it read."""
    import onnxruntime
    from tokenizers import Tokenizer

    tokens = Tokenizer.from_file(tokenizer(build))
    tokens.enable_truncation(32)
    tokens.enable_padding(length=32, pad_id=0, pad_token="[PAD]")
    encoding = tokens.encode(text)
    feeds = {
        name: np.array([values], dtype=np.int64)
        for name, values in (
            ("input_ids", encoding.ids),
            ("attention_mask", encoding.attention_mask),
            ("token_type_ids", encoding.type_ids),
        )
    }
    [logits] = onnxruntime.InferenceSession(str(build / "text-classifier.onnx")).run(None, feeds)
    return logits[0], sum(encoding.attention_mask)


@pytest.mark.slow
@pytest.mark.frameworks
def test_a_text_classifier_answers_its_top_classes_in_three_frameworks(
    sqlite_url: str, build: Path, catalog: tuple[str, ...]
) -> None:
    text = "rain and snow in the storm, a cold wind in the forecast"
    long = " ".join(["the tech chip code"] * 12)  # 48 words: more than 32 tokens
    with launch_client(sqlite_url, workers=0, catalog=catalog) as client:
        form = text_form(text, tokenizer=tokenizer(build))
        answer = client.post("/api/v1/try", headers=WRITE, **form)
        form = text_form(long, frameworks=["onnxruntime"], k=1, tokenizer=tokenizer(build))
        cut = client.post("/api/v1/try", headers=WRITE, **form)
    assert answer.status_code == 200, answer.text
    found = answer.json()
    assert found["task"] == "text-classification" and found["agree"] is True
    assert found["image"] is None
    assert found["text"] == {"characters": len(text), "bytes": len(text)}
    logits, count = topic_logits(build, text)
    probabilities = _softmax(logits)
    best = np.argsort(-probabilities, kind="stable")[:3].tolist()
    assert TOPICS[best[0]] == "weather"
    for result in found["results"]:
        assert result["ok"], result["error"]
        assert result["probabilities"] is True and result["boxes"] == []
        assert [c["index"] for c in result["top"]] == best
        assert [c["label"] for c in result["top"]] == [TOPICS[i] for i in best]
        scores = [c["score"] for c in result["top"]]
        assert scores == pytest.approx(probabilities[best].tolist(), abs=1e-4)
        assert result["tokens"] == count and result["truncated"] is False
        assert result["latency_ms"] > 0 and result["preprocess_ms"] > 0
    assert cut.status_code == 200, cut.text
    [shortened] = cut.json()["results"]
    assert shortened["tokens"] == 32 and shortened["truncated"] is True
    assert [c["label"] for c in shortened["top"]] == ["tech"]


def _pixels(png: str) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(png))) as picture:
        return np.asarray(picture)


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return np.inf if mse == 0 else 10 * np.log10(255.0**2 / mse)


def run_onnx(path: Path, image: bytes) -> np.ndarray:
    """An RGB image through an ONNX image-to-image model directly (0..1 NCHW in), its output
    clipped to 0..1 and made 8-bit, [H, W, 3]."""
    import onnxruntime
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(image)).convert("RGB"), dtype=np.float32) / 255
    session = onnxruntime.InferenceSession(str(path))
    [out] = session.run(None, {"input": pixels.transpose(2, 0, 1)[np.newaxis]})
    return np.rint(np.clip(out[0].transpose(1, 2, 0), 0, 1) * 255).astype(np.uint8)


@pytest.mark.slow
@pytest.mark.frameworks
def test_a_denoisers_output_image_agrees_in_three_frameworks(
    sqlite_url: str, build: Path, catalog: tuple[str, ...]
) -> None:
    noisy = sorted((build / "pairs" / "noisy").iterdir())[0]
    image = noisy.read_bytes()
    with launch_client(sqlite_url, workers=0, catalog=catalog) as client:
        answer = post(client, image, "shapes-denoiser", FRAMEWORKS)
    assert answer.status_code == 200, answer.text
    found = answer.json()
    assert found["task"] == "image-to-image" and found["agree"] is True
    assert found["image"]["width"] == 48 and found["text"] is None
    want = run_onnx(build / "denoiser.onnx", image)
    outputs = []
    for result in found["results"]:
        assert result["ok"], result["error"]
        assert result["top"] == [] and result["class_map"] is None
        shown = result["output_image"]
        assert (shown["width"], shown["height"], shown["channels"]) == (48, 48, 3)
        outputs.append(_pixels(shown["png"]))
    # ONNX Runtime's, as run directly: its 0..1 floats rounded alike but at a rounding edge
    assert np.abs(outputs[0].astype(int) - want).max() <= 1
    assert np.mean(outputs[0] == want) > 0.99
    assert found["results"][0]["output_image"]["difference"] is None
    for result, pixels in zip(found["results"][1:], outputs[1:], strict=True):
        assert _psnr(pixels, outputs[0]) > 40, result["framework"]
        difference = result["output_image"]["difference"]
        assert difference["framework"] == "onnxruntime" and difference["same_size"] is True
        assert difference["max_difference"] <= 2
        assert difference["psnr_db"] is None or difference["psnr_db"] > 40


@pytest.mark.slow
@pytest.mark.frameworks
def test_a_2x_upscalers_output_is_twice_the_uploads_size(
    sqlite_url: str, build: Path, catalog: tuple[str, ...], tmp_path: Path
) -> None:
    from PIL import Image

    clean = sorted((build / "pairs" / "clean").iterdir())[0]
    small = Image.open(clean).convert("RGB").resize((24, 24), Image.Resampling.BICUBIC)
    image = rgb_png(np.asarray(small))
    with launch_client(sqlite_url, workers=0, catalog=catalog) as client:
        answer = post(client, image, "upscaler", ["onnxruntime"])
    assert answer.status_code == 200, answer.text
    found = answer.json()
    assert found["task"] == "image-to-image" and found["agree"] is True
    assert (found["image"]["width"], found["image"]["height"]) == (24, 24)
    [result] = found["results"]
    shown = result["output_image"]
    assert (shown["width"], shown["height"]) == (48, 48)
    want = run_onnx(tmp_path / "upscaler.onnx", image)
    assert np.abs(_pixels(shown["png"]).astype(int) - want).max() <= 1


@pytest.mark.parametrize(
    ("model", "text", "loc", "says"),
    [
        ("shapes-denoiser", "rain", ["body", "text"],
         "shapes-denoiser takes an image, not a text: upload an image file instead"),
        ("topic-labels", "   ", ["body", "text"], "the text is empty"),
        ("topic-labels", "x" * (MAX_TEXT_CHARS + 1), ["body", "text"],
         f"a try takes at most {MAX_TEXT_CHARS}"),
    ],
    ids=["a text for an image Model", "an empty text", "a text too long"],
)  # fmt: skip
def test_a_text_the_model_does_not_take_is_refused_on_text(
    sqlite_url: str, build: Path, catalog: tuple[str, ...], model: str, text: str,
    loc: list[str], says: str,
) -> None:  # fmt: skip
    form = text_form(text, model=model, frameworks=["onnxruntime"], tokenizer=tokenizer(build))
    with launch_client(sqlite_url, workers=0, catalog=catalog) as client:
        answer = client.post("/api/v1/try", headers=WRITE, **form)
    assert answer.status_code == 422, answer.text
    [problem] = answer.json()["detail"]
    assert problem["loc"] == loc
    assert says in problem["msg"]


@pytest.mark.slow
@pytest.mark.frameworks
def test_the_page_shows_a_texts_classes_and_the_output_image_beside_the_input(
    sqlite_url: str, build: Path, catalog: tuple[str, ...]
) -> None:
    ort = ["onnxruntime"]
    typed = "<b>rain</b> & snow, a cold storm"
    logits, count = topic_logits(build, typed)
    with launch_client(sqlite_url, workers=0, catalog=catalog) as client:
        page = client.get("/try").text
        assert '<textarea name="text" rows="3" maxlength="10000"' in page
        for field in ("tokenizer", "max_length", "data_range"):
            assert f'name="{field}"' in page
        assert "topic-classifier (text-classification)</option>" in page
        assert "upscaler (super-resolution)</option>" in page
        form = text_form(typed, frameworks=ort, token=WRITE_TOKEN, tokenizer=tokenizer(build))
        classified = client.post("/try", **form)
        refused = client.post("/try", **{**form, "data": {**form["data"], "model": "upscaler"}})
        noisy = sorted((build / "pairs" / "noisy").iterdir())[0].read_bytes()
        form = try_form(noisy, model="shapes-denoiser", frameworks=ort)
        form["data"] = {**form["data"], "token": WRITE_TOKEN}
        denoised = client.post("/try", **form)
    assert classified.status_code == 200, classified.text
    text = classified.text
    escaped = "&lt;b&gt;rain&lt;/b&gt; &amp; snow, a cold storm"
    assert f'<blockquote class="tried-text">{escaped}</blockquote>' in text
    assert f"a text of {len(typed)} characters; Model topic-labels (text-classification)" in text
    best = TOPICS[int(np.argmax(logits))]
    assert f"The one framework that ran found the top 3: {best}, " in text
    assert f'<td class="tokens">{count}</td>' in text
    assert f">{escaped}</textarea>" in text  # typed again
    assert refused.status_code == 422
    assert "takes an image, not a text" in refused.text.split('data-errors-for="text">')[1][:300]
    assert denoised.status_code == 200, denoised.text
    pair = denoised.text.split('<div class="pair">')[1]
    assert pair.startswith('<figure><img alt="the uploaded image" src="data:image/png;base64,')
    assert '<img class="output-image" alt="the output image" src="data:image/png;base64,' in pair
    assert "the output (48x48)" in pair
