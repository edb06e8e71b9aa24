"""Numerical agreement between runs, on real runs: the digits CNN evaluated by the agent in
ONNX Runtime, PyTorch and TensorFlow, once more in ONNX Runtime with a wrong preprocessing scale,
and once as an ONNX model that ends in a softmax (probabilities instead of logits). Every
expectation is computed here from the raw outputs the agent returned, never copied from what
compare says."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from mlmodelscope.agent.accuracy import sample_predictions
from mlmodelscope.agent.digits import digits_evaluation, ensure_digits_models
from mlmodelscope.agent.runner import evaluate
from mlmodelscope.cli import app
from mlmodelscope.contract.result import PREDICTIONS_LIMIT, AccuracyResult, SamplePredictions
from mlmodelscope.report.compare import (
    FIRST_DIFFERENCES,
    NOT_RECORDED,
    LoadedRun,
    SampleDifference,
    compare,
    load_result,
)
from mlmodelscope.report.html import render_html
from mlmodelscope.report.render import NO_AGREEMENT, render
from mlmodelscope.spec import load_evaluations

pytestmark = pytest.mark.frameworks

QUICK = {"warmup": 3, "minQueryCount": 20, "minDuration": "20ms", "stability": {"maxWindows": 2}}
SWEEP = "agreement-test"
TEST_SAMPLES = 360
"""The digits test split."""
FRAMEWORKS = {"ort": "onnxruntime", "torch": "pytorch", "tf": "tensorflow"}


def softmax_model(models: Path, folder: Path) -> Path:
    """The digits ONNX model with a Softmax appended: the same network, outputting
    probabilities."""
    import onnx
    from onnx import helper

    model = onnx.load(str(models / "digits.onnx"))
    graph = model.graph
    logits = graph.output[0].name
    graph.node.append(helper.make_node("Softmax", [logits], ["probabilities"], axis=-1))
    shape = graph.output[0].type
    out = onnx.ValueInfoProto()
    out.name = "probabilities"
    out.type.CopyFrom(shape)
    graph.output.pop()
    graph.output.append(out)
    onnx.checker.check_model(model)
    path = folder / "digits-softmax.onnx"
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, np.ndarray]]:
    """name -> (its result document, the raw first output of every sample) of real runs,
    each labelled as a child of the sweep ``agreement-test`` and recorded in a store."""
    models = ensure_digits_models()
    folder = tmp_path_factory.mktemp("agreement")
    scenario = {**QUICK, "batchSizes": [8]}
    documents = [
        digits_evaluation(models, framework, name, scenario=scenario)
        for name, framework in FRAMEWORKS.items()
    ]
    wrong_scale = [{"scale": {"factor": 1.0}}, {"layout": {"from": "HWC", "to": "CHW"}}]
    documents.append(
        digits_evaluation(
            models, "onnxruntime", "ort-wrong", scenario=scenario, preprocessing=wrong_scale
        )
    )
    probabilities = digits_evaluation(models, "onnxruntime", "ort-softmax", scenario=scenario)
    probabilities["spec"]["model"]["uri"] = str(softmax_model(models, folder))
    probabilities["spec"]["model"]["outputs"] = [{"name": "probabilities", "shape": [-1, 10]}]
    documents.append(probabilities)
    for document in documents:
        document["metadata"]["labels"] = {"mlmodelscope.io/sweep": SWEEP}
    spec = folder / "spec.yaml"
    spec.write_text(yaml.safe_dump_all(documents))
    found: dict[str, tuple[Path, np.ndarray]] = {}
    from mlmodelscope.store import open_store

    with open_store(f"sqlite:///{folder / 'store.db'}") as store:
        for loaded in load_evaluations(spec):
            name = loaded.evaluation.metadata.name
            outcome = evaluate(loaded, output=folder / f"{name}.json")
            assert outcome.outputs is not None and outcome.path is not None
            store.record(outcome.document)
            found[name] = (outcome.path, outcome.outputs)
    return found


def loaded(runs: dict[str, tuple[Path, np.ndarray]], *names: str) -> list[LoadedRun]:
    return [load_result(runs[name][0]) for name in names]


def document(runs: dict[str, tuple[Path, np.ndarray]], name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(runs[name][0].read_text())
    return data


def chosen(outputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(top-1 class, the output at it) of every sample."""
    best = np.argmax(outputs, axis=1)
    return best, outputs[np.arange(len(outputs)), best]


