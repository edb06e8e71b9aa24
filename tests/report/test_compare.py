"""`mlms compare` on real result documents: the digits CNN run by `mlms run` in ONNX Runtime
and PyTorch, and once more in ONNX Runtime with a wrong preprocessing scale and other batch
sizes, so the comparison has framework, stack and spec differences and an accuracy drop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from compare_runs import NAMES, doc, store_env
from typer.testing import CliRunner

from mlmodelscope.cli import app
from mlmodelscope.report.compare import (
    CompareError,
    Difference,
    LoadedRun,
    compare,
    differences,
    flatten,
    load_result,
    load_runs,
    relative,
)


def runs(results: Path, *names: str) -> list[LoadedRun]:
    return [load_result(results / f"{name}.json") for name in names]


def test_rows_carry_the_documents_numbers(results: Path) -> None:
    comparison = compare(runs(results, *NAMES))
    assert [run.label for run in comparison.runs] == list(NAMES)
    assert comparison.reference == "ort"
    expected = [
        (name, row) for name in NAMES for row in doc(results, name)["results"]
    ]  # every row, in run then batch order
    assert len(comparison.rows) == len(expected) == 6
    for row, (name, want) in zip(comparison.rows, expected, strict=True):
        assert (row.run, row.scenario, row.batch_size) == (
            name,
            want["scenario"],
            want["batch_size"],
        )
        assert row.p50_ms == want["latency_ms"]["p50"]
        assert row.p99_ms == want["latency_ms"]["p99"]
        assert row.throughput == want["throughput"]
        assert row.top1 == want["top1"]
        assert row.valid == want["valid"]
        assert row.invalid_reasons == want["invalid_reasons"]
    framework = {run.label: run.framework for run in comparison.runs}
    assert framework["ort"].startswith("onnxruntime ")
    assert framework["torch"].startswith("pytorch ")


def test_relative_differences_against_the_reference_by_batch_size(results: Path) -> None:
    comparison = compare(runs(results, *NAMES))
    reference = {r["batch_size"]: r for r in doc(results, "ort")["results"]}
    rows = {(row.run, row.batch_size): row for row in comparison.rows}
    measured = {r["batch_size"]: r for r in doc(results, "torch")["results"]}
    for batch in (1, 8):
        assert rows["ort", batch].p50_rel is None  # the reference itself
        torch, got, ref = rows["torch", batch], measured[batch], reference[batch]
        p50, p99 = got["latency_ms"]["p50"], got["latency_ms"]["p99"]
        assert torch.p50_rel == pytest.approx(p50 / ref["latency_ms"]["p50"] - 1)
        assert torch.p99_rel == pytest.approx(p99 / ref["latency_ms"]["p99"] - 1)
        assert torch.throughput_rel == pytest.approx(got["throughput"] / ref["throughput"] - 1)
        assert torch.top1_rel == pytest.approx(0.0)  # same weights, same samples
    wrong = rows["ort-wrong", 1]
    assert wrong.top1 is not None and wrong.top1 < reference[1]["top1"]
    assert wrong.top1_rel is not None and wrong.top1_rel < 0
    assert wrong.top1_rel == pytest.approx(wrong.top1 / reference[1]["top1"] - 1)
    # batch size 4 has no row in the reference: nothing to be relative to
    four = rows["ort-wrong", 4]
    assert (four.p50_rel, four.p99_rel, four.throughput_rel, four.top1_rel) == (None,) * 4


def test_spec_differences_are_exactly_the_changed_fields(results: Path) -> None:
    frameworks = compare(runs(results, "ort", "torch"))
    assert {d.key for d in frameworks.spec} == {
        "spec.model.uri",
        "spec.model.format",
        "spec.framework.name",
    }
    by_key = {d.key: d.values for d in frameworks.spec}
    assert by_key["spec.framework.name"] == ["onnxruntime", "pytorch"]
    assert by_key["spec.model.format"] == ["onnx", "torchscript"]

    wrong = compare(runs(results, "ort", "ort-wrong"))
    assert wrong.spec == [
        Difference("spec.preprocessing[0].scale.factor", [0.0625, 1.0]),
        Difference("spec.scenario.batchSizes", [[1, 8], [1, 4]]),
    ]


def test_stack_differences_are_exactly_the_changed_keys(results: Path) -> None:
    same_stack = compare(runs(results, "ort", "ort-wrong"))
    assert same_stack.stack == []  # same framework, same machine

    frameworks = compare(runs(results, "ort", "torch"))
    ort, torch = doc(results, "ort"), doc(results, "torch")
    flat_ort, flat_torch = flatten(ort["stack"], "stack"), flatten(torch["stack"], "stack")
    expected = {
        key
        for key in flat_ort.keys() | flat_torch.keys()
        if flat_ort.get(key, "missing") != flat_torch.get(key, "missing")
    }
    found = {d.key: d.values for d in frameworks.stack}
    assert set(found) == expected
    assert found["stack.backend.framework"] == ["onnxruntime", "pytorch"]
    assert found["stack.backend.framework_version"] == [
        ort["backend"]["framework_version"],
        torch["backend"]["framework_version"],
    ]
    assert "stack.cpu.model" not in found and "stack.libraries.numpy" not in found


def test_cli_prints_tables(results: Path) -> None:
    files = [str(results / f"{name}.json") for name in NAMES]
    result = CliRunner().invoke(app, ["compare", *files])
    assert result.exit_code == 0, result.output
    for text in (
        "mlmodelscope comparison (Δ against ort)",
        "HW/SW stack differences",
        "stack.backend.framework_version",
        "spec differences",
        "spec.preprocessing[0].scale.factor",
        "ort-wrong",
    ):
        assert text in result.output, text


def test_cli_json_of_a_folder(results: Path) -> None:
    """A folder means its result documents, by name; comparison.json is not one of them."""
    result = CliRunner().invoke(app, ["compare", str(results), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    order = sorted(NAMES, key=lambda name: f"{name}.json")  # ort-wrong.json < ort.json
    assert [run["label"] for run in data["runs"]] == order
    assert data["reference"] == order[0]
    expected = compare(runs(results, *order), significance=True)  # as the command does
    assert data == json.loads(json.dumps(expected.to_json_dict()))
    first = data["rows"][0]
    assert first["p50_ms"] == doc(results, order[0])["results"][0]["latency_ms"]["p50"]


def test_a_file_that_is_not_a_result_document_is_named(results: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": "world"}))
    result = CliRunner().invoke(app, ["compare", str(results / "ort.json"), str(other)])
    assert result.exit_code == 1
    assert f"{other}: not an mlmodelscope result document" in result.output

    broken = tmp_path / "broken.json"
    data = doc(results, "ort")
    del data["stack"]
    broken.write_text(json.dumps(data))
    with pytest.raises(CompareError, match=rf"^{broken}: not a valid result document: .*stack"):
        load_result(broken)

    text = tmp_path / "text.json"
    text.write_text("not json")
    with pytest.raises(CompareError, match=rf"^{text}: not JSON"):
        load_result(text)


def test_run_ids_from_the_store_that_mlms_run_recorded_in(results: Path) -> None:
    ids = [doc(results, name)["run_id"] for name in ("ort", "torch")]
    result = CliRunner().invoke(app, ["compare", *ids, "--json"], env=store_env(results))
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [run["source"] for run in data["runs"]] == [f"store:{i}" for i in ids]
    files = json.loads(json.dumps(compare(runs(results, "ort", "torch")).to_json_dict()))
    assert data["rows"] == files["rows"]
    assert data["spec"] == files["spec"] and data["stack"] == files["stack"]

    # a file and a stored run mixed; an unknown id named
    mixed = CliRunner().invoke(
        app, ["compare", str(results / "ort.json"), ids[1]], env=store_env(results)
    )
    assert mixed.exit_code == 0, mixed.output
    unknown = "0f9e0f6e-0000-4000-8000-000000000000"
    missing = CliRunner().invoke(
        app, ["compare", str(results / "ort.json"), unknown], env=store_env(results)
    )
    assert missing.exit_code == 1
    assert f"{unknown}: no such file, folder or run in the results store" in missing.output


def test_a_run_id_without_the_store_package(results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files compare without the store's extra installed; a run id then says what is missing."""
    import sys

    monkeypatch.setitem(sys.modules, "mlmodelscope.store", None)
    files = [str(results / "ort.json"), str(results / "torch.json")]
    assert CliRunner().invoke(app, ["compare", *files]).exit_code == 0
    result = CliRunner().invoke(app, ["compare", files[0], "some-run-id"])
    assert result.exit_code == 1
    assert "some-run-id: no such file or folder" in result.output
    assert "install mlmodelscope[store]" in result.output


