"""The Try page in real headless Chromium: upload a digit of scikit-learn's digits as a PNG
through the plain form, and see ONNX Runtime, PyTorch and TensorFlow give the same top 3,
led by the digit's label. The pages' CSP is on; any CSP violation or script error fails the
test."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import opened_page, screenshot_dir
from launch_fixtures import CATALOG
from serve_fixtures import READ_TOKEN, WRITE_TOKEN
from try_fixtures import FRAMEWORKS, digit_png

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
