"""The Launch page in real headless Chromium, JavaScript on: preview the YAML, launch the
catalog's digits CNN in ONNX Runtime, and watch the launch page go from queued to succeeded
without reloading, then follow its link to the recorded run; launch the same as a sweep over
two batch sizes and watch the sweep and both children succeed in place; cancel a running launch
from its page and watch it turn cancelled in place. The pages' CSP is on; any CSP violation or
script error fails the test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from browser import opened_page, screenshot_dir
from launch_fixtures import CATALOG
from processes import agents_of
from serve_fixtures import READ_TOKEN, WRITE_TOKEN

from mlmodelscope.devtools.telemetry_servers import wait_until
from mlmodelscope.server.app import ServeSettings, create_app

pytestmark = [pytest.mark.slow, pytest.mark.frameworks]


def test_launch_from_the_page_and_watch_it_succeed(
    sqlite_url: str, pvc_root: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    settings = ServeSettings(
        store_url=sqlite_url,
        read_token=READ_TOKEN,
        write_token=WRITE_TOKEN,
        catalog=(str(CATALOG),),
    )
    shots = screenshot_dir(tmp_path)
    problems: list[str] = []
    with opened_page(create_app(settings), problems, f"/launch?token={READ_TOKEN}") as (
        base,
        page,
    ):
        page.select_option('select[name="model"]', "digits-cnn")
        page.fill('input[name="batch_sizes"]', "1, 8")
        page.fill('input[name="minQueryCount"]', "20")
        page.fill('input[name="minDuration"]', "20ms")
        page.fill('input[name="warmup"]', "3")
        page.fill('input[name="token"]', WRITE_TOKEN)

        page.fill('input[name="batch_sizes"]', "0")  # refused, next to its field
        page.get_by_role("button", name="Preview").click()
        expect(page.locator('[data-errors-for="batch_sizes"]')).to_contain_text(
            "spec.scenario.batchSizes"
        )
        page.fill('input[name="batch_sizes"]', "1, 8")
        page.get_by_role("button", name="Preview").click()
        preview = page.locator("#preview-yaml")
        expect(preview).to_contain_text("modelRef: {name: digits-cnn}")
        expect(preview).to_contain_text("batchSizes: [1, 8]")
        expect(page.locator('[data-errors-for="batch_sizes"]')).to_be_empty()
        page.screenshot(path=str(shots / "launch-1-preview.png"), full_page=True)

        page.get_by_role("button", name="Launch").click()
        page.wait_for_url(f"{base}/launches/*")
        page.evaluate("window.notReloaded = true")
        state = page.locator("table.launch td.state")
        expect(state).to_have_text("succeeded", timeout=120_000)
        assert page.evaluate("window.notReloaded") is True  # updated in place
        link = page.locator("table.launch td.run a")
        run_id = (link.get_attribute("href") or "").rsplit("/", 1)[1]
        expect(link).to_have_text(f"run {run_id}")
        expect(page.locator("#cancel-form")).to_be_hidden()
        page.screenshot(path=str(shots / "launch-2-succeeded.png"), full_page=True)
        link.click()
        page.wait_for_url(f"{base}/runs/*")
        expect(page.locator("table.facts").first).to_contain_text("digits-cnn-onnxruntime")
        expect(page.locator("table.headline tbody tr")).to_have_count(2)
    assert problems == []


def test_launch_a_sweep_from_the_page_and_watch_it_succeed(
    sqlite_url: str, pvc_root: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    settings = ServeSettings(
        store_url=sqlite_url,
        read_token=READ_TOKEN,
        write_token=WRITE_TOKEN,
        catalog=(str(CATALOG),),
    )
    shots = screenshot_dir(tmp_path)
    problems: list[str] = []
    with opened_page(create_app(settings), problems, f"/launch?token={READ_TOKEN}") as (
        base,
        page,
    ):
        expect(page.locator("#sweep-devices")).to_be_hidden()
        page.check('input[name="kind"][value="sweep"]')
        expect(page.locator("#sweep-devices")).to_be_visible()
        page.select_option('select[name="model"]', "digits-cnn")
        page.fill('input[name="batch_sizes"]', "1, 8")
        page.fill('input[name="minQueryCount"]', "20")
        page.fill('input[name="minDuration"]', "20ms")
        page.fill('input[name="warmup"]', "3")
        page.fill('input[name="token"]', WRITE_TOKEN)

        page.fill('input[name="batch_sizes"]', "8, 8")  # refused by the sweep's own rule
        page.get_by_role("button", name="Preview").click()
        expect(page.locator('[data-errors-for="batch_sizes"]')).to_contain_text(
            "batch sizes must be unique"
        )
        page.fill('input[name="batch_sizes"]', "1, 8")
        page.get_by_role("button", name="Preview").click()
        preview = page.locator("#preview-yaml")
        expect(preview).to_contain_text("kind: EvaluationSweep")
        expect(preview).to_contain_text("modelRef: {name: digits-cnn}")
        expect(preview).to_contain_text("batchSizes: [1, 8]")
        page.screenshot(path=str(shots / "launch-3-sweep-preview.png"), full_page=True)

        page.get_by_role("button", name="Launch").click()
        page.wait_for_url(f"{base}/sweep-launches/*")
        page.evaluate("window.notReloaded = true")
        children = page.locator("#sweep-children tbody tr")
        expect(children).to_have_count(2)
        expect(page.locator("table.sweep td.state")).to_have_text("succeeded", timeout=180_000)
        assert page.evaluate("window.notReloaded") is True  # updated in place
        expect(page.locator("table.sweep td.counts")).to_have_text("2 succeeded")
        expect(children.locator("td.state")).to_have_text(["succeeded", "succeeded"])
        expect(children.locator("td.run a")).to_have_count(2)
        expect(children.locator("td.wrap")).to_have_text(
            ["digits-cnn-digits-cnn-onnxruntime-b1", "digits-cnn-digits-cnn-onnxruntime-b8"]
        )
        expect(page.locator("#cancel-form")).to_be_hidden()
        page.screenshot(path=str(shots / "launch-4-sweep-succeeded.png"), full_page=True)
    assert problems == []


def test_cancel_a_running_launch_from_its_page(
    sqlite_url: str, pvc_root: Path, tmp_path: Path
) -> None:
    """A digits evaluation of a minute's minimum duration, cancelled from its page once the
    page shows it running: the state turns cancelled in place and the Cancel form goes."""
    from playwright.sync_api import expect

    settings = ServeSettings(
        store_url=sqlite_url,
        read_token=READ_TOKEN,
        write_token=WRITE_TOKEN,
        catalog=(str(CATALOG),),
    )
    shots = screenshot_dir(tmp_path)
    problems: list[str] = []
    app = create_app(settings)
    with opened_page(app, problems, f"/launch?token={READ_TOKEN}") as (base, page):
        page.select_option('select[name="model"]', "digits-cnn")
        page.fill('input[name="batch_sizes"]', "1")
        page.fill('input[name="minQueryCount"]', "20")
        page.fill('input[name="minDuration"]', "60s")
        page.fill('input[name="warmup"]', "3")
        page.fill('input[name="token"]', WRITE_TOKEN)
        page.get_by_role("button", name="Launch").click()
        page.wait_for_url(f"{base}/launches/*")
        page.evaluate("window.notReloaded = true")
        state = page.locator("table.launch td.state")
        expect(state).to_have_text("running", timeout=60_000)
        expect(page.locator("table.launch td.started")).not_to_be_empty()
        wait_until(lambda: bool(agents_of(os.getpid())), 30, "the launch's `mlms run` process")

        cancel = page.locator("#cancel-form")
        cancel.locator('input[name="token"]').fill(WRITE_TOKEN)
        cancel.get_by_role("button", name="Cancel launch").click()
        expect(state).to_have_text("cancelled")
        expect(state).to_have_class("state state-cancelled")
        expect(cancel).to_be_hidden()
        expect(page.locator("#cancel-error")).to_be_empty()
        expect(page.locator("table.launch pre.message")).to_have_text("cancelled")
        expect(page.locator("table.launch td.run")).to_have_text("not recorded yet")
        assert page.evaluate("window.notReloaded") is True  # updated in place
        page.screenshot(path=str(shots / "launch-cancelled.png"), full_page=True)

        launch_id = page.locator("table.launch").get_attribute("data-launch-id")
        assert app.state.launches.started == [launch_id]
        # its worker stops the `mlms run` process long before its minute is up
        wait_until(lambda: not agents_of(os.getpid()), 15, "the cancelled run's process gone")
        item = page.request.get(f"{base}/api/v1/launches/{launch_id}").json()
        assert item["state"] == "cancelled" and item["run_id"] is None
        assert page.request.get(f"{base}/api/v1/runs").json()["total"] == 0
    assert problems == []
