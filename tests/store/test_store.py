"""The results store on SQLite and a real PostgreSQL: migrations from an empty database, real
result documents recorded and read back, idempotence by run UUID, filters, failed runs."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from mlmodelscope.store import NotRecordableError, Store, StoreError, open_store
from mlmodelscope.store.schema import metadata
from mlmodelscope.store.store import alembic_config, default_url, migrate, normalize_url

pytestmark = pytest.mark.frameworks


def head() -> str:
    from alembic.script import ScriptDirectory

    revision = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert revision is not None
    return revision


def test_migrations_from_an_empty_database_to_head(store_url: str) -> None:
    engine = sa.create_engine(store_url)
    try:
        assert sa.inspect(engine).get_table_names() == []
        migrate(engine)
        inspector = sa.inspect(engine)
        assert {"runs", "run_results", "alembic_version"} <= set(inspector.get_table_names())
        indexes = {i["name"] for i in inspector.get_indexes("runs")}
        assert {
            "ix_runs_model_name_started_at",
            "ix_runs_framework_started_at",
            "ix_runs_status_started_at",
            "ix_runs_evaluation_started_at",
            "ix_runs_gpu_product_started_at",
            "ix_runs_started_at",
        } <= indexes
        replaced = {"ix_runs_model_name", "ix_runs_evaluation", "ix_runs_gpu_product"}
        assert not replaced & indexes  # replaced in 0002
        with engine.connect() as conn:
            assert MigrationContext.configure(conn).get_current_revision() == head()
            # the migrations build exactly the tables the code uses (no drift)
            diff = compare_metadata(MigrationContext.configure(conn), metadata)
        assert diff == []
        migrate(engine)  # at head already: nothing to do, no error
        if engine.dialect.name == "postgresql":
            with engine.connect() as conn:
                kinds: dict[str, str] = dict(
                    conn.execute(
                        sa.text(
                            "select column_name, data_type from information_schema.columns "
                            "where table_name = 'runs' and column_name in ('document', 'labels')"
                        )
                    ).all()
                )
            assert kinds == {"document": "jsonb", "labels": "jsonb"}
    finally:
        engine.dispose()


def test_a_real_document_round_trips(store: Store, documents: dict[str, dict[str, Any]]) -> None:
    doc = documents["succeeded"]
    assert store.record(doc) is True
    assert store.get(doc["run_id"]) == doc  # the whole document, latency samples included
    assert len(doc["measurements"][0]["raw"]["latencies_ns"]) >= 20
    [summary] = store.list_runs()
    assert summary.run_id == doc["run_id"]
    assert summary.status == "Succeeded"
    assert summary.evaluation == "digits-ort"
    assert summary.model_name == doc["model"]["name"]
    assert summary.model_sha256 == doc["model"]["sha256"]
    assert summary.framework == "onnxruntime"
    assert summary.framework_version == doc["backend"]["framework_version"]
    assert summary.device == doc["backend"]["device"]
    assert summary.scenario == "SingleStream"
    assert summary.top1 == doc["accuracy"]["top1"]
    assert summary.started_at.isoformat().startswith(doc["started_at"][:19])
    assert summary.started_at.tzinfo is not None
    assert [r.batch_size for r in summary.results] == [1, 8]
    for row, want in zip(summary.results, doc["results"], strict=True):
        assert row.latency_ms.p50 == want["latency_ms"]["p50"]
        assert row.latency_ms.p99 == want["latency_ms"]["p99"]
        assert row.throughput == want["throughput"]
        assert row.valid == want["valid"]


def test_recording_twice_never_duplicates(
    store_url: str, documents: dict[str, dict[str, Any]]
) -> None:
    doc = documents["succeeded"]
    with open_store(store_url) as first:
        assert first.record(doc) is True
    with open_store(store_url) as retry:  # a retried write, e.g. after a crash
        assert retry.record(doc) is False
        changed = {**doc, "evaluation": {**doc["evaluation"], "name": "renamed"}}
        assert retry.record(changed) is False  # the first write wins
        assert len(retry.list_runs()) == 1
        assert retry.get(doc["run_id"]) == doc
    engine = sa.create_engine(store_url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("select count(*) from run_results")).scalar_one() == 2
    engine.dispose()


def test_a_failed_run_is_recorded(store: Store, documents: dict[str, dict[str, Any]]) -> None:
    doc = documents["failed"]
    assert doc["status"] == "Failed" and "results" not in doc
    assert store.record(doc) is True
    [summary] = store.list_runs(status="Failed")
    assert summary.error_type == doc["error"]["type"]
    assert summary.results == ()
    assert summary.valid is None
    assert store.get(doc["run_id"]) == doc


def test_filters(store: Store, documents: dict[str, dict[str, Any]]) -> None:
    base = documents["succeeded"]
    variants = [
        ("a", "onnxruntime", "cpu", "2026-01-01T00:00:00.000Z"),
        ("b", "onnxruntime", "cuda", "2026-02-01T00:00:00.000Z"),
        ("c", "pytorch", "cpu", "2026-03-01T00:00:00.000Z"),
    ]
    ids = {}
    for name, framework, device, started in variants:
        doc = json.loads(json.dumps(base))
        doc["run_id"] = ids[name] = str(uuid.uuid4())
        doc["evaluation"]["name"] = name
        doc["backend"]["framework"] = framework
        doc["backend"]["device"] = device
        doc["started_at"] = started
        if device == "cuda":
            doc["stack"]["gpu"] = {"count": 1, "devices": [{"index": 0, "name": "NVIDIA H100"}]}
        assert store.record(doc)
    assert store.record(documents["failed"])

    def names(**filters: Any) -> list[str | None]:
        return [s.evaluation for s in store.list_runs(**filters)]

    # newest first; the failed run's framework comes from its spec (it never loaded one)
    assert names(framework="onnxruntime") == ["digits-bad-hash", "b", "a"]
    assert names(device="cpu") == ["c", "a"]
    assert names(gpu="NVIDIA H100") == ["b"]
    assert names(evaluation="c") == ["c"]
    assert names(model=base["model"]["name"], limit=2) == ["digits-bad-hash", "c"]
    assert names(model="no-such-model") == []
    assert names(status="Failed") == ["digits-bad-hash"]
    assert len(store.list_runs()) == 4


def test_what_is_not_recordable(store: Store, documents: dict[str, dict[str, Any]]) -> None:
    no_id = {**documents["failed"], "run_id": None}
    with pytest.raises(NotRecordableError, match="no run_id"):
        store.record(no_id)
    with pytest.raises(NotRecordableError, match="not a valid result document"):
        store.record({"kind": "EvaluationResult"})
    with pytest.raises(NotRecordableError, match="not a UUID"):
        store.record({**documents["failed"], "run_id": "run-1"})
    assert store.list_runs() == []
    assert store.get("not-a-uuid") is None
    assert store.get(str(uuid.uuid4())) is None


def test_urls_and_the_default_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLMS_STORE_URL", raising=False)
    monkeypatch.delenv("MLMS_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_url() == f"sqlite:///{tmp_path}/xdg/mlmodelscope/runs.db"
    monkeypatch.setenv("MLMS_DATA_DIR", str(tmp_path / "data"))
    with open_store() as store:
        assert store.url == f"sqlite:///{tmp_path}/data/runs.db"
    assert (tmp_path / "data" / "runs.db").is_file()
    monkeypatch.setenv("MLMS_STORE_URL", "sqlite:///elsewhere.db")
    assert default_url() == "sqlite:///elsewhere.db"
    assert str(normalize_url("postgresql://u:pw@db/x")).startswith("postgresql+psycopg://")
    assert normalize_url("postgres://db/x").drivername == "postgresql+psycopg"
    assert normalize_url("plain.db").database == str(Path("plain.db").absolute())


def test_a_store_that_cannot_open_says_where(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreError, match="cannot open the results store"):
        open_store(str(tmp_path / "file" / "runs.db"))
    with pytest.raises(StoreError, match=r"\*\*\*"):  # the password is never shown
        open_store("postgresql://u:secret@127.0.0.1:1/x")
