"""`mlms agent`: the in-pod entrypoint, run for real on the digits model with mapped paths."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from meval_docs import evaluation_doc
from result_docs import document, row

from mlmodelscope.agent.pod import (
    compact_summary,
    configmap_patch,
    publish_configmap,
    run_agent,
    strip_document,
)
from mlmodelscope.contract.result import EvaluationSummary, ResultError
from mlmodelscope.contract.wire import EXIT_FAILED, EXIT_OK, EXIT_SPEC_ERROR, TERMINATION_LIMIT
from mlmodelscope.controller import builders, results
from mlmodelscope.spec import parse_evaluation

QUICK = {
    "batchSizes": [1, 4],
    "warmup": 2,
    "minQueryCount": 20,
    "minDuration": "20ms",
    "stability": {"maxWindows": 2},
}


@pytest.fixture(scope="module")
def digits_onnx() -> Path:
    from mlmodelscope.agent.digits import ensure_digits_models

    return ensure_digits_models() / "digits.onnx"


class Recorder:
    """A fake ConfigMap patcher that remembers what it was sent."""

    def __init__(self, fail_with: Exception | None = None) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.fail_with = fail_with

    def __call__(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        self.calls.append((namespace, name, body))
        if self.fail_with is not None:
            raise self.fail_with


def pod_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec_doc: dict[str, Any]) -> Path:
    """Lay out volumes as the exec kubelet does and export MLMS_PATH_MAP for them."""
    spec_dir, results_dir, cache = (tmp_path / n for n in ("spec", "results", "cache"))
    for d in (spec_dir, results_dir, cache):
        d.mkdir()
    (spec_dir / "evaluation.yaml").write_text(yaml.safe_dump(spec_doc))
    message = tmp_path / "termination-log"
    mapping = {
        builders.SPEC_DIR: str(spec_dir),
        builders.RESULTS_DIR: str(results_dir),
        builders.CACHE_DIR: str(cache),
        builders.TERMINATION_LOG: str(message),
    }
    monkeypatch.setenv("MLMS_PATH_MAP", json.dumps(mapping))
    monkeypatch.setenv("MLMS_NAMESPACE", "team-a")
    monkeypatch.setenv("MLMS_CACHE_DIR", str(cache))
    return message


def agent(recorder: Recorder) -> int:
    return run_agent(
        f"{builders.SPEC_DIR}/evaluation.yaml",
        f"{builders.RESULTS_DIR}/result.json",
        "digits-cpu-results",
        builders.TERMINATION_LOG,
        patcher=recorder,
    )


@pytest.mark.frameworks
def test_agent_runs_the_spec_configmap_and_publishes_both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, digits_onnx: Path
) -> None:
    doc = evaluation_doc(generation=5, model={"uri": f"file://{digits_onnx}"}, scenario=QUICK)
    cm = builders.build_spec_configmap(parse_evaluation(doc))
    message = pod_dirs(tmp_path, monkeypatch, yaml.safe_load(cm["data"]["evaluation.yaml"]))
    recorder = Recorder()
    assert agent(recorder) == EXIT_OK
    assert (tmp_path / "results" / "result.json").is_file()
    summary_text = message.read_text()
    assert len(summary_text.encode()) <= TERMINATION_LIMIT
    from_message = results.outcome_from_pods(
        [{"status": {"containerStatuses": [
            {"name": "agent", "state": {"terminated": {"message": summary_text}}}
        ]}}],
        5,
    )  # fmt: skip
    assert from_message is not None and from_message.succeeded
    assert [r["batchSize"] for r in from_message.results] == [1, 4]
    top1 = from_message.summary.top1
    assert top1 is not None and 0.8 < top1 <= 1.0
    [(namespace, name, body)] = recorder.calls
    assert (namespace, name) == ("team-a", "digits-cpu-results")
    from_cm = results.outcome_from_configmap(body, 5)
    assert from_cm is not None and from_cm.source == "configmap summary.json"
    assert from_cm.run_id == from_message.run_id
    assert from_cm.stack["framework"] == "onnxruntime"
    assert from_cm.summary.top1 == pytest.approx(top1, rel=1e-5)
    stored = json.loads(body["data"]["result.json"])
    for m in stored["measurements"]:  # a sample of the query latencies, for mlms gate
        assert set(m["raw"]) == {"latencies_ns", "sample_of"}
        assert 0 < len(m["raw"]["latencies_ns"]) <= min(m["raw"]["sample_of"], 2000)


def test_invalid_spec_file_exits_with_the_spec_error_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = evaluation_doc()
    doc["spec"]["scenario"] = {"type": "Server"}  # targetQPS missing
    message = pod_dirs(tmp_path, monkeypatch, doc)
    recorder = Recorder()
    assert agent(recorder) == EXIT_SPEC_ERROR
    summary = json.loads(message.read_text())
    assert summary["status"] == "Failed"
    assert summary["error"]["field"] == "spec.scenario.targetQPS"
    assert len(recorder.calls) == 1


def test_missing_model_is_a_spec_error_named_by_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = evaluation_doc(model={"uri": f"file://{tmp_path}/nowhere.onnx"})
    message = pod_dirs(tmp_path, monkeypatch, doc)
    assert agent(Recorder()) == EXIT_SPEC_ERROR
    outcome = results.outcome_from_summary(
        EvaluationSummary.model_validate_json(message.read_text())
    )
    assert outcome.error is not None and outcome.error.startswith("spec.model.uri: ")


def test_uri_credentials_are_published_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A presigned URI to a loopback port nobody listens on: the fetch fails, and its error
    # travels through every channel to the evaluation's status, redacted all the way.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    uri = f"http://bob:hunter2@127.0.0.1:{port}/m.onnx?X-Amz-Credential=AKIA7&X-Amz-Signature=f00d"
    message = pod_dirs(tmp_path, monkeypatch, evaluation_doc(model={"uri": uri}))
    recorder = Recorder()
    caplog.set_level(logging.INFO)
    assert agent(recorder) == EXIT_FAILED  # a transport failure: worth a retry
    [(_, _, body)] = recorder.calls
    published = [
        message.read_text(),
        (tmp_path / "results" / "result.json").read_text(),
        json.dumps(body),
        caplog.text,
    ]
    for text in published:
        assert "hunter2" not in text and "AKIA7" not in text and "f00d" not in text
    outcome = results.outcome_from_summary(EvaluationSummary.model_validate_json(published[0]))
    assert outcome.error is not None
    assert f"GET http://REDACTED@127.0.0.1:{port}/m.onnx?X-Amz-Credential=REDACTED" in outcome.error
    assert "&X-Amz-Signature=REDACTED failed" in outcome.error


def test_a_metadata_uri_fails_at_once_without_a_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts: list[Any] = []

    def connect(sock: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise ConnectionRefusedError("this test connects nowhere")

    monkeypatch.setattr(socket.socket, "connect", connect)
    uri = "http://169.254.169.254/latest/meta-data/iam/security-credentials/node"
    message = pod_dirs(tmp_path, monkeypatch, evaluation_doc(model={"uri": uri}))
    assert agent(Recorder()) == EXIT_SPEC_ERROR  # the Job's podFailurePolicy: no retries
    summary = EvaluationSummary.model_validate_json(message.read_text())
    assert summary.error is not None and summary.error.field == "spec.model.uri"
    assert "link-local" in summary.error.message and "MLMS_FETCH_ALLOW" in summary.error.message
    assert attempts == []


def test_configmap_publishing_failure_keeps_the_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class ForbiddenError(Exception):
        status = 403

    doc = evaluation_doc(model={"uri": f"file://{tmp_path}/nowhere.onnx"})
    message = pod_dirs(tmp_path, monkeypatch, doc)
    recorder = Recorder(fail_with=ForbiddenError("configmaps is forbidden"))
    assert agent(recorder) == EXIT_SPEC_ERROR
    assert len(recorder.calls) == 1  # permanent errors are not retried
    assert json.loads(message.read_text())["status"] == "Failed"


def test_transient_publishing_errors_are_retried() -> None:
    class UnavailableError(Exception):
        status = 503

    recorder = Recorder(fail_with=UnavailableError("etcd leader changed"))
    doc = {"status": "Succeeded", "results": []}
    assert not publish_configmap(doc, "cm", "ns", recorder, attempts=2)
    assert len(recorder.calls) == 2
    assert not publish_configmap(doc, "cm", None, recorder)


def test_unexpected_error_without_field_exits_failed() -> None:
    from mlmodelscope.agent.pod import _exit_code

    assert _exit_code({"status": "Failed", "error": {"message": "OOM"}}) == EXIT_FAILED
    assert _exit_code({"status": "Succeeded"}) == EXIT_OK


def big_document(rows: int, samples: int, status: str = "Succeeded") -> dict[str, Any]:
    """A contract-valid document with many long rows and many raw samples."""
    reasons = ["x" * 300, "y" * 300]
    many = [
        row(b, scenario="Server", valid=False, invalid_reasons=reasons) for b in range(1, rows + 1)
    ]
    if status == "Failed":
        return document(status="Failed", error=ResultError(type="X", message="z" * 5000))
    return document(rows=many, samples=samples)


def test_compact_summary_always_fits_the_termination_message() -> None:
    summary = compact_summary(big_document(rows=32, samples=10))
    assert summary.encoded_size() <= TERMINATION_LIMIT
    assert summary.truncated and summary.results[0].batch_size == 1
    failed = compact_summary(big_document(rows=1, samples=10, status="Failed"))
    assert failed.encoded_size() <= TERMINATION_LIMIT
    assert failed.error is not None and failed.error.message.startswith("zzz")


def test_a_document_off_contract_still_reaches_the_operator_as_failed() -> None:
    broken = document()
    del broken["measurements"]
    summary = compact_summary(broken)
    assert summary.status == "Failed"
    assert summary.error is not None and summary.error.type == "ContractError"


def test_strip_document_drops_detail_in_order() -> None:
    doc = big_document(rows=4, samples=20_000)
    sampled = strip_document(doc, 1_000_000)
    for m, full in zip(sampled["measurements"], doc["measurements"], strict=True):
        kept, every = m["raw"]["latencies_ns"], full["raw"]["latencies_ns"]
        assert m["raw"]["sample_of"] == len(every) and len(kept) == min(len(every), 2000)
        assert kept[0] == every[0] and kept[-1] == every[-1] and set(kept) <= set(every)
    small = strip_document(doc, len(json.dumps(sampled, separators=(",", ":"))) - 1)
    assert all("raw" not in m for m in small["measurements"])
    assert "windows" in small["measurements"][0]
    tiny = strip_document(doc, 8_000)
    assert "measurements" not in tiny and tiny["results"]
    assert "stack" in tiny
    doc["tracing"] = {"spans": ["s" * 100] * 200}
    minimal = strip_document(doc, 8_000)
    assert "tracing" not in minimal and "stack" not in minimal and minimal["results"]
    assert "tracing" in minimal["truncated"]
    patch = configmap_patch(doc)
    total = sum(len(v.encode()) for v in patch["data"].values())
    assert total < 1_048_576