def store_env(runs: dict[str, tuple[Path, np.ndarray]]) -> dict[str, str]:
    return {"MLMS_STORE_URL": f"sqlite:///{runs['ort'][0].parent / 'store.db'}", "COLUMNS": "240"}


# ------------------------------------------------------------------ what the agent records


def test_the_agent_records_every_samples_top1_class_and_raw_score(
    runs: dict[str, tuple[Path, np.ndarray]],
) -> None:
    for name, (_path, outputs) in runs.items():
        accuracy = AccuracyResult.model_validate(document(runs, name)["accuracy"])
        recorded = accuracy.predictions
        assert recorded is not None, name
        assert recorded.count == accuracy.samples == len(outputs) == TEST_SAMPLES
        assert (recorded.classes, recorded.output_dtype) == (10, "float32")
        best, score = chosen(outputs)
        assert recorded.classes_list() == best.tolist()
        assert recorded.scores_list() == score.tolist()  # float32, bit for bit
        expected = "probability" if name == "ort-softmax" else "logit"
        assert recorded.score_scale == expected, name


def test_the_predictions_keep_the_document_small(runs: dict[str, tuple[Path, np.ndarray]]) -> None:
    predictions = document(runs, "ort")["accuracy"]["predictions"]
    size = len(json.dumps(predictions, separators=(",", ":")))
    assert size < 4 * 1024  # 360 samples x 8 bytes, base64
    full = sample_predictions(np.zeros((PREDICTIONS_LIMIT + 50, 1000), np.float32))
    assert full is not None and full.count == PREDICTIONS_LIMIT
    assert len(full.model_dump_json()) < 48 * 1024  # the most any document carries


# ------------------------------------------------------------------ compare


def test_frameworks_agree_sample_by_sample(runs: dict[str, tuple[Path, np.ndarray]]) -> None:
    comparison = compare(loaded(runs, "ort", "torch", "tf"))
    agreement = comparison.agreement
    assert agreement is not None
    assert agreement.reference == "ort"
    assert agreement.dataset == f"digits/test ({TEST_SAMPLES} samples)"
    assert [pair.run for pair in agreement.pairs] == ["torch", "tf"]
    ref_outputs = runs["ort"][1]
    ref_best, ref_score = chosen(ref_outputs)
    for pair in agreement.pairs:
        outputs = runs[pair.run][1]
        best, score = chosen(outputs)
        same = best == ref_best
        assert pair.bit_identical == np.array_equal(outputs, ref_outputs)
        assert pair.samples == TEST_SAMPLES
        assert pair.top1_agree == int(same.sum())
        assert pair.top1_differ == TEST_SAMPLES - int(same.sum())
        assert pair.top1_agreement == pytest.approx(same.mean())
        assert pair.same_class_samples == int(same.sum())
        deltas = np.abs(score[same].astype(np.float64) - ref_score[same].astype(np.float64))
        assert pair.max_abs_score_diff == pytest.approx(float(deltas.max()), rel=1e-12, abs=0)
        assert pair.mean_abs_score_diff == pytest.approx(float(deltas.mean()), rel=1e-9)
        assert pair.max_abs_score_diff is not None and pair.max_abs_score_diff < 1e-3
        assert pair.score_scale == "logit" and pair.note is None


def test_wrong_preprocessing_disagrees_at_the_samples_it_changed(
    runs: dict[str, tuple[Path, np.ndarray]],
) -> None:
    comparison = compare(loaded(runs, "ort", "ort-wrong"))
    assert comparison.agreement is not None
    [pair] = comparison.agreement.pairs
    ref_best, _ = chosen(runs["ort"][1])
    wrong_best, _ = chosen(runs["ort-wrong"][1])
    differ = np.flatnonzero(ref_best != wrong_best)
    assert len(differ) > 0
    assert pair.bit_identical is False
    assert pair.top1_differ == len(differ)
    assert pair.top1_agree == TEST_SAMPLES - len(differ)
    assert pair.first_differences == [
        SampleDifference(int(i), int(ref_best[i]), int(wrong_best[i]))
        for i in differ[:FIRST_DIFFERENCES]
    ]
    console = Console(record=True, width=240)
    render(console, comparison)
    text = console.export_text()
    first = differ[0]
    assert f"#{first}: {ref_best[first]}→{wrong_best[first]}" in text
    assert f"({TEST_SAMPLES - len(differ)}/{TEST_SAMPLES})" in text


