"""`mlms serve` over real task documents (examples/tasks: segmentation in ONNX Runtime and
PyTorch, text classification), on SQLite and a real PostgreSQL: the API and the dashboard name
each run's primary metric, the leaderboard ranks by it, and a comparison of an mIoU with an
accuracy says they are not comparable."""

from __future__ import annotations

import copy
import csv
import io
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mlmodelscope.server.app import ServeSettings, create_app
from mlmodelscope.store import open_store

pytestmark = pytest.mark.frameworks

SEG, SEG_TORCH, TEXT = (
    "segmentation-onnxruntime",
    "segmentation-pytorch",
    "text-classification-onnxruntime",
)


@pytest.fixture
def tasks(task_documents: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return copy.deepcopy(task_documents)


@pytest.fixture
def client(store_url: str, tasks: dict[str, dict[str, Any]]) -> Iterator[TestClient]:
    with open_store(store_url) as store:
        for document in tasks.values():
            assert store.record(document)
        with TestClient(create_app(ServeSettings(), store)) as opened:
            yield opened


def primary(document: dict[str, Any]) -> tuple[str, float]:
    return document["task"]["primary"], document["task"]["metrics"][document["task"]["primary"]]


def test_api_lists_filters_and_ranks_by_the_primary_metric(
    client: TestClient, tasks: dict[str, dict[str, Any]]
) -> None:
    items = {i["run_id"]: i for i in client.get("/api/v1/runs").json()["items"]}
    for document in tasks.values():
        item = items[document["run_id"]]
        assert (item["metric"], item["metric_value"]) == primary(document)
        assert {(r["metric"], r["metric_value"]) for r in item["results"]} == {primary(document)}
    miou = client.get("/api/v1/runs", params={"metric_name": "miou"}).json()
    assert {i["run_id"] for i in miou["items"]} == {
        tasks[SEG]["run_id"],
        tasks[SEG_TORCH]["run_id"],
    }
    board = client.get(
        "/api/v1/leaderboard", params={"metric": "metric_value", "metric_name": "miou"}
    ).json()
    assert board["metric"] == "metric_value"
    assert sorted((e["framework"], e["metric"], e["value"]) for e in board["entries"]) == [
        ("onnxruntime", "miou", primary(tasks[SEG])[1]),
        ("pytorch", "miou", primary(tasks[SEG_TORCH])[1]),
    ]
    refused = client.get("/api/v1/leaderboard", params={"metric": "metric_value"})
    assert refused.status_code == 422
    assert "metric_name" in refused.text
    rows = list(csv.DictReader(io.StringIO(client.get("/api/v1/runs.csv").text)))
    assert {(r["metric"], float(r["metric_value"])) for r in rows} == {
        primary(d) for d in tasks.values()
    }


def cell(page: str, row: str, column: str) -> tuple[float, str]:
    """(exact value, text shown) of ``column`` in the first row starting with ``row``."""
    start = page.index(row)
    found = re.search(rf'data-column="{column}" data-value="([^"]+)">([^<]*)<', page[start:])
    assert found, f"no {column} in row {row}"
    return float(found.group(1)), found.group(2)


def test_run_list_and_run_page_name_the_metric(
    client: TestClient, tasks: dict[str, dict[str, Any]]
) -> None:
    listing = client.get("/").text
    assert "<th>top-1</th>" not in listing and ">metric</th>" in listing
    for document in tasks.values():
        name, value = primary(document)
        row = f'<tr data-run-id="{document["run_id"]}">'
        assert cell(listing, row, "metric_value") == (value, f"{name} {value:.2%}")
    page = client.get(f"/runs/{tasks[SEG]['run_id']}").text
    name, value = primary(tasks[SEG])
    for result in tasks[SEG]["results"]:
        row = f'<tr data-batch="{result["batch_size"]}">'
        assert cell(page, row, "metric_value") == (value, f"miou {value:.2%}")
    assert "<h2>Task</h2>" in page and "segmentation" in page
    assert f"<th>primary</th><td>miou {value:.2%}</td>" in page
    assert "<th>pixel_accuracy</th>" in page
    assert "<th>top-1</th>" not in page


def test_compare_page_refuses_to_compare_miou_with_accuracy(
    client: TestClient, tasks: dict[str, dict[str, Any]]
) -> None:
    runs = "&".join(f"run={tasks[n]['run_id']}" for n in (SEG, SEG_TORCH, TEXT))
    page = client.get(f"/compare?{runs}").text
    torch = f'<tr data-run="{SEG_TORCH}" data-scenario="SingleStream" data-batch="1">'
    value = primary(tasks[SEG_TORCH])[1]
    assert cell(page, torch, "metric_value") == (value, f"miou {value:.2%}")
    rel, _ = cell(page, torch, "metric_rel")
    assert rel == pytest.approx(value / primary(tasks[SEG])[1] - 1)
    text = page[page.index(f'<tr data-run="{TEXT}" data-scenario="SingleStream"') :]
    assert text.index("not comparable: accuracy vs miou") < text.index("</tr>")
    api = client.get(
        "/api/v1/compare", params={"run": [tasks[SEG]["run_id"], tasks[TEXT]["run_id"]]}
    ).json()
    assert {r["metric_note"] for r in api["rows"] if r["run"] == TEXT} == {
        "not comparable: accuracy vs miou"
    }
