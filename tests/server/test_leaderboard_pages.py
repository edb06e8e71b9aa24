"""The dashboard's leaderboard and model history pages, in-process (TestClient), over real
result documents: the digits CNN run by the agent in ONNX Runtime, PyTorch and TensorFlow (as
runs whose latencies differ by known factors, :func:`dashboard_fixtures.timed`), a failed run,
and the task examples (segmentation in two frameworks, text classification). Every expected
number is read from the documents."""

from __future__ import annotations

import copy
import html
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from dashboard_fixtures import FAILED, evaluation_name, real_documents, record, timed
from fastapi.testclient import TestClient

from mlmodelscope.server.app import ServeSettings, create_app
from mlmodelscope.server.dashboard import COOKIE, CSP
from mlmodelscope.server.pages.render import history_url

pytestmark = pytest.mark.frameworks

HOSTILE = '<script>alert("x")</script>&'
SEG, SEG_TORCH, TEXT = (
    "segmentation-onnxruntime",
    "segmentation-pytorch",
    "text-classification-onnxruntime",
)
FACTORS = {"onnxruntime": 3.0, "pytorch": 1.0, "tensorflow": 2.0}
"""Each framework's digits run has the same raw latencies times this: p50 ranks PyTorch,
TensorFlow, ONNX Runtime."""
TINY = "digits-tiny"
"""A second model: the ONNX Runtime run renamed, twice as fast as the fastest digits run."""


