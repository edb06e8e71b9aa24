"""The result document as a run builds it: typed sections laid out in the document's order,
only those the run reached, and the contract checked before it is written."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from synthetic_specs import load_synthetic

from mlmodelscope.agent.document import ResultDraft, check_contract, finish, model_manifest
from mlmodelscope.contract.result import (
    AccuracyResult,
    BackendInfo,
    CostInfo,
    DatasetInfo,
    ModelInfo,
    ResultDocument,
    ResultError,
)
from mlmodelscope.spec.manifest import ANNOTATION_MANIFEST
from mlmodelscope.spec.status import BatchResult, LatencySummary

HEADER = ["api_version", "kind", "run_id", "status", "evaluation", "agent_version", "started_at"]


def loaded_spec(tmp_path: Path, metadata: dict[str, Any] | None = None) -> Any:
    """A synthetic-data ModelEvaluation, loaded as `mlms run` loads it."""
    return load_synthetic(tmp_path, "draft", "s3://bucket/m.onnx?X-Amz-Signature=secret", metadata)


def model_info() -> ModelInfo:
    return ModelInfo(
        name="m", format="onnx", uri="m.onnx", sha256="a" * 64, source="file", cached=False
    )


def test_a_new_draft_lays_out_its_header_and_the_spec_redacted(tmp_path: Path) -> None:
    draft = ResultDraft.begin(loaded_spec(tmp_path))
    document = draft.document()
    assert list(document) == [*HEADER, "spec"]
    assert document["status"] == "Succeeded"
    assert document["evaluation"] == {
        "name": "draft",
        "namespace": None,
        "generation": None,
        "source": draft.evaluation.source,
    }
    assert "secret" not in json.dumps(document["spec"])
    assert ResultDraft.begin(loaded_spec(tmp_path)).run_id != draft.run_id


def test_labels_and_a_resolved_manifest_appear_only_when_the_evaluation_has_them(
    tmp_path: Path,
) -> None:
    manifest = {"name": "m", "chain": [{"name": "m", "source": "models.yaml"}]}
    metadata = {
        "labels": {"team": "vision"},
        "annotations": {ANNOTATION_MANIFEST: json.dumps(manifest)},
    }
    evaluation = ResultDraft.begin(loaded_spec(tmp_path, metadata)).document()["evaluation"]
    assert evaluation["labels"] == {"team": "vision"}
    assert evaluation["model_manifest"] == manifest


def test_an_unreadable_manifest_annotation_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert model_manifest({ANNOTATION_MANIFEST: "{not json"}) is None
    assert ANNOTATION_MANIFEST in caplog.text
    assert model_manifest({}) is None


def test_a_failed_draft_shows_how_far_it_got_and_the_error_last(tmp_path: Path) -> None:
    draft = ResultDraft.begin(loaded_spec(tmp_path))
    draft.spec_sha256 = "b" * 64
    draft.model = model_info()
    error = ResultError(type="SpecError", message="bad", field="spec.model.uri")
    document = draft.document(error)
    assert list(document) == [*HEADER, "spec", "spec_sha256", "model", "error"]
    assert document["status"] == "Failed"
    assert document["error"] == {"type": "SpecError", "message": "bad", "field": "spec.model.uri"}
    assert "version" not in document["model"]  # only the fields the stage gave


def test_accuracy_is_null_from_the_stack_on_until_the_pass_gives_it(tmp_path: Path) -> None:
    draft = ResultDraft.begin(loaded_spec(tmp_path))
    draft.backend = BackendInfo(framework="onnxruntime", framework_version="1", device="cpu")
    assert "accuracy" not in draft.document()
    draft.stack = {"cpu": {}, "os": {}, "python": {}, "libraries": {}}
    assert draft.document()["accuracy"] is None
    draft.accuracy = AccuracyResult(
        samples=8, batch_size=8, outputs_sha256="c" * 64, top1=0.5, top5=None
    )
    assert draft.document()["accuracy"] == {
        "samples": 8,
        "batch_size": 8,
        "outputs_sha256": "c" * 64,
        "top1": 0.5,
        "top5": None,
    }


def complete(draft: ResultDraft) -> ResultDraft:
    """``draft`` with every section a Succeeded document needs but ``dataset``."""
    draft.spec_sha256 = "b" * 64
    draft.model = model_info()
    draft.backend = BackendInfo(framework="onnxruntime", framework_version="1", device="cpu")
    draft.stack = {"cpu": {}, "os": {}, "python": {}, "libraries": {}}
    draft.measurements = []
    draft.cost = CostInfo(price_per_node_hour=None, reason="not measured: no price")
    latency = LatencySummary(p50=1.0, p90=2.0, p99=3.0, mean=1.5)
    draft.results = [
        BatchResult(batch_size=1, scenario="SingleStream", latency_ms=latency, throughput=1.0)
    ]
    return draft


def test_a_complete_draft_is_a_valid_succeeded_document(tmp_path: Path) -> None:
    draft = complete(ResultDraft.begin(loaded_spec(tmp_path)))
    stats = {"count": 8, "mean_s": 0.0, "min_s": 0.0, "max_s": 0.0, "percentiles_s": {}}
    draft.dataset = DatasetInfo(
        name="synthetic", type="synthetic", samples=8, labelled=False, preprocessing=stats
    )
    document = draft.document()
    finish(document, {"fetch model": 0.5}, started=0.0)
    check_contract(document)
    assert "contract_error" not in document
    assert document["results"] == [row.model_dump(mode="json") for row in draft.results or []]
    assert document["stage_durations_s"] == {"fetch model": 0.5}
    assert list(document)[-3:] == ["finished_at", "duration_s", "stage_durations_s"]
    ResultDocument.model_validate(document)


def test_a_document_that_breaks_the_contract_keeps_what_was_measured(tmp_path: Path) -> None:
    document = complete(ResultDraft.begin(loaded_spec(tmp_path))).document()
    finish(document, {}, started=0.0)
    check_contract(document)  # Succeeded without a dataset: this program's bug, recorded
    assert "dataset" in document["contract_error"]
    assert document["status"] == "Succeeded" and document["results"]
