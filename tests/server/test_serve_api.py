"""The JSON API of `mlms serve` over real result documents, on SQLite and PostgreSQL
(in-process: TestClient). Every expected number is read from the documents the agent wrote."""

from __future__ import annotations

import csv
import io
import json
import uuid
from typing import Any

import jsonschema
import pytest
import sqlalchemy as sa
from dashboard_fixtures import FIRST_100_DATASET, WHOLE_DATASET, limited_document, timed
from fastapi.testclient import TestClient
from serve_fixtures import ClientFactory, bearer

from mlmodelscope.devtools.documents import EFFICIENCY_KEYS, metered
from mlmodelscope.report.compare import SIGNIFICANCE_RUNS, compare, parse_result
from mlmodelscope.server.app import ServeSettings, create_app
from mlmodelscope.store import Store

pytestmark = pytest.mark.frameworks

Docs = dict[str, dict[str, Any]]
NEWEST_FIRST = ["srv-bad-hash", "srv-torch", "srv-ort-b", "srv-ort-a"]


def rows(document: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The document's results by batch size."""
    return {r["batch_size"]: r for r in document.get("results") or []}


def test_list_runs_newest_first_with_their_batch_rows(
    make_client: ClientFactory, docs: Docs
) -> None:
    page = make_client().get("/api/v1/runs").json()
    assert page["total"] == 4 and page["offset"] == 0 and page["limit"] == 100
    assert [item["evaluation"] for item in page["items"]] == NEWEST_FIRST
    for item in page["items"]:
        document = docs[item["evaluation"]]
        assert item["run_id"] == document["run_id"]
        assert item["status"] == document["status"]
        assert item["model_name"] == document["spec"]["model"]["name"]
        assert item["framework"] == document["spec"]["framework"]["name"]
        assert item["scenario"] == "SingleStream"
        succeeded = document["status"] == "Succeeded"
        assert item["dataset"] == (WHOLE_DATASET if succeeded else None)  # Failed: never loaded
        expected = rows(document)
        assert [r["batch_size"] for r in item["results"]] == sorted(expected)
        for row in item["results"]:
            wanted = expected[row["batch_size"]]
            assert row["latency_ms"] == {
                k: wanted["latency_ms"].get(k) for k in ("p50", "p90", "p99", "mean")
            }
            assert row["throughput"] == wanted["throughput"]
            assert row["valid"] == wanted["valid"]
            assert [row[k] for k in EFFICIENCY_KEYS] == [None] * 3  # no counter, no price
        if document["status"] == "Succeeded":
            assert item["top1"] == document["accuracy"]["top1"]
            assert item["framework_version"] == document["backend"]["framework_version"]
        else:
            assert item["results"] == [] and item["error_type"] == document["error"]["type"]


def test_list_runs_filters_and_pages(make_client: ClientFactory, docs: Docs) -> None:
    client = make_client()

    def names(**params: Any) -> list[str]:
        response = client.get("/api/v1/runs", params=params)
        assert response.status_code == 200, response.text
        return [item["evaluation"] for item in response.json()["items"]]

    assert names(framework="pytorch") == ["srv-torch"]
    assert names(status="Failed") == ["srv-bad-hash"]
    assert names(status="Succeeded", framework="onnxruntime") == ["srv-ort-b", "srv-ort-a"]
    assert names(evaluation="srv-ort-a") == ["srv-ort-a"]
    assert names(scenario="SingleStream") == NEWEST_FIRST
    assert names(scenario="Offline") == []
    assert names(model=docs["srv-ort-a"]["spec"]["model"]["name"]) == NEWEST_FIRST
    assert names(device="cpu", framework="pytorch") == ["srv-torch"]
    assert names(gpu="NVIDIA H100 80GB HBM3") == []
    assert names(limit=2) == NEWEST_FIRST[:2]
    assert names(limit=2, offset=2) == NEWEST_FIRST[2:]
    assert names(offset=10) == []
    page = client.get("/api/v1/runs", params={"limit": 1, "framework": "onnxruntime"}).json()
    assert page["total"] == 3 and len(page["items"]) == 1
    for bad in ({"limit": 0}, {"limit": 1001}, {"offset": -1}, {"model": "a\x00b"}):
        response = client.get("/api/v1/runs", params=bad)
        assert response.status_code == 422, (bad, response.text)


def test_get_run_returns_the_document_as_recorded(make_client: ClientFactory, docs: Docs) -> None:
    client = make_client()
    for document in docs.values():
        response = client.get(f"/api/v1/runs/{document['run_id']}")
        assert response.status_code == 200
        assert response.json() == document
    unknown = str(uuid.uuid4())
    response = client.get(f"/api/v1/runs/{unknown}")
    assert response.status_code == 404
    assert response.json() == {"detail": f"no run {unknown} in the results store"}
    response = client.get("/api/v1/runs/not-a-uuid")
    assert response.status_code == 404
    assert "run ids are UUIDs" in response.json()["detail"]


def test_post_records_once_and_refuses_what_is_no_document(
    make_client: ClientFactory, docs: Docs, filled_store: Store
) -> None:
    client = make_client(write_token="w")
    document = docs["srv-ort-a"]
    document["run_id"] = str(uuid.uuid4())
    document["evaluation"]["name"] = "srv-posted"
    first = client.post("/api/v1/runs", json=document, headers=bearer("w"))
    assert first.status_code == 201, first.text
    assert first.json() == {
        "run_id": document["run_id"],
        "created": True,
        "location": f"/api/v1/runs/{document['run_id']}",
    }
    again = client.post("/api/v1/runs", json=document, headers=bearer("w"))
    assert again.status_code == 200 and again.json()["created"] is False
    assert client.get(first.json()["location"]).json() == document
    assert filled_store.get(document["run_id"]) == document

    def refused(body: Any) -> str:
        response = client.post(
            "/api/v1/runs",
            content=json.dumps(body),
            headers={**bearer("w"), "Content-Type": "application/json"},
        )
        assert response.status_code == 422, response.text
        return json.dumps(response.json()["detail"])

    assert "kind" in refused({"kind": "Something"})
    partial = {k: v for k, v in document.items() if k not in ("results", "accuracy")}
    assert "a Succeeded document needs" in refused(partial)
    no_id = {**docs["srv-bad-hash"], "run_id": None}
    assert "without run_id" in refused(no_id)
    assert "is not a UUID" in refused({**document, "run_id": "run-1"})
    assert "not a finite number" in refused(
        {**document, "run_id": str(uuid.uuid4()), "spec": {"note": float("nan")}}
    )
    assert "Input should be a valid dictionary" in refused([document])


def test_post_a_value_the_database_refuses_is_422_not_500(
    make_client: ClientFactory, docs: Docs, filled_store: Store
) -> None:
    """PostgreSQL refuses an evaluation name longer than its column (253); SQLite stores it."""
    client = make_client(write_token="w")
    document = docs["srv-torch"]
    document["run_id"] = str(uuid.uuid4())
    document["evaluation"]["name"] = "x" * 300
    response = client.post("/api/v1/runs", json=document, headers=bearer("w"))
    if filled_store.engine.dialect.name == "postgresql":
        assert response.status_code == 422, response.text
        assert "not recordable" in json.dumps(response.json()["detail"])
        assert filled_store.get(document["run_id"]) is None
    else:
        assert response.status_code == 201, response.text


def test_compare_is_mlms_compare_of_the_stored_documents(
    make_client: ClientFactory, docs: Docs
) -> None:
    client = make_client()
    names = ["srv-ort-a", "srv-torch", "srv-ort-b"]
    ids = [docs[name]["run_id"] for name in names]
    response = client.get("/api/v1/compare", params={"run": ids})
    assert response.status_code == 200, response.text
    loaded = [parse_result(docs[n], f"store:{docs[n]['run_id']}") for n in names]
    expected = compare(loaded, significance=True)
    assert expected.verdicts  # the same verdicts: every bootstrap is seeded
    assert response.json() == json.loads(json.dumps(expected.to_json_dict()))
    assert response.json()["reference"] == "srv-ort-a"
    assert [row["run"] for row in response.json()["rows"]][:2] == ["srv-ort-a", "srv-ort-a"]

    one = client.get("/api/v1/compare", params={"run": ids[:1]})
    assert one.status_code == 422 and "at least two" in one.text
    unknown = str(uuid.uuid4())
    missing = client.get("/api/v1/compare", params={"run": [ids[0], unknown]})
    assert missing.status_code == 404 and unknown in missing.json()["detail"]
    assert client.get("/api/v1/compare").status_code == 422


def test_compare_judges_significance_as_its_openapi_document_says(
    make_client: ClientFactory, docs: Docs, filled_store: Store
) -> None:
    """``verdicts``: per candidate run, metric, scenario and batch size the outcome, its
    interval or p-value and the method; for a run recorded with 1.5x the latencies of
    another, slower. The answer is valid against /openapi.json's ``Comparison``; more runs
    than are judged give ``null``."""
    base = timed(docs["srv-ort-a"], "api-base", 1.0)
    slower = timed(docs["srv-ort-a"], "api-slower", 1.5, seed=1)
    for document in (base, slower):
        assert filled_store.record(document)
    client = make_client()
    response = client.get("/api/v1/compare", params={"run": [base["run_id"], slower["run_id"]]})
    assert response.status_code == 200, response.text
    body = response.json()
    openapi = client.get("/openapi.json").json()
    schema = {"$ref": "#/components/schemas/Comparison", "components": openapi["components"]}
    jsonschema.validate(body, schema)
    assert {v["run"] for v in body["verdicts"]} == {"api-slower"}
    found = {(v["metric"], v["batch_size"]): v for v in body["verdicts"]}
    assert len(found) == len(body["verdicts"]) == 7
    for batch in (1, 8):
        row = rows(base)[batch]
        for metric, ratio, headline in (
            ("latency p50", 1.5, row["latency_ms"]["p50"]),
            ("latency p99", 1.5, row["latency_ms"]["p99"]),
            ("throughput", 1 / 1.5, row["throughput"]),
        ):
            verdict = found[metric, batch]
            assert verdict["outcome"] == "slower" and verdict["scenario"] == "SingleStream"
            assert verdict["baseline"] == headline
            assert verdict["low"] < verdict["ratio"] < verdict["high"]
            assert verdict["ratio"] == pytest.approx(ratio, rel=0.05)
            assert verdict["level"] == 0.95 and verdict["method"].startswith("bootstrap")
    top1 = found["top-1 accuracy", None]
    assert (top1["outcome"], top1["p_value"], top1["why"]) == (
        "no significant difference",
        1.0,
        None,
    )
    assert top1["method"].startswith("McNemar exact test")

    many = client.get("/api/v1/compare", params={"run": [base["run_id"]] * (SIGNIFICANCE_RUNS + 1)})
    assert many.status_code == 200 and many.json()["verdicts"] is None
    jsonschema.validate(many.json(), schema)


def test_leaderboard_keeps_the_best_succeeded_run_per_model_and_hardware(
    make_client: ClientFactory, docs: Docs
) -> None:
    client = make_client()
    ort = [docs["srv-ort-a"], docs["srv-ort-b"]]
    board = client.get("/api/v1/leaderboard").json()
    assert board["metric"] == "p50_ms" and board["batch_size"] == 1
    by_framework = {entry["framework"]: entry for entry in board["entries"]}
    assert set(by_framework) == {"onnxruntime", "pytorch"}  # the Failed run takes no part
    best = min(ort, key=lambda d: rows(d)[1]["latency_ms"]["p50"])
    entry = by_framework["onnxruntime"]
    assert entry["run_id"] == best["run_id"] and entry["runs"] == 2
    assert entry["value"] == entry["p50_ms"] == rows(best)[1]["latency_ms"]["p50"]
    assert entry["throughput"] == rows(best)[1]["throughput"]
    assert entry["top1"] == best["accuracy"]["top1"]
    assert entry["device"] == "cpu" and entry["gpu_product"] is None
    assert entry["dataset"] == WHOLE_DATASET and board["dataset"] is None
    assert by_framework["pytorch"]["run_id"] == docs["srv-torch"]["run_id"]
    assert by_framework["pytorch"]["runs"] == 1
    values = [e["value"] for e in board["entries"]]
    assert values == sorted(values)  # one model: best first

    fastest = client.get("/api/v1/leaderboard", params={"metric": "throughput", "batch_size": 8})
    entry = {e["framework"]: e for e in fastest.json()["entries"]}["onnxruntime"]
    best = max(ort, key=lambda d: rows(d)[8]["throughput"])
    assert entry["run_id"] == best["run_id"] and entry["value"] == rows(best)[8]["throughput"]
    assert entry["batch_size"] == 8

    only = client.get("/api/v1/leaderboard", params={"framework": "pytorch", "metric": "top1"})
    assert [e["run_id"] for e in only.json()["entries"]] == [docs["srv-torch"]["run_id"]]
    assert client.get("/api/v1/leaderboard", params={"batch_size": 3}).json()["entries"] == []
    assert client.get("/api/v1/leaderboard", params={"metric": "nope"}).status_code == 422


def test_dataset_and_efficiency_in_listing_leaderboard_history_and_csv(
    make_client: ClientFactory, docs: Docs, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Two more runs posted: ONNX Runtime on the first 100 samples (the agent's own run), and
    srv-ort-a as if a RAPL counter and a price per node-hour had been given
    (:func:`~mlmodelscope.devtools.documents.metered`)."""
    client = make_client(write_token="w")
    limited = limited_document(tmp_path_factory)
    energy = metered(docs["srv-ort-a"], {1: 0.004, 8: 0.001}, 2.5)
    energy["run_id"] = str(uuid.uuid4())
    energy["evaluation"]["name"] = "srv-metered"
    for document in (limited, energy):
        posted = client.post("/api/v1/runs", json=document, headers=bearer("w"))
        assert posted.status_code == 201, posted.text
    efficiency = [tuple(r[k] for k in EFFICIENCY_KEYS) for r in energy["results"]]
    assert efficiency[0][:2] == (pytest.approx(0.004), "rapl") and efficiency[0][2] is not None

    items = {i["run_id"]: i for i in client.get("/api/v1/runs").json()["items"]}
    assert items[limited["run_id"]]["dataset"] == FIRST_100_DATASET
    assert items[energy["run_id"]]["dataset"] == WHOLE_DATASET
    listed = [tuple(r[k] for k in EFFICIENCY_KEYS) for r in items[energy["run_id"]]["results"]]
    assert listed == efficiency
    only = client.get("/api/v1/runs", params={"dataset": FIRST_100_DATASET}).json()
    assert only["total"] == 1 and only["items"][0]["run_id"] == limited["run_id"]
    detail = client.get(f"/api/v1/runs/{energy['run_id']}").json()  # the document itself
    assert [tuple(r[k] for k in EFFICIENCY_KEYS) for r in detail["results"]] == efficiency

    board = client.get("/api/v1/leaderboard").json()
    ort = [e for e in board["entries"] if e["framework"] == "onnxruntime"]
    assert [(e["dataset"], e["runs"]) for e in ort] == [(FIRST_100_DATASET, 1), (WHOLE_DATASET, 3)]
    assert ort[0]["run_id"] == limited["run_id"]  # never ranked against the whole split
    narrowed = client.get("/api/v1/leaderboard", params={"dataset": FIRST_100_DATASET}).json()
    assert narrowed["dataset"] == FIRST_100_DATASET
    assert [e["run_id"] for e in narrowed["entries"]] == [limited["run_id"]]
    joules = client.get("/api/v1/leaderboard", params={"metric": "joules_per_inference"}).json()
    assert [
        (e["run_id"], e["value"], e["energy_method"], e["runs"]) for e in joules["entries"]
    ] == [
        (energy["run_id"], efficiency[0][0], "rapl", 1)  # the runs without a counter: none
    ]
    cost = client.get("/api/v1/leaderboard", params={"metric": "cost_per_1000", "batch_size": 8})
    assert [(e["run_id"], e["value"]) for e in cost.json()["entries"]] == [
        (energy["run_id"], efficiency[1][2])
    ]

    model = energy["model"]["name"]
    history = client.get(f"/api/v1/models/{model}/history").json()["points"]
    by_run = {p["run_id"]: p for p in history}
    assert by_run[limited["run_id"]]["dataset"] == FIRST_100_DATASET
    assert by_run[docs["srv-bad-hash"]["run_id"]]["dataset"] is None
    point = by_run[energy["run_id"]]
    assert (point["joules_per_inference"], point["cost_per_1000"]) == (
        efficiency[0][0],
        efficiency[0][2],
    )
    first_100 = client.get(
        f"/api/v1/models/{model}/history", params={"dataset": FIRST_100_DATASET}
    ).json()
    assert [p["run_id"] for p in first_100["points"]] == [limited["run_id"]]

    table = csv.DictReader(io.StringIO(client.get("/api/v1/runs.csv").text))
    exported = {(r["run_id"], r["batch_size"]): r for r in table}
    for result, values in zip(energy["results"], efficiency, strict=True):
        row = exported[(energy["run_id"], str(result["batch_size"]))]
        assert row["dataset"] == WHOLE_DATASET
        assert (float(row["joules_per_inference"]), row["energy_method"]) == values[:2]
        assert float(row["cost_per_1000"]) == values[2]
    assert exported[(limited["run_id"], "1")]["joules_per_inference"] == ""
    for bad in ({"dataset": "a\x00b"}, {"dataset": "d" * 254}):
        assert client.get("/api/v1/leaderboard", params=bad).status_code == 422
        assert client.get("/api/v1/runs", params=bad).status_code == 422


def test_history_of_a_model_oldest_first(make_client: ClientFactory, docs: Docs) -> None:
    client = make_client()
    model = docs["srv-ort-a"]["spec"]["model"]["name"]
    history = client.get(f"/api/v1/models/{model}/history").json()
    assert history["model"] == model and history["batch_size"] is None
    assert [p["evaluation"] for p in history["points"]] == list(docs)
    for point in history["points"]:
        document = docs[point["evaluation"]]
        if document["status"] == "Failed":
            assert point["batch_size"] is None and point["p50_ms"] is None
            continue
        row = rows(document)[1]  # the smallest batch size
        assert point["batch_size"] == 1
        assert point["p50_ms"] == row["latency_ms"]["p50"]
        assert point["p99_ms"] == row["latency_ms"]["p99"]
        assert point["throughput"] == row["throughput"]
        assert point["top1"] == document["accuracy"]["top1"]

    at8 = client.get(
        f"/api/v1/models/{model}/history",
        params={"batch_size": 8, "framework": "onnxruntime", "status": "Succeeded"},
    ).json()
    assert [p["evaluation"] for p in at8["points"]] == ["srv-ort-a", "srv-ort-b"]
    assert [p["throughput"] for p in at8["points"]] == [
        rows(docs[n])[8]["throughput"] for n in ("srv-ort-a", "srv-ort-b")
    ]
    newest = client.get(f"/api/v1/models/{model}/history", params={"limit": 2}).json()
    assert [p["evaluation"] for p in newest["points"]] == ["srv-torch", "srv-bad-hash"]
    missing = client.get("/api/v1/models/no-such-model/history")
    assert missing.status_code == 404 and "no-such-model" in missing.json()["detail"]
    empty = client.get(f"/api/v1/models/{model}/history", params={"gpu": "none"})
    assert empty.status_code == 200 and empty.json()["points"] == []


def test_csv_export_one_row_per_run_and_batch_size(make_client: ClientFactory, docs: Docs) -> None:
    response = make_client().get("/api/v1/runs.csv", params={"framework": "onnxruntime"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(response.text)))
    assert [(r["evaluation"], r["batch_size"]) for r in table] == [
        ("srv-bad-hash", ""),
        ("srv-ort-b", "1"),
        ("srv-ort-b", "8"),
        ("srv-ort-a", "1"),
        ("srv-ort-a", "8"),
    ]
    for row in table[1:]:
        wanted = rows(docs[row["evaluation"]])[int(row["batch_size"])]
        assert float(row["p50_ms"]) == wanted["latency_ms"]["p50"]
        assert float(row["p99_ms"]) == wanted["latency_ms"]["p99"]
        assert float(row["throughput"]) == wanted["throughput"]
        assert row["run_id"] == docs[row["evaluation"]]["run_id"]
    assert table[0]["status"] == "Failed" and table[0]["p50_ms"] == ""
    everything = make_client().get("/api/v1/runs.csv").text
    assert len(list(csv.DictReader(io.StringIO(everything)))) == 7


def test_probes(make_client: ClientFactory) -> None:
    client = make_client(read_token="r")
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ok"}


def test_readyz_is_503_when_the_store_does_not_answer(tmp_path: Any) -> None:
    broken = Store(sa.create_engine(f"sqlite:///{tmp_path / 'no-such-folder' / 'runs.db'}"))
    with TestClient(create_app(ServeSettings(), broken)) as client:
        assert client.get("/healthz").status_code == 200
        response = client.get("/readyz")
        assert response.status_code == 503
        assert "does not answer" in response.json()["detail"]


def test_csv_export_quotes_cells_a_spreadsheet_would_run(
    make_client: ClientFactory, filled_store: Store, docs: Docs
) -> None:
    """Evaluation names come from users: one starting with ``=`` must not become a formula."""
    hostile = json.loads(json.dumps(docs["srv-ort-a"]))
    hostile["run_id"] = str(uuid.uuid4())
    hostile["evaluation"]["name"] = '=HYPERLINK("http://evil.example","x")'
    assert filled_store.record(hostile)
    response = make_client().get(
        "/api/v1/runs.csv", params={"evaluation": '=HYPERLINK("http://evil.example","x")'}
    )
    table = list(csv.DictReader(io.StringIO(response.text)))
    assert table and {r["evaluation"] for r in table} == {"'" + hostile["evaluation"]["name"]}
    assert float(table[0]["p50_ms"]) == rows(hostile)[1]["latency_ms"]["p50"]
