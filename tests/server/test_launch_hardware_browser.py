"""The Launch form's hardware in real headless Chromium, JavaScript on. Against the shared
fake API server: choosing a pool fills the node selector and tolerations, a line the form
cannot read and a toleration the spec refuses are shown next to the tolerations field, a
pool with GPUs shows a note while no gpu device is chosen (an evaluation's device, a sweep's
devices), the preview shows the pool's hardware and the device, and the launched
ModelEvaluation carries them. On a local server: device gpu shows the GPU count, a count the
spec refuses is shown under it, and the preview has both. The pages' CSP is on; any CSP
violation or script error fails the test."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import pytest
from browser import opened_page, screenshot_dir
from launch_fixtures import CATALOG, NS, node
from serve_fixtures import READ_TOKEN, WRITE_TOKEN

from fakes import FakeApiServer, FakeKube
from mlmodelscope.server.app import ServeSettings, create_app
from mlmodelscope.server.node_pools import NODES_PATH
from mlmodelscope.server.pages.launch import POOL_CPUS

pytestmark = [pytest.mark.slow]

POOL: Final = "mlmodelscope.io/pool"
GPU_TAINT: Final = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
HARDWARE: Final[dict[str, Any]] = {
    "nodeSelector": {POOL: "gpu-a100"},
    "tolerations": [
        {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
    ],
}


def test_choose_a_node_pool_on_the_form_and_launch_onto_it(sqlite_url: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    api = FakeApiServer()
    api.add_namespace(NS)
    api.seed(NODES_PATH, node("cpu-1", {POOL: "cpu"}))
    api.seed(NODES_PATH, node("a100-1", {POOL: "gpu-a100"}, gpus=8, taints=[GPU_TAINT]))
    dedicated = {"key": "dedicated", "effect": "NoExecute"}
    api.seed(NODES_PATH, node("a100-2", {POOL: "gpu-a100"}, gpus=8, taints=[GPU_TAINT, dedicated]))
    settings = ServeSettings(
        store_url=sqlite_url,
        read_token=READ_TOKEN,
        write_token=WRITE_TOKEN,
        catalog=(str(CATALOG),),
        launch_namespace=NS,
    )
    shots = screenshot_dir(tmp_path)
    problems: list[str] = []
    with opened_page(
        create_app(settings, kube=FakeKube(api)), problems, f"/launch?token={READ_TOKEN}"
    ) as (
        base,
        page,
    ):
        expect(page.locator("#node-pools tbody tr")).to_have_count(2)
        page.select_option('select[name="model"]', "digits-cnn")
        page.fill('input[name="token"]', WRITE_TOKEN)
        selector = page.locator('input[name="node_selector"]')
        tolerations = page.locator('textarea[name="tolerations"]')
        page.select_option('select[name="pool"]', f"{POOL}=gpu-a100")
        expect(selector).to_have_value(f"{POOL}=gpu-a100")
        expect(tolerations).to_have_value("dedicated:NoExecute\nnvidia.com/gpu=present:NoSchedule")
        page.select_option('select[name="pool"]', "")  # any node: both cleared
        expect(selector).to_have_value("")
        expect(tolerations).to_have_value("")

        errors = page.locator('[data-errors-for="hardware.tolerations"]')
        tolerations.fill("a=b=c")  # not a taint: refused before it is sent
        page.get_by_role("button", name="Preview").click()
        expect(errors).to_contain_text("write key=value:Effect")
        tolerations.fill("dedicated:Sometimes")  # refused by the spec, next to the field
        page.get_by_role("button", name="Preview").click()
        expect(errors).to_contain_text("spec.hardware.tolerations[0].effect")

        note = page.locator("#pool-cpus")
        expect(note).to_be_hidden()
        page.select_option('select[name="pool"]', f"{POOL}=cpu")  # no GPUs: no note
        expect(note).to_be_hidden()
        page.select_option('select[name="pool"]', f"{POOL}=gpu-a100")
        expect(note).to_have_text(POOL_CPUS)  # device cpu on a pool with GPUs
        page.screenshot(path=str(shots / "launch-pool-cpus.png"), full_page=True)
        page.check('input[name="kind"][value="sweep"]')  # a sweep's devices decide
        expect(page.locator("#evaluation-device")).to_be_hidden()
        expect(note).to_be_visible()
        page.check('input[name="devices"][value="gpu"]')
        expect(note).to_be_hidden()
        page.check('input[name="kind"][value="evaluation"]')
        expect(note).to_be_visible()
        expect(page.locator("#gpu-count")).to_be_hidden()
        page.select_option('select[name="device"]', "gpu")
        expect(note).to_be_hidden()
        page.fill('input[name="gpus"]', "2")
        page.get_by_role("button", name="Preview").click()
        preview = page.locator("#preview-yaml")
        expect(preview).to_contain_text("device: gpu")
        expect(preview).to_contain_text("gpus: 2")
        expect(preview).to_contain_text(f"nodeSelector: {{{POOL}: gpu-a100}}")
        expect(preview).to_contain_text("- {key: dedicated, operator: Exists, effect: NoExecute}")
        expect(errors).to_be_empty()
        page.screenshot(path=str(shots / "launch-hardware.png"), full_page=True)

        page.get_by_role("button", name="Launch").click()
        page.wait_for_url(f"{base}/launches/*")
        [created] = api.of("modelevaluations", NS)
        assert created["spec"]["hardware"] == {"device": "gpu", "gpus": 2, **HARDWARE}
    assert not problems, problems


def test_choose_a_gpu_on_a_local_server(sqlite_url: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    settings = ServeSettings(
        store_url=sqlite_url,
        read_token=READ_TOKEN,
        write_token=WRITE_TOKEN,
        catalog=(str(CATALOG),),
    )
    problems: list[str] = []
    with opened_page(create_app(settings), problems, f"/launch?token={READ_TOKEN}") as (
        _,
        page,
    ):
        page.select_option('select[name="model"]', "digits-cnn")
        page.fill('input[name="token"]', WRITE_TOKEN)
        count = page.locator('input[name="gpus"]')
        expect(count).to_be_hidden()
        page.select_option('select[name="device"]', "gpu")
        count.fill("65")  # refused by the spec, under the GPU count
        page.get_by_role("button", name="Preview").click()
        expect(page.locator('[data-errors-for="hardware.gpus"]')).to_contain_text(
            "hardware.gpus: spec.hardware.gpus: Input should be less than or equal to 64"
        )
        count.fill("2")
        page.get_by_role("button", name="Preview").click()
        preview = page.locator("#preview-yaml")
        expect(preview).to_contain_text("hardware: {device: gpu, gpus: 2}")
        expect(page.locator('[data-errors-for="hardware.gpus"]')).to_be_empty()
        page.select_option('select[name="device"]', "cpu")  # the spec's default: not written
        expect(count).to_be_hidden()
        page.get_by_role("button", name="Preview").click()
        expect(preview).not_to_contain_text("hardware")
    assert not problems, problems
