"""The dashboard's pages, in-process (TestClient), over real result documents: the digits CNN
evaluated by the agent in ONNX Runtime, PyTorch and TensorFlow, and a run that failed. Every
expected number is read from the documents."""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from dashboard_fixtures import FAILED, FRAMEWORKS, evaluation_name, real_documents, record, timed
from fastapi.testclient import TestClient

from mlmodelscope.report.verdicts import NEEDS_SCIPY, Outcome
from mlmodelscope.server.app import ServeSettings, create_app
from mlmodelscope.server.dashboard import COOKIE
from mlmodelscope.server.pages.render import compare_url

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
    # each other run judged against the reference: 3 latency metrics per batch size, top-1
    verdicts = Verdicts(page)
    assert {run for run, _, _ in verdicts.rows} == {"digits-pytorch", "digits-tensorflow"}
    assert len(verdicts.rows) == 2 * 7 and verdicts.legend


@dataclass
class VerdictRow:
    """One row of the significance table: each cell's text by its class, the interval cell's
    ``data-*`` numbers, and the legend item its method footnote points at."""

    cells: dict[str, str] = field(default_factory=dict)
    numbers: dict[str, float] = field(default_factory=dict)
    note: str | None = None


class Verdicts(HTMLParser):
    """The significance table's rows by (run, metric, batch size or None), and the methods
    legend by item id."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: dict[tuple[str, str, int | None], VerdictRow] = {}
        self.legend: dict[str, str] = {}
        self._row: VerdictRow | None = None
        self._cell: str | None = None
        self._item: str | None = None
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "tr" and "data-outcome" in found:
            batch = int(found["data-batch"]) if "data-batch" in found else None
            self._row = VerdictRow()
            self.rows[found["data-run"], found["data-metric"], batch] = self._row
        elif tag == "td" and self._row is not None:
            self._cell = found.get("class", "").split(" ")[0] or f"td{len(self._row.cells)}"
            self._row.cells[self._cell] = ""
            self._row.numbers.update(
                {k[5:]: float(v) for k, v in found.items() if k.startswith("data-")}
            )
        elif tag == "a" and self._cell == "method" and self._row is not None:
            self._row.note = found["href"].removeprefix("#")
        elif tag == "li" and found.get("id", "").startswith("method-"):
            self._item = found["id"]
            self.legend[self._item] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cell = None
        elif tag == "tr":
            self._row = None
        elif tag == "li":
            self._item = None

    def handle_data(self, data: str) -> None:
        if self._row is not None and self._cell is not None:
            self._row.cells[self._cell] += data
        elif self._item is not None:
            self.legend[self._item] += data

    def method(self, row: VerdictRow) -> str:
        """The legend's text of the row's method."""
        assert row.note is not None
        return self.legend[row.note]


INTERVAL = re.compile(r"ratio \d+\.\d{3} \[\d+\.\d{3}, \d+\.\d{3}\] at 95%")


def test_compare_page_judges_each_difference(
    tmp_path: Path, documents: dict[str, dict[str, Any]]
) -> None:
    """Runs whose latencies differ by exactly 1.5x are slower (and, the other way round,
    faster) with an interval around 1.5 and a method in the legend; another draw of the same
    latencies is no significant difference; a run without raw latencies is not testable."""
    ort = documents[evaluation_name("onnxruntime")]
    base, slower, again = (
        timed(ort, "base", 1.0),
        timed(ort, "slower", 1.5, 1),
        timed(ort, "again", 1.0, 2),
    )
    bare = timed(ort, "bare", 1.0, 3)
    for measurement in bare["measurements"]:
        del measurement["raw"]
    url = f"sqlite:///{tmp_path / 'timed.db'}"
    record(url, [base, slower, again, bare])
    with TestClient(create_app(ServeSettings(store_url=url))) as c:
        page = c.get(compare_url([d["run_id"] for d in (base, slower, again, bare)]))
        backwards = c.get(compare_url([slower["run_id"], base["run_id"]])).text
    assert page.status_code == 200
    assert "<h2>Significance</h2>" in page.text and "<b>base</b>" in page.text
    found = Verdicts(page.text)
    latency = ("latency p50", "latency p99", "throughput")
    for batch in (1, 8):
        for metric in latency:
            row = found.rows["slower", metric, batch]
            assert row.cells["outcome"] == "slower", (metric, batch)
            assert INTERVAL.fullmatch(row.cells["evidence"]), row.cells["evidence"]
            assert row.numbers["level"] == 0.95
            expected = 1.5 if metric != "throughput" else 1 / 1.5
            assert row.numbers["low"] < row.numbers["ratio"] < row.numbers["high"]
            assert row.numbers["ratio"] == pytest.approx(expected, rel=0.05)
            assert found.method(row).startswith("bootstrap")
            assert found.rows["again", metric, batch].cells["outcome"] == str(Outcome.SAME)
            untestable = found.rows["bare", metric, batch]
            assert untestable.cells["outcome"] == (
                "not testable: candidate: no raw latencies (run with --raw)"
            )
            assert untestable.note is None and untestable.cells["evidence"] == "-"
    top1 = found.rows["slower", "top-1 accuracy", None]
    assert top1.cells["outcome"] == "no significant difference"
    assert top1.cells["evidence"] == "p = 1" and top1.numbers["p-value"] == 1.0
    assert found.method(top1).startswith("McNemar exact test")
    assert len(found.rows) == 3 * 7
    assert all(run != "base" for run, _, _ in found.rows)  # the reference is not judged
    # every method once in the legend, in order of first use
    assert list(found.legend) == [f"method-{n}" for n in range(1, len(found.legend) + 1)]
    assert len(set(found.legend.values())) == len(found.legend) >= 4

    faster = Verdicts(backwards)
    for batch in (1, 8):
        for metric in latency:
            row = faster.rows["base", metric, batch]
            assert row.cells["outcome"] == "faster" and INTERVAL.fullmatch(row.cells["evidence"])
    assert 'class="outcome better"' in backwards and 'class="outcome worse"' not in backwards


def test_compare_page_without_scipy_says_not_testable(
    client: TestClient, documents: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """scipy unimportable (as where it is not installed): every verdict names it."""
    monkeypatch.setitem(sys.modules, "scipy", None)
    ids = [run_id(documents, evaluation_name(f)) for f in ("onnxruntime", "pytorch")]
    found = Verdicts(client.get(compare_url(ids)).text)
    assert len(found.rows) == 7
    for row in found.rows.values():
        assert row.cells["outcome"] == f"not testable: {NEEDS_SCIPY}"
    assert found.legend == {}


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
            c.get(f"/compare?run={other['run_id']}&run={hostile['run_id']}").text,  # judged
        ]
        unknown = c.get("/runs/" + quote('<b id="x">&', safe="")).text
    for page in pages:
        assert "<script>" not in page
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in page
    judged = Verdicts(pages[-1]).rows
    assert judged and {run for run, _, _ in judged} == {HOSTILE}
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
