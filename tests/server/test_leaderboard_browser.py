"""The leaderboard's acceptance test: real runs of the digits CNN in ONNX Runtime, PyTorch and
TensorFlow and of the task examples (segmentation, text classification) recorded in a fresh
SQLite store, served by a real uvicorn server, driven in real headless Chromium with
JavaScript off: open the leaderboard, filter it by framework, rank it by a column's heading,
narrow it to one dataset, follow a model's link to its history. A full-page screenshot of
each page is kept in $MLMS_SCREENSHOT_DIR (else the test's tmp_path) for a person to look
at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from browser import chromium, screenshot_dir, serve
from dashboard_fixtures import FRAMEWORKS, WHOLE_DATASET, evaluation_name, real_documents, record

from mlmodelscope.server.app import ServeSettings, create_app

pytestmark = [pytest.mark.slow, pytest.mark.frameworks]


def test_leaderboard_filter_and_history_in_chromium(
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    task_documents: dict[str, dict[str, Any]],
) -> None:
    executable = chromium()
    from playwright.sync_api import Page, expect, sync_playwright

    documents = real_documents(tmp_path_factory)
    runs = [documents[evaluation_name(f)] for f in FRAMEWORKS]
    model = runs[0]["model"]["name"]
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    record(store_url, [*runs, *task_documents.values()])
    shots = screenshot_dir(tmp_path)
    taken: list[Path] = []

    def shoot(page: Page, name: str) -> None:
        path = shots / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        taken.append(path)
        print(f"screenshot: {path}")

    with (
        serve(create_app(ServeSettings(store_url=store_url))) as base,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=executable, headless=True)
        context = browser.new_context(
            java_script_enabled=False, viewport={"width": 1400, "height": 900}
        )
        page = context.new_page()
        page.goto(base + "/")
        page.get_by_role("link", name="leaderboard", exact=True).click()
        assert page.url == base + "/leaderboard"
        boards = page.locator("section.board")
        expect(boards).to_have_count(3)
        top1 = page.locator('table.leaderboard[data-task="top1"] tbody tr')
        expect(top1).to_have_count(3)
        expect(page.locator('table.leaderboard[data-task="miou"] tbody tr')).to_have_count(2)
        for run in runs:
            row = page.locator(f'tr[data-run-id="{run["run_id"]}"]')
            expect(row).to_contain_text(run["backend"]["framework"])
            top1_value = row.locator('td[data-column="metric_value"]')
            expect(top1_value).to_have_text(f"top1 {100 * run['accuracy']['top1']:.2f}%")
        shoot(page, "leaderboard-1-all")

        page.select_option('select[name="framework"]', "pytorch")
        page.select_option('select[name="rank"]', "p50_ms")
        page.get_by_role("button", name="Show").click()
        assert "framework=pytorch" in page.url and "rank=p50_ms" in page.url
        torch = documents[evaluation_name("pytorch")]
        expect(top1).to_have_count(1)
        expect(top1.first).to_have_attribute("data-run-id", torch["run_id"])
        expect(top1.first.locator('td[data-column="p50_ms"]')).to_have_text(
            f"{torch['results'][0]['latency_ms']['p50']:.3f}"
        )
        expect(page.locator('table.leaderboard[data-task="miou"] tbody tr')).to_have_count(1)
        expect(page.locator('section.board[data-task="accuracy"] p.note')).to_be_visible()
        expect(page.locator("th.ranked")).to_have_count(2)
        shoot(page, "leaderboard-2-pytorch")

        top1_table = page.locator('table.leaderboard[data-task="top1"]')
        top1_table.locator("th a.rank", has_text="samples/s").click()
        assert "rank=throughput" in page.url and "framework=pytorch" in page.url
        expect(page.locator('select[name="rank"]')).to_have_value("throughput")
        expect(top1_table.locator("th.ranked")).to_have_text("samples/s")
        page.select_option('select[name="dataset"]', WHOLE_DATASET)
        page.get_by_role("button", name="Show").click()
        expect(boards).to_have_count(1)  # the tasks with runs on that dataset: top1
        expect(page.locator(f'div.dataset[data-dataset="{WHOLE_DATASET}"] h3')).to_have_text(
            f"Dataset {WHOLE_DATASET}"
        )
        expect(top1).to_have_count(1)
        shoot(page, "leaderboard-3-dataset")

        top1.first.get_by_role("link", name=model, exact=True).click()
        assert page.url == f"{base}/models/{model}/history"
        expect(page.locator("h1")).to_have_text(f"History of {model}")
        history = page.locator("#history tbody tr")
        expect(history).to_have_count(3)
        oldest_first = sorted(runs, key=lambda d: d["started_at"])
        for index, run in enumerate(oldest_first):
            expect(history.nth(index)).to_have_attribute("data-run-id", run["run_id"])
        for plot in ("history-metric", "history-latency"):
            expect(page.locator(f"svg#{plot}")).to_be_visible()
            expect(page.locator(f"svg#{plot} path.history-{plot[8:]}")).to_have_count(3)
        shoot(page, "leaderboard-4-history")

        history.nth(0).get_by_role("link").click()
        assert page.url == f"{base}/runs/{oldest_first[0]['run_id']}"
        browser.close()
    assert all(path.stat().st_size > 10_000 for path in taken)