def test_probabilities_and_logits_are_not_subtracted(
    runs: dict[str, tuple[Path, np.ndarray]],
) -> None:
    comparison = compare(loaded(runs, "ort", "ort-softmax"))
    assert comparison.agreement is not None
    [pair] = comparison.agreement.pairs
    ref_best, _ = chosen(runs["ort"][1])
    soft_best, _ = chosen(runs["ort-softmax"][1])
    assert pair.top1_agree == int((ref_best == soft_best).sum())  # the classes still compare
    assert pair.max_abs_score_diff is None and pair.mean_abs_score_diff is None
    assert (
        pair.note == "scores not comparable: the reference outputs logits, this run probabilities"
    )


def test_cli_compare_prints_and_json_carries_the_agreement(
    runs: dict[str, tuple[Path, np.ndarray]],
) -> None:
    files = [str(runs[name][0]) for name in ("ort", "torch", "ort-wrong")]
    result = CliRunner().invoke(app, ["compare", *files], env={"COLUMNS": "240"})
    assert result.exit_code == 0, result.output
    assert f"numerical agreement with ort on digits/test ({TEST_SAMPLES} samples)" in result.output
    assert "first differing samples" in result.output

    as_json = CliRunner().invoke(app, ["compare", *files, "--json"])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.stdout)
    expected = compare(loaded(runs, "ort", "torch", "ort-wrong")).agreement
    assert expected is not None
    assert data["agreement"]["reference"] == "ort"
    pairs = {pair["run"]: pair for pair in data["agreement"]["pairs"]}
    assert set(pairs) == {"torch", "ort-wrong"}
    wrong = next(p for p in expected.pairs if p.run == "ort-wrong")
    assert pairs["ort-wrong"]["top1_differ"] == wrong.top1_differ
    assert pairs["ort-wrong"]["first_differences"][0] == {
        "index": wrong.first_differences[0].index,
        "reference_class": wrong.first_differences[0].reference_class,
        "run_class": wrong.first_differences[0].run_class,
    }


def test_html_report_has_the_section(runs: dict[str, tuple[Path, np.ndarray]]) -> None:
    runs_ = loaded(runs, "ort", "torch", "ort-wrong")
    page = render_html(runs_)
    assert "<h2>Numerical agreement</h2>" in page
    agreement = compare(runs_).agreement
    assert agreement is not None
    wrong = agreement.pairs[1]
    first = wrong.first_differences[0]
    assert (
        f'data-index="{first.index}" data-reference-class="{first.reference_class}" '
        f'data-run-class="{first.run_class}"'
    ) in page
    assert f'data-column="top1_differ" data-value="{wrong.top1_differ!r}"' in page
    torch = agreement.pairs[0]
    assert f'data-column="max_abs_score_diff" data-value="{torch.max_abs_score_diff!r}"' in page


