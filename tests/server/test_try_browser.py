"""The Try page in real headless Chromium: upload a digit of scikit-learn's digits as a PNG
through the plain form, and see ONNX Runtime, PyTorch and TensorFlow give the same top 3,
led by the digit's label; upload a rendered shapes image to the examples/tasks detector and
see each framework's box drawn over it; type a text for the examples/tasks text classifier and
see each framework's topics; upload a noisy image to the examples/tasks denoiser and see each
framework's output image beside the input. The pages' CSP is on; any CSP violation or script
error fails the test."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import opened_page, screenshot_dir
from launch_fixtures import CATALOG, task_catalog
from serve_fixtures import READ_TOKEN, WRITE_TOKEN
from try_fixtures import FRAMEWORKS, digit_png, try_models

from mlmodelscope.server.app import ServeSettings, create_app

pytestmark = [pytest.mark.slow, pytest.mark.frameworks]


def test_upload_a_digit_and_see_three_frameworks_agree(
    sqlite_url: str, pvc_root: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    image, label = digit_png(3)
    upload = tmp_path / "digit.png"
    upload.write_bytes(image)
    settings = ServeSettings(
        store_url=sqlite_url,
        read_token=READ_TOKEN,
        write_token=WRITE_TOKEN,
        catalog=(str(CATALOG),),
        launch_workers=0,
    )
    shots = screenshot_dir(tmp_path)
    problems: list[str] = []
    with opened_page(create_app(settings), problems, f"/try?token={READ_TOKEN}") as (
        _,
        page,
    ):
        page.set_input_files('input[name="file"]', str(upload))
        page.select_option('select[name="model"]', "digits-cnn")

        page.fill('input[name="token"]', READ_TOKEN)  # refused, next to its field
        page.get_by_role("button", name="Try").click()
        expect(page.locator('[data-errors-for="token"]')).to_contain_text("may only read")

        page.set_input_files('input[name="file"]', str(upload))  # a new page: choose again
        page.fill('input[name="token"]', WRITE_TOKEN)
        page.get_by_role("button", name="Try").click()
        verdict = page.locator("#verdict")
        expect(verdict).to_contain_text(
            "The 3 frameworks that ran agree on the top 3", timeout=120_000
        )
        columns = page.locator("#results section.framework")
        expect(columns).to_have_count(3)
        tops = []
        for framework in FRAMEWORKS:
            section = page.locator(f'section[data-framework="{framework}"]')
            labels = section.locator("table.top td.label").all_inner_texts()
            tops.append(labels)
            expect(section.locator("td.latency")).to_contain_text(" ms")
        assert len(tops[0]) == 3 and tops[0][0] == str(label)
        assert tops == [tops[0]] * 3
        expect(page.locator("img.upload")).to_be_visible()
        page.screenshot(path=str(shots / "try-1-three-frameworks.png"), full_page=True)
    assert problems == []


def test_try_a_detector_and_see_its_boxes_drawn_over_the_image(
    sqlite_url: str, tmp_path: Path
) -> None:
    """The examples/tasks detector on one of its rendered shapes images: with the box
    reading its evaluation uses, each framework draws the one disc it finds over the image,
    with its label, and lists it."""
    from playwright.sync_api import expect

    from mlmodelscope.agent.tasks.reference import ensure_task_models

    build = ensure_task_models()
    upload = build / "shapes" / "images" / "00000.png"
    settings = ServeSettings(
        store_url=sqlite_url,
        read_token=READ_TOKEN,
        write_token=WRITE_TOKEN,
        catalog=(str(CATALOG), str(task_catalog(tmp_path, build))),
        launch_workers=0,
    )
    shots = screenshot_dir(tmp_path)
    problems: list[str] = []
    with opened_page(create_app(settings), problems, f"/try?token={READ_TOKEN}") as (
        _,
        page,
    ):
        page.set_input_files('input[name="file"]', str(upload))
        page.select_option('select[name="model"]', "shapes-detector")
        page.select_option('select[name="box_format"]', "cxcywh")
        page.check('input[name="normalized"]')
        page.fill('input[name="nms_iou"]', "0.5")
        page.fill('input[name="token"]', WRITE_TOKEN)
        page.get_by_role("button", name="Try").click()
        expect(page.locator("#verdict")).to_contain_text(
            "The 3 frameworks that ran agree on the boxes' classes: 2.", timeout=120_000
        )
        for framework in FRAMEWORKS:
            section = page.locator(f'section[data-framework="{framework}"]')
            overlay = section.locator(".overlay")
            expect(overlay.locator("img")).to_be_visible()
            box = overlay.locator("svg g.box rect")
            expect(box).to_have_count(1)
            expect(overlay.locator("svg g.box text")).to_contain_text("2 0.")
            drawn, picture = box.bounding_box(), overlay.locator("img").bounding_box()
            assert drawn is not None and picture is not None
            scale = picture["width"] / 48  # the box in the image's pixels, as shown
            assert 4 <= (drawn["x"] - picture["x"]) / scale <= 10
            assert 17 <= drawn["width"] / scale <= 26
            expect(section.locator("table.boxes tr.box")).to_have_count(1)
        page.screenshot(path=str(shots / "try-2-detector-boxes.png"), full_page=True)
    assert problems == []


def _task_settings(sqlite_url: str, tmp_path: Path) -> tuple[ServeSettings, Path]:
    """The examples catalog, the examples/tasks Models and the Try tests' Models."""
    from mlmodelscope.agent.tasks.reference import ensure_task_models

    build = ensure_task_models()
    catalog = (str(CATALOG), str(task_catalog(tmp_path, build)), str(try_models(tmp_path, build)))
    settings = ServeSettings(
        store_url=sqlite_url,
        read_token=READ_TOKEN,
        write_token=WRITE_TOKEN,
        catalog=catalog,
        launch_workers=0,
    )
    return settings, build