@pytest.fixture
def board_documents(
    tmp_path_factory: pytest.TempPathFactory, task_documents: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """{name: document}: the digits runs (timed), the tiny model's run, the failed run and the
    task runs."""
    digits = real_documents(tmp_path_factory)
    made = {
        name: timed(digits[evaluation_name(framework)], name, factor)
        for framework, factor in FACTORS.items()
        for name in [f"lb-{framework}"]
    }
    tiny = timed(digits[evaluation_name("onnxruntime")], "lb-tiny", 0.5, seed=1)
    tiny["model"]["name"] = TINY
    made["lb-tiny"] = tiny
    made[FAILED] = digits[FAILED]
    made.update(copy.deepcopy(task_documents))
    return made


@pytest.fixture
def board_store(store_url: str, board_documents: dict[str, dict[str, Any]]) -> str:
    """``store_url`` (SQLite, then PostgreSQL) with every document recorded."""
    record(store_url, list(board_documents.values()))
    return store_url


@pytest.fixture
def client(board_store: str) -> Iterator[TestClient]:
    with TestClient(create_app(ServeSettings(store_url=board_store))) as opened:
        yield opened


def sections(page: str) -> dict[str, list[str]]:
    """{task metric: the run ids of its leaderboard's rows, in order}."""
    found = {}
    for match in re.finditer(r'<section class="board" data-task="([^"]+)">(.*?)</section>', page):
        found[match.group(1)] = re.findall(r'<tr data-run-id="([^"]+)">', match.group(2))
    return found


def rows(page: str) -> list[str]:
    return re.findall(r'<tr data-run-id="([^"]+)">', page)


def cell(page: str, run_id: str, column: str) -> float:
    start = page.index(f'<tr data-run-id="{run_id}">')
    end = page.index("</tr>", start)
    found = re.search(rf'data-column="{column}" data-value="([^"]+)"', page[start:end])
    assert found, f"no {column} in the row of {run_id}"
    return float(found.group(1))


def model_of(document: dict[str, Any]) -> str:
    """The model name the store keeps: the document's, else its spec's (a run that failed
    before loading the model)."""
    return str((document.get("model") or document["spec"]["model"])["name"])


def primary(document: dict[str, Any]) -> float:
    task = document.get("task")
    return float(task["metrics"][task["primary"]] if task else document["accuracy"]["top1"])


def test_one_leaderboard_per_task_ranked_by_the_primary_metric(
    client: TestClient, board_documents: dict[str, dict[str, Any]]
) -> None:
    response = client.get("/leaderboard")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["content-security-policy"] == CSP
    boards = sections(response.text)
    assert list(boards) == ["accuracy", "miou", "top1"]
    ids = {name: d["run_id"] for name, d in board_documents.items()}
    assert boards["accuracy"] == [ids[TEXT]]
    segmentation = sorted(  # ties (both frameworks may agree exactly): by run id
        (SEG, SEG_TORCH), key=lambda n: (-primary(board_documents[n]), ids[n])
    )
    assert boards["miou"] == [ids[n] for n in segmentation]
    digits = [f"lb-{f}" for f in FACTORS] + ["lb-tiny"]
    assert sorted(boards["top1"]) == sorted(ids[n] for n in digits)  # the failed run: none
    shown = [cell(response.text, run_id, "metric_value") for run_id in boards["top1"]]
    assert shown == sorted(shown, reverse=True)
    for name in (*digits, SEG, SEG_TORCH, TEXT):
        assert cell(response.text, ids[name], "metric_value") == primary(board_documents[name])
    for task, found in boards.items():  # each table's JSON link: the API's same entries
        section = response.text[response.text.index(f'<section class="board" data-task="{task}"') :]
        link = re.search(r'<a href="([^"]+)">This table as JSON</a>', section)
        assert link
        api = client.get(html.unescape(link.group(1)))
        assert api.status_code == 200
        assert {e["run_id"] for e in api.json()["entries"]} == set(found)


@pytest.mark.parametrize(
    ("rank", "order"),
    [
        ("p50_ms", ["lb-tiny", "lb-pytorch", "lb-tensorflow", "lb-onnxruntime"]),
        ("p99_ms", ["lb-tiny", "lb-pytorch", "lb-tensorflow", "lb-onnxruntime"]),
        ("throughput", ["lb-tiny", "lb-pytorch", "lb-tensorflow", "lb-onnxruntime"]),
    ],
)
def test_latency_and_throughput_rank_across_models(
    client: TestClient, board_documents: dict[str, dict[str, Any]], rank: str, order: list[str]
) -> None:
    page = client.get("/leaderboard", params={"rank": rank, "metric_name": "top1"}).text
    assert list(sections(page)) == ["top1"]
    assert sections(page)["top1"] == [board_documents[n]["run_id"] for n in order]
    assert re.search(rf'<option value="{rank}" selected>', page)
    for name in order:
        first = board_documents[name]["results"][0]
        assert first["batch_size"] == 1
        assert cell(page, board_documents[name]["run_id"], "p50_ms") == (first["latency_ms"]["p50"])
        assert cell(page, board_documents[name]["run_id"], "throughput") == first["throughput"]
    eight = client.get("/leaderboard", params={"rank": rank, "batch_size": "8"}).text
    tiny = board_documents["lb-tiny"]
    assert cell(eight, tiny["run_id"], "p50_ms") == tiny["results"][1]["latency_ms"]["p50"]


def test_filters_narrow_every_task_and_keep_the_choice(
    client: TestClient, board_documents: dict[str, dict[str, Any]]
) -> None:
    page = client.get("/leaderboard", params={"framework": "pytorch"}).text
    ids = {name: d["run_id"] for name, d in board_documents.items()}
    assert sections(page) == {"accuracy": [], "miou": [ids[SEG_TORCH]], "top1": [ids["lb-pytorch"]]}
    assert "No run of this task matches these filters" in page
    assert '<option value="pytorch" selected>pytorch</option>' in page
    for option in ("onnxruntime", "tensorflow"):
        assert f'<option value="{option}">{option}</option>' in page
    device = board_documents["lb-pytorch"]["backend"]["device"]
    narrowed = client.get(
        "/leaderboard", params={"metric_name": "miou", "device": device, "gpu": ""}
    ).text
    assert {k: set(v) for k, v in sections(narrowed).items()} == {
        "miou": {ids[SEG], ids[SEG_TORCH]}
    }
    assert '<option value="miou" selected>miou</option>' in narrowed
    nothing = client.get("/leaderboard", params={"device": "tpu"}).text
    assert all(not found for found in sections(nothing).values())
    bad = client.get("/leaderboard", params={"rank": "top5"})
    assert bad.status_code == 400 and "rank" in bad.text
    assert client.get("/leaderboard", params={"batch_size": "x"}).status_code == 400


def test_rows_link_to_the_run_and_the_models_history(
    client: TestClient, board_documents: dict[str, dict[str, Any]]
) -> None:
    page = client.get("/leaderboard").text
    tiny = board_documents["lb-tiny"]
    start = page.index(f'<tr data-run-id="{tiny["run_id"]}">')
    row = page[start : page.index("</tr>", start)]
    assert f'href="/runs/{tiny["run_id"]}"' in row
    assert f'<a class="model" href="/models/{TINY}/history">{TINY}</a>' in row
    model = board_documents["lb-pytorch"]["model"]["name"]
    assert f'href="{history_url(model)}"' in page
    assert client.get(history_url(model)).status_code == 200


def test_history_lists_a_models_runs_oldest_first_with_plots(
    client: TestClient, board_documents: dict[str, dict[str, Any]]
) -> None:
    model = model_of(board_documents[FAILED])
    mine = [d for d in board_documents.values() if model_of(d) == model]
    assert len(mine) == 4  # three frameworks and the failed run
    response = client.get(history_url(model))
    assert response.status_code == 200
    assert response.headers["content-security-policy"] == CSP
    page = response.text
    oldest_first = sorted(mine, key=lambda d: (d["started_at"], d["run_id"]))
    assert rows(page) == [d["run_id"] for d in oldest_first]
    failed = board_documents[FAILED]["run_id"]
    assert 'class="status-Failed"' in page[page.index(f'<tr data-run-id="{failed}">') :]
    for document in mine:
        if document["status"] != "Succeeded":
            continue
        smallest = document["results"][0]
        assert cell(page, document["run_id"], "p50_ms") == smallest["latency_ms"]["p50"]
        assert cell(page, document["run_id"], "metric_value") == primary(document)
        assert f'href="/runs/{document["run_id"]}"' in page
    for plot in ("history-metric", "history-latency"):
        svg = page[page.index(f'id="{plot}"') : page.index("</svg>", page.index(f'id="{plot}"'))]
        assert svg.count("<path ") == 3  # one line per framework and device
        assert svg.count("<circle ") == 3
    assert "top1 (%)" in page and "p50 latency (ms)" in page
    eight = client.get(history_url(model), params={"batch_size": "8", "framework": "pytorch"})
    torch = board_documents["lb-pytorch"]
    assert rows(eight.text) == [torch["run_id"]]
    assert cell(eight.text, torch["run_id"], "p50_ms") == torch["results"][1]["latency_ms"]["p50"]
    assert '<option value="pytorch" selected>pytorch</option>' in eight.text
    none = client.get(history_url(model), params={"status": "Running"})
    assert none.status_code == 200 and "No run of this model matches these filters" in none.text


def test_unknown_model_is_a_404_page_naming_it(client: TestClient) -> None:
    name = '<b id="x">&/no-such'
    response = client.get(history_url(name))
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["content-security-policy"] == CSP
    assert "<b id" not in response.text
    assert "No recorded run of model &#x27;&lt;b id=&quot;x&quot;&gt;&amp;/no-such&#x27;" in (
        response.text
    )


def test_nav_and_runs_pages_link_to_both(
    client: TestClient, board_documents: dict[str, dict[str, Any]]
) -> None:
    torch = board_documents["lb-pytorch"]
    model = torch["model"]["name"]
    pages = [client.get(p).text for p in ("/", f"/runs/{torch['run_id']}", "/launches")]
    pages.append(client.get(history_url(model)).text)
    for page in pages:
        header = page[page.index("<header>") : page.index("</header>")]
        assert '<a href="/leaderboard">leaderboard</a>' in header
    runs, run = pages[0], pages[1]
    start = runs.index(f'<tr data-run-id="{torch["run_id"]}">')
    assert f'<a class="model" href="/models/{model}/history">{model}</a>' in runs[start:]
    assert f'<a href="/models/{model}/history">History of model {model}</a>' in run


def test_pages_escape_a_hostile_model_name(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    documents = real_documents(tmp_path_factory)
    hostile = documents[evaluation_name("onnxruntime")]
    hostile["run_id"] = str(uuid.uuid4())
    hostile["model"]["name"] = HOSTILE
    hostile["evaluation"]["name"] = HOSTILE
    url = f"sqlite:///{tmp_path / 'hostile.db'}"
    record(url, [hostile, documents[evaluation_name("pytorch")]])
    with TestClient(create_app(ServeSettings(store_url=url))) as c:
        board = c.get("/leaderboard")
        history = c.get(history_url(HOSTILE))
        filtered = c.get("/leaderboard?framework=" + quote(HOSTILE, safe=""))
    assert history.status_code == 200
    for page in (board.text, history.text, filtered.text):
        assert "<script>" not in page
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in page
    assert f'href="/models/{quote(HOSTILE, safe="")}/history"'.replace("&", "&amp;") in board.text
    assert rows(history.text) == [hostile["run_id"]]


def test_read_token_from_header_query_or_cookie(board_store: str) -> None:
    settings = ServeSettings(store_url=board_store, read_token="r3ad", write_token="wr1te")
    with TestClient(create_app(settings)) as c:
        for path in ("/leaderboard", history_url("digits-cnn"), history_url("unknown")):
            denied = c.get(path)
            assert denied.status_code == 401
            assert 'action="/login"' in denied.text
            assert denied.headers["content-security-policy"] == CSP
        assert c.get("/leaderboard", headers={"Authorization": "Bearer r3ad"}).status_code == 200
        assert c.get("/leaderboard?token=wrong").status_code == 401
        kept = c.get("/leaderboard?token=r3ad")
        assert kept.status_code == 200 and kept.cookies.get(COOKIE) == "r3ad"
        assert c.get(history_url("unknown")).status_code == 404  # the cookie reads
