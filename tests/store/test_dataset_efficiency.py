"""Which dataset a run measured, and its energy and cost per inference, in the store on SQLite
and a real PostgreSQL: recorded from real documents (the digits CNN run by the agent on the
whole digits test split and on its first 100 samples; RAPL energy and a price per node-hour
given to two runs through the agent's own functions; a Failed run), listed, filtered, ranked per
dataset, exported; the index the leaderboard of one dataset reads; and revision 0008, which adds
the columns, backfilled from runs recorded in the 0007 shape, and drops them on downgrade."""

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
from mlmodelscope.devtools.documents import EFFICIENCY_KEYS as EFFICIENCY
from mlmodelscope.devtools.documents import metered
from mlmodelscope.store import Store, open_store, queries
from mlmodelscope.store.schema import metadata, run_results, runs
from mlmodelscope.store.store import (
    RunFilter,
    _result_row,
    _run_row,
    alembic_config,
    dataset_identity,
    migrate,
)

pytestmark = pytest.mark.frameworks

WHOLE = "digits/test (360 samples)"
FIRST_100 = "digits/test (100 samples)"
JOULES = {1: 0.002, 8: 0.0005}
"""J per sample the RAPL counter read for the fast run, by batch size; the slow run: half."""
PRICE = 3.2
INDEX = "ix_runs_dataset_status_metric"
Docs = dict[str, dict[str, Any]]


@pytest.fixture
def docs(documents: Docs, limited_document: dict[str, Any]) -> Docs:
    """``fast`` and ``slow`` on the whole test split (``slow``: twice the latency, half the
    energy, twice the price per node-hour), ``first-100`` on its first 100 samples (no energy
    counter, no price: as the agent wrote it on this machine), and ``failed`` (no dataset)."""
    fast = metered(documents["succeeded"], JOULES, PRICE)
    slow = metered(documents["succeeded"], {k: v / 2 for k, v in JOULES.items()}, 2 * PRICE)
    slow["run_id"] = str(uuid.uuid4())
    slow["started_at"] = "2026-01-01T00:00:00.000Z"
    for row in slow["results"]:
        row["latency_ms"] = {k: 2 * v for k, v in row["latency_ms"].items()}
    return {
        "fast": fast,
        "slow": slow,
        "first-100": copy.deepcopy(limited_document),
        "failed": documents["failed"],
    }


@pytest.fixture
def recorded(store: Store, docs: Docs) -> Docs:
    for document in docs.values():
        assert store.record(document)
    return docs


def efficiency(document: dict[str, Any]) -> dict[int, tuple[Any, ...]]:
    """The document's rows' efficiency, by batch size."""
    return {r["batch_size"]: tuple(r[k] for k in EFFICIENCY) for r in document.get("results") or []}


def identity(document: dict[str, Any]) -> str | None:
    return dataset_identity(ResultDocument.model_validate(document))


def test_record_keeps_the_dataset_and_the_efficiency(store: Store, recorded: Docs) -> None:
    assert recorded["first-100"]["dataset"]["samples"] == 100
    assert [identity(d) for d in recorded.values()] == [WHOLE, WHOLE, FIRST_100, None]
    by_id = {s.run_id: s for s in store.list_runs()}
    for name, document in recorded.items():
        summary = by_id[document["run_id"]]
        assert summary.dataset == identity(document)
        stored = {r.batch_size: tuple(getattr(r, k) for k in EFFICIENCY) for r in summary.results}
        assert stored == efficiency(document), name
        assert store.get(document["run_id"]) == document
    fast = efficiency(recorded["fast"])
    assert fast[1][:2] == (pytest.approx(JOULES[1]), "rapl")
    throughput = recorded["fast"]["results"][0]["throughput"]
    assert fast[1][2] == pytest.approx(PRICE / 3600 / throughput * 1000)
    assert set(efficiency(recorded["first-100"]).values()) == {(None, None, None)}

    assert [s.run_id for s in store.list_runs(dataset=FIRST_100)] == [
        recorded["first-100"]["run_id"]
    ]
    assert queries.count_runs(store, RunFilter(dataset=WHOLE)) == 2
    assert store.list_runs(dataset="digits/test") == []  # exact values only
    rows = queries.flat_rows(store.list_runs(dataset=WHOLE))
    assert {
        (r["run_id"], r["batch_size"]): (r["dataset"], *(r[k] for k in EFFICIENCY)) for r in rows
    } == {
        (d["run_id"], size): (WHOLE, *values)
        for d in (recorded["fast"], recorded["slow"])
        for size, values in efficiency(d).items()
    }


