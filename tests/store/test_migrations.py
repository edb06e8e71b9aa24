"""Migrations from the previous revision, on SQLite and a real PostgreSQL: runs recorded in the
0001 shape (through the 0001 tables, as the previous release wrote them) are upgraded to head
with nothing lost and the new columns backfilled, then downgraded to 0001 and upgraded again."""

from __future__ import annotations

import copy
import math
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.store import open_store
from mlmodelscope.store.schema import metadata, run_results, runs
from mlmodelscope.store.store import _result_row, _run_row, alembic_config, migrate

pytestmark = pytest.mark.frameworks

ADDED_IN_0002 = {"trace_id", "labels"}
ADDED_IN_0003 = {"metric", "metric_value"}
ADDED_IN_0008 = {"dataset"}
RESULTS_ADDED_IN_0008 = {"joules_per_inference", "energy_method", "cost_per_1000"}
SWEEP = {"sweep": "batch-sizes", "team": "vision"}
INDEXES_0001 = {
    "ix_runs_model_name",
    "ix_runs_model_sha256",
    "ix_runs_framework",
    "ix_runs_device",
    "ix_runs_gpu_product",
    "ix_runs_evaluation",
    "ix_runs_started_at",
}


def revision(engine: sa.Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def downgrade(engine: sa.Engine, target: str) -> None:
    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, target)


def columns(engine: sa.Engine) -> set[str]:
    return {c["name"] for c in sa.inspect(engine).get_columns("runs")}


def indexes(engine: sa.Engine) -> set[str]:
    return {i["name"] for i in sa.inspect(engine).get_indexes("runs") if i["name"]}


def count(engine: sa.Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(f"select count(*) from {table}")).scalar_one())


def record_in_0001_shape(engine: sa.Engine, documents: list[dict[str, Any]]) -> None:
    """What revision 0001's ``Store.record`` wrote: the 0001 columns (checked against the
    live 0001 table) and one run_results row per batch size, inserted with SQLAlchemy Core."""
    live = columns(engine)
    assert not live & ADDED_IN_0002, "the database is not at 0001"
    with engine.begin() as conn:
        for document in documents:
            parsed = ResultDocument.model_validate(document)
            assert parsed.run_id is not None
            row = _run_row(parsed, parsed.run_id, document)
            for key in ADDED_IN_0002 | ADDED_IN_0003 | ADDED_IN_0008:
                del row[key]
            assert set(row) == live
            conn.execute(runs.insert(), row)
            batches = [
                {
                    k: v
                    for k, v in _result_row(parsed.run_id, r).items()
                    if k not in RESULTS_ADDED_IN_0008
                }
                for r in parsed.results or []
            ]
            if batches:
                conn.execute(run_results.insert(), batches)


