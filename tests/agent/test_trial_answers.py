"""What a try reads from one upload's outputs, by task, with no model: the examples/tasks
detector's box reading (normalised cxcywh to the image's pixel xyxy, the threshold, class-wise
NMS, the Model's labels), the segmenter's class map (per-pixel argmax, resized to the image
by nearest neighbour, pixels per class), the text classifier's top classes of the output its
task names, the denoiser's output image (channels first or last, clipped to dataRange, BGR
turned RGB, 8-bit), and the tasks a try refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from mlmodelscope.agent.processing import Postprocessor
from mlmodelscope.agent.trial import TRIAL_TASKS, UploadKind, trial_task, upload_kind
from mlmodelscope.agent.trial_answers import (
    class_map_of,
    found_boxes,
    output_image_of,
    text_top_classes,
)
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.document import parse_evaluation
from mlmodelscope.spec.evaluation import EvaluationSpec, TaskType

TASKS = Path(__file__).parents[2] / "examples" / "tasks"


def example(name: str, **task: Any) -> EvaluationSpec:
    """examples/tasks/NAME.yaml's spec, its task updated with ``task``."""
    document = yaml.safe_load((TASKS / f"{name}.yaml").read_text())
    document["spec"]["task"].update(task)
    return parse_evaluation(document).spec


def test_boxes_are_read_in_the_specs_format_and_drawn_in_the_images_pixels() -> None:
    spec = example(
        "detection",
        detection={"boxFormat": "cxcywh", "normalized": True, "scoreThreshold": 0.5, "nmsIou": 0.5},
    )
    boxes = np.array([[[0.5, 0.5, 0.5, 0.25], [0.52, 0.5, 0.5, 0.25], [0.2, 0.2, 0.1, 0.1],
                       [0.8, 0.8, 0.2, 0.2]]], dtype=np.float32)  # fmt: skip
    scores = np.array([[0.9, 0.8, 0.4, 0.7]], dtype=np.float32)
    classes = np.array([[1.0, 1.0, 2.0, 3.0]], dtype=np.float32)
    found = found_boxes(
        spec, [boxes, scores, classes], ["background", "square", "disc"], (48, 48), (64, 96)
    )
    # the second box overlaps the first of its class (NMS), the third scores below 0.5
    assert [(b.index, b.label) for b in found] == [(1, "square"), (3, "3")]
    assert [b.score for b in found] == pytest.approx([0.9, 0.7])
    assert found[0].box == pytest.approx((24.0, 24.0, 72.0, 40.0))  # x by 96, y by 64
    assert found[1].box == pytest.approx((67.2, 44.8, 86.4, 57.6))


def test_pixel_boxes_scale_from_the_model_input_to_the_image() -> None:
    spec = example("detection", detection={"boxFormat": "xywh", "scoreThreshold": 0.0})
    boxes = np.array([[[12.0, 6.0, 24.0, 12.0]]], dtype=np.float32)
    [box] = found_boxes(
        spec, [boxes, np.array([[0.3]]), np.array([[2.0]])], None, (48, 48), (96, 144)
    )
    assert box.box == pytest.approx((36.0, 12.0, 108.0, 36.0))  # x by 3, y by 2
    assert box.label == "2"


def test_outputs_that_are_no_boxes_name_the_detection_options() -> None:
    spec = example("detection")
    with pytest.raises(SpecError) as refused:
        found_boxes(spec, [np.zeros((1, 4)), np.zeros((1, 4)), np.zeros((1, 4))], None,
                    (48, 48), (48, 48))  # fmt: skip
    assert refused.value.field == "spec.task.detection"


def test_the_class_map_is_the_per_pixel_argmax_at_the_images_size() -> None:
    spec = example("segmentation", numClasses=3)
    scores = np.zeros((1, 3, 2, 2), dtype=np.float32)
    scores[0, 0] = [[1, 0], [0, 0]]
    scores[0, 1] = [[0, 1], [0, 0]]
    scores[0, 2] = [[0, 0], [1, 1]]
    found = class_map_of(spec, [scores], ["background", "square"], (4, 6))
    assert found.classes.tolist() == [
        [0, 0, 0, 1, 1, 1],
        [0, 0, 0, 1, 1, 1],
        [2, 2, 2, 2, 2, 2],
        [2, 2, 2, 2, 2, 2],
    ]
    assert [(c.index, c.label, c.pixels) for c in found.pixels] == [
        (0, "background", 6),
        (1, "square", 6),
        (2, "2", 12),
    ]