def test_a_sweeps_runs_from_the_store(runs: dict[str, tuple[Path, np.ndarray]]) -> None:
    from mlmodelscope.store import open_store

    env = store_env(runs)
    with open_store(env["MLMS_STORE_URL"]) as store:
        found = store.list_runs(sweep=SWEEP)
        assert {r.evaluation for r in found} == set(runs)
        assert store.list_runs(sweep="another-sweep") == []
    result = CliRunner().invoke(app, ["compare", "--sweep", SWEEP, "--json"], env=env)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    started = sorted(runs, key=lambda name: document(runs, name)["started_at"])
    assert [run["label"] for run in data["runs"]] == started  # oldest first
    assert [pair["run"] for pair in data["agreement"]["pairs"]] == started[1:]

    # a run given first is the reference, and is not repeated
    torch_id = document(runs, "torch")["run_id"]
    result = CliRunner().invoke(app, ["compare", torch_id, "--sweep", SWEEP, "--json"], env=env)
    assert result.exit_code == 0, result.output
    labels = [run["label"] for run in json.loads(result.stdout)["runs"]]
    assert labels[0] == "torch" and sorted(labels) == sorted(runs)

    report = runs["ort"][0].parent / "sweep.html"
    result = CliRunner().invoke(app, ["report", "--sweep", SWEEP, "-o", str(report)], env=env)
    assert result.exit_code == 0, result.output
    assert "<h2>Numerical agreement</h2>" in report.read_text()

    unknown = CliRunner().invoke(app, ["compare", "--sweep", "no-such-sweep"], env=env)
    assert unknown.exit_code == 1
    assert "no runs labelled mlmodelscope.io/sweep=no-such-sweep" in unknown.output
    nothing = CliRunner().invoke(app, ["compare"], env=env)
    assert nothing.exit_code == 1 and "nothing to compare" in nothing.output


# ------------------------------------------------------------------ older documents


def without_predictions(runs: dict[str, tuple[Path, np.ndarray]], name: str, folder: Path) -> Path:
    """The run's document as an agent before per-sample predictions wrote it."""
    data = document(runs, name)
    del data["accuracy"]["predictions"]
    path = folder / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def test_older_documents_still_compare(
    runs: dict[str, tuple[Path, np.ndarray]], tmp_path: Path
) -> None:
    old = without_predictions(runs, "torch", tmp_path)
    comparison = compare([load_result(runs["ort"][0]), load_result(old)])
    assert comparison.agreement is not None
    [pair] = comparison.agreement.pairs
    assert pair.note == f"{NOT_RECORDED} (this run)"
    assert pair.bit_identical == (
        document(runs, "ort")["accuracy"]["outputs_sha256"]
        == document(runs, "torch")["accuracy"]["outputs_sha256"]
    )
    assert (pair.samples, pair.top1_agree, pair.max_abs_score_diff) == (None, None, None)
    result = CliRunner().invoke(
        app, ["compare", str(runs["ort"][0]), str(old)], env={"COLUMNS": "240"}
    )
    assert result.exit_code == 0, result.output
    assert "numerical agreement with ort" in result.output
    console = Console(record=True, width=240)
    render(console, comparison)
    assert f"{NOT_RECORDED} (this run)" in console.export_text()
    assert "<h2>Numerical agreement</h2>" in render_html(
        [load_result(runs["ort"][0]), load_result(old)]
    )


def test_no_section_without_a_shared_dataset_or_accuracy_pass(
    runs: dict[str, tuple[Path, np.ndarray]], tmp_path: Path
) -> None:
    other = document(runs, "torch")
    other["dataset"]["samples"] = 100  # as a run with dataset.limit 100
    other_path = tmp_path / "other.json"
    other_path.write_text(json.dumps(other))
    comparison = compare([load_result(runs["ort"][0]), load_result(other_path)])
    assert comparison.agreement is None
    console = Console(record=True, width=200)
    render(console, comparison)
    assert NO_AGREEMENT in console.export_text()
    assert "Not shown" in render_html([load_result(runs["ort"][0]), load_result(other_path)])

    # a third run on the same dataset is compared; the other one is listed
    mixed = compare(
        [load_result(runs["ort"][0]), load_result(other_path), load_result(runs["tf"][0])]
    )
    assert mixed.agreement is not None
    assert [p.run for p in mixed.agreement.pairs] == ["tf"]
    assert mixed.agreement.other_datasets == ["torch"]

    no_pass = document(runs, "ort")
    no_pass["accuracy"] = None
    no_pass_path = tmp_path / "no-pass.json"
    no_pass_path.write_text(json.dumps(no_pass))
    assert compare([load_result(no_pass_path), load_result(runs["tf"][0])]).agreement is None
    reverse = compare([load_result(runs["tf"][0]), load_result(no_pass_path)])
    assert reverse.agreement is not None
    assert reverse.agreement.pairs[0].note == "no accuracy pass in this run"


