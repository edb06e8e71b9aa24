"""Launching a segmentation, image-to-image, detection or text-classification Model (issues 27,
32): the form's dataset takes a masks dataset's ``masks``, a pairs dataset's ``targets``, a coco
dataset's ``annotations`` and a text dataset's ``tokenizer``, its ``task`` the evaluation's
``spec.task`` (a Model's task is only a label); the preview and the created launch carry both
and the preview is what `mlms validate` accepts, a wrong field is 422 on that field of the
form (an evaluation's and a sweep's), the page offers the fields, and each launch runs on this
server's workers to its task's metric."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from launch_fixtures import CATALOG, WRITE, launch_client, task_catalog, wait_for_state

from mlmodelscope.spec.document import ModelEvaluation
from mlmodelscope.spec.resources import check_files

QUICK: Final = {"warmup": 2, "minQueryCount": 20, "minDuration": "20ms"}
SEGMENTATION: Final[dict[str, Any]] = {
    "model": "shapes-segmenter",
    "frameworks": ["onnxruntime"],
    "batch_sizes": [1, 8],
    "scenario_settings": QUICK,
    "dataset": {
        "type": "masks",
        "path": "pvc://mlmodelscope-tasks/shapes/images",
        "masks": "pvc://mlmodelscope-tasks/shapes/masks",
    },
    "task": {"type": "segmentation", "output": "logits", "numClasses": 4},
}
"""The launch of examples/tasks/segmentation.yaml's model from the tasks catalog."""
IMAGE_TO_IMAGE: Final[dict[str, Any]] = {
    "model": "shapes-denoiser",
    "frameworks": ["onnxruntime"],
    "batch_sizes": [1, 8],
    "scenario_settings": QUICK,
    "dataset": {
        "type": "pairs",
        "path": "pvc://mlmodelscope-tasks/pairs/noisy",
        "targets": "pvc://mlmodelscope-tasks/pairs/clean",
    },
    "task": {"type": "image-to-image", "output": "restored", "dataRange": 1.0},
}
"""The launch of examples/tasks/image-to-image.yaml's model."""
DETECTION: Final[dict[str, Any]] = {
    "model": "shapes-detector",
    "frameworks": ["onnxruntime"],
    "batch_sizes": [1, 8],
    "scenario_settings": QUICK,
    "dataset": {
        "type": "coco",
        "path": "pvc://mlmodelscope-tasks/shapes/images",
        "annotations": "pvc://mlmodelscope-tasks/shapes/instances.json",
    },
    "task": {
        "type": "detection",
        "detection": {"boxFormat": "cxcywh", "normalized": True, "nmsIou": 0.5},
    },
}
"""The launch of examples/tasks/detection.yaml's model."""
TEXT: Final[dict[str, Any]] = {
    "model": "topic-classifier",
    "frameworks": ["onnxruntime"],
    "batch_sizes": [1, 8],
    "scenario_settings": QUICK,
    "dataset": {
        "type": "text",
        "path": "pvc://mlmodelscope-tasks/text/eval.jsonl",
        "tokenizer": "pvc://mlmodelscope-tasks/text/tokenizer.json",
        "maxLength": 32,
    },
    "task": {"type": "text-classification", "output": "logits", "numClasses": 4},
}
"""The launch of examples/tasks/text-classification.yaml's model."""
FORMS: Final = [SEGMENTATION, IMAGE_TO_IMAGE, DETECTION, TEXT]
FORM_IDS: Final = ["masks", "pairs", "coco", "text"]
FILES: Final = ("path", "masks", "targets", "annotations", "tokenizer")
"""The dataset fields that name files or folders."""


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    return task_catalog(tmp_path)


def _catalog(tasks: Path) -> tuple[str, str]:
    return (str(CATALOG), str(tasks))


