"""The dashboard's pages, in-process (TestClient), over real result documents: the digits CNN
evaluated by the agent in ONNX Runtime, PyTorch and TensorFlow, and a run that failed. Every
expected number is read from the documents."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from dashboard_fixtures import FAILED, FRAMEWORKS, evaluation_name, real_documents, record
from fastapi.testclient import TestClient

from mlmodelscope.server.app import ServeSettings, create_app
from mlmodelscope.server.dashboard import COOKIE

pytestmark = pytest.mark.frameworks

JAEGER = "http://jaeger.example:16686"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
HOSTILE = '<script>alert("x")</script>&'


@pytest.fixture
def documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return real_documents(tmp_path_factory)


@pytest.fixture
def dashboard_store(tmp_path: Path, documents: dict[str, dict[str, Any]]) -> str:
    """A SQLite store with every document recorded."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    record(url, list(documents.values()))
    return url


@pytest.fixture
def client(dashboard_store: str) -> Iterator[TestClient]:
    with TestClient(create_app(ServeSettings(store_url=dashboard_store))) as opened:
        yield opened


def listed(page: str) -> list[str]:
    """The run ids of the runs table's rows, in order."""
    return re.findall(r'<tr data-run-id="([^"]+)">', page)


def run_id(documents: dict[str, dict[str, Any]], name: str) -> str:
    return str(documents[name]["run_id"])


def cell(page: str, row: str, column: str) -> float:
    """The exact number in ``column`` of the first table row that starts with ``row``."""
    start = page.index(row)
    found = re.search(rf'data-column="{column}" data-value="([^"]+)"', page[start:])
    assert found, f"no {column} in row {row}"
    return float(found.group(1))


def test_runs_table_lists_every_run_newest_first(
    client: TestClient, documents: dict[str, dict[str, Any]]
) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    newest_first = sorted(documents.values(), key=lambda d: d["started_at"], reverse=True)
    assert listed(response.text) == [d["run_id"] for d in newest_first]
    torch = documents[evaluation_name("pytorch")]
    row = f'<tr data-run-id="{torch["run_id"]}">'
    first = torch["results"][0]
    assert cell(response.text, row, "p50_ms") == first["latency_ms"]["p50"]
    assert cell(response.text, row, "p99_ms") == first["latency_ms"]["p99"]
    assert cell(response.text, row, "throughput") == first["throughput"]
    assert cell(response.text, row, "metric_value") == torch["accuracy"]["top1"]
    assert f'href="/runs/{torch["run_id"]}"' in response.text
    assert 'form method="get" action="/compare"' in response.text


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("framework=pytorch", [evaluation_name("pytorch")]),
        ("framework=tensorflow&status=Succeeded", [evaluation_name("tensorflow")]),
        ("status=Failed", [FAILED]),
        ("evaluation=digits-onnxruntime", [evaluation_name("onnxruntime")]),
        ("framework=onnxruntime", [FAILED, evaluation_name("onnxruntime")]),
        ("device=cpu&framework=", [evaluation_name(f) for f in reversed(FRAMEWORKS)]),
        ("model=digits-cnn&gpu=", [FAILED, *(evaluation_name(f) for f in reversed(FRAMEWORKS))]),
        ("gpu=NVIDIA+H100+80GB+HBM3", []),
    ],
)
def test_filters_narrow_the_table(
    client: TestClient, documents: dict[str, dict[str, Any]], query: str, expected: list[str]
) -> None:
    page = client.get(f"/?{query}").text
    assert listed(page) == [run_id(documents, name) for name in expected]
    if not expected:
        assert "No runs match these filters." in page


def test_filter_menus_offer_the_recorded_values_and_keep_the_choice(client: TestClient) -> None:
    page = client.get("/?framework=pytorch").text
    for framework in FRAMEWORKS:
        assert f'<option value="{framework}"' in page
    assert '<option value="pytorch" selected>' in page
    assert '<option value="Failed">' in page


