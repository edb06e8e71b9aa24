"""A real GPU run as a fixture: the GPU kit's ResNet-50 result document from the H100
(benchmarks/gpu/2026-11-27-h100-trace/, tracing.level library, its trace cut to two queries
per traced pass) read by `mlms trace`, `mlms analyze` and the dashboard's analysis page on a
machine without a GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from mlmodelscope.cli import app
from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.contract.schema import SCHEMA_PATH

RUN = Path(__file__).parents[2] / "benchmarks" / "gpu" / "2026-11-27-h100-trace"
DOCUMENT = RUN / "gpu-resnet50.json"
CONVOLUTION = "aten::cudnn_convolution"


def kit_record() -> dict[str, Any]:
    """What the kit's trace step recorded of ResNet-50 (over all 20 queries per level)."""
    document = json.loads((RUN / "results.json").read_text())
    step = next(s for s in document["steps"] if s["name"] == "trace")
    return dict(step["data"]["models"]["resnet50"])


def test_the_fixture_is_a_valid_gpu_result_document_with_its_cut_trace() -> None:
    document = json.loads(DOCUMENT.read_text())
    jsonschema.validate(document, json.loads(SCHEMA_PATH.read_text()))
    parsed = ResultDocument.model_validate(document)
    assert parsed.status == "Succeeded"
    assert document["backend"]["device"].startswith("cuda")
    assert document["tracing"]["trace_file"] == "gpu-resnet50.trace.json"
    fixture = kit_record()["fixture"]
    trace = json.loads((RUN / fixture["trace"]).read_text())
    assert len(trace["spans"]) == fixture["spans"] < fixture["spans_whole"]
    kinds = {s["attributes"].get("mlmodelscope.span.kind") for s in trace["spans"]}
    assert {"layer", "kernel", "memcpy"} <= kinds


def test_mlms_trace_breaks_the_gpu_trace_down_to_cupti_kernels() -> None:
    """The library level has CUDA kernels under the framework's layers; its top kernel is
    the one the kit found over all 20 queries."""
    result = CliRunner().invoke(app, ["trace", str(DOCUMENT), "--json", "--top", "3"])
    assert result.exit_code == 0, result.output
    passes = {p["level"]: p for p in json.loads(result.output)["passes"]}
    assert set(passes) == {"model", "framework", "library"}
    library = passes["library"]
    assert library["queries"] == 2 and library["kernels_time_s"] > 0
    whole = kit_record()["top_kernels"][0]["name"]
    assert library["kernels"][0]["name"] == whole
    assert library["layers"][0]["name"] == CONVOLUTION
    assert passes["framework"]["kernels_time_s"] == 0.0  # kernels only at library level


def test_mlms_analyze_and_the_dashboard_read_the_gpu_run(tmp_path: Path) -> None:
    """`mlms analyze` writes its tables for the GPU run; the dashboard, over a real SQLite
    store holding the document, serves its analysis page."""
    from fastapi.testclient import TestClient

    from mlmodelscope.server.app import ServeSettings, create_app
    from mlmodelscope.store import open_store

    out = tmp_path / "analysis"
    result = CliRunner().invoke(app, ["analyze", str(DOCUMENT), "--out", str(out)])
    assert result.exit_code == 0, result.output
    analysis = json.loads((out / "analysis.json").read_text())
    document = json.loads(DOCUMENT.read_text())
    correction = document["tracing"]["by_batch_size"][0]["correction"]
    (run,) = analysis["runs"]
    assert (run["model"], run["framework"], run["device"]) == ("resnet50", "pytorch", "cuda:0")
    (batch,) = run["batches"]
    assert batch["residual"] == pytest.approx(correction["residual"])
    assert batch["within_tolerance"] is False  # docs/gpu.md: ResNet-50's residual is ~10 %
    (top,) = analysis["top_layers"]  # the framework level's layers: TorchScript's operators
    assert "aten::_convolution" in {row["op_type"] for row in top["rows"]}
    with open_store(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        assert store.record(document)
        with TestClient(create_app(ServeSettings(), store)) as client:
            page = client.get(f"/runs/{document['run_id']}/analysis")
            assert page.status_code == 200, page.text
            assert "Residuals" in page.text and "aten::_convolution" in page.text


def test_the_agent_measured_energy_with_nvml_on_the_gpu() -> None:
    """The agent's own energy per inference (issue 31) on a real GPU: NVML's board counter
    around the reported window, in the measurement and in the headline row."""
    document = json.loads(DOCUMENT.read_text())
    (measurement,) = document["measurements"]
    energy = measurement["energy"]
    assert (energy["method"], energy["source"], energy["reason"]) == ("nvml", "GPU 0", None)
    assert energy["seconds"] >= 1.0 and energy["samples"] > 0
    assert energy["joules_per_inference"] == pytest.approx(energy["joules"] / energy["samples"])
    row = document["results"][0]
    assert row["energy_method"] == "nvml"
    assert row["joules_per_inference"] == pytest.approx(energy["joules_per_inference"])
