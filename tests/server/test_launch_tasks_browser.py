"""The Launch form's masks, targets, annotations, tokenizer and task in real headless
Chromium, JavaScript on, over a catalog with the examples/tasks segmenter, denoiser, detector
and text classifier: a missing path, tokenizer, and a masks, targets and annotations path the
spec refuses, are shown under their fields, a masks dataset without a segmentation task under
the task, a detector's NMS IoU under its options, the preview carries each dataset and task,
and a launched detector's evaluation carries them. The pages' CSP is on; any CSP violation or
script error fails the test."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import opened_page, screenshot_dir
from launch_fixtures import CATALOG, task_catalog
from serve_fixtures import READ_TOKEN, WRITE_TOKEN

from mlmodelscope.server.app import ServeSettings, create_app

pytestmark = [pytest.mark.slow]

TASKS = "pvc://mlmodelscope-tasks"


def test_fill_masks_targets_and_a_task_and_preview_them(sqlite_url: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    settings = ServeSettings(
        store_url=sqlite_url,
        read_token=READ_TOKEN,
        write_token=WRITE_TOKEN,
        catalog=(str(CATALOG), str(task_catalog(tmp_path))),
    )
    shots = screenshot_dir(tmp_path)
    problems: list[str] = []
    with opened_page(create_app(settings), problems, f"/launch?token={READ_TOKEN}") as (
        _,
        page,
    ):
        page.fill('input[name="token"]', WRITE_TOKEN)
        preview_button = page.get_by_role("button", name="Preview")
        preview = page.locator("#preview-yaml")

        page.select_option('select[name="model"]', "shapes-segmenter")
        page.select_option('select[name="dataset_type"]', "masks")
        page.fill('input[name="dataset_masks"]', f"{TASKS}/shapes/masks")
        preview_button.click()  # the spec names one problem of the dataset at a time
        path_errors = page.locator('[data-errors-for="dataset.path"]')
        expect(path_errors).to_contain_text("spec.dataset.path: required when type is")
        page.fill('input[name="dataset_path"]', f"{TASKS}/shapes/images")
        page.fill('input[name="dataset_masks"]', f"{TASKS}/../masks")
        preview_button.click()
        masks_errors = page.locator('[data-errors-for="dataset.masks"]')
        expect(masks_errors).to_contain_text("spec.dataset.masks: a pvc:// path must not contain")
        expect(path_errors).to_be_empty()
        page.fill('input[name="dataset_masks"]', f"{TASKS}/shapes/masks")
        preview_button.click()
        task_errors = page.locator('[data-errors-for="task"]')
        expect(task_errors).to_contain_text("a masks dataset a segmentation task")
        expect(masks_errors).to_be_empty()
        page.select_option('select[name="task_type"]', "segmentation")
        page.fill('input[name="task_output"]', "logits")
        page.fill('input[name="task_classes"]', "4")
        preview_button.click()
        expect(preview).to_contain_text(f"masks: '{TASKS}/shapes/masks'")
        expect(preview).to_contain_text("task: {type: segmentation, output: logits, numClasses: 4}")
        expect(task_errors).to_be_empty()
        page.screenshot(path=str(shots / "launch-masks.png"), full_page=True)

        page.select_option('select[name="model"]', "shapes-denoiser")
        page.select_option('select[name="dataset_type"]', "pairs")
        page.fill('input[name="dataset_path"]', f"{TASKS}/pairs/noisy")
        page.fill('input[name="dataset_masks"]', "")
        page.fill('input[name="dataset_targets"]', "pvc://Clean/pairs")
        page.select_option('select[name="task_type"]', "image-to-image")
        page.fill('input[name="task_output"]', "restored")
        page.fill('input[name="task_classes"]', "")
        page.fill('input[name="task_range"]', "1.0")
        preview_button.click()
        expect(page.locator('[data-errors-for="dataset.targets"]')).to_contain_text(
            "spec.dataset.targets: write pvc://<claim>/<path>"
        )
        page.fill('input[name="dataset_targets"]', f"{TASKS}/pairs/clean")
        preview_button.click()
        expect(preview).to_contain_text("modelRef: {name: shapes-denoiser}")
        expect(preview).to_contain_text(f"targets: '{TASKS}/pairs/clean'")
        expect(preview).to_contain_text(
            "task: {type: image-to-image, output: restored, dataRange: 1}"
        )
        expect(page.locator('[data-errors-for="dataset.targets"]')).to_be_empty()
        page.screenshot(path=str(shots / "launch-pairs.png"), full_page=True)
    assert not problems, problems


def test_fill_annotations_a_detector_and_a_tokenizer_and_launch(
    sqlite_url: str, tmp_path: Path
) -> None:
    """A coco dataset's annotations and a detection task with its box format, normalized
    boxes, threshold and NMS; a refused annotations path and a text dataset without its
    tokenizer shown under their fields; the launched detector's evaluation carries them."""
    from playwright.sync_api import expect

    settings = ServeSettings(
        store_url=sqlite_url,
        read_token=READ_TOKEN,
        write_token=WRITE_TOKEN,
        catalog=(str(CATALOG), str(task_catalog(tmp_path))),
        launch_workers=0,
    )
    shots = screenshot_dir(tmp_path)
    problems: list[str] = []
    with opened_page(create_app(settings), problems, f"/launch?token={READ_TOKEN}") as (
        _,
        page,
    ):
        page.fill('input[name="token"]', WRITE_TOKEN)
        preview_button = page.get_by_role("button", name="Preview")
        preview = page.locator("#preview-yaml")

        page.select_option('select[name="model"]', "topic-classifier")
        page.select_option('select[name="dataset_type"]', "text")
        page.fill('input[name="dataset_path"]', f"{TASKS}/text/eval.jsonl")
        page.fill('input[name="dataset_max_length"]', "32")
        page.select_option('select[name="task_type"]', "text-classification")
        page.fill('input[name="task_output"]', "logits")
        preview_button.click()
        tokenizer_errors = page.locator('[data-errors-for="dataset.tokenizer"]')
        expect(tokenizer_errors).to_contain_text("spec.dataset.tokenizer: required when type is")
        page.fill('input[name="dataset_tokenizer"]', f"{TASKS}/text/tokenizer.json")
        preview_button.click()
        expect(preview).to_contain_text(f"tokenizer: '{TASKS}/text/tokenizer.json'")
        expect(preview).to_contain_text("maxLength: 32")
        expect(preview).to_contain_text("task: {type: text-classification, output: logits}")
        expect(tokenizer_errors).to_be_empty()

        page.select_option('select[name="model"]', "shapes-detector")
        page.select_option('select[name="dataset_type"]', "coco")
        page.fill('input[name="dataset_path"]', f"{TASKS}/shapes/images")
        page.fill('input[name="dataset_tokenizer"]', "")
        page.fill('input[name="dataset_max_length"]', "")
        page.fill('input[name="dataset_annotations"]', f"{TASKS}/../instances.json")
        page.select_option('select[name="task_type"]', "detection")
        page.fill('input[name="task_output"]', "")
        page.select_option('select[name="task_box_format"]', "cxcywh")
        page.check('input[name="task_normalized"]')
        page.fill('input[name="task_score_threshold"]', "0.05")
        page.fill('input[name="task_nms_iou"]', "0")
        preview_button.click()
        annotations_errors = page.locator('[data-errors-for="dataset.annotations"]')
        expect(annotations_errors).to_contain_text(
            "spec.dataset.annotations: a pvc:// path must not contain"
        )
        page.fill('input[name="dataset_annotations"]', f"{TASKS}/shapes/instances.json")
        preview_button.click()
        detection_errors = page.locator('[data-errors-for="task.detection"]')
        expect(detection_errors).to_contain_text("spec.task.detection.nmsIou:")
        expect(annotations_errors).to_be_empty()
        page.fill('input[name="task_nms_iou"]', "0.5")
        preview_button.click()
        expect(preview).to_contain_text(f"annotations: '{TASKS}/shapes/instances.json'")
        expect(detection_errors).to_be_empty()

        page.get_by_role("button", name="Launch").click()
        page.wait_for_url("**/launches/*")
        spec = page.locator("pre.spec")
        expect(spec).to_contain_text("modelRef: {name: shapes-detector}")
        expect(spec).to_contain_text(f"annotations: '{TASKS}/shapes/instances.json'")
        expect(spec).to_contain_text(
            "detection: {boxFormat: cxcywh, normalized: true, scoreThreshold: 0.05, nmsIou: 0.5}"
        )
        page.screenshot(path=str(shots / "launch-detection.png"), full_page=True)
    assert not problems, problems
