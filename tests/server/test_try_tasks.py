"""How a try reads a catalog Model, with no model run: its task label picks the answer
(classification, detection, segmentation; any other refused on ``model``), the form's task
options become ``spec.task`` (a segmentation Model's classes from its declared output), a
class map becomes a PNG whose pixels are the class ids, and boxes an SVG in the image's
pixels."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from launch_fixtures import CATALOG, task_catalog

from mlmodelscope.agent.trial_answers import ClassMap, ClassPixels
from mlmodelscope.server.pages.try_results import boxes_svg
from mlmodelscope.server.try_answers import Box, ClassMapAnswer, class_colour, class_map_png
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
    return FileModels.read([CATALOG, task_catalog(tmp_path)])


def resolved(catalog: FileModels, name: str) -> ResolvedModel:
    return resolve_model(name, catalog.lookup())


def test_the_task_label_picks_the_answer(catalog: FileModels) -> None:
    assert task_of(resolved(catalog, "digits-cnn")) == TaskType.CLASSIFICATION
    assert task_of(resolved(catalog, "shapes-detector")) == TaskType.DETECTION
    assert task_of(resolved(catalog, "shapes-segmenter")) == TaskType.SEGMENTATION
    for name, label in (
        ("topic-classifier", "text-classification"),
        ("shapes-denoiser", "image-to-image"),
    ):
        with pytest.raises(TaskRefusedError) as refused:
            task_of(resolved(catalog, name))
        assert refused.value.field == "model"
        assert refused.value.message.startswith(
            f"{name}'s task is {label!r}: a try answers classification, detection and "
            "segmentation Models"
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
