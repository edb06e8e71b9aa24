"""The dashboard's acceptance test: real runs of the digits CNN in ONNX Runtime, PyTorch and
TensorFlow recorded in a fresh SQLite store, served by a real uvicorn server, driven in real
headless Chromium with JavaScript off (every step is a link or a GET form): list the runs,
filter them, compare them, open a run. A full-page screenshot of each page is kept in
$MLMS_SCREENSHOT_DIR (else the test's tmp_path) for a person to look at."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from browser import chromium, screenshot_dir, serve
from dashboard_fixtures import FRAMEWORKS, evaluation_name, real_documents, record

from mlmodelscope.report.verdicts import Outcome
from mlmodelscope.server.app import ServeSettings, create_app

pytestmark = [pytest.mark.slow, pytest.mark.frameworks]


def test_list_filter_compare_and_open_a_run_in_chromium(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    executable = chromium()
    from playwright.sync_api import Page, expect, sync_playwright

    documents = real_documents(tmp_path_factory)
    runs = [documents[evaluation_name(f)] for f in FRAMEWORKS]
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    record(store_url, runs)
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
        rows = page.locator("#runs tbody tr")

        page.goto(base + "/")
        expect(rows).to_have_count(3)
        for run in runs:
            expect(page.locator(f'tr[data-run-id="{run["run_id"]}"]')).to_contain_text(
                run["evaluation"]["name"]
            )
        shoot(page, "1-runs")

        page.select_option('select[name="framework"]', "pytorch")
        page.get_by_role("button", name="Filter").click()
        expect(rows).to_have_count(1)
        expect(rows).to_contain_text("digits-pytorch")
        assert "framework=pytorch" in page.url
        shoot(page, "2-runs-filtered")

        page.get_by_role("link", name="clear filters").click()
        expect(rows).to_have_count(3)

        for run in runs:
            page.locator(f'input[name="run"][value="{run["run_id"]}"]').check()
        page.get_by_role("button", name="Compare selected runs").click()
        assert "/compare?" in page.url
        for plot, curves in (("cdf", "path.cdf"), ("throughput", "path.throughput")):
            expect(page.locator(f"svg#{plot}")).to_be_visible()
            expect(page.locator(f"svg#{plot} {curves}")).to_have_count(3)
        expect(page.locator("svg#accuracy circle.accuracy")).to_have_count(6)
        for run in runs:
            _expect_numbers(page, run)
        expect(page.locator("table.stack")).to_contain_text("stack.backend.framework")
        expect(page.locator("table.spec")).to_contain_text("spec.framework.name")
        _expect_verdicts(page)
        shoot(page, "3-compare")

        torch = documents[evaluation_name("pytorch")]
        page.get_by_role("link", name="digits-pytorch", exact=True).click()
        assert page.url.endswith(f"/runs/{torch['run_id']}")
        stack = page.locator("table.stack")
        expect(stack).to_be_visible()
        expect(stack).to_contain_text(torch["stack"]["cpu"]["model"])
        expect(stack).to_contain_text(torch["stack"]["backend"]["framework_version"])
        spec = page.locator("pre.spec")
        expect(spec).to_be_visible()
        expect(spec).to_contain_text("name: pytorch")
        expect(page.locator("table.headline tbody tr")).to_have_count(2)
        expect(page.locator("svg#cdf")).to_be_visible()
        shoot(page, "4-run")
        browser.close()
    assert all(path.stat().st_size > 10_000 for path in taken)


def _expect_numbers(page: Any, run: dict[str, Any]) -> None:
    """The comparison's rows of ``run`` show the document's numbers (exact in data-value,
    rounded as text)."""
    from playwright.sync_api import expect

    for result in run["results"]:
        row = page.locator(
            f'table.results tr[data-run="{run["evaluation"]["name"]}"]'
            f'[data-batch="{result["batch_size"]}"]'
        )
        for column, value, text in (
            ("p50_ms", result["latency_ms"]["p50"], f"{result['latency_ms']['p50']:.3f}"),
            ("p99_ms", result["latency_ms"]["p99"], f"{result['latency_ms']['p99']:.3f}"),
            ("throughput", result["throughput"], f"{result['throughput']:,.0f}"),
            ("metric_value", result["top1"], f"top1 {100 * result['top1']:.2f}%"),
        ):
            cell = row.locator(f'td[data-column="{column}"]')
            expect(cell).to_have_text(text)
            assert float(cell.get_attribute("data-value") or "nan") == value


def _expect_verdicts(page: Any) -> None:
    """The significance table judges each run but the reference (the runs table's first):
    per batch size p50, p99 and throughput, and top-1 once, each row's verdict and interval
    or p-value visible, its method footnote pointing at a visible legend item."""
    from playwright.sync_api import expect

    compared = page.locator("table.runs tbody tr")
    candidates = [compared.nth(i).get_attribute("data-run") for i in range(compared.count())][1:]
    assert len(candidates) == 2
    table = page.locator("table.verdicts")
    expect(table).to_be_visible()
    expect(table.locator("tbody tr")).to_have_count(7 * len(candidates))
    outcomes = re.compile("^(" + "|".join(re.escape(o) for o in Outcome) + ")")
    for name in candidates:
        for metric, batch in (("latency p50", 1), ("throughput", 8), ("top-1 accuracy", None)):
            where = "" if batch is None else f'[data-batch="{batch}"]'
            row = table.locator(f'tr[data-run="{name}"][data-metric="{metric}"]{where}')
            expect(row.locator("td.outcome")).to_be_visible()
            expect(row.locator("td.outcome")).to_have_text(outcomes)
            evidence = row.locator("td.evidence")
            expect(evidence).to_be_visible()
            expect(evidence).to_have_text(
                re.compile(r"^(p = [\d.e-]+|ratio [\d.]+ \[[\d.]+, [\d.]+\] at 95%|-)$")
            )
            footnote = row.locator("td.method a")
            if footnote.count():
                target = footnote.get_attribute("href") or ""
                expect(page.locator(f"ol.methods li{target}")).to_be_visible()
    expect(page.locator("ol.methods li").first).to_be_visible()