@pytest.mark.parametrize("form", FORMS, ids=FORM_IDS)
def test_the_preview_carries_the_dataset_and_task_and_validates(
    sqlite_url: str, tasks: Path, tmp_path: Path, form: dict[str, Any]
) -> None:
    with launch_client(sqlite_url, workers=0, catalog=_catalog(tasks)) as client:
        answer = client.post("/api/v1/launches?dry_run=true", json=form, headers=WRITE)
        sweep = client.post(
            "/api/v1/launches?dry_run=true", json={**form, "kind": "sweep"}, headers=WRITE
        )
    assert answer.status_code == 200, answer.text
    [document] = yaml.safe_load_all(answer.json()["yaml"])
    assert document["spec"]["dataset"] == form["dataset"]
    assert document["spec"]["task"] == form["task"]
    spec = tmp_path / "preview.yaml"
    spec.write_text(answer.json()["yaml"])
    [checked], unusable = check_files([spec], [tasks])
    assert unusable == [] and checked.error is None
    assert isinstance(checked.resource, ModelEvaluation)
    assert checked.resource.spec.task.type == form["task"]["type"]
    assert sweep.status_code == 200, sweep.text
    [swept] = yaml.safe_load_all(sweep.json()["yaml"])
    template = swept["spec"]["template"]
    assert (template["dataset"], template["task"]) == (form["dataset"], form["task"])


def _without(section: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in section.items() if k != key}


@pytest.mark.parametrize("kind", ["evaluation", "sweep"])
@pytest.mark.parametrize(
    ("form", "loc", "says"),
    [
        ({**SEGMENTATION, "dataset": _without(SEGMENTATION["dataset"], "masks")},
         ["body", "dataset", "masks"], "required when type is masks"),
        ({**SEGMENTATION, "dataset": {**SEGMENTATION["dataset"],
                                      "masks": "pvc://mlmodelscope-tasks/../masks"}},
         ["body", "dataset", "masks"], "must not contain '..'"),
        ({**SEGMENTATION, "task": _without(SEGMENTATION["task"], "numClasses")},
         ["body", "task", "numClasses"], "required when type is segmentation"),
        (_without(SEGMENTATION, "task"), ["body", "task"], "a masks dataset a segmentation task"),
        ({**IMAGE_TO_IMAGE, "dataset": _without(IMAGE_TO_IMAGE["dataset"], "targets")},
         ["body", "dataset", "targets"], "required when type is pairs"),
        ({**IMAGE_TO_IMAGE, "dataset": {**IMAGE_TO_IMAGE["dataset"], "targets": "pvc://Clean/x"}},
         ["body", "dataset", "targets"], "write pvc://<claim>/<path>"),
        ({**IMAGE_TO_IMAGE, "task": {**IMAGE_TO_IMAGE["task"], "dataRange": 0}},
         ["body", "task", "dataRange"], "greater than 0"),
        ({**DETECTION, "dataset": {**DETECTION["dataset"],
                                   "annotations": "pvc://mlmodelscope-tasks/../x.json"}},
         ["body", "dataset", "annotations"], "must not contain '..'"),
        ({**DETECTION, "task": {"type": "detection", "detection": {"nmsIou": 0}}},
         ["body", "task", "detection", "nmsIou"], "greater than 0"),
        (_without(DETECTION, "task"), ["body", "task"], "a coco dataset one of them"),
        ({**TEXT, "dataset": _without(TEXT["dataset"], "tokenizer")},
         ["body", "dataset", "tokenizer"], "required when type is text"),
        ({**TEXT, "dataset": {**TEXT["dataset"], "tokenizer": "pvc://Topics/tokenizer.json"}},
         ["body", "dataset", "tokenizer"], "write pvc://<claim>/<path>"),
        ({**TEXT, "dataset": {**TEXT["dataset"], "maxLength": 0}},
         ["body", "dataset", "maxLength"], "greater than 0"),
    ],
)  # fmt: skip
def test_a_wrong_dataset_or_task_field_is_refused_on_that_field(
    sqlite_url: str, tasks: Path, kind: str, form: dict[str, Any], loc: list[Any], says: str
) -> None:
    """The spec's own checks, located on the form's field (a sweep's template too): the page
    shows each under the masks, targets, annotations, tokenizer, max length or task fields."""
    with launch_client(sqlite_url, workers=0, catalog=_catalog(tasks)) as client:
        answer = client.post(
            "/api/v1/launches?dry_run=true", json={**form, "kind": kind}, headers=WRITE
        )
        assert answer.status_code == 422, answer.text
        [problem] = answer.json()["detail"]
        assert problem["loc"] == loc  # the page shows it by loc[1:3]
        assert says in problem["msg"]


