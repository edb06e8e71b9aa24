"""``repetitionProcess: fresh`` on the real digits CNN: each repetition in its own process
that loads the model again, the repetitions summarized as in one process, and a repetition
whose process fails failing the whole run, named."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from mlmodelscope.agent.digits import FRAMEWORK_FORMATS, MODEL_FILES, digits_evaluation
from mlmodelscope.agent.hooks import Reporter
from mlmodelscope.agent.runner import EvaluationError, evaluate
from mlmodelscope.cli import app
from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.contract.schema import SCHEMA_PATH
from mlmodelscope.spec import load_evaluations

pytestmark = pytest.mark.frameworks

QUICK = {"warmup": 3, "minQueryCount": 20, "minDuration": "20ms", "stability": {"maxWindows": 2}}


def fresh_spec(tmp_path: Path, models: Path, framework: str, **scenario: Any) -> Path:
    """A digits evaluation with fresh-process repetitions (3 unless ``scenario`` says)."""
    settings = {"batchSizes": [1], "repetitions": 3, "repetitionProcess": "fresh", **QUICK}
    document = digits_evaluation(models, framework, "eval", scenario={**settings, **scenario})
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def check_fresh(measurement: dict[str, Any], repetitions: int) -> list[int]:
    """Every repetition ran in its own fresh process, loaded and warmed up there; their pids."""
    assert measurement["repetition_process"] == "fresh"
    reps = measurement["repetitions"]
    assert [r["repetition"] for r in reps] == list(range(repetitions))
    pids = [r["process"]["pid"] for r in reps]
    assert len(set(pids)) == repetitions and os.getpid() not in pids
    for r in reps:
        assert r["process"]["framework_import_s"] >= 0 and r["process"]["model_load_s"] > 0
        assert r["warmup"]["queries"] == 3  # each process warms up before its repetition
        assert r["queries"] >= 20
    assert measurement["process"] == reps[measurement["repetition"]]["process"]  # the median
    spread = measurement["spread"]
    assert spread["repetitions"] == len(spread["figures"]) == repetitions
    assert [f["queries"] for f in spread["figures"]] == [r["queries"] for r in reps]
    return pids


def test_three_repetitions_in_three_fresh_processes(tmp_path: Path, digits_models: Path) -> None:
    spec = fresh_spec(tmp_path, digits_models, "onnxruntime")
    result = CliRunner().invoke(app, ["run", str(spec), "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "eval.json").read_text())
    ResultDocument.model_validate(document)
    jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text())).validate(document)
    assert document["status"] == "Succeeded"
    [measurement] = document["measurements"]
    check_fresh(measurement, 3)
    assert len(measurement["raw"]["latencies_ns"]) == measurement["queries"]
    assert "startup" not in document  # no query was timed in the agent's own process
    assert document["spec"]["scenario"]["repetitionProcess"] == "fresh"
    printed = " ".join(result.output.split())  # as wrapped to the terminal's width
    assert "interval over 3 repetitions, each in a fresh process" in printed
    row = document["results"][0]
    assert row["latency_ms"]["p50"] == pytest.approx(
        measurement["latency"]["percentiles_s"]["p50"] * 1e3
    )  # the headline row is the median repetition's, as in one process


@pytest.mark.slow  # two more imports of torch: seconds each
def test_pytorch_repetitions_in_fresh_processes(tmp_path: Path, digits_models: Path) -> None:
    [loaded] = load_evaluations(fresh_spec(tmp_path, digits_models, "pytorch", repetitions=2))
    document = evaluate(loaded).document
    assert document["backend"]["framework"] == "pytorch"
    check_fresh(document["measurements"][0], 2)


def test_server_auto_searches_in_each_fresh_process(tmp_path: Path, digits_models: Path) -> None:
    spec = fresh_spec(
        tmp_path, digits_models, "onnxruntime", repetitions=2, type="Server", targetQPS="auto"
    )
    [loaded] = load_evaluations(spec)
    [measurement] = evaluate(loaded).document["measurements"]
    check_fresh(measurement, 2)
    for r in measurement["repetitions"]:
        assert r["server"]["search"] and r["server"]["target_qps"] > 0  # its own search


def test_same_is_said_in_the_document(tmp_path: Path, digits_models: Path) -> None:
    spec = fresh_spec(tmp_path, digits_models, "onnxruntime", repetitions=2, repetitionProcess=None)
    [loaded] = load_evaluations(spec)
    document = evaluate(loaded).document
    [measurement] = document["measurements"]
    assert measurement["repetition_process"] == "same"
    assert "process" not in measurement and "process" not in measurement["repetitions"][0]
    assert "repetitionProcess" not in document["spec"]["scenario"]
    assert document["startup"]["warmup_queries"] == 3


def test_a_repetition_whose_process_fails_fails_the_run(
    tmp_path: Path, digits_models: Path
) -> None:
    """The model file disappears while the first repetition is measured (its progress, once
    the measurement has begun, is the cue): the second repetition's process cannot load it,
    and the run is Failed, naming that repetition, although one repetition was measured."""
    model = tmp_path / "model" / MODEL_FILES[FRAMEWORK_FORMATS["onnxruntime"]]
    model.parent.mkdir()
    shutil.copy(digits_models / model.name, model)
    spec = fresh_spec(tmp_path, model.parent, "onnxruntime", minDuration="300ms")
    [loaded] = load_evaluations(spec)
    stages: list[str] = []

    def progress(done: int, needed: int) -> None:
        if stages[-1].startswith("measure SingleStream"):  # not the accuracy pass
            model.unlink(missing_ok=True)

    reporter = Reporter(stage=stages.append, progress=progress)
    with pytest.raises(EvaluationError) as caught:
        evaluate(loaded, output=tmp_path / "result.json", reporter=reporter)
    document = json.loads((tmp_path / "result.json").read_text())
    assert document == caught.value.document
    assert document["status"] == "Failed" and "results" not in document
    message = document["error"]["message"]
    assert message.startswith("repetition 2 of 3 (batch size 1) failed in its fresh process ")
    assert f"model file not found: {model}" in message
    assert document["error"]["type"] == "RepetitionError"