def test_class_ids_beyond_num_classes_are_refused() -> None:
    spec = example("segmentation", numClasses=2)
    ids = np.array([[[0, 1], [2, 1]]], dtype=np.int64)
    with pytest.raises(SpecError) as refused:
        class_map_of(spec, [ids], None, (2, 2))
    assert refused.value.field == "spec.task.numClasses"


def test_a_try_answers_every_task_but_text_detection() -> None:
    assert TRIAL_TASKS == (
        TaskType.CLASSIFICATION, TaskType.DETECTION, TaskType.SEGMENTATION,
        TaskType.TEXT_CLASSIFICATION, TaskType.IMAGE_TO_IMAGE,
    )  # fmt: skip
    assert trial_task(example("detection")) == TaskType.DETECTION
    assert upload_kind(example("text-classification")) == UploadKind.TEXT
    assert upload_kind(example("image-to-image")) == UploadKind.ENCODED
    with pytest.raises(SpecError) as refused:
        trial_task(example("detection", type="text-detection"))
    assert refused.value.field == "spec.task.type"
    assert "classification, detection, segmentation, text-classification, image-to-image" in (
        refused.value.message
    )
    with pytest.raises(SpecError) as unnamed:
        trial_task(example("detection", detection={"scores": "confidence"}))
    assert unnamed.value.field == "spec.task.detection.scores"


def test_a_texts_classes_come_from_the_output_its_task_names() -> None:
    spec = example("text-classification", output="scores")
    spec.model.outputs = [spec.model.outputs[0].model_copy(update={"name": "pooled"}),
                          spec.model.outputs[0].model_copy(update={"name": "scores"})]  # fmt: skip
    pooled = np.zeros((1, 4), dtype=np.float32)
    scores = np.array([[0.1, 2.0, -1.0, 0.5]], dtype=np.float32)
    found = text_top_classes(spec, Postprocessor([]), [pooled, scores], 2)
    assert [(c.index, c.label) for c in found] == [(1, "1"), (3, "3")]
    assert [c.score for c in found] == pytest.approx([2.0, 0.5])


def test_the_output_image_is_clipped_to_the_range_and_made_8_bit() -> None:
    spec = example("image-to-image")  # restored [N, 3, 48, 48] NCHW, dataRange 1
    out = np.zeros((2, 3, 2, 2), dtype=np.float32)
    out[0, 0] = [[-0.5, 0.5], [1.0, 2.0]]  # red: clipped to 0..1
    out[0, 2] = 0.2  # blue
    pixels = output_image_of(spec, [out]).pixels
    assert pixels.dtype == np.uint8 and pixels.shape == (2, 2, 3)  # the first sample only
    assert pixels[..., 0].tolist() == [[0, 128], [255, 255]]
    assert pixels[..., 2].tolist() == [[51, 51], [51, 51]]
    document = yaml.safe_load((TASKS / "image-to-image.yaml").read_text())
    document["spec"]["preprocessing"].insert(1, {"channelOrder": {"order": "BGR"}})
    document["spec"]["task"]["dataRange"] = 255.0
    bgr = parse_evaluation(document).spec  # the model takes BGR in 0..255: its output too
    turned = output_image_of(bgr, [out[:1] * 255]).pixels
    assert turned[..., 2].tolist() == [[0, 128], [255, 255]]  # red is the last channel there
    assert turned[..., 0].tolist() == [[51, 51], [51, 51]]
    grey = output_image_of(spec, [np.full((1, 1, 3, 5), 0.5, dtype=np.float32)]).pixels
    assert grey.shape == (3, 5, 1) and set(grey.ravel().tolist()) == {128}
