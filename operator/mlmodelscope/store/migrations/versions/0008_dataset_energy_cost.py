"""dataset column on runs; energy and cost per inference on run_results

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27

Written by hand; frozen once released: later changes go in a new revision, never here.

* ``runs.dataset`` (nullable): which data a run's numbers came from, the document's dataset
  name and sample count, ``digits/test (360 samples)``; a name longer than 200 characters is
  kept as its first 200, ``...sha256:`` and 12 hex digits of its sha256. NULL for a run whose
  document has no ``dataset`` section (it failed before loading its data).
  ``ix_runs_dataset_status_metric``: the leaderboard of one dataset reads its Succeeded runs
  of one primary metric from one index range.
* ``run_results.joules_per_inference``, ``energy_method`` and ``cost_per_1000`` (nullable):
  the row's energy per inference (J, from the ``nvml`` or ``rapl`` counter) and cost per
  1,000 inferences (USD), as the document's ``results`` row of the same batch size has them.

All are backfilled from the stored documents: in the database's JSON functions, then in
Python for what those cannot do (names over 200 characters; on SQLite, documents json_valid
refuses, such as those holding the NaN Python's json writes).

As in 0003, SQLite rebuilds ``runs`` with the new column before ``document`` (a column stored
after a large document is slow to read), copying ``run_results`` aside and dropping it first
so that no cascade deletes its rows, and recreates ``run_results`` with the new columns;
PostgreSQL adds the columns. Downgrade drops the index and the columns in place on both
(``batch_alter_table(recreate="never")``: ALTER TABLE ... DROP COLUMN, SQLite >= 3.35).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None

INDEXES = {
    "ix_runs_model_name_started_at": ["model_name", "started_at"],
    "ix_runs_framework_started_at": ["framework", "started_at"],
    "ix_runs_status_started_at": ["status", "started_at"],
    "ix_runs_evaluation_started_at": ["evaluation", "namespace", "started_at"],
    "ix_runs_gpu_product_started_at": ["gpu_product", "started_at"],
    "ix_runs_metric_started_at": ["metric", "started_at"],
    "ix_runs_model_sha256": ["model_sha256"],
    "ix_runs_framework": ["framework", "framework_version"],
    "ix_runs_device": ["device", "gpu_product"],
    "ix_runs_started_at": ["started_at"],
}
"""The 0003 indexes (recreated with the table on SQLite)."""
DATASET_INDEX = ("ix_runs_dataset_status_metric", ["dataset", "status", "metric"])
EFFICIENCY = ("joules_per_inference", "energy_method", "cost_per_1000")
NAME_KEPT = 200
"""Longer dataset names are shortened (in Python: the database has no portable sha256)."""
BATCH = 1000
"""Rows per UPDATE round trip in the Python backfill."""

# SQLite: the identity of a valid document whose dataset name fits; CASE evaluates in order,
# so no JSON function sees a document json_valid refused.
_SQLITE_NAME = "json_extract(document, '$.dataset.name')"
_SQLITE_DATASET = (
    "CASE WHEN NOT json_valid(document) THEN NULL"
    " WHEN json_type(document, '$.dataset.name') = 'text'"
    " AND json_type(document, '$.dataset.samples') IN ('integer', 'real')"
    f" AND length({_SQLITE_NAME}) <= {NAME_KEPT}"
    f" THEN {_SQLITE_NAME} || ' ('"
    " || CAST(json_extract(document, '$.dataset.samples') AS INTEGER) || ' samples)' END"
)
_SQLITE_EFFICIENCY = (
    "UPDATE run_results SET"
    " joules_per_inference = CASE WHEN json_type(e.value, '$.joules_per_inference')"
    " IN ('integer', 'real') THEN json_extract(e.value, '$.joules_per_inference') END,"
    " energy_method = CASE WHEN json_type(e.value, '$.energy_method') = 'text'"
    " THEN json_extract(e.value, '$.energy_method') END,"
    " cost_per_1000 = CASE WHEN json_type(e.value, '$.cost_per_1000') IN ('integer', 'real')"
    " THEN json_extract(e.value, '$.cost_per_1000') END"
    " FROM (SELECT run_id, document FROM runs WHERE CASE WHEN json_valid(document)"
    " THEN json_type(document, '$.results') = 'array' ELSE 0 END) AS r,"
    " json_each(r.document, '$.results') AS e"
    " WHERE r.run_id = run_results.run_id"
    " AND json_type(e.value, '$.batch_size') = 'integer'"
    " AND json_extract(e.value, '$.batch_size') = run_results.batch_size"
)
_POSTGRESQL_DATASET = (
    "UPDATE runs SET dataset = (document->'dataset'->>'name') || ' ('"
    " || (document->'dataset'->>'samples')::numeric::bigint::text || ' samples)'"
    " WHERE jsonb_typeof(document->'dataset'->'name') = 'string'"
    " AND jsonb_typeof(document->'dataset'->'samples') = 'number'"
    f" AND length(document->'dataset'->>'name') <= {NAME_KEPT}"
)
_POSTGRESQL_EFFICIENCY = (
    "UPDATE run_results SET"
    " joules_per_inference = CASE WHEN jsonb_typeof(e.value->'joules_per_inference') = 'number'"
    " THEN (e.value->>'joules_per_inference')::float END,"
    " energy_method = CASE WHEN jsonb_typeof(e.value->'energy_method') = 'string'"
    " THEN e.value->>'energy_method' END,"
    " cost_per_1000 = CASE WHEN jsonb_typeof(e.value->'cost_per_1000') = 'number'"
    " THEN (e.value->>'cost_per_1000')::float END"
    " FROM runs CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN"
    " jsonb_typeof(runs.document->'results') = 'array' THEN runs.document->'results'"
    " ELSE '[]'::jsonb END) AS e(value)"
    " WHERE runs.run_id = run_results.run_id"
    " AND CASE WHEN jsonb_typeof(e.value->'batch_size') = 'number'"
    " THEN (e.value->>'batch_size')::numeric END = run_results.batch_size"
)


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        _rebuild_sqlite()
        op.execute(_SQLITE_EFFICIENCY)
    else:
        with op.batch_alter_table("runs", recreate="never") as batch:
            batch.add_column(sa.Column("dataset", sa.String(253), nullable=True))
        with op.batch_alter_table("run_results", recreate="never") as batch:
            for column in _efficiency_columns():
                batch.add_column(column)
        if conn.dialect.name == "postgresql":
            op.execute(_POSTGRESQL_DATASET)
            op.execute(_POSTGRESQL_EFFICIENCY)
    op.create_index(DATASET_INDEX[0], "runs", DATASET_INDEX[1])
    _backfill_leftovers(conn)


def downgrade() -> None:
    op.drop_index(DATASET_INDEX[0], table_name="runs")
    with op.batch_alter_table("run_results", recreate="never") as batch:
        for name in reversed(EFFICIENCY):
            batch.drop_column(name)
    with op.batch_alter_table("runs", recreate="never") as batch:
        batch.drop_column("dataset")


def _json_type() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(JSONB(), "postgresql")


def _labels_type() -> sa.types.TypeEngine[Any]:
    return sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


def _efficiency_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("joules_per_inference", sa.Float, nullable=True),
        sa.Column("energy_method", sa.String(16), nullable=True),
        sa.Column("cost_per_1000", sa.Float, nullable=True),
    ]


def _runs_columns() -> list[sa.Column[Any]]:
    """``runs`` at 0008, in storage order (the document last)."""
    return [
        sa.Column("run_id", sa.Uuid(as_uuid=False), primary_key=True),
        sa.Column("evaluation", sa.String(253), nullable=True),
        sa.Column("namespace", sa.String(63), nullable=True),
        sa.Column("generation", sa.Integer, nullable=True),
        sa.Column("spec_sha256", sa.String(64), nullable=True),
        sa.Column("model_name", sa.String(253), nullable=True),
        sa.Column("model_sha256", sa.String(64), nullable=True),
        sa.Column("framework", sa.String(64), nullable=True),
        sa.Column("framework_version", sa.String(64), nullable=True),
        sa.Column("device", sa.String(64), nullable=True),
        sa.Column("gpu_product", sa.String(128), nullable=True),
        sa.Column("scenario", sa.String(32), nullable=True),
        sa.Column("dataset", sa.String(253), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("valid", sa.Boolean, nullable=True),
        sa.Column("top1", sa.Float, nullable=True),
        sa.Column("top5", sa.Float, nullable=True),
        sa.Column("metric", sa.String(32), nullable=True),
        sa.Column("metric_value", sa.Float, nullable=True),
        sa.Column("error_type", sa.String(128), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=True),
        sa.Column("labels", _labels_type(), nullable=True),
        sa.Column("document", _json_type(), nullable=False),
    ]


def _run_results_columns() -> list[sa.Column[Any]]:
    """``run_results`` as 0001 created it."""
    return [
        sa.Column(
            "run_id",
            sa.Uuid(as_uuid=False),
            sa.ForeignKey("runs.run_id", name="fk_run_results_run_id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("batch_size", sa.Integer, primary_key=True),
        sa.Column("scenario", sa.String(32), nullable=False),
        sa.Column("p50_ms", sa.Float, nullable=True),
        sa.Column("p90_ms", sa.Float, nullable=True),
        sa.Column("p99_ms", sa.Float, nullable=True),
        sa.Column("mean_ms", sa.Float, nullable=True),
        sa.Column("throughput", sa.Float, nullable=True),
        sa.Column("qps", sa.Float, nullable=True),
        sa.Column("valid", sa.Boolean, nullable=True),
    ]


def _rebuild_sqlite() -> None:
    """``runs`` copied into the 0008 layout, ``dataset`` filled in the same pass where
    SQLite's JSON functions can; ``run_results`` recreated with the efficiency columns
    (empty: :data:`_SQLITE_EFFICIENCY` fills them)."""
    new_columns = _runs_columns()
    op.create_table("runs_0008", *new_columns)
    kept = ", ".join(c.name for c in new_columns if c.name != "dataset")
    op.execute(
        f"INSERT INTO runs_0008 ({kept}, dataset) SELECT {kept}, {_SQLITE_DATASET} FROM runs"
    )
    results = ", ".join(c.name for c in _run_results_columns())
    op.execute(f"CREATE TEMPORARY TABLE run_results_0007 AS SELECT {results} FROM run_results")
    op.drop_table("run_results")  # first: nothing references runs when it is dropped
    op.drop_table("runs")
    op.rename_table("runs_0008", "runs")
    for name, columns in INDEXES.items():
        op.create_index(name, "runs", columns)
    op.create_table("run_results", *_run_results_columns(), *_efficiency_columns())
    op.execute(f"INSERT INTO run_results ({results}) SELECT {results} FROM run_results_0007")
    op.execute("DROP TABLE run_results_0007")


def _backfill_leftovers(conn: sa.Connection) -> None:
    """In Python, what the SQL above left: the dataset of documents whose name is too long
    (both dialects), and on SQLite everything of the documents json_valid refuses."""
    if conn.dialect.name == "sqlite":
        leftover = sa.text(
            "SELECT run_id, document, NOT json_valid(document) AS unparsed FROM runs"
            " WHERE CASE WHEN NOT json_valid(document) THEN 1"
            " WHEN dataset IS NULL AND json_type(document, '$.dataset') = 'object' THEN 1"
            " ELSE 0 END = 1"
        )
    elif conn.dialect.name == "postgresql":
        leftover = sa.text(
            "SELECT run_id, document, false AS unparsed FROM runs"
            " WHERE dataset IS NULL AND jsonb_typeof(document->'dataset') = 'object'"
        )
    else:  # pragma: no cover - the store supports SQLite and PostgreSQL only
        leftover = sa.text("SELECT run_id, document, true AS unparsed FROM runs")
    key = sa.Uuid(as_uuid=False)  # psycopg compares uuid with uuid only
    runs = sa.table("runs", sa.column("run_id", key), sa.column("dataset"))
    set_dataset = (
        sa.update(runs)
        .where(runs.c.run_id == sa.bindparam("key"))
        .values(dataset=sa.bindparam("identity", type_=sa.String))
    )
    results = sa.table(
        "run_results",
        sa.column("run_id", key),
        sa.column("batch_size", sa.Integer),
        *(sa.column(name) for name in EFFICIENCY),
    )
    set_efficiency = (
        sa.update(results)
        .where(
            results.c.run_id == sa.bindparam("key"),
            results.c.batch_size == sa.bindparam("size", type_=sa.Integer),
        )
        .values(
            joules_per_inference=sa.bindparam("joules", type_=sa.Float),
            energy_method=sa.bindparam("method", type_=sa.String),
            cost_per_1000=sa.bindparam("cost", type_=sa.Float),
        )
    )
    datasets: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for found, document, unparsed in conn.execute(leftover).all():
        run_id = str(found)
        parsed = document if isinstance(document, dict) else json.loads(document)
        datasets.append({"key": run_id, "identity": _identity(parsed)})
        if unparsed:
            rows += [{"key": run_id, **row} for row in _efficiency(parsed)]
        if len(datasets) >= BATCH:
            conn.execute(set_dataset, datasets)
            datasets = []
        if len(rows) >= BATCH:
            conn.execute(set_efficiency, rows)
            rows = []
    if datasets:
        conn.execute(set_dataset, datasets)
    if rows:
        conn.execute(set_efficiency, rows)


def _identity(document: dict[str, Any]) -> str | None:
    dataset = document.get("dataset")
    if not isinstance(dataset, dict):
        return None
    name, samples = dataset.get("name"), dataset.get("samples")
    if not isinstance(name, str) or not isinstance(samples, int | float):
        return None
    if len(name) > NAME_KEPT:
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        name = f"{name[:NAME_KEPT]}...sha256:{digest}"
    return f"{name} ({int(samples)} samples)"


def _number(value: Any) -> float | None:
    finite = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if finite and math.isfinite(value) else None


def _efficiency(document: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for row in document.get("results") or []:
        if not isinstance(row, dict) or not isinstance(row.get("batch_size"), int):
            continue
        method = row.get("energy_method")
        found.append(
            {
                "size": row["batch_size"],
                "joules": _number(row.get("joules_per_inference")),
                "method": method if isinstance(method, str) else None,
                "cost": _number(row.get("cost_per_1000")),
            }
        )
    return found
