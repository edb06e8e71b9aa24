"""Efficiency end to end: `mlms run` of the digits CNN on this machine's CPU with a price per
node-hour, then `mlms compare` and `mlms report` of what it wrote. With no readable RAPL
powercap (pointed at an empty folder, so the test means the same on every machine) the energy
is recorded and shown as not measured; the cost is computed from the price."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mlmodelscope.agent import energy
from mlmodelscope.agent.digits import digits_evaluation
from mlmodelscope.cli import app
from mlmodelscope.contract.result import ResultDocument

pytestmark = pytest.mark.frameworks

QUICK = {"warmup": 3, "minQueryCount": 20, "minDuration": "20ms", "stability": {"maxWindows": 2}}


def test_run_records_energy_not_measured_and_the_cost(
    tmp_path: Path, digits_models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(energy, "POWERCAP_ROOT", tmp_path / "no-powercap")
    spec = tmp_path / "spec.yaml"
    evaluation = digits_evaluation(
        digits_models, "onnxruntime", "ort", scenario={**QUICK, "batchSizes": [1, 8]}
    )
    spec.write_text(yaml.safe_dump(evaluation))
    out = tmp_path / "out"
    runner = CliRunner()
    args = ["run", str(spec), "-o", str(out), "--no-store", "--price-per-node-hour", "3.20"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output

    doc = json.loads((out / "ort.json").read_text())
    ResultDocument.model_validate(doc)
    assert "contract_error" not in doc
    assert doc["cost"] == {
        "price_per_node_hour": 3.2,
        "currency": "USD",
        "source": "mlms run --price-per-node-hour",
        "reason": None,
    }
    for m, row in zip(doc["measurements"], doc["results"], strict=True):
        assert m["energy"]["method"] is None
        assert m["energy"]["reason"] == energy.NOT_MEASURED
        assert m["energy"]["samples"] == m["samples"]
        assert row["joules_per_inference"] is None and row["energy_method"] is None
        expected = 3.20 / 3600 / m["throughput_samples_per_s"] * 1000
        assert row["cost_per_1000"] == pytest.approx(expected)
    assert "efficiency" in result.output
    assert f"energy {energy.NOT_MEASURED}" in result.output

    # compare and report what was written (a copy as the second run)
    shutil.copy(out / "ort.json", tmp_path / "again.json")
    shown = runner.invoke(app, ["compare", str(out / "ort.json"), str(tmp_path / "again.json")])
    assert shown.exit_code == 0, shown.output
    table = shown.output[shown.output.index("efficiency") :]
    assert "not measured" in table
    cost = doc["results"][0]["cost_per_1000"]
    assert f"${cost:.3g}" in table

    page = tmp_path / "report.html"
    made = runner.invoke(
        app, ["report", str(out / "ort.json"), str(tmp_path / "again.json"), "-o", str(page)]
    )
    assert made.exit_code == 0, made.output
    html = page.read_text()
    assert "<th>energy/inference</th>" in html and "<th>cost/1k inferences</th>" in html
    assert 'data-column="joules_per_inference">not measured</td>' in html
    assert f'data-column="cost_per_1000" data-value="{cost!r}">${cost:.3g}</td>' in html


def test_old_documents_without_efficiency_fields_still_load(
    tmp_path: Path, digits_models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A document as an older agent wrote it: no cost, no energy, rows without the fields;
    `mlms compare` still shows its efficiency as not measured."""
    monkeypatch.setattr(energy, "POWERCAP_ROOT", tmp_path / "no-powercap")
    spec = tmp_path / "spec.yaml"
    evaluation = digits_evaluation(
        digits_models, "onnxruntime", "old", scenario={**QUICK, "batchSizes": [1]}
    )
    spec.write_text(yaml.safe_dump(evaluation))
    result = CliRunner().invoke(app, ["run", str(spec), "-o", str(tmp_path), "--no-store"])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "old.json").read_text())
    assert doc["cost"]["reason"].startswith("not measured: no price per node-hour")
    assert all(row["cost_per_1000"] is None for row in doc["results"])
    del doc["cost"]
    for m in doc["measurements"]:
        del m["energy"]
    for row in doc["results"]:
        for key in ("joules_per_inference", "energy_method", "cost_per_1000"):
            del row[key]
    ResultDocument.model_validate(doc)
    (tmp_path / "older.json").write_text(json.dumps(doc))
    shown = CliRunner().invoke(
        app, ["compare", str(tmp_path / "older.json"), str(tmp_path / "old.json")]
    )
    assert shown.exit_code == 0, shown.output
    assert shown.output[shown.output.index("efficiency") :].count("not measured") >= 4


def test_the_job_agent_takes_its_price_from_the_environment(
    tmp_path: Path, digits_models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a cluster Job the price arrives as MLMS_PRICE_PER_NODE_HOUR (and where it came
    from as MLMS_PRICE_SOURCE); a value that is no price is logged, never fatal."""
    from mlmodelscope.agent.pod import run_evaluation

    monkeypatch.setattr(energy, "POWERCAP_ROOT", tmp_path / "no-powercap")
    monkeypatch.setenv("MLMS_PRICE_PER_NODE_HOUR", "7.2")
    monkeypatch.setenv("MLMS_PRICE_SOURCE", "operator setting")
    spec = tmp_path / "spec.yaml"
    evaluation = digits_evaluation(
        digits_models, "onnxruntime", "job", scenario={**QUICK, "batchSizes": [4]}
    )
    spec.write_text(yaml.safe_dump(evaluation))
    doc = run_evaluation(spec, tmp_path / "result.json")
    assert doc["status"] == "Succeeded"
    assert (doc["cost"]["price_per_node_hour"], doc["cost"]["source"]) == (7.2, "operator setting")
    [row], [m] = doc["results"], doc["measurements"]
    assert row["cost_per_1000"] == pytest.approx(7.2 / 3.6 / m["throughput_samples_per_s"])

    monkeypatch.setenv("MLMS_PRICE_PER_NODE_HOUR", "cheap")
    doc = run_evaluation(spec, tmp_path / "result.json")
    assert doc["status"] == "Succeeded"
    assert doc["cost"]["reason"].startswith("not measured: no price per node-hour")
