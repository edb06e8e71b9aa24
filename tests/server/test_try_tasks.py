"""How a try reads a catalog Model, with no model run: its task label picks the answer
(classification, detection, segmentation, text-classification, image-to-image; any other
refused on ``model``), the form's task options become ``spec.task`` (a segmentation Model's
classes from its declared output) and a text Model's ``spec.dataset`` (its tokenizer, its
length from its declared input), a class map becomes a PNG whose pixels are the class ids,
boxes an SVG in the image's pixels, an output image an 8-bit PNG that frameworks agree on
within 40 dB PSNR, and the upload must be what the Model takes."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from launch_fixtures import CATALOG, task_catalog
from try_fixtures import try_models

from mlmodelscope.agent.trial_answers import ClassMap, ClassPixels, OutputImage
from mlmodelscope.server.pages.try_results import boxes_svg
from mlmodelscope.server.trials import MAX_TEXT_CHARS, TryError, Upload, accepted
from mlmodelscope.server.try_answers import (
    Box,
    ClassMapAnswer,
    FrameworkTry,
    OutputImageAnswer,
    agree,
    class_colour,
    class_map_png,
    compare_images,
)
from mlmodelscope.server.try_tasks import (
    TaskRefusedError,
    TryOptions,
    task_of,
    try_task,
)
from mlmodelscope.spec.evaluation import TaskType
from mlmodelscope.spec.manifest import ResolvedModel, resolve_model
from mlmodelscope.spec.resources import FileModels


@pytest.fixture
def catalog(tmp_path: Path) -> FileModels:
    build = tmp_path / "build"  # the Models' files are never read here
    return FileModels.read([CATALOG, task_catalog(tmp_path, build), try_models(tmp_path, build)])


def resolved(catalog: FileModels, name: str) -> ResolvedModel:
    return resolve_model(name, catalog.lookup())


def test_the_task_label_picks_the_answer(catalog: FileModels) -> None:
    assert task_of(resolved(catalog, "digits-cnn")) == TaskType.CLASSIFICATION
    assert task_of(resolved(catalog, "shapes-detector")) == TaskType.DETECTION
    assert task_of(resolved(catalog, "shapes-segmenter")) == TaskType.SEGMENTATION
    assert task_of(resolved(catalog, "topic-classifier")) == TaskType.TEXT_CLASSIFICATION
    assert task_of(resolved(catalog, "bert-base-sst2")) == TaskType.TEXT_CLASSIFICATION
    assert task_of(resolved(catalog, "shapes-denoiser")) == TaskType.IMAGE_TO_IMAGE
    assert task_of(resolved(catalog, "upscaler")) == TaskType.IMAGE_TO_IMAGE  # super-resolution
    with pytest.raises(TaskRefusedError) as refused:
        task_of(resolved(catalog, "word-boxes"))
    assert refused.value.field == "model"
    assert refused.value.message.startswith(
        "word-boxes's task is 'text-detection': a try answers classification, detection, "
        "segmentation, text-classification and image-to-image Models (task labels "
        "classification, image-classification, detection"
    )
    assert "text-classification, image-to-image, super-resolution, or none)" in (
        refused.value.message
    )


def test_a_detectors_options_become_its_spec_task(catalog: FileModels) -> None:
    default = try_task(resolved(catalog, "shapes-detector"), TryOptions())
    assert default.task == {
        "type": "detection",
        "detection": {"boxFormat": "xyxy", "normalized": False, "scoreThreshold": 0.5},
    }
    assert default.dataset["type"] == "coco"
    given = TryOptions(box_format="cxcywh", normalized=True, score_threshold=0.3, nms_iou=0.5)
    chosen = try_task(resolved(catalog, "shapes-detector"), given)
    assert chosen.task == {
        "type": "detection",
        "detection": {
            "boxFormat": "cxcywh",
            "normalized": True,
            "scoreThreshold": 0.3,
            "nmsIou": 0.5,
        },
    }


def test_a_segmenters_classes_come_from_its_declared_output(
    catalog: FileModels, tmp_path: Path
) -> None:
    segmenter = resolved(catalog, "shapes-segmenter")  # outputs: logits [-1, 4, 48, 48]
    chosen = try_task(segmenter, TryOptions())
    assert chosen.task == {"type": "segmentation", "numClasses": 4}
    assert chosen.dataset["type"] == "masks"
    given = try_task(segmenter, TryOptions(classes=6, output="logits"))
    assert given.task == {"type": "segmentation", "numClasses": 6, "output": "logits"}
    assert try_task(resolved(catalog, "digits-cnn"), TryOptions()).task is None

    document = yaml.safe_load((tmp_path / "tasks.yaml").read_text().split("---")[0])
    del document["spec"]["model"]["outputs"]
    document["metadata"]["name"] = "undeclared"
    (tmp_path / "undeclared.yaml").write_text(yaml.safe_dump(document))
    undeclared = FileModels.read([tmp_path / "undeclared.yaml"])
    with pytest.raises(TaskRefusedError) as refused:
        try_task(resolved(undeclared, "undeclared"), TryOptions())
    assert refused.value.field == "classes"
    assert "give the number of classes" in refused.value.message


def test_a_class_map_png_holds_the_class_ids() -> None:
    from PIL import Image

    classes = np.array([[0, 1, 2], [3, 3, 0]], dtype=np.int64)
    found = ClassMap(classes, 4, (ClassPixels(0, "0", 2), ClassPixels(3, "3", 2)))
    with Image.open(io.BytesIO(class_map_png(found))) as picture:
        assert picture.mode == "P" and picture.size == (3, 2)
        assert np.asarray(picture).tolist() == classes.tolist()
        palette = picture.getpalette()
        assert palette is not None
        assert tuple(palette[9:12]) == class_colour(3)
    answer = ClassMapAnswer.of(found)
    assert (answer.width, answer.height) == (3, 2)
    assert base64.b64decode(answer.png) == class_map_png(found)
    assert [c.colour for c in answer.classes] == ["#000000", "#ffe119"]

    many = ClassMap(np.array([[0, 299]], dtype=np.int64), 300, ())
    with Image.open(io.BytesIO(class_map_png(many))) as picture:
        assert np.asarray(picture).tolist() == [[0, 299]]


def test_boxes_are_drawn_in_the_images_pixels() -> None:
    svg = boxes_svg(
        [Box(index=2, label="disc <b>", score=0.75, box=(7.2, 11.0, 28.1, 32.0))], 96, 48
    )
    assert svg.startswith('<svg viewBox="0 0 96 48"')
    [rect] = re.findall(r"<rect [^>]*>", svg)
    assert 'x="7.2" y="11.0" width="20.9" height="21.0"' in rect
    assert "disc &lt;b&gt; 0.75</text>" in svg


def test_a_text_models_tokenizer_and_length_become_its_spec_dataset(catalog: FileModels) -> None:
    topics = resolved(catalog, "topic-classifier")  # inputs [-1, 32]: three token fields
    with pytest.raises(TaskRefusedError) as refused:
        try_task(topics, TryOptions())
    assert refused.value.field == "tokenizer"
    assert "give the tokenizer.json" in refused.value.message
    chosen = try_task(topics, TryOptions(tokenizer="text/tokenizer.json"))
    assert chosen.type == TaskType.TEXT_CLASSIFICATION
    assert chosen.task == {"type": "text-classification"}
    assert chosen.dataset == {
        "type": "text", "path": "upload", "tokenizer": "text/tokenizer.json", "maxLength": 32
    }  # fmt: skip
    given = try_task(topics, TryOptions(tokenizer="t.json", max_length=16, output="logits"))
    assert given.task == {"type": "text-classification", "output": "logits"}
    assert given.dataset["maxLength"] == 16
    with pytest.raises(TaskRefusedError) as wrong:
        try_task(topics, TryOptions(tokenizer="t.json", output="scores"))
    assert wrong.value.field == "output"


def test_an_image_to_image_models_range_becomes_its_spec_task(catalog: FileModels) -> None:
    denoiser = resolved(catalog, "shapes-denoiser")
    assert try_task(denoiser, TryOptions()).task == {"type": "image-to-image"}
    chosen = try_task(upscaler := resolved(catalog, "upscaler"), TryOptions(data_range=255))
    assert chosen.task == {"type": "image-to-image", "dataRange": 255.0}
    assert chosen.dataset == {"type": "pairs", "path": "upload", "targets": "upload"}
    assert try_task(upscaler, TryOptions(output="upscaled")).task == {
        "type": "image-to-image", "output": "upscaled"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("takes_text", "upload", "field", "says"),
    [
        (True, Upload(image=b"png", text="rain"), "file", "is a text Model and takes no image"),
        (True, Upload.of(None, "  \n"), "text", "the text is empty"),
        (True, Upload(text="x" * (MAX_TEXT_CHARS + 1)), "text",
         f"the text is {MAX_TEXT_CHARS + 1} characters; a try takes at most {MAX_TEXT_CHARS}"),
        (False, Upload(image=b"png", text="rain"), "text", "takes an image, not a text"),
        (False, Upload(), "file", "takes an image: upload an image file"),
    ],
    ids=["an image for a text Model", "an empty text", "a text too long",
         "a text for an image Model", "no image"],
)  # fmt: skip
def test_an_upload_the_model_does_not_take_is_refused_on_its_field(
    takes_text: bool, upload: Upload, field: str, says: str
) -> None:
    with pytest.raises(TryError) as refused:
        accepted(takes_text, "m", upload)
    assert refused.value.status == 422
    [(where, message)] = refused.value.problems
    assert where == field and says in message
    assert accepted(True, "m", Upload(text="rain " * 2000)) == "rain " * 2000
    assert accepted(False, "m", Upload.of(b"png", " ")) == b"png"


def _framework(name: str, pixels: np.ndarray, ok: bool = True) -> FrameworkTry:
    return FrameworkTry(
        framework=name, evaluation=f"m-{name}", ok=ok, top=[], probabilities=False,
        output_image=OutputImageAnswer.of(OutputImage(pixels)) if ok else None,
        latency_ms=1.0, preprocess_ms=None, postprocess_ms=None, load_ms=None,
        warmup_ms=None, framework_version=None, device=None, error=None, error_field=None,
    )  # fmt: skip


def test_output_images_are_8_bit_pngs_that_agree_within_40_db() -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)
    answer = OutputImageAnswer.of(OutputImage(pixels))
    assert (answer.width, answer.height, answer.channels) == (8, 6, 3)
    with Image.open(io.BytesIO(base64.b64decode(answer.png))) as png:
        assert png.mode == "RGB" and np.array_equal(np.asarray(png), pixels)
    grey = OutputImageAnswer.of(OutputImage(pixels[..., :1]))
    with Image.open(io.BytesIO(base64.b64decode(grey.png))) as png:
        assert png.mode == "L" and np.array_equal(np.asarray(png), pixels[..., 0])

    near = pixels.copy()
    near[0, 0, 0] ^= 1  # one value one level off: PSNR about 70 dB
    far = np.clip(pixels.astype(int) + 40, 0, 255).astype(np.uint8)
    results = compare_images(
        [_framework("onnxruntime", pixels), _framework("pytorch", near),
         _framework("tensorflow", pixels)]
    )  # fmt: skip
    first, second, third = (r.output_image for r in results)
    assert first is not None and second is not None and third is not None
    assert first.difference is None
    assert second.difference is not None and second.difference.framework == "onnxruntime"
    assert second.difference.max_difference == 1 and second.difference.psnr_db is not None
    assert 65 < second.difference.psnr_db < 80
    assert third.difference is not None and third.difference.psnr_db is None  # identical
    assert agree(results)
    apart = compare_images([_framework("onnxruntime", pixels), _framework("pytorch", far)])
    assert not agree(apart)
    other = apart[1].output_image
    assert other is not None and other.difference is not None
    assert other.difference.psnr_db is not None and other.difference.psnr_db < 40
    smaller = compare_images([_framework("a", pixels), _framework("b", pixels[:4])])
    assert smaller[1].output_image is not None
    assert smaller[1].output_image.difference is not None
    assert not smaller[1].output_image.difference.same_size and not agree(smaller)
    failed = compare_images([_framework("a", pixels), _framework("b", pixels, ok=False)])
    assert agree(failed)  # the one that ran