def test_run_ids_are_looked_up_in_any_store(results: Path) -> None:
    """Any object with ``get(run_id) -> dict | None`` serves (the results store's API)."""
    stored = {d["run_id"]: d for d in (doc(results, "ort"), doc(results, "torch"))}

    class Store:
        def get(self, run_id: str) -> dict[str, Any] | None:
            return stored.get(run_id)

    ids = list(stored)
    loaded = load_runs(ids, Store())
    assert [run.source for run in loaded] == [f"store:{i}" for i in ids]
    assert compare(loaded).reference == "ort"
    with pytest.raises(CompareError, match="no-such-run: no such file, folder or run"):
        load_runs(["no-such-run"], Store())
    with pytest.raises(CompareError, match=r"no-such-run: no such file or folder .*--store"):
        load_runs(["no-such-run"])


def test_the_same_run_twice_gets_two_labels(results: Path) -> None:
    comparison = compare(runs(results, "ort", "ort"))
    assert len({run.label for run in comparison.runs}) == 2
    assert comparison.stack == comparison.spec == []
    assert all(r.p50_rel in (None, 0.0) for r in comparison.rows)


# ------------------------------------------------------------------ pure helpers


def test_flatten() -> None:
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": [{"e": 3}], "f": {}}, "x") == {
        "x.a.b": 1,
        "x.a.c": [1, 2],
        "x.d[0].e": 3,
        "x.f": {},
    }


def test_differences_count_a_missing_key() -> None:
    found = differences([{"a": 1, "b": 2}, {"a": 1, "b": 3}, {"a": 1, "c": 4}])
    assert found == [Difference("b", [2, 3, None]), Difference("c", [None, None, 4])]


def test_relative() -> None:
    assert relative(1.5, 1.0) == pytest.approx(0.5)
    assert relative(None, 1.0) is None
    assert relative(1.0, 0.0) is None
