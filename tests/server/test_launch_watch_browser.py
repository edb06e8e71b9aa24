"""A cluster launch's page in real headless Chromium, JavaScript on, against the shared fake
API server: its Events and agent log are shown, grow in place while it runs (no reload), a
hostile message stays text, and when it succeeds the state and the trace link appear. Any CSP
violation or script error fails the test."""

from __future__ import annotations

from typing import Any, Final

import httpx
import pytest
from browser import opened_page, screenshot_dir
from launch_fixtures import CATALOG, DIGITS, NS, WRITE, set_phase
from serve_fixtures import READ_TOKEN, WRITE_TOKEN

from fakes import FakeApiServer, FakeKube
from mlmodelscope.contract.kube import JOB_NAME_LABEL, job_path, pod_path
from mlmodelscope.server.app import ServeSettings, create_app

pytestmark = [pytest.mark.slow]

JOB: Final = "digits-cnn-onnxruntime-1a2b3c4d"
POD: Final = f"{JOB}-xyz12"
TRACE: Final = "4bf92f3577b34da6a3ce929d0e0e4736"
JAEGER: Final = "http://jaeger.example.com:16686"
EVENTS: Final = f"/api/v1/namespaces/{NS}/events"


def _event(name: str, kind: str, obj: str, when: str, message: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "involvedObject": {"kind": kind, "name": obj, "namespace": NS},
        "type": "Normal",
        "reason": name.split(".")[-1],
        "message": message,
        "lastTimestamp": when,
    }


def test_a_cluster_launch_page_shows_its_events_and_log_growing_in_place(
    sqlite_url: str, tmp_path: Any
) -> None:
    from playwright.sync_api import expect

    api = FakeApiServer()
    api.add_namespace(NS)
    settings = ServeSettings(
        store_url=sqlite_url,
        read_token=READ_TOKEN,
        write_token=WRITE_TOKEN,
        catalog=(str(CATALOG),),
        launch_namespace=NS,
        jaeger_url=JAEGER,
    )
    shots = screenshot_dir(tmp_path)
    problems: list[str] = []
    with opened_page(create_app(settings, kube=FakeKube(api)), problems) as (base, page):
        answer = httpx.post(f"{base}/api/v1/launches", json=DIGITS, headers=WRITE, timeout=30)
        assert answer.status_code == 202, answer.text
        [item] = answer.json()["launches"]
        set_phase(api, item["evaluation"], phase="Running", jobName=JOB)
        api.seed(job_path(NS), {"metadata": {"name": JOB}, "spec": {}})
        pod = {"metadata": {"name": POD, "labels": {JOB_NAME_LABEL: JOB}},
               "spec": {"containers": [{"name": "agent"}]}}  # fmt: skip
        api.seed(pod_path(NS), pod)
        api.seed(EVENTS, _event("a.SuccessfulCreate", "Job", JOB, "2024-05-01T10:00:00Z",
                                f"Created pod: {POD}"))  # fmt: skip
        api.seed(EVENTS, _event("b.Started", "Pod", POD, "2024-05-01T10:00:05Z",
                                "<img src=x onerror=alert(1)>"))  # fmt: skip
        api.logs[(NS, POD, "agent")] = "loading the model\n"

        page.goto(f"{base}/launches/{item['launch_id']}?token={READ_TOKEN}")
        events = page.locator("#launch-events tbody")
        expect(events).to_contain_text(f"Created pod: {POD}")
        expect(events).to_contain_text("<img src=x onerror=alert(1)>")  # as text
        expect(page.locator("#launch-log")).to_have_text("loading the model")
        expect(page.locator(".state")).to_have_text("running")

        api.seed(EVENTS, _event("c.Progress", "Pod", POD, "2024-05-01T10:00:09Z", "batch 8"))
        api.logs[(NS, POD, "agent")] += "batch 1 done\nbatch 8 done\n"
        expect(events.locator("tr")).to_have_count(3, timeout=15_000)
        expect(events.locator("tr").last).to_contain_text("batch 8")
        expect(page.locator("#launch-log")).to_contain_text("batch 8 done", timeout=15_000)

        set_phase(api, item["evaluation"], phase="Succeeded", traceID=TRACE,
                  runId="6f1c2a4e-1d2b-4c3a-9e8f-0a1b2c3d4e5f")  # fmt: skip
        expect(page.locator(".state")).to_have_text("succeeded", timeout=15_000)
        link = page.locator("td.trace a")
        expect(link).to_have_attribute("href", f"{JAEGER}/trace/{TRACE}", timeout=15_000)
        expect(page.locator("#cancel-form")).to_be_hidden()
        assert page.locator("#launch-events img").count() == 0
        page.screenshot(path=str(shots / "launch-watch.png"), full_page=True)
    assert not problems, problems
