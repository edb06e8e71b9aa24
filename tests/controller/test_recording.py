"""Recording finished runs in the results store, without a cluster: the settings, the outbox
ConfigMap, the ``status.record`` transitions, and the recorder against real databases (a
SQLite file and a fresh database in the session's PostgreSQL)."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from result_docs import document

from mlmodelscope.controller import recording, run_store, status
from mlmodelscope.controller.instrument import StartupError
from mlmodelscope.controller.metrics import OperatorMetrics
from mlmodelscope.controller.settings import OperatorSettings, SettingsError
from mlmodelscope.controller.status import Observed
from mlmodelscope.devtools.postgres import PostgreSQL
from mlmodelscope.spec.status import EvaluationStatus
from mlmodelscope.store import StoreError, open_store

NOW = "2026-11-22T08:00:10Z"
LATER = "2026-11-22T08:01:00Z"


def result_document(generation: int = 1) -> dict[str, Any]:
    doc = document(generation)
    doc["run_id"] = str(uuid.uuid4())
    return doc


def finished_status(run_id: str | None, generation: int = 1) -> dict[str, Any]:
    return {"phase": "Succeeded", "observedGeneration": generation, "runId": run_id}


def results_configmap(doc: Mapping[str, Any] | None) -> dict[str, Any]:
    data = {} if doc is None else {"result.json": json.dumps(doc)}
    return {"metadata": {"name": "e-results", "namespace": "ns"}, "data": data}


def apply(current: dict[str, Any], change: status.StatusChange) -> dict[str, Any]:
    """A JSON merge patch of one level below ``.status`` (enough for ``record``)."""
    merged = dict(current)
    for key, value in change.patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = {k: v for k, v in value.items() if v is not None}
    return merged


# ----------------------------------------------------------------------------------- settings


def test_store_settings_default_to_no_store() -> None:
    settings = OperatorSettings.from_env({})
    assert settings.store_url is None
    assert settings.record_retry_seconds == 30.0


def test_store_settings_are_read_and_the_password_never_shows() -> None:
    url = "postgresql://mlms:s3cret@db.example:5432/results"
    settings = OperatorSettings.from_env(
        {"MLMS_OPERATOR_STORE_URL": url, "MLMS_OPERATOR_RECORD_RETRY_SECONDS": "2.5"}
    )
    assert settings.store_url == url
    assert settings.record_retry_seconds == 2.5
    assert "s3cret" not in repr(settings)
    recorder = run_store.Recorder(url)
    assert "s3cret" not in recorder.url and "db.example" in recorder.url


@pytest.mark.parametrize(
    "url", ["mysql://u:s3cret@db/x", "u:s3cret@db/x", "http://u:s3cret@db/x", "postgresql://"]
)
def test_a_bad_store_url_names_the_variable_without_echoing_it(url: str) -> None:
    with pytest.raises(SettingsError) as caught:
        OperatorSettings.from_env({"MLMS_OPERATOR_STORE_URL": url})
    assert "MLMS_OPERATOR_STORE_URL" in str(caught.value)
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf"])
def test_a_bad_retry_interval_names_the_variable(value: str) -> None:
    with pytest.raises(SettingsError, match="MLMS_OPERATOR_RECORD_RETRY_SECONDS"):
        OperatorSettings.from_env({"MLMS_OPERATOR_RECORD_RETRY_SECONDS": value})


def test_a_store_url_without_the_store_extra_is_a_startup_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "mlmodelscope.store", None)
    with pytest.raises(StartupError, match=r"mlmodelscope\[store\]"):
        run_store.Recorder("postgresql://db/results")


# ------------------------------------------------------------------------ document and outbox


def test_the_document_to_record_comes_from_the_results_configmap() -> None:
    doc = result_document(generation=2)
    found = recording.document_in(results_configmap(doc), 2)
    assert isinstance(found, recording.Finished)
    assert found.run_id == doc["run_id"] and found.document == doc


@pytest.mark.parametrize(
    ("configmap", "why"),
    [
        (None, "no result document"),
        (results_configmap(None), "no result document"),
        ({"data": {"result.json": "{not json"}}, "not JSON"),
        (results_configmap(document(2)), "no run UUID"),
        (results_configmap(result_document(generation=1)), "generation 1, not 2"),
    ],
)
def test_no_document_for_this_run_says_why(configmap: dict[str, Any] | None, why: str) -> None:
    found = recording.document_in(configmap, 2)
    assert isinstance(found, str) and why in found


def test_the_outbox_configmap_outlives_the_evaluation_and_is_found_by_label() -> None:
    doc = result_document(generation=3)
    found = recording.document_in(results_configmap(doc), 3)
    assert isinstance(found, recording.Finished)
    body = recording.build_outbox("team-a", "digits", 3, found, "connection refused")
    meta = body["metadata"]
    assert meta["name"] == f"mlmodelscope-unrecorded-{doc['run_id']}"
    assert len(meta["name"]) <= 63
    assert meta["namespace"] == "team-a"
    assert "ownerReferences" not in meta  # deleting the evaluation must not delete it
    assert meta["labels"]["mlmodelscope.io/record"] == "pending"
    assert recording.OUTBOX_SELECTOR == "mlmodelscope.io/record=pending"
    assert meta["labels"]["mlmodelscope.io/evaluation"] == "digits"
    assert meta["labels"]["mlmodelscope.io/generation"] == "3"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "mlmodelscope-operator"
    assert meta["annotations"]["mlmodelscope.io/run-id"] == doc["run_id"]
    assert json.loads(body["data"]["result.json"]) == doc


# ------------------------------------------------------------------------ status transitions


def test_recorded_says_so_once_without_an_event() -> None:
    run = str(uuid.uuid4())
    change = status.recorded(Observed.of(finished_status(run)), 1, run, NOW)
    assert change.event is None
    assert change.patch["record"] == {
        "state": "Recorded",
        "runId": run,
        "recordedAt": NOW,
        "attempts": 1,
        "message": "",
    }
    after = apply(finished_status(run), change)
    EvaluationStatus.model_validate(after)  # the CRD's shape
    assert not status.recorded(Observed.of(after), 1, run, LATER)
    assert not status.record_pending(Observed.of(after), 1, run, "down")  # never back to Pending


def test_pending_warns_once_counts_attempts_then_recorded_announces_it() -> None:
    run = str(uuid.uuid4())
    current = finished_status(run)
    first = status.record_pending(Observed.of(current), 1, run, "connection refused")
    assert first.event is not None and first.event.type == "Warning"
    assert first.event.reason == "RecordPending"
    assert first.patch["record"]["state"] == "Pending"
    current = apply(current, first)
    again = status.record_pending(Observed.of(current), 1, run, "connection refused")
    assert again.event is None and again.patch["record"]["attempts"] == 2
    current = apply(current, again)
    done = status.recorded(Observed.of(current), 1, run, LATER)
    assert done.event is not None and done.event.type == "Normal"
    assert done.event.reason == "Recorded" and "3 attempts" in done.event.message
    current = apply(current, done)
    assert current["record"]["state"] == "Recorded" and current["record"]["recordedAt"] == LATER
    assert current["record"]["message"] == ""
    EvaluationStatus.model_validate(current)


def test_not_recorded_when_there_is_no_document() -> None:
    change = status.not_recorded(
        Observed.of(finished_status(None)), 1, None, "not recorded: no document"
    )
    assert change.patch["record"]["state"] == "NotRecorded"
    assert change.event is not None and change.event.reason == "NotRecorded"
    after = apply(finished_status(None), change)
    assert not status.not_recorded(Observed.of(after), 1, None, "not recorded: no document")
    EvaluationStatus.model_validate(after)


def test_record_changes_only_the_run_the_status_shows() -> None:
    run, other = str(uuid.uuid4()), str(uuid.uuid4())
    shown = finished_status(run, generation=2)
    assert not status.recorded(Observed.of(shown), 2, other, NOW)  # an older run recorded late
    assert not status.recorded(Observed.of(shown), 1, run, NOW)  # another generation
    assert not status.record_pending(Observed.of(shown), 2, other, "down")
    assert not status.recorded(Observed.of({**shown, "phase": "Running"}), 2, run, NOW)


def test_a_new_generation_clears_the_record() -> None:
    run = str(uuid.uuid4())
    finished = {
        **finished_status(run),
        "jobName": "e-g1",
        "record": {"state": "Recorded", "runId": run},
    }
    change = status.job_created(Observed.of(finished), 2, "e-g2", "e-results", None, NOW)
    assert change.patch["record"] is None


# --------------------------------------------------------------------------------- the store


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    server: PostgreSQL = request.getfixturevalue("postgresql")
    return server.create_database()


def test_recording_the_same_run_twice_keeps_one_row(store_url: str) -> None:
    metrics = OperatorMetrics()
    recorder = run_store.Recorder(store_url, metrics=metrics)
    doc = result_document()
    try:
        assert recorder.record(doc) is True
        assert recorder.record(doc) is False  # a retried write: already there, nothing new
    finally:
        recorder.close()
    with open_store(store_url) as store:
        assert store.get(doc["run_id"]) == doc
        with store.engine.connect() as conn:
            count = conn.execute(sa.text("select count(*) from runs")).scalar_one()
            rows = conn.execute(sa.text("select count(*) from run_results")).scalar_one()
    assert count == 1 and rows == 2
    text = metrics.render().decode()
    assert 'mlmodelscope_operator_records_total{outcome="recorded"} 1.0' in text
    assert 'mlmodelscope_operator_records_total{outcome="already_recorded"} 1.0' in text


def test_a_document_the_store_rejects_is_not_retried(tmp_path: Path) -> None:
    recorder = run_store.Recorder(f"sqlite:///{tmp_path / 'runs.db'}")
    with pytest.raises(run_store.DocumentRejectedError):
        recorder.record(document())  # no run UUID
    with pytest.raises(run_store.DocumentRejectedError):
        recorder.record({"kind": "Something"})
    recorder.close()


def test_an_unreachable_database_fails_fast_and_is_opened_again_later(
    postgresql: PostgreSQL,
) -> None:
    """The first write finds nothing listening (a closed port): StoreUnavailableError within the
    connect timeout; the recorder opens the store again on the next write."""
    from mlmodelscope.devtools.telemetry_servers import free_port

    down = f"postgresql://mlms:s3cret@127.0.0.1:{free_port()}/results"
    urls = [down, postgresql.create_database()]
    opened: list[str] = []

    def opener(url: str) -> run_store.RunStore:
        opened.append(url)
        return run_store.open_operator_store(urls[len(opened) - 1], connect_timeout=2)

    recorder = run_store.Recorder(down, opener=opener)
    doc = result_document()
    with pytest.raises(run_store.StoreUnavailableError) as caught:
        recorder.record(doc)
    assert "s3cret" not in str(caught.value)
    assert recorder.record(doc) is True
    assert len(opened) == 2
    recorder.close()


def test_open_operator_store_raises_store_error_naming_the_url_without_password() -> None:
    from mlmodelscope.devtools.telemetry_servers import free_port

    with pytest.raises(StoreError) as caught:
        run_store.open_operator_store(f"postgresql://u:s3cret@127.0.0.1:{free_port()}/x", 2)
    assert "s3cret" not in str(caught.value) and "127.0.0.1" in str(caught.value)
