"""The task's primary metric in the store, on SQLite and a real PostgreSQL: recorded from real
documents (examples/tasks segmentation and text classification, the digits CNN), listed,
filtered and ranked by name, exported, shown by `mlms runs`; and revision 0003, which adds
the columns, backfilled from runs recorded in the 0002 shape."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from typer.testing import CliRunner

from mlmodelscope.cli import app
from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.store import Store, open_store, queries
from mlmodelscope.store.schema import metadata, run_results, runs
from mlmodelscope.store.store import RunFilter, _result_row, _run_row, migrate

pytestmark = pytest.mark.frameworks

SEG, SEG_TORCH, TEXT = (
    "segmentation-onnxruntime",
    "segmentation-pytorch",
    "text-classification-onnxruntime",
)


def primary(document: dict[str, Any]) -> tuple[str, float]:
    task = document["task"]
    return task["primary"], task["metrics"][task["primary"]]


@pytest.fixture
def recorded(
    store: Store, task_documents: dict[str, dict[str, Any]], documents: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Every task document and the digits runs (succeeded and failed), recorded."""
    everything = {**copy.deepcopy(task_documents), "digits": documents["succeeded"]}
    everything["failed"] = documents["failed"]
    for document in everything.values():
        assert store.record(document)
    return everything


def test_record_keeps_the_primary_metric_by_name(
    store: Store, recorded: dict[str, dict[str, Any]]
) -> None:
    by_id = {s.run_id: s for s in store.list_runs()}
    for name in (SEG, SEG_TORCH, TEXT):
        summary = by_id[recorded[name]["run_id"]]
        assert (summary.metric, summary.metric_value) == primary(recorded[name])
        assert [(r.metric, r.metric_value) for r in summary.results] == [
            (r["metric"], r["metric_value"]) for r in recorded[name]["results"]
        ]
    assert recorded[SEG]["task"]["primary"] == "miou"
    assert by_id[recorded[SEG]["run_id"]].top1 is None  # an mIoU is no top-1
    digits = by_id[recorded["digits"]["run_id"]]
    assert (digits.metric, digits.metric_value) == ("top1", recorded["digits"]["accuracy"]["top1"])
    failed = by_id[recorded["failed"]["run_id"]]
    assert (failed.metric, failed.metric_value) == (None, None)


def test_filter_and_leaderboard_by_primary_metric(
    store: Store, recorded: dict[str, dict[str, Any]]
) -> None:
    segmentation = {recorded[SEG]["run_id"], recorded[SEG_TORCH]["run_id"]}
    assert {s.run_id for s in store.list_runs(metric="miou")} == segmentation
    assert queries.count_runs(store, RunFilter(metric="accuracy")) == 1
    board = queries.leaderboard(store, metric="metric_value", where=RunFilter(metric="miou"))
    assert {e.framework for e in board} == {"onnxruntime", "pytorch"}
    for entry in board:
        assert entry.metric == "miou" and entry.value == entry.metric_value
        name = SEG if entry.framework == "onnxruntime" else SEG_TORCH
        assert entry.value == primary(recorded[name])[1]
    top1 = queries.leaderboard(store, metric="metric_value", where=RunFilter(metric="top1"))
    assert [(e.model_name, e.value) for e in top1] == [
        ("digits-cnn", recorded["digits"]["accuracy"]["top1"])
    ]
    with pytest.raises(ValueError, match="ranks one primary metric"):
        queries.leaderboard(store, metric="metric_value")
    history = queries.history(store, "shapes-segmenter")
    assert {(p.metric, p.metric_value) for p in history} == {
        primary(recorded[SEG]),
        primary(recorded[SEG_TORCH]),
    }
    rows = queries.flat_rows(store.list_runs(metric="accuracy"))
    assert {(r["metric"], r["metric_value"], r["batch_size"]) for r in rows} == {
        ("accuracy", recorded[TEXT]["task"]["metrics"]["accuracy"], 1),
        ("accuracy", recorded[TEXT]["task"]["metrics"]["accuracy"], 8),
    }


