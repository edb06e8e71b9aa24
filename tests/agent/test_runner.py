"""The agent end to end on the real digits CNN: every adapter, every scenario, two batch sizes,
and the failures a user will meet, each with one clear message and no complete-looking file."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import logging
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from loopback import Site, send
from typer.testing import CliRunner

from mlmodelscope.agent.digits import FRAMEWORK_FORMATS, digits_evaluation
from mlmodelscope.agent.runner import EvaluationError, evaluate
from mlmodelscope.cli import app
from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.contract.schema import SCHEMA_PATH
from mlmodelscope.spec import load_evaluations

pytestmark = pytest.mark.frameworks

SCHEMA = json.loads(SCHEMA_PATH.read_text())
QUICK = {"warmup": 3, "minQueryCount": 20, "minDuration": "20ms", "stability": {"maxWindows": 2}}
SCENARIOS: dict[str, dict[str, Any]] = {
    "SingleStream": {"type": "SingleStream"},
    "MultiStream": {"type": "MultiStream", "samplesPerQuery": 8},
    "Server": {"type": "Server", "targetQPS": 100, "latencyBound": "1s"},
    "Offline": {"type": "Offline"},
}


def document(models: Path, backend: str, name: str = "eval", **spec: Any) -> dict[str, Any]:
    """A quick digits ModelEvaluation for ``backend``; ``spec`` sections are merged in."""
    scenario = {"batchSizes": [1, 8], **QUICK, **spec.pop("scenario", {})}
    return digits_evaluation(models, backend, name, scenario=scenario, **spec)


def write(tmp_path: Path, *documents: dict[str, Any]) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    return path


def validate_result(doc: dict[str, Any]) -> None:
    """The document holds to the contract: its model and the schema generated from it."""
    assert "contract_error" not in doc
    ResultDocument.model_validate(doc)
    jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker()).validate(doc)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("framework", list(FRAMEWORK_FORMATS))
def test_every_adapter_every_scenario(
    tmp_path: Path, digits_models: Path, framework: str, scenario: str
) -> None:
    spec = write(tmp_path, document(digits_models, framework, scenario={**SCENARIOS[scenario]}))
    [loaded] = load_evaluations(spec)
    outcome = evaluate(loaded, output=tmp_path / "result.json")
    doc = json.loads((tmp_path / "result.json").read_text())
    validate_result(doc)
    assert doc["status"] == "Succeeded"
    assert doc["backend"]["framework"] == framework
    assert doc["accuracy"]["top1"] >= 0.95
    assert [m["batch_size"] for m in doc["measurements"]] == [1, 8]
    assert doc["startup"]["warmup_queries"] == 3  # the first batch size's run
    assert "framework_import" in doc["startup"]["phases_s"]
    for m in doc["measurements"]:
        assert m["scenario"] == scenario
        assert m["warmup"]["queries"] == 3
        assert len(m["raw"]["latencies_ns"]) == m["queries"] == m["latency"]["count"]
        assert m["harness_overhead"]["percentiles_s"]["p50"] > 0
        if scenario == "MultiStream":
            assert m["samples"] == 8 * m["queries"]
        if scenario == "Server":
            assert m["server"]["target_qps"] == 100
    assert outcome.outputs is not None and outcome.outputs.shape == (360, 10)
    predictions = ResultDocument.model_validate(doc).accuracy.predictions  # type: ignore[union-attr]
    assert predictions is not None and predictions.count == doc["dataset"]["samples"] == 360
    assert predictions.classes_list() == outcome.outputs.argmax(axis=1).tolist()


def test_same_spec_same_stack_same_bits(tmp_path: Path, digits_models: Path) -> None:
    spec = write(tmp_path, document(digits_models, "onnxruntime"))
    [loaded] = load_evaluations(spec)
    first = evaluate(loaded).document
    second = evaluate(loaded).document
    assert first["run_id"] != second["run_id"]
    assert first["accuracy"]["outputs_sha256"] == second["accuracy"]["outputs_sha256"]
    assert first["accuracy"]["top1"] == second["accuracy"]["top1"]
    assert first["spec_sha256"] == second["spec_sha256"]


def test_three_frameworks_agree(tmp_path: Path, digits_models: Path) -> None:
    spec = write(
        tmp_path,
        *(
            document(digits_models, f, name=f"digits-{f}", scenario={"batchSizes": [16]})
            for f in FRAMEWORK_FORMATS
        ),
    )
    result = CliRunner().invoke(app, ["run", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    comparison = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert comparison["top1_spread_percentage_points"] <= 0.5
    assert all(row["max_abs_output_diff"] < 1e-4 for row in comparison["outputs"])
    assert "max |diff|" in result.output


def test_repetitions_record_each_repetition_and_an_interval(
    tmp_path: Path, digits_models: Path
) -> None:
    doc = document(digits_models, "onnxruntime", scenario={"batchSizes": [1], "repetitions": 3})
    result = CliRunner().invoke(app, ["run", str(write(tmp_path, doc)), "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    found = json.loads((tmp_path / "eval.json").read_text())
    validate_result(found)
    [m] = found["measurements"]
    spread = m["spread"]
    assert spread["repetitions"] == len(spread["figures"]) == len(m["repetitions"]) == 3
    assert [f["queries"] for f in spread["figures"]] == [r["queries"] for r in m["repetitions"]]
    assert (spread["method"], spread["confidence_level"]) == ("percentile", 0.95)
    for name in ("p50_s", "p99_s", "throughput_samples_per_s"):
        figure = spread[name]
        assert figure["low"] <= figure["estimate"] <= figure["high"], name
    assert m["warmup"]["queries"] == 3  # once, before the first repetition
    assert "interval over 3 repetitions" in result.output
    assert found["results"][0]["latency_ms"]["p50"] == pytest.approx(
        m["latency"]["percentiles_s"]["p50"] * 1e3
    )  # the headline row is still the median repetition's
    interval = found["results"][0]["p50_interval_ms"]  # and carries the interval, in ms
    assert (interval["repetitions"], interval["confidence_level"]) == (3, 0.95)
    for key in ("estimate", "low", "high"):
        assert interval[key] == pytest.approx(spread["p50_s"][key] * 1e3), key


def failed_run(tmp_path: Path, doc: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Run through the CLI; return what it printed and the Failed document it left."""
    spec = write(tmp_path, doc)
    result = CliRunner().invoke(app, ["run", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code != 0
    path = tmp_path / "out" / f"{doc['metadata']['name']}.json"
    left = json.loads(path.read_text()) if path.exists() else {"status": "absent"}
    assert left["status"] in ("Failed", "absent"), "a failed run left a complete-looking file"
    assert "results" not in left and "measurements" not in left
    if path.exists():
        validate_result(left)
    return result.output, left


def test_wrong_sha256(tmp_path: Path, digits_models: Path) -> None:
    doc = document(digits_models, "onnxruntime", model={"sha256": "0" * 64})
    output, left = failed_run(tmp_path, doc)
    assert "spec.model.sha256" in output
    assert left["error"]["field"] == "spec.model.sha256"


def test_missing_file(tmp_path: Path, digits_models: Path) -> None:
    doc = document(digits_models, "onnxruntime", model={"uri": str(tmp_path / "nope.onnx")})
    output, left = failed_run(tmp_path, doc)
    assert "spec.model.uri" in output and "nope.onnx" in output
    assert left["error"]["field"] == "spec.model.uri"


def test_unsupported_format_for_framework(tmp_path: Path, digits_models: Path) -> None:
    doc = document(digits_models, "onnxruntime", framework={"name": "tensorflow"})
    output, left = failed_run(tmp_path, doc)
    assert "spec.model.format" in output and left["status"] == "absent"


def test_shape_mismatch_between_model_and_preprocessing(
    tmp_path: Path, digits_models: Path
) -> None:
    doc = document(digits_models, "onnxruntime", preprocessing=[{"scale": {"factor": 0.0625}}])
    output, left = failed_run(tmp_path, doc)
    assert "spec.model.inputs[0].shape" in output
    assert left["error"]["field"] == "spec.model.inputs[0].shape"


def test_missing_extra(
    tmp_path: Path, digits_models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    output, left = failed_run(tmp_path, document(digits_models, "onnxruntime"))
    assert "pip install 'mlmodelscope[onnxruntime]'" in output
    assert left["error"]["type"] == "MissingExtraError"


def test_framework_version_constraint(tmp_path: Path, digits_models: Path) -> None:
    doc = document(digits_models, "onnxruntime", framework={"version": "<1.0"})
    output, left = failed_run(tmp_path, doc)
    assert "spec.framework.version" in output
    assert left["error"]["field"] == "spec.framework.version"


def test_evaluate_raises_with_the_failed_document(tmp_path: Path, digits_models: Path) -> None:
    spec = write(tmp_path, document(digits_models, "onnxruntime", model={"sha256": "1" * 64}))
    [loaded] = load_evaluations(spec)
    with pytest.raises(EvaluationError) as info:
        evaluate(loaded, output=tmp_path / "r.json")
    assert info.value.document["status"] == "Failed"
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "Failed"


# ------------------------------------------------------------------- credentials in URIs

SECRET, SIGNATURE, TOKEN = "s3cret-pw", "sig-abc123", "labels-token-42"


def test_uri_credentials_reach_the_server_but_never_the_result_or_the_logs(
    tmp_path: Path,
    digits_models: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("MLMS_CACHE_DIR", str(tmp_path / "cache"))
    site = Site()
    model_bytes = (digits_models / "digits.onnx").read_bytes()
    basic = "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()

    def private(h: http.server.BaseHTTPRequestHandler) -> None:
        if h.headers.get("Authorization") == basic and f"={SIGNATURE}" in h.path:
            send(model_bytes)(h)
        else:
            h.send_error(403)

    site.routes["/digits.onnx"] = private
    site.routes["/labels.txt"] = send("\n".join(str(i) for i in range(10)).encode())
    uri = site.url(f"/digits.onnx?X-Amz-Signature={SIGNATURE}&v=1", userinfo=f"alice:{SECRET}@")
    labels = site.url(f"/labels.txt?access_token={TOKEN}")
    post = [{"softmax": {}}, {"topk": {"k": 5}}, {"labels": {"uri": labels}}]
    doc = document(digits_models, "onnxruntime", model={"uri": uri}, postprocessing=post)
    [loaded] = load_evaluations(write(tmp_path, doc))
    caplog.set_level(logging.DEBUG)
    try:
        outcome = evaluate(loaded, output=tmp_path / "result.json")
    finally:
        site.close()

    text = (tmp_path / "result.json").read_text()
    cached = "".join(p.read_text() for p in (tmp_path / "cache").rglob("meta.json"))
    for secret in (SECRET, SIGNATURE, TOKEN):
        assert secret not in text + cached + caplog.text
    result = json.loads(text)
    assert result["status"] == "Succeeded"
    shown = site.url("/digits.onnx?X-Amz-Signature=REDACTED&v=1", userinfo="REDACTED@")
    assert result["model"]["uri"] == result["spec"]["model"]["uri"] == shown
    assert result["spec"]["postprocessing"][2]["labels"]["uri"].endswith("access_token=REDACTED")
    canonical = json.dumps(result["spec"], sort_keys=True, separators=(",", ":"))
    assert result["spec_sha256"] == hashlib.sha256(canonical.encode()).hexdigest()
    assert outcome.document == result
    assert loaded.evaluation.spec.model.uri == uri, "the submitted spec keeps what it says"
