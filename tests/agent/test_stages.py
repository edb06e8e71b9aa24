"""The stages of one evaluation on their own, with no framework: each returns its typed
record, the document section in it as the result document will carry it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from synthetic_specs import load_synthetic

from mlmodelscope.agent.hooks import Reporter, no_hooks
from mlmodelscope.agent.stages import (
    Accuracy,
    Run,
    check_framework_version,
    fetch,
    load_data,
    loadgen_logs,
    measure_accuracy,
)
from mlmodelscope.agent.startup import Timeline
from mlmodelscope.contract.result import DatasetInfo, ModelInfo
from mlmodelscope.spec import SpecError
from mlmodelscope.spec.evaluation import EvaluationSpec


def make_run(tmp_path: Path, stages: list[str] | None = None, **spec: Any) -> Run:
    """A Run of a synthetic-data evaluation of ``tmp_path/model.onnx`` (any bytes: no stage
    here loads it); ``stages`` collects what the run reports."""
    loaded = load_synthetic(tmp_path, "stages", "model.onnx", **spec)
    reporter = Reporter(stage=(stages if stages is not None else []).append)
    return Run(loaded, reporter, no_hooks(loaded.evaluation), Timeline())


def test_a_timed_stage_is_reported_and_its_duration_kept_even_when_it_fails(
    tmp_path: Path,
) -> None:
    stages: list[str] = []
    run = make_run(tmp_path, stages)
    with pytest.raises(RuntimeError), run.timed("load model"):
        raise RuntimeError("no")
    assert stages == ["load model"]
    assert run.timings["load model"] >= 0


def test_fetch_describes_exactly_which_bytes(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"not really a model")
    fetched = fetch(make_run(tmp_path))
    assert fetched.path == tmp_path / "model.onnx"
    assert isinstance(fetched.section, ModelInfo)
    assert fetched.section.sha256 == hashlib.sha256(b"not really a model").hexdigest()
    assert fetched.section.sha256_verified is False
    assert fetched.section.model_dump(exclude_unset=True)["format"] == "onnx"


def test_load_data_prepares_every_sample_before_timing(tmp_path: Path) -> None:
    data = load_data(make_run(tmp_path))
    assert isinstance(data.section, DatasetInfo)
    assert (data.section.samples, data.section.labelled) == (8, False)
    assert data.section.preprocessing.count == 8
    [feed] = data.inputs.feeds
    assert feed.shape == (8, 4) and data.inputs.preprocessor is not None
    assert data.inputs.truncated is None
    assert set(data.section.model_dump(exclude_unset=True)) == {
        "name",
        "type",
        "samples",
        "labelled",
        "preprocessing",
    }  # skipped and truncated only where a dataset has them


def test_no_accuracy_pass_without_labels_or_when_the_spec_turns_it_off(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    data = load_data(run)
    skipped = measure_accuracy(run, data, None, None)  # type: ignore[arg-type]
    assert skipped == Accuracy(skipped=f"dataset {data.samples.name} has no labels")
    off = make_run(tmp_path, scenario={"accuracy": False})
    assert measure_accuracy(off, data, None, None) == Accuracy()  # type: ignore[arg-type]


def test_the_framework_version_constraint_names_its_field(
    make_spec: Callable[..., EvaluationSpec],
) -> None:
    def spec(version: str) -> EvaluationSpec:
        return make_spec("onnxruntime", "onnx", "m.onnx", settings={"version": version})

    check_framework_version(spec(">=1.2,<2"), "1.17.0+cpu")
    with pytest.raises(SpecError, match="does not satisfy") as caught:
        check_framework_version(spec(">=2"), "1.17.0")
    assert caught.value.field == "spec.framework.version"
    with pytest.raises(SpecError, match="is not a version constraint"):
        check_framework_version(spec("latest"), "1.17.0")


def test_loadgen_logs_go_beside_the_document_emptied_first(tmp_path: Path) -> None:
    output = tmp_path / "out" / "eval.json"
    stale = tmp_path / "out" / "eval.loadgen" / "batch-8" / "mlperf_log_detail.txt"
    stale.parent.mkdir(parents=True)
    stale.write_text("an earlier run")
    folder, base = loadgen_logs(output, 8)
    assert (folder, base) == (stale.parent, output.parent)
    assert not folder.exists()
    elsewhere, none = loadgen_logs(None, 8)
    assert elsewhere.is_dir() and none is None
    elsewhere.rmdir()


def test_feeds_are_arrays_in_dataset_order(tmp_path: Path) -> None:
    first = load_data(make_run(tmp_path)).inputs.feeds[0]
    again = load_data(make_run(tmp_path)).inputs.feeds[0]
    assert isinstance(first, np.ndarray)
    np.testing.assert_array_equal(first, again)  # the scenario's seed: the same samples