def test_mlms_runs_names_the_metric(
    store: Store, store_url: str, recorded: dict[str, dict[str, Any]]
) -> None:
    result = CliRunner().invoke(
        app, ["runs", "--metric", "miou"], env={"MLMS_STORE_URL": store_url, "COLUMNS": "250"}
    )
    assert result.exit_code == 0, result.output
    value = primary(recorded[SEG])[1]
    assert f"miou {value:.2%}" in result.output
    assert recorded[SEG]["run_id"][:8] in result.output
    assert recorded[TEXT]["run_id"][:8] not in result.output
    assert "top-1" not in result.output and "accuracy" not in result.output
    everything = CliRunner().invoke(
        app, ["runs"], env={"MLMS_STORE_URL": store_url, "COLUMNS": "250"}
    )
    assert f"accuracy {recorded[TEXT]['task']['metrics']['accuracy']:.2%}" in everything.output
    assert f"top1 {recorded['digits']['accuracy']['top1']:.2%}" in everything.output


# ------------------------------------------------------------------------------ revision 0003


@pytest.fixture
def engine_at_0002(store_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(store_url)
    migrate(engine, "0002")
    yield engine
    engine.dispose()


def record_in_0002_shape(engine: sa.Engine, documents: list[dict[str, Any]]) -> None:
    """What revision 0002's ``Store.record`` wrote: no metric columns."""
    live = {c["name"] for c in sa.inspect(engine).get_columns("runs")}
    assert "metric" not in live
    with engine.begin() as conn:
        for document in documents:
            parsed = ResultDocument.model_validate(document)
            assert parsed.run_id is not None
            row = _run_row(parsed, parsed.run_id, document)
            del row["metric"], row["metric_value"], row["dataset"]  # dataset: 0008
            assert set(row) == live
            conn.execute(runs.insert(), row)
            if parsed.results:
                rows = [_result_row(parsed.run_id, r) for r in parsed.results]
                for batch in rows:  # 0008's
                    del batch["joules_per_inference"], batch["energy_method"]
                    del batch["cost_per_1000"]
                conn.execute(run_results.insert(), rows)


def test_upgrade_from_0002_backfills_the_metric(
    engine_at_0002: sa.Engine,
    store_url: str,
    task_documents: dict[str, dict[str, Any]],
    documents: dict[str, dict[str, Any]],
) -> None:
    """A task run gets its task's primary metric, a classification run top1 = top1, a run
    without accuracy neither; nothing else changes."""
    seg, text = copy.deepcopy(task_documents[SEG]), copy.deepcopy(task_documents[TEXT])
    digits, failed = documents["succeeded"], documents["failed"]
    no_accuracy = copy.deepcopy(digits)
    no_accuracy["run_id"] = str(uuid.uuid4())
    no_accuracy["accuracy"] = None
    for row in no_accuracy["results"]:
        row.update(top1=None, top5=None, metric=None, metric_value=None)
    docs = [seg, text, digits, failed, no_accuracy]
    record_in_0002_shape(engine_at_0002, docs)
    batches = sum(len(d.get("results") or []) for d in docs)
    migrate(engine_at_0002)
    with engine_at_0002.connect() as conn:
        assert not compare_metadata(MigrationContext.configure(conn), metadata)
        stored = {
            str(uuid.UUID(str(r.run_id))): (r.metric, r.metric_value)
            for r in conn.execute(sa.select(runs.c.run_id, runs.c.metric, runs.c.metric_value))
        }
        assert conn.execute(sa.select(sa.func.count()).select_from(run_results)).scalar() == (
            batches
        )
    assert stored == {
        seg["run_id"]: primary(seg),
        text["run_id"]: primary(text),
        digits["run_id"]: ("top1", digits["accuracy"]["top1"]),
        failed["run_id"]: (None, None),
        no_accuracy["run_id"]: (None, None),
    }
    with open_store(store_url) as store:
        assert {s.run_id for s in store.list_runs(metric="miou")} == {seg["run_id"]}
        assert store.get(seg["run_id"]) == seg


def test_downgrade_to_0002_drops_the_columns(
    store_url: str, task_documents: dict[str, dict[str, Any]]
) -> None:
    from alembic import command

    from mlmodelscope.store.store import alembic_config

    with open_store(store_url) as store:
        assert store.record(copy.deepcopy(task_documents[SEG]))
        config = alembic_config()
        with store.engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0002")
        columns = {c["name"] for c in sa.inspect(store.engine).get_columns("runs")}
        assert not columns & {"metric", "metric_value"}
        migrate(store.engine)
        [summary] = store.list_runs()
    assert (summary.metric, summary.metric_value) == primary(task_documents[SEG])
    assert len(summary.results) == 2