def test_the_leaderboard_ranks_each_dataset_on_its_own(store: Store, recorded: Docs) -> None:
    ids = {name: d["run_id"] for name, d in recorded.items()}
    board = queries.leaderboard(store, metric="p50_ms")
    assert [(e.dataset, e.run_id, e.runs) for e in board] == [
        (FIRST_100, ids["first-100"], 1),
        (WHOLE, ids["fast"], 2),
    ]
    assert board[1].joules_per_inference == pytest.approx(JOULES[1])
    assert board[1].energy_method == "rapl"
    assert board[1].cost_per_1000 == recorded["fast"]["results"][0]["cost_per_1000"]
    assert board[0].joules_per_inference is None and board[0].cost_per_1000 is None
    only = queries.leaderboard(store, metric="p50_ms", where=RunFilter(dataset=FIRST_100))
    assert [e.run_id for e in only] == [ids["first-100"]]
    with pytest.raises(ValueError, match="one dataset"):
        queries.best_first(board, "p50_ms")
    assert {k: [e.run_id for e in v] for k, v in queries.by_dataset(board).items()} == {
        FIRST_100: [ids["first-100"]],
        WHOLE: [ids["fast"]],
    }

    # energy and cost rank the runs that measured them, lowest first
    energy = queries.leaderboard(store, metric="joules_per_inference", batch_size=8)
    assert [(e.dataset, e.run_id, e.runs) for e in energy] == [(WHOLE, ids["slow"], 2)]
    assert energy[0].value == energy[0].joules_per_inference == pytest.approx(JOULES[8] / 2)
    cost = queries.leaderboard(store, metric="cost_per_1000")
    assert [(e.run_id, e.value) for e in cost] == [
        (ids["fast"], recorded["fast"]["results"][0]["cost_per_1000"])
    ]

    assert queries.dataset_names(store) == [FIRST_100, WHOLE]
    assert queries.metric_names(store, dataset=FIRST_100) == ["top1"]
    assert queries.metric_names(store, dataset="none") == []
    history = queries.history(store, "digits-cnn")
    assert [(p.run_id, p.dataset) for p in history] == [
        (d["run_id"], identity(d))
        for d in sorted(recorded.values(), key=lambda d: (d["started_at"], d["run_id"]))
    ]
    slow = next(p for p in history if p.run_id == ids["slow"])
    assert slow.joules_per_inference == pytest.approx(JOULES[1] / 2)
    assert slow.cost_per_1000 == recorded["slow"]["results"][0]["cost_per_1000"]
    narrowed = queries.history(store, "digits-cnn", where=RunFilter(dataset=FIRST_100))
    assert [p.run_id for p in narrowed] == [ids["first-100"]]


def test_a_long_dataset_name_is_shortened_to_fit(store: Store, documents: Docs) -> None:
    long_names = []
    for tail in ("a", "b"):  # the same first 200 characters
        document = copy.deepcopy(documents["succeeded"])
        document["run_id"] = str(uuid.uuid4())
        document["dataset"]["name"] = "imagefolder:/data/" + "x" * 300 + tail
        long_names.append(document)
        assert store.record(document)
    first, second = (identity(d) for d in long_names)
    assert first is not None and second is not None and first != second
    for name in (first, second):
        assert len(name) <= 253
        assert name.startswith("imagefolder:/data/xxx") and name.endswith(" (360 samples)")
        assert "...sha256:" in name
    assert [s.run_id for s in store.list_runs(dataset=first)] == [long_names[0]["run_id"]]


def test_the_leaderboard_of_one_dataset_reads_its_index(store: Store, recorded: Docs) -> None:
    query = queries.leaderboard_query(
        metric="metric_value", where=RunFilter(dataset=WHOLE, metric="top1")
    )
    sql = str(query.compile(dialect=store.engine.dialect, compile_kwargs={"literal_binds": True}))
    with store.engine.connect() as conn:
        if store.engine.dialect.name == "sqlite":
            plan = " ".join(
                str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")
            )
        else:  # a few rows: make the planner show which index it would use
            conn.exec_driver_sql("ANALYZE runs")
            conn.exec_driver_sql("SET enable_seqscan = off")
            plan = " ".join(str(row[0]) for row in conn.exec_driver_sql(f"EXPLAIN {sql}"))
    assert INDEX in plan, plan
    entries = queries.leaderboard(
        store, metric="metric_value", where=RunFilter(dataset=WHOLE, metric="top1")
    )
    assert [e.run_id for e in entries] == [recorded["fast"]["run_id"]]  # ties: the newer run


# ------------------------------------------------------------------------------ revision 0008