@pytest.fixture
def old_runs(store_url: str, documents: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Four runs: traced and labelled, traced only, a failed one with neither, and one whose
    document holds a NaN on SQLite (Python's json writes it there, SQLite's JSON functions
    reject it; PostgreSQL refuses it at insert)."""
    traced, plain, nan = (copy.deepcopy(documents["succeeded"]) for _ in range(3))
    for doc in (traced, plain, nan):
        doc["run_id"] = str(uuid.uuid4())
        doc["trace_id"] = uuid.uuid4().hex
    traced["evaluation"]["labels"] = SWEEP
    traced["started_at"] = "2026-03-01T00:00:00.000Z"
    plain["started_at"] = "2026-02-01T00:00:00.000Z"
    nan["started_at"] = "2026-01-01T00:00:00.000Z"
    if store_url.startswith("sqlite"):
        nan["stack"]["cpu"]["probe"] = math.nan
    failed = documents["failed"]
    failed.pop("trace_id", None)
    return [traced, plain, failed, nan]


@pytest.fixture
def engine_at_0001(store_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(store_url)
    migrate(engine, "0001")
    assert revision(engine) == "0001"
    yield engine
    engine.dispose()


def expected(doc: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    return doc.get("trace_id"), doc["evaluation"].get("labels")


def check_at_head(store_url: str, docs: list[dict[str, Any]], batch_rows: int) -> None:
    """Every run is still there with its batch rows, trace_id and labels read from its
    document, and the store lists, filters and returns documents as at head."""
    engine = sa.create_engine(store_url)
    try:
        assert columns(engine) >= ADDED_IN_0002
        with engine.connect() as conn:
            stored = {
                str(uuid.UUID(str(r.run_id))): (r.trace_id, r.labels)
                for r in conn.execute(sa.select(runs.c.run_id, runs.c.trace_id, runs.c.labels))
            }
            assert not compare_metadata(MigrationContext.configure(conn), metadata)
            null_labels = conn.execute(
                sa.text("select count(*) from runs where labels is null")
            ).scalar_one()
        assert stored == {d["run_id"]: expected(d) for d in docs}
        assert null_labels == len(docs) - 1  # SQL NULL, not a JSON null
        assert count(engine, "run_results") == batch_rows
    finally:
        engine.dispose()
    with open_store(store_url) as store:
        listed = store.list_runs()
        newest_first = sorted(docs, key=lambda d: d["started_at"], reverse=True)
        assert [s.run_id for s in listed] == [d["run_id"] for d in newest_first]
        for summary, doc in zip(listed, newest_first, strict=True):
            assert (summary.trace_id, summary.labels) == expected(doc)
            assert len(summary.results) == len(doc.get("results") or [])
        assert [s.labels for s in store.list_runs(status="Failed")] == [None]
        assert len(store.list_runs(framework="onnxruntime")) == len(docs)
        for doc in docs[:3]:  # the NaN one is not equal to itself
            assert store.get(doc["run_id"]) == doc
        assert store.record(docs[0]) is False  # still recorded once


def test_upgrade_from_0001_keeps_every_run_and_backfills(
    engine_at_0001: sa.Engine, store_url: str, old_runs: list[dict[str, Any]]
) -> None:
    record_in_0001_shape(engine_at_0001, old_runs)
    batch_rows = count(engine_at_0001, "run_results")
    assert batch_rows == 3 * len(old_runs[0]["results"])
    assert indexes(engine_at_0001) == INDEXES_0001
    migrate(engine_at_0001)
    assert revision(engine_at_0001) == "0009"
    check_at_head(store_url, old_runs, batch_rows)


def test_downgrade_to_0001_and_up_again(
    engine_at_0001: sa.Engine, store_url: str, old_runs: list[dict[str, Any]]
) -> None:
    record_in_0001_shape(engine_at_0001, old_runs[:2])
    with open_store(store_url) as store:  # to head, then one run recorded in the head shape
        assert store.record(old_runs[2])
        # down through the store's own engine: on SQLite, foreign keys are on, so a table copy
        # of `runs` would cascade into run_results
        downgrade(store.engine, "0001")
        assert revision(store.engine) == "0001"
        assert not columns(store.engine) & ADDED_IN_0002
        assert indexes(store.engine) == INDEXES_0001
        assert count(store.engine, "runs") == 3
        assert count(store.engine, "run_results") == 2 * len(old_runs[0]["results"])
        record_in_0001_shape(store.engine, old_runs[3:])  # the old release writes again
    migrate(engine_at_0001)
    assert revision(engine_at_0001) == "0009"
    check_at_head(store_url, old_runs, 3 * len(old_runs[0]["results"]))


def test_a_new_run_fills_trace_id_and_labels(
    store_url: str, documents: dict[str, dict[str, Any]]
) -> None:
    doc = documents["succeeded"]
    doc["trace_id"] = "0af7651916cd43dd8448eb211c80319c"
    doc["evaluation"]["labels"] = SWEEP
    with open_store(store_url) as store:
        assert store.record(doc)
        assert store.record(documents["failed"])
        by_id = {s.run_id: s for s in store.list_runs()}
    assert by_id[doc["run_id"]].trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert by_id[doc["run_id"]].labels == SWEEP
    assert by_id[documents["failed"]["run_id"]].labels is None


def test_0005_brick_timings_keep_the_first_timing_per_stack(store_url: str) -> None:
    from mlmodelscope.analysis.brickstore import MeasuredBrick

    def brick(key: str, p50: float) -> MeasuredBrick:
        return MeasuredBrick(key, f"Relu(float32[{key}])", "Relu", p50, p50, p50, 3, 1, 0.25)

    stack = {"cpu": "test", "intra_op_threads": 1}
    with open_store(store_url) as store:
        store.record_brick_timings("s" * 64, stack, [brick("a" * 64, 1.0), brick("b" * 64, 2.0)])
        store.record_brick_timings("s" * 64, stack, [brick("a" * 64, 9.0)])  # kept: 1.0
        found = store.brick_timings("s" * 64, ["a" * 64, "b" * 64, "c" * 64])
        assert store.brick_timings("t" * 64, ["a" * 64]) == {}  # another stack
    assert set(found) == {"a" * 64, "b" * 64}
    assert found["a" * 64].p50_ms == 1.0 and found["a" * 64].measure_s == 0.25
    assert found["b" * 64].signature == f"Relu(float32[{'b' * 64}])"
    assert found["a" * 64].measured_at.tzinfo is not None