def test_the_form_offers_masks_targets_and_a_task(sqlite_url: str, tasks: Path) -> None:
    with launch_client(sqlite_url, workers=0, catalog=_catalog(tasks)) as client:
        text = client.get("/launch").text
    assert '<option value="shapes-segmenter" data-dataset="shapes">' in text
    assert "shapes-denoiser (image-to-image, shapes)</option>" in text
    for dataset in ("masks", "pairs", "coco", "text"):
        assert f'<option value="{dataset}">{dataset}</option>' in text
    for field in (
        "dataset_masks", "dataset_targets", "dataset_annotations", "dataset_tokenizer",
        "dataset_max_length", "task_output", "task_classes", "task_range", "task_box_format",
        "task_normalized", "task_score_threshold", "task_nms_iou",
    ):  # fmt: skip
        assert f'name="{field}"' in text
    assert '<option value="">classification (no spec.task)</option>' in text
    for task in (
        "segmentation", "image-to-image", "detection", "text-detection", "text-classification"
    ):  # fmt: skip
        assert f'<option value="{task}">{task}</option>' in text
    for box_format in ("xywh", "cxcywh"):
        assert f'<option value="{box_format}">{box_format}</option>' in text
    for errors in (
        "dataset.masks", "dataset.targets", "dataset.annotations", "dataset.tokenizer",
        "dataset.maxLength", "task.detection", "task",
    ):  # fmt: skip
        assert f'data-errors-for="{errors}"' in text


@pytest.mark.parametrize("form", [DETECTION, TEXT], ids=["coco", "text"])
def test_a_created_launch_carries_the_annotations_or_the_tokenizer(
    sqlite_url: str, tasks: Path, form: dict[str, Any]
) -> None:
    """Queued (no worker takes it): the launch's ModelEvaluation has the dataset and task."""
    with launch_client(sqlite_url, workers=0, catalog=_catalog(tasks)) as client:
        answer = client.post("/api/v1/launches", json=form, headers=WRITE)
        assert answer.status_code == 202, answer.text
        [launch] = answer.json()["launches"]
        stored = client.get(launch["location"]).json()
    assert stored["state"] == "queued"
    [document] = yaml.safe_load_all(stored["spec"])
    assert document["spec"]["dataset"] == form["dataset"]
    assert document["spec"]["task"] == form["task"]


@pytest.mark.slow
@pytest.mark.frameworks
@pytest.mark.parametrize(
    ("form", "metric", "floor"),
    [
        (SEGMENTATION, "miou", 0.35),
        (IMAGE_TO_IMAGE, "psnr", 25.0),  # the noisy inputs: 20 dB
        (DETECTION, "map", 0.25),
        (TEXT, "accuracy", 0.9),
    ],
    ids=FORM_IDS,
)
def test_a_task_launch_runs_to_its_metric(
    sqlite_url: str, tmp_path: Path, form: dict[str, Any], metric: str, floor: float
) -> None:
    """The floors are those the agent's own runs of examples/tasks reach
    (tests/agent/test_task_runs.py): a model that learned nothing stays below them."""
    from mlmodelscope.agent.tasks.reference import ensure_task_models

    build = ensure_task_models()
    dataset = {
        key: str(build / value.removeprefix("pvc://mlmodelscope-tasks/")) if key in FILES else value
        for key, value in form["dataset"].items()
    }
    catalog = (str(CATALOG), str(task_catalog(tmp_path, build)))
    with launch_client(sqlite_url, workers=1, catalog=catalog) as client:
        answer = client.post("/api/v1/launches", json={**form, "dataset": dataset}, headers=WRITE)
        assert answer.status_code == 202, answer.text
        [launch] = answer.json()["launches"]
        wait_for_state(client, launch["launch_id"])
        done = client.get(launch["location"]).json()
        assert done["state"] == "succeeded", done["message"]
        document = client.get(f"/api/v1/runs/{done['run_id']}").json()
    assert document["task"]["type"] == form["task"]["type"]
    assert document["evaluation"]["model_manifest"]["name"] == form["model"]
    assert document["results"][0]["metric"] == metric
    assert document["task"]["metrics"][metric] > floor