def test_type_a_text_and_see_its_topic_in_three_frameworks(sqlite_url: str, tmp_path: Path) -> None:
    """The examples/tasks text classifier (with a softmax and its topics' names) on a text
    about the weather, through its tokenizer: each framework's top 3 led by weather, with the
    tokens it read; the text is shown again in the form and above the results."""
    from playwright.sync_api import expect
    from tokenizers import Tokenizer

    settings, build = _task_settings(sqlite_url, tmp_path)
    text = "snow and rain tonight, a cold wind in the forecast"
    count = len(Tokenizer.from_file(str(build / "text" / "tokenizer.json")).encode(text).ids)
    shots = screenshot_dir(tmp_path)
    problems: list[str] = []
    with opened_page(create_app(settings), problems, f"/try?token={READ_TOKEN}") as (
        _,
        page,
    ):
        page.select_option('select[name="model"]', "topic-labels")
        page.fill('textarea[name="text"]', text)
        page.fill('input[name="tokenizer"]', str(build / "text" / "tokenizer.json"))
        page.fill('input[name="token"]', WRITE_TOKEN)
        page.get_by_role("button", name="Try").click()
        expect(page.locator("#verdict")).to_contain_text(
            "The 3 frameworks that ran agree on the top 3: weather", timeout=120_000
        )
        for framework in FRAMEWORKS:
            section = page.locator(f'section[data-framework="{framework}"]')
            expect(section.locator("table.top td.label").first).to_have_text("weather")
            expect(section.locator("table.top td.score").first).to_contain_text("%")
            expect(section.locator("td.tokens")).to_have_text(str(count))
        expect(page.locator("blockquote.tried-text")).to_have_text(text)
        expect(page.locator('textarea[name="text"]')).to_have_value(text)
        page.screenshot(path=str(shots / "try-3-text-classifier.png"), full_page=True)
    assert problems == []


def test_try_a_denoiser_and_see_each_output_image_beside_the_input(
    sqlite_url: str, tmp_path: Path
) -> None:
    """The examples/tasks denoiser on one of its noisy images: each framework shows its
    48x48 output image to the right of the input, and the second and third say how far they
    are from the first (PSNR at least 40 dB, or identical)."""
    from playwright.sync_api import expect

    settings, build = _task_settings(sqlite_url, tmp_path)
    upload = sorted((build / "pairs" / "noisy").iterdir())[0]
    shots = screenshot_dir(tmp_path)
    problems: list[str] = []
    with opened_page(create_app(settings), problems, f"/try?token={READ_TOKEN}") as (
        _,
        page,
    ):
        page.set_input_files('input[name="file"]', str(upload))
        page.select_option('select[name="model"]', "shapes-denoiser")
        page.fill('input[name="token"]', WRITE_TOKEN)
        page.get_by_role("button", name="Try").click()
        expect(page.locator("#verdict")).to_contain_text(
            "The 3 frameworks that ran agree on the output image (PSNR 40 dB or more): 48x48",
            timeout=120_000,
        )
        for index, framework in enumerate(FRAMEWORKS):
            section = page.locator(f'section[data-framework="{framework}"]')
            given = section.locator('.pair img[alt="the uploaded image"]')
            output = section.locator(".pair img.output-image")
            expect(given).to_be_visible()
            expect(output).to_be_visible()
            assert output.evaluate("img => img.naturalWidth") == 48
            left, right = given.bounding_box(), output.bounding_box()
            assert left is not None and right is not None
            assert right["x"] >= left["x"] + left["width"]  # side by side
            assert abs(right["y"] - left["y"]) < 1
            difference = section.locator("p.difference")
            if index == 0:
                expect(difference).to_have_count(0)
            else:
                expect(difference).to_contain_text("against onnxruntime: ")
                psnr = difference.get_attribute("data-psnr")
                assert psnr == "" or float(psnr or 0) >= 40
        page.screenshot(path=str(shots / "try-4-image-to-image.png"), full_page=True)
    assert problems == []