# ------------------------------------------------------------------ encoding


def test_encoding_round_trip_is_exact_and_little_endian() -> None:
    classes = [0, 9, 2**31 - 1, 7, 123456]
    scores = np.array([1.5, -3.25e-7, 3.4e38, np.float32(0.1), -0.0], np.float32)
    encoded = SamplePredictions.of(
        classes, scores.tolist(), output_dtype="float32", classes=10, score_scale="logit"
    )
    assert encoded.count == 5
    assert encoded.classes_list() == classes
    assert encoded.scores_list() == scores.tolist()
    raw_classes = np.frombuffer(base64.b64decode(encoded.top1_class), dtype="<i4")
    assert raw_classes.tolist() == classes
    assert encoded.top1_score is not None
    raw_scores = np.frombuffer(base64.b64decode(encoded.top1_score), dtype="<f4")
    assert raw_scores.tobytes() == scores.astype("<f4").tobytes()
    # through JSON and the contract's validation
    again = SamplePredictions.model_validate_json(encoded.model_dump_json())
    assert again.classes_list() == classes and again.scores_list() == scores.tolist()

    broken = encoded.model_copy(update={"count": 6})
    with pytest.raises(ValueError, match="5 values encoded, but count says 6"):
        broken.classes_list()
    with pytest.raises(ValueError, match="5 classes but 4 scores"):
        SamplePredictions.of(
            classes, scores[:4].tolist(), output_dtype="float32", classes=10, score_scale="logit"
        )
    empty = SamplePredictions.of([], [], output_dtype="float32", classes=10, score_scale="logit")
    assert empty.classes_list() == [] and empty.scores_list() == []


def test_sample_predictions_of_other_outputs() -> None:
    logits = np.array([[0.5, 2.0, 2.0], [-1.0, -3.0, -2.0]], np.float64)
    recorded = sample_predictions(logits)
    assert recorded is not None
    assert recorded.classes_list() == [1, 0]  # ties go to the lower index
    assert recorded.scores_list() == [2.0, -1.0]
    assert (recorded.output_dtype, recorded.classes, recorded.score_scale) == (
        "float64",
        3,
        "logit",
    )

    probabilities = np.array([[0.1, 0.7, 0.2], [0.25, 0.25, 0.5]], np.float16)
    recorded = sample_predictions(probabilities)
    assert recorded is not None and recorded.score_scale == "probability"
    assert recorded.output_dtype == "float16"
    assert recorded.scores_list() == [float(np.float16(0.7)), 0.5]

    indices = np.array([3, 1, 4, 1, 5], np.int64)
    recorded = sample_predictions(indices, limit=3)
    assert recorded is not None
    assert recorded.count == 3 and recorded.classes_list() == [3, 1, 4]
    assert (recorded.scores_list(), recorded.classes, recorded.score_scale) == (None, None, "none")

    with_nan = np.array([[np.nan, 1.0], [0.2, 0.8]], np.float32)
    recorded = sample_predictions(with_nan)
    assert recorded is not None and recorded.score_scale == "logit"
    assert sample_predictions(np.float32(1.0).reshape(())) is None


def test_the_docs_name_every_agreement_key() -> None:
    """docs/results.md lists the keys of `mlms compare --json`'s agreement as they are."""
    import dataclasses
    import re

    from mlmodelscope.report.compare import Agreement, NumericalAgreement

    text = (Path(__file__).resolve().parents[2] / "docs" / "results.md").read_text()
    section = text[text.index("`agreement` (`null`") :]
    section = section[: section.index("\n\n")]
    named = set(re.findall(r"`([a-z_0-9]+)`", section))
    for cls in (Agreement, NumericalAgreement, SampleDifference):
        fields = {f.name for f in dataclasses.fields(cls)} - {"run"}
        assert fields <= named | {"index", "reference_class", "run_class"}, cls.__name__
    assert {"index", "reference_class", "run_class"} <= set(
        re.findall(r"[{ ]([a-z_]+)[,}]", section.replace("\n", " "))
    )
    assert f"first {PREDICTIONS_LIMIT} samples" in text
    assert NOT_RECORDED in text
