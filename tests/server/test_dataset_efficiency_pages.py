"""The dashboard's dataset and efficiency views, in-process (TestClient), on SQLite and
PostgreSQL, over real result documents: the digits CNN run by the agent in ONNX Runtime,
PyTorch and TensorFlow on the whole digits test split (latencies made to differ by known
factors, :func:`dashboard_fixtures.timed`), ONNX Runtime on its first 100 samples, a Failed
run, and the segmentation example. The PyTorch and TensorFlow runs are given a RAPL energy
counter and a price per node-hour by the agent's own functions
(:func:`mlmodelscope.devtools.documents.metered`); the others measured neither, as on this
machine. Every expected number is read from the documents."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from dashboard_fixtures import (
    FAILED,
    FIRST_100_DATASET,
    WHOLE_DATASET,
    evaluation_name,
    limited_document,
    real_documents,
    record,
    timed,
)
from fastapi.testclient import TestClient

from mlmodelscope.devtools.documents import metered
from mlmodelscope.server.app import ServeSettings, create_app
from mlmodelscope.server.pages.render import history_url, significant

pytestmark = pytest.mark.frameworks

SEG = "segmentation-onnxruntime"
JOULES = {"ds-pytorch": 0.003, "ds-tensorflow": 0.001}
"""J per inference the RAPL counter read at batch size 1; and the price per node-hour:"""
PRICES = {"ds-pytorch": 3.0, "ds-tensorflow": 6.0}
FACTORS = {"onnxruntime": 3.0, "pytorch": 1.0, "tensorflow": 2.0}


@pytest.fixture
def docs(
    tmp_path_factory: pytest.TempPathFactory, task_documents: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    digits = real_documents(tmp_path_factory)
    made = {}
    for framework, factor in FACTORS.items():
        name = f"ds-{framework}"
        made[name] = timed(digits[evaluation_name(framework)], name, factor)
        if name in JOULES:
            made[name] = metered(made[name], {1: JOULES[name]}, PRICES[name])
    made["first-100"] = limited_document(tmp_path_factory)
    made[FAILED] = digits[FAILED]
    made[SEG] = task_documents[SEG]
    return made


@pytest.fixture
def client(store_url: str, docs: dict[str, dict[str, Any]]) -> Iterator[TestClient]:
    record(store_url, list(docs.values()))
    with TestClient(create_app(ServeSettings(store_url=store_url))) as opened:
        yield opened


def tables(page: str) -> dict[tuple[str, str], list[str]]:
    """{(task, dataset): the run ids of that leaderboard table's rows, in order}."""
    found = {}
    pattern = r'<table class="listing leaderboard" data-task="([^"]+)" data-dataset="([^"]*)">'
    for match in re.finditer(pattern + r"(.*?)</table>", page):
        key = (html.unescape(match.group(1)), html.unescape(match.group(2)))
        found[key] = re.findall(r'<tr data-run-id="([^"]+)">', match.group(3))
    return found


def row_of(page: str, run_id: str) -> str:
    start = page.index(f'<tr data-run-id="{run_id}">')
    return page[start : page.index("</tr>", start)]


def identity(document: dict[str, Any]) -> str:
    """The document's dataset as the store names it: ``digits/test (360 samples)``."""
    return "{name} ({samples} samples)".format(**document["dataset"])


def first_row(document: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = document["results"][0]
    assert row["batch_size"] == 1
    return row


def test_each_dataset_ranks_in_its_own_table(
    client: TestClient, docs: dict[str, dict[str, Any]]
) -> None:
    ids = {name: d["run_id"] for name, d in docs.items()}
    page = client.get("/leaderboard").text
    assert list(tables(page)) == [
        ("miou", f"{docs[SEG]['dataset']['name']} ({docs[SEG]['dataset']['samples']} samples)"),
        ("top1", FIRST_100_DATASET),
        ("top1", WHOLE_DATASET),
    ]
    assert tables(page)[("top1", FIRST_100_DATASET)] == [ids["first-100"]]
    assert sorted(tables(page)[("top1", WHOLE_DATASET)]) == sorted(ids[f"ds-{f}"] for f in FACTORS)
    assert "on the same dataset rank against each other" in page
    assert f"<h3>Dataset {html.escape(FIRST_100_DATASET)}</h3>" in page
    for dataset in (FIRST_100_DATASET, WHOLE_DATASET):
        assert f'<option value="{html.escape(dataset)}">' in page

    p50 = client.get("/leaderboard", params={"rank": "p50_ms"}).text
    assert tables(p50)[("top1", WHOLE_DATASET)] == [
        ids["ds-pytorch"],
        ids["ds-tensorflow"],
        ids["ds-onnxruntime"],
    ]  # the run on 100 samples is ranked in its own table only

    one = client.get("/leaderboard", params={"dataset": FIRST_100_DATASET}).text
    assert tables(one) == {("top1", FIRST_100_DATASET): [ids["first-100"]]}
    assert 'data-task="miou"' not in one  # a task with no run on this dataset: none
    assert f'<option value="{html.escape(FIRST_100_DATASET)}" selected>' in one
    link = re.search(r'<a href="([^"]+)">This table as JSON</a>', one)
    assert link is not None
    api = client.get(html.unescape(link.group(1))).json()
    assert api["dataset"] == FIRST_100_DATASET
    assert [e["run_id"] for e in api["entries"]] == [ids["first-100"]]


def test_energy_and_cost_rank_and_are_blank_when_not_measured(
    client: TestClient, docs: dict[str, dict[str, Any]]
) -> None:
    ids = {name: d["run_id"] for name, d in docs.items()}
    page = client.get("/leaderboard").text
    head = page[page.index("<thead>") : page.index("</thead>")]
    for name, rank in (
        ("energy mJ/inference", "joules_per_inference"),
        ("cost USD/1k inferences", "cost_per_1000"),
    ):
        assert (
            f'<a class="rank" href="/leaderboard?rank={rank}&amp;batch_size=1">{name}</a>' in head
        )
    for name, document in docs.items():
        if not name.startswith("ds-"):
            continue
        row = row_of(page, document["run_id"])
        measured = first_row(document)
        if name in JOULES:
            joules, cost = measured["joules_per_inference"], measured["cost_per_1000"]
            assert joules == pytest.approx(JOULES[name]) and cost is not None
            assert (
                f'data-column="joules_per_inference" data-value="{joules!r}" title="rapl counter">'
                f"{significant(joules * 1e3)}</td>"
            ) in row
            assert (
                f'data-column="cost_per_1000" data-value="{cost!r}">{significant(cost)}</td>' in row
            )
        else:  # blank, not "not measured" nor 0
            assert '<td class="num none" data-column="joules_per_inference"></td>' in row
            assert '<td class="num none" data-column="cost_per_1000"></td>' in row

    for rank, key in (
        ("joules_per_inference", "joules_per_inference"),
        ("cost_per_1000", "cost_per_1000"),
    ):
        ranked = client.get("/leaderboard", params={"rank": rank, "metric_name": "top1"}).text
        metered_runs = sorted(JOULES, key=lambda n: first_row(docs[n])[key])
        assert tables(ranked) == {("top1", WHOLE_DATASET): [ids[n] for n in metered_runs]}
        assert re.search(
            rf'<th class="ranked" title="[^"]*"><a class="rank" href="[^"]*rank={rank}', ranked
        )
        assert f'<option value="{rank}" selected>' in ranked

    none = client.get(
        "/leaderboard", params={"rank": "joules_per_inference", "framework": "onnxruntime"}
    ).text
    assert tables(none) == {}
    assert (
        "No run of this task matches these filters at this batch size and measured its energy "
        "per inference." in none
    )
    kept = client.get("/leaderboard", params={"framework": "pytorch", "rank": "p50_ms"}).text
    assert 'href="/leaderboard?framework=pytorch&amp;rank=cost_per_1000&amp;batch_size=1"' in kept


def test_history_and_runs_pages_show_and_filter_the_dataset(
    client: TestClient, docs: dict[str, dict[str, Any]]
) -> None:
    """Both pages have a dataset column (``-`` for the Failed run, which never loaded it) and
    a dataset filter."""
    ids = {name: d["run_id"] for name, d in docs.items()}
    model = docs["ds-pytorch"]["model"]["name"]
    page = client.get(history_url(model)).text
    assert "<th>dataset</th>" in page
    for name in ("ds-pytorch", "first-100", FAILED):
        dataset = FIRST_100_DATASET if name == "first-100" else WHOLE_DATASET
        shown = "-" if name == FAILED else html.escape(dataset)
        assert f'<td class="wrap dataset">{shown}</td>' in row_of(page, ids[name])
    latency = page[page.index('id="history-latency"') :]
    latency = latency[: latency.index("</svg>")]
    assert latency.count("<path ") == 4  # per framework, and per dataset: they differ
    assert html.escape(FIRST_100_DATASET) in latency
    narrowed = client.get(history_url(model), params={"dataset": FIRST_100_DATASET}).text
    assert re.findall(r'<tr data-run-id="([^"]+)">', narrowed) == [ids["first-100"]]
    assert f'<option value="{html.escape(FIRST_100_DATASET)}" selected>' in narrowed

    every = client.get("/").text
    head = every[every.index("<thead>") : every.index("</thead>")]
    assert re.findall(r"<th[^>]*>([^<]*)</th>", head)[3:6] == ["model", "dataset", "framework"]
    for name, document in docs.items():
        shown = "-" if name == FAILED else html.escape(identity(document))
        assert f'<td class="wrap dataset">{shown}</td>' in row_of(every, ids[name])
    runs = client.get("/?dataset=" + quote(FIRST_100_DATASET)).text
    assert re.findall(r'<tr data-run-id="([^"]+)">', runs) == [ids["first-100"]]
    assert f'<td class="wrap dataset">{html.escape(FIRST_100_DATASET)}</td>' in runs
    assert f'<option value="{html.escape(WHOLE_DATASET)}">' in runs


def test_run_page_shows_efficiency_per_batch_size_and_where_it_came_from(
    client: TestClient, docs: dict[str, dict[str, Any]]
) -> None:
    document = docs["ds-tensorflow"]
    page = client.get(f"/runs/{document['run_id']}").text
    assert "<th>energy mJ/inference</th><th>cost USD/1k inferences</th>" in page
    for result in document["results"]:
        row = page[page.index(f'<tr data-batch="{result["batch_size"]}">') :]
        row = row[: row.index("</tr>")]
        joules, cost = result["joules_per_inference"], result["cost_per_1000"]
        if joules is None:  # batch size 8 was given no counter reading
            assert '<td class="num none" data-column="joules_per_inference"></td>' in row
        else:
            assert f'data-value="{joules!r}" title="rapl counter">' in row
        assert f'data-column="cost_per_1000" data-value="{cost!r}">{significant(cost)}</td>' in row
    assert f'<th>dataset</th><td class="">{WHOLE_DATASET}</td>' in page
    assert '<th>price</th><td class="">6 USD per node-hour (tests)</td>' in page

    plain = docs["ds-onnxruntime"]
    page = client.get(f"/runs/{plain['run_id']}").text
    reason = html.escape(plain["cost"]["reason"])
    assert f'<th>price</th><td class="">{reason}</td>' in page
    reasons = {m["energy"]["reason"] for m in plain["measurements"] if m["energy"]["reason"]}
    for reason in reasons:  # what this machine's agent wrote (none where RAPL is readable)
        assert html.escape(reason) in page
    assert '<td class="num none" data-column="cost_per_1000"></td>' in page
