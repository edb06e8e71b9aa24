"""`scenario.driver: loadgen`: the agent's SUT under the real MLPerf LoadGen, on the real
digits CNN in ONNX Runtime, every scenario end to end, and the combinations it refuses."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from mlmodelscope.agent.digits import digits_evaluation
from mlmodelscope.agent.loadgen_driver import DetailLog, _reasons, latency_key
from mlmodelscope.agent.pod import configmap_patch
from mlmodelscope.agent.runner import EvaluationError, evaluate
from mlmodelscope.cli import app
from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.contract.schema import SCHEMA_PATH
from mlmodelscope.contract.wire import RESULT_KEY
from mlmodelscope.spec import SpecValidationError, load_evaluations
from mlmodelscope.spec.evaluation import LOADGEN_PERCENTILES, Scenario

pytest.importorskip("mlperf_loadgen")  # the dev virtualenv has it (extra `loadgen`)
pytestmark = pytest.mark.frameworks

SCHEMA = json.loads(SCHEMA_PATH.read_text())
QUICK = {
    "driver": "loadgen",
    "warmup": 3,
    "minQueryCount": 20,
    "minDuration": "20ms",
    "accuracy": False,
}
SCENARIOS: dict[str, dict[str, Any]] = {
    "SingleStream": {"type": "SingleStream", "batchSizes": [1, 4]},
    "MultiStream": {"type": "MultiStream", "samplesPerQuery": 8, "batchSizes": [1, 8]},
    "Server": {"type": "Server", "targetQPS": 200, "latencyBound": "1s", "batchSizes": [1]},
    "Offline": {"type": "Offline", "batchSizes": [4]},
}


def write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def evaluation(models: Path, name: str = "lg", **scenario: Any) -> dict[str, Any]:
    return digits_evaluation(models, "onnxruntime", name, scenario={**QUICK, **scenario})


def validate(doc: dict[str, Any]) -> None:
    assert "contract_error" not in doc
    ResultDocument.model_validate(doc)
    jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker()).validate(doc)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_scenario_under_loadgen(tmp_path: Path, digits_models: Path, scenario: str) -> None:
    spec = write(tmp_path, evaluation(digits_models, **SCENARIOS[scenario]))
    [loaded] = load_evaluations(spec)
    evaluate(loaded, output=tmp_path / "out" / "lg.json")
    doc = json.loads((tmp_path / "out" / "lg.json").read_text())
    validate(doc)
    assert doc["status"] == "Succeeded"
    assert [m["batch_size"] for m in doc["measurements"]] == SCENARIOS[scenario]["batchSizes"]
    for m in doc["measurements"]:
        info = m["loadgen"]
        assert m["driver"] == "loadgen" and m["scenario"] == scenario
        assert info["scenario"] == scenario and info["mode"] == "PerformanceOnly"
        assert info["settings"]["scenario"] == scenario
        assert info["settings"]["test_mode"] == "PerformanceOnly"
        assert info["errors"] == []
        folder = tmp_path / "out" / info["logs"]["dir"]
        assert info["logs"]["dir"] == f"lg.loadgen/batch-{m['batch_size']}"
        summary = (folder / info["logs"]["summary"]).read_text()
        assert f"Scenario : {scenario}" in summary and summary == info["summary_text"]
        detail = DetailLog.read(folder / info["logs"]["detail"])
        # the document's figures are LoadGen's own, as its detail log has them
        for p in (50.0, 90.0, 99.0):
            assert round(m["latency"]["percentiles_s"][f"p{p:g}"] * 1e9) == detail.number(
                latency_key(p)
            )
        assert m["latency"]["count"] == detail.values["result_query_count"]
        assert "stdev_s" not in m["latency"] and m["raw"]["latencies_ns"] == []
        # validity as LoadGen decides it, reasons in its words
        assert m["verdict"]["valid"] == (detail.values["result_validity"] == "VALID")
        assert m["verdict"]["valid"] == (not m["verdict"]["reasons"])
        assert all(r.startswith("LoadGen") for r in m["verdict"]["reasons"])
        assert m["warmup"]["queries"] == 3 and m["warmup"]["latency"]["count"] == 3
        assert 0 < m["harness_overhead"]["percentiles_s"]["p50"] < m["latency"]["max_s"]
        assert m["predict"]["count"] == m["queries"] and m["predict"]["mean_s"] > 0
        assert m["samples"] == m["queries"] * m["samples_per_query"]
        assert m["throughput_samples_per_s"] > 0
        if scenario == "MultiStream":
            assert info["settings"]["samples_per_query"] == 8 // m["batch_size"]
        if scenario == "Server":
            assert info["settings"]["target_qps"] == 200
            assert m["server"]["achieved_qps"] > 0 and m["server"]["latency_bound_s"] == 1.0
        if scenario == "Offline":
            assert m["latency"]["count"] == 1  # LoadGen's one Offline query
            assert m["queries"] >= 20  # minQueryCount samples, each one batch
    assert doc["results"][0]["scenario"] == scenario


def test_mlms_run_keeps_loadgen_logs(tmp_path: Path, digits_models: Path) -> None:
    spec = write(tmp_path, evaluation(digits_models, "lg-cli", batchSizes=[1]))
    result = CliRunner().invoke(app, ["run", str(spec), "-o", str(tmp_path / "out"), "--no-store"])
    assert result.exit_code == 0, result.output
    folder = tmp_path / "out" / "lg-cli.loadgen" / "batch-1"
    assert (folder / "mlperf_log_summary.txt").is_file()
    assert (folder / "mlperf_log_detail.txt").is_file()
    assert not (folder / "mlperf_log_trace.json").exists()  # trace off, empty file removed
    # in a cluster the files stay in the pod: the published document carries the summary
    doc = json.loads((tmp_path / "out" / "lg-cli.json").read_text())
    published = json.loads(configmap_patch(doc)["data"][RESULT_KEY])
    summary = (folder / "mlperf_log_summary.txt").read_text()
    assert published["measurements"][0]["loadgen"]["summary_text"] == summary


def test_builtin_driver_is_recorded(tmp_path: Path, digits_models: Path) -> None:
    doc = evaluation(digits_models, driver="builtin", stability={"maxWindows": 2})
    [loaded] = load_evaluations(write(tmp_path, doc))
    outcome = evaluate(loaded)
    validate(outcome.document)
    assert outcome.document["measurements"][0]["driver"] == "builtin"
    assert "loadgen" not in outcome.document["measurements"][0]


def test_missing_loadgen_names_the_field_and_the_fix(
    tmp_path: Path, digits_models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "mlperf_loadgen", None)  # import raises ImportError
    [loaded] = load_evaluations(write(tmp_path, evaluation(digits_models)))
    with pytest.raises(EvaluationError) as caught:
        evaluate(loaded, output=tmp_path / "out.json")
    error = caught.value.document["error"]
    assert error["field"] == "spec.scenario.driver"
    assert "pip install 'mlmodelscope[loadgen]'" in error["message"]
    assert "stage_durations_s" in caught.value.document
    assert "fetch model" not in caught.value.document["stage_durations_s"]


BAD: list[tuple[dict[str, Any], str]] = [
    ({"type": "Server", "targetQPS": "auto"}, "targetQPS"),
    ({"repetitions": 3}, "repetitions"),
    ({"latencyPercentiles": [50.0, 98.0]}, "latencyPercentiles"),
    ({"type": "Server", "targetQPS": 10, "latencyBoundPercentile": 98.0}, "latencyBoundPercentile"),
    ({"type": "MultiStream", "samplesPerQuery": 8, "batchSizes": [3]}, "batchSizes"),
]


@pytest.mark.parametrize(("scenario", "field"), BAD, ids=[f for _, f in BAD])
def test_bad_combinations_are_refused(
    tmp_path: Path, digits_models: Path, scenario: dict[str, Any], field: str
) -> None:
    with pytest.raises(SpecValidationError) as caught:
        load_evaluations(write(tmp_path, evaluation(digits_models, **scenario)))
    paths = [p.path for p in caught.value.problems]
    assert f"spec.scenario.{field}" in paths, paths
    assert "driver loadgen" in str(caught.value)
    # the same settings are fine with the built-in driver
    Scenario.model_validate({**scenario, "driver": "builtin"})


def test_the_cel_rules_carry_loadgens_percentiles() -> None:
    rules = Scenario.model_json_schema()["x-kubernetes-validations"]
    listed = "[" + ", ".join(f"{p:.1f}" for p in LOADGEN_PERCENTILES) + "]"
    assert sum(listed in r["rule"] for r in rules) == 2
    assert all("self.driver != 'loadgen'" in r["rule"] for r in rules if "loadgen" in r["message"])


def test_invalid_reasons_are_loadgens_words(tmp_path: Path) -> None:
    summary = (
        "Result is : INVALID\n  Min duration satisfied : Yes\n  Early stopping satisfied: NO\n"
        "Recommendations:\nEarly Stopping Result:\n * Only processed 16 queries.\n"
        "\n====\nAdditional Stats\n * not a reason\n"
    )
    detail = tmp_path / "detail.txt"
    record = {"key": "error_runtime", "value": "Ran out", "metadata": {"is_error": True}}
    detail.write_text(":::MLLOG " + json.dumps(record) + "\n")
    reasons = _reasons(DetailLog.read(detail), summary)
    assert reasons == [
        "LoadGen: Early stopping satisfied: NO (Only processed 16 queries.)",
        "LoadGen error: error_runtime: Ran out",
    ]