def test_compare_page_shows_each_run_with_the_documents_numbers(
    client: TestClient, documents: dict[str, dict[str, Any]]
) -> None:
    names = [evaluation_name(f) for f in FRAMEWORKS]
    query = "&".join(f"run={run_id(documents, n)}" for n in names)
    response = client.get(f"/compare?{query}")
    assert response.status_code == 200
    page = response.text
    for name in names:
        assert f'href="/runs/{run_id(documents, name)}"' in page
        for result in documents[name]["results"]:
            row = f'<tr data-run="{name}" data-scenario="SingleStream" '
            row += f'data-batch="{result["batch_size"]}">'
            assert cell(page, row, "p50_ms") == result["latency_ms"]["p50"]
            assert cell(page, row, "p99_ms") == result["latency_ms"]["p99"]
            assert cell(page, row, "throughput") == result["throughput"]
            assert cell(page, row, "metric_value") == result["top1"]
    for plot in ("cdf", "throughput", "accuracy"):
        assert f'<svg class="chart" id="{plot}"' in page
    assert page.count('<path class="cdf"') == 3
    assert "<b>digits-onnxruntime</b>" in page  # the reference
    assert "stack.backend.framework_version" in page
    assert "spec.framework.name" in page
    # the frameworks' numerical agreement, from the predictions the real runs recorded
    assert "<h2>Numerical agreement</h2>" in page and '<table class="agreement">' in page
    assert "Not shown" not in page.split("<h2>Numerical agreement</h2>")[1].split("<h2>")[0]
    # the reference's own rows have no deltas; the others do
    torch = documents[evaluation_name("pytorch")]["results"][0]
    ort = documents[evaluation_name("onnxruntime")]["results"][0]
    row = '<tr data-run="digits-pytorch" data-scenario="SingleStream" data-batch="1">'
    expected = torch["latency_ms"]["p50"] / ort["latency_ms"]["p50"] - 1
    assert cell(page, row, "p50_rel") == pytest.approx(expected)


def test_compare_needs_two_runs_and_names_an_unknown_one(
    client: TestClient, documents: dict[str, dict[str, Any]]
) -> None:
    one = run_id(documents, evaluation_name("pytorch"))
    for query in ("", f"?run={one}", f"?run={one}&run={one}"):
        response = client.get(f"/compare{query}")
        assert response.status_code == 400
        assert "at least two different runs" in response.text
        assert response.headers["content-type"].startswith("text/html")
    unknown = str(uuid.uuid4())
    response = client.get(f"/compare?run={one}&run={unknown}")
    assert response.status_code == 404
    assert unknown in response.text
    response = client.get("/compare?run=not-a-run&run=" + one)
    assert response.status_code == 404
    assert "not-a-run" in response.text


def test_run_page_shows_numbers_stack_spec_and_links(
    client: TestClient, documents: dict[str, dict[str, Any]]
) -> None:
    document = documents[evaluation_name("tensorflow")]
    response = client.get(f"/runs/{document['run_id']}")
    assert response.status_code == 200
    page = response.text
    for result in document["results"]:
        row = f'<tr data-batch="{result["batch_size"]}">'
        assert cell(page, row, "p50_ms") == result["latency_ms"]["p50"]
        assert cell(page, row, "p90_ms") == result["latency_ms"]["p90"]
        assert cell(page, row, "throughput") == result["throughput"]
    stack = document["stack"]
    assert "<code>cpu.model</code>" in page and stack["cpu"]["model"] in page
    assert stack["backend"]["framework_version"] in page
    assert "name: tensorflow" in page and "batchSizes: [1, 8]" in page  # the spec, as YAML
    assert f'href="/api/v1/runs/{document["run_id"]}"' in page
    assert "No trace link: this run has no trace id" in page
    assert '<svg class="chart" id="cdf"' in page