@pytest.fixture
def engine_at_0007(store_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(store_url)
    migrate(engine, "0007")
    yield engine
    engine.dispose()


def live_columns(engine: sa.Engine, table: str) -> set[str]:
    return {c["name"] for c in sa.inspect(engine).get_columns(table)}


def record_in_0007_shape(engine: sa.Engine, documents: list[dict[str, Any]]) -> None:
    """What revision 0007's ``Store.record`` wrote: no dataset, no efficiency columns."""
    live, live_results = live_columns(engine, "runs"), live_columns(engine, "run_results")
    assert "dataset" not in live and not live_results & set(EFFICIENCY)
    with engine.begin() as conn:
        for document in documents:
            parsed = ResultDocument.model_validate(document)
            assert parsed.run_id is not None
            row = _run_row(parsed, parsed.run_id, document)
            del row["dataset"]
            assert set(row) == live
            conn.execute(runs.insert(), row)
            batches = [_result_row(parsed.run_id, r) for r in parsed.results or []]
            for batch in batches:
                for key in EFFICIENCY:
                    del batch[key]
                assert set(batch) == live_results
            if batches:
                conn.execute(run_results.insert(), batches)


def stored(
    engine: sa.Engine,
) -> tuple[dict[str, str | None], dict[str, dict[int, tuple[Any, ...]]]]:
    """({run id: dataset}, {run id: {batch size: efficiency}}) as the tables hold them."""
    with engine.connect() as conn:
        datasets = {
            str(uuid.UUID(str(r.run_id))): r.dataset
            for r in conn.execute(sa.select(runs.c.run_id, runs.c.dataset))
        }
        rows: dict[str, dict[int, tuple[Any, ...]]] = {}
        for r in conn.execute(sa.select(run_results)).mappings():
            key = str(uuid.UUID(str(r["run_id"])))
            rows.setdefault(key, {})[r["batch_size"]] = tuple(r[k] for k in EFFICIENCY)
    return datasets, rows


def expected(documents: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """What ``Store.record`` would have written for ``documents`` (runs without rows: none)."""
    datasets = {d["run_id"]: identity(d) for d in documents}
    rows = {d["run_id"]: efficiency(d) for d in documents if d.get("results")}
    return datasets, rows


@pytest.fixture
def old_runs(store_url: str, docs: Docs, documents: Docs) -> list[dict[str, Any]]:
    """``docs``, a run whose dataset name is too long for SQL to shorten, and on SQLite a
    metered run whose document holds a NaN (Python's json writes it; SQLite's JSON functions
    before 3.42 refuse it; PostgreSQL refuses it at insert): the last two take the Python
    backfill."""
    long_name = copy.deepcopy(docs["first-100"])
    long_name["run_id"] = str(uuid.uuid4())
    long_name["dataset"]["name"] = "text:/data/" + "t" * 250
    made = [*docs.values(), long_name]
    if store_url.startswith("sqlite"):
        nan = metered(documents["succeeded"], JOULES, PRICE)
        nan["run_id"] = str(uuid.uuid4())
        nan["stack"]["cpu"]["probe"] = math.nan
        made.append(nan)
    return made


def test_upgrade_from_0007_backfills_dataset_and_efficiency(
    engine_at_0007: sa.Engine, store_url: str, old_runs: list[dict[str, Any]]
) -> None:
    record_in_0007_shape(engine_at_0007, old_runs)
    migrate(engine_at_0007)
    with engine_at_0007.connect() as conn:
        assert not compare_metadata(MigrationContext.configure(conn), metadata)
    assert INDEX in {i["name"] for i in sa.inspect(engine_at_0007).get_indexes("runs")}
    datasets, rows = stored(engine_at_0007)
    assert (datasets, rows) == expected(old_runs)
    assert datasets[old_runs[0]["run_id"]] == WHOLE and datasets[old_runs[3]["run_id"]] is None
    assert rows[old_runs[0]["run_id"]][1][1] == "rapl"
    with open_store(store_url) as store:
        board = queries.leaderboard(store, metric="joules_per_inference")
        assert {(e.dataset, e.run_id) for e in board} == {(WHOLE, old_runs[1]["run_id"])}
        for document in old_runs[:4]:
            assert store.get(document["run_id"]) == document


def test_downgrade_to_0007_and_up_again(store_url: str, old_runs: list[dict[str, Any]]) -> None:
    with open_store(store_url) as store:
        for document in old_runs:
            assert store.record(document)
        recorded = stored(store.engine)
        assert recorded == expected(old_runs)
        batch_rows = sum(len(d.get("results") or []) for d in old_runs)
        config = alembic_config()
        # through the store's own engine: on SQLite, foreign keys are on
        with store.engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0007")
        assert "dataset" not in live_columns(store.engine, "runs")
        assert not live_columns(store.engine, "run_results") & set(EFFICIENCY)
        indexes = {i["name"] for i in sa.inspect(store.engine).get_indexes("runs")}
        assert INDEX not in indexes and "ix_runs_metric_started_at" in indexes
        with store.engine.connect() as conn:
            assert conn.execute(sa.text("select count(*) from runs")).scalar_one() == len(old_runs)
            assert conn.execute(sa.text("select count(*) from run_results")).scalar_one() == (
                batch_rows
            )
        migrate(store.engine)
        assert stored(store.engine) == recorded
        assert [s.run_id for s in store.list_runs(dataset=FIRST_100)] == [old_runs[2]["run_id"]]