def test_run_page_links_the_trace_in_jaeger(
    tmp_path: Path, documents: dict[str, dict[str, Any]]
) -> None:
    traced = {**documents[evaluation_name("onnxruntime")], "trace_id": TRACE_ID}
    traced["run_id"] = str(uuid.uuid4())
    url = f"sqlite:///{tmp_path / 'traced.db'}"
    record(url, [traced])
    with TestClient(create_app(ServeSettings(store_url=url, jaeger_url=JAEGER + "/"))) as c:
        page = c.get(f"/runs/{traced['run_id']}").text
        assert f'href="{JAEGER}/trace/{TRACE_ID}"' in page
    with TestClient(create_app(ServeSettings(store_url=url))) as c:
        page = c.get(f"/runs/{traced['run_id']}").text
        assert "/trace/" not in page
        assert "started without a Jaeger URL" in page and TRACE_ID in page


def test_failed_run_page_shows_the_error(
    client: TestClient, documents: dict[str, dict[str, Any]]
) -> None:
    failed = documents[FAILED]
    page = client.get(f"/runs/{failed['run_id']}").text
    assert "<h2>Error</h2>" in page
    assert failed["error"]["type"] in page
    assert "No accuracy" in page
    assert 'class="headline"' not in page


def test_unknown_run_is_a_404_page_naming_it(client: TestClient) -> None:
    unknown = str(uuid.uuid4())
    response = client.get(f"/runs/{unknown}")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert unknown in response.text


def test_every_page_escapes_a_hostile_evaluation_name(
    tmp_path: Path, documents: dict[str, dict[str, Any]]
) -> None:
    hostile = documents[evaluation_name("onnxruntime")]
    hostile["run_id"] = str(uuid.uuid4())
    hostile["evaluation"]["name"] = HOSTILE
    other = documents[evaluation_name("pytorch")]
    url = f"sqlite:///{tmp_path / 'hostile.db'}"
    record(url, [hostile, other])
    with TestClient(create_app(ServeSettings(store_url=url))) as c:
        pages = [
            c.get("/").text,
            c.get("/?evaluation=" + HOSTILE.replace("&", "%26")).text,
            c.get(f"/runs/{hostile['run_id']}").text,
            c.get(f"/compare?run={hostile['run_id']}&run={other['run_id']}").text,
        ]
        unknown = c.get("/runs/" + quote('<b id="x">&', safe="")).text
    for page in pages:
        assert "<script>" not in page
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in page
    assert "<b id" not in unknown and "&lt;b id=&quot;x&quot;&gt;&amp;" in unknown


def test_read_token_from_header_query_or_cookie(dashboard_store: str) -> None:
    settings = ServeSettings(store_url=dashboard_store, read_token="r3ad", write_token="wr1te")
    with TestClient(create_app(settings)) as c:
        denied = c.get("/")
        assert denied.status_code == 401
        assert 'action="/login"' in denied.text and denied.headers["www-authenticate"]
        assert c.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/", headers={"Authorization": "Bearer r3ad"}).status_code == 200
        assert c.get("/?token=wrong").status_code == 401
        kept = c.get("/?token=r3ad")
        assert kept.status_code == 200
        assert kept.cookies.get(COOKIE) == "r3ad"
        assert c.get("/runs/" + str(uuid.uuid4())).status_code == 404  # the cookie reads
        c.cookies.clear()
        login = c.post(
            "/login", data={"token": "wr1te", "next": "/?status=Failed"}, follow_redirects=False
        )
        assert login.status_code == 303 and login.headers["location"] == "/?status=Failed"
        assert c.get("/?status=Failed").status_code == 200
        c.cookies.clear()
        away = c.post(
            "/login", data={"token": "r3ad", "next": "//evil.example/"}, follow_redirects=False
        )
        assert away.headers["location"] == "/"
        assert c.post("/login", data={"token": "nope"}).status_code == 401
