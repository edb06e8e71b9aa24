"""metric and metric_value columns: the task's primary metric by name

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26

Written by hand; frozen once released: later changes go in a new revision, never here.

* ``runs.metric``: the name of the run's primary metric (``top1`` for classification, the
  ``task`` section's ``primary`` otherwise: ``miou``, ``accuracy``), and ``runs.metric_value``
  its value, both nullable. Backfilled from the stored documents: a document with a ``task``
  section gets its primary metric, any other ``top1`` and ``metric_value = top1`` where top1
  is not null (NULL and NULL otherwise).
* ``ix_runs_metric_started_at``: listings filtered by metric name, newest first.

As in 0002, SQLite rebuilds ``runs`` with the new columns before ``document`` (a column stored
after a large document is slow to read), copying ``run_results`` aside and dropping it first so
that no cascade deletes its rows; PostgreSQL adds the columns. Downgrade drops them in place.
"""

from __future__ import annotations

import json
import math
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None

INDEXES = {
    "ix_runs_model_name_started_at": ["model_name", "started_at"],
    "ix_runs_framework_started_at": ["framework", "started_at"],
    "ix_runs_status_started_at": ["status", "started_at"],
    "ix_runs_evaluation_started_at": ["evaluation", "namespace", "started_at"],
    "ix_runs_gpu_product_started_at": ["gpu_product", "started_at"],
    "ix_runs_model_sha256": ["model_sha256"],
    "ix_runs_framework": ["framework", "framework_version"],
    "ix_runs_device": ["device", "gpu_product"],
    "ix_runs_started_at": ["started_at"],
}
"""The 0002 indexes (recreated with the table on SQLite)."""
METRIC_INDEX = ("ix_runs_metric_started_at", ["metric", "started_at"])
ADDED = ("metric", "metric_value")
BATCH = 1000
"""Rows per UPDATE round trip in the Python backfill."""

# SQLite: the task's primary metric where the document has a task section, else top1.
_SQLITE_TASK = "json_type(document, '$.task') = 'object'"
_SQLITE_PRIMARY = "json_extract(document, '$.task.primary')"
_SQLITE_VALUE_PATH = "'$.task.metrics.\"' || json_extract(document, '$.task.primary') || '\"'"
_SQLITE_METRIC = (
    f"CASE WHEN json_valid(document) AND {_SQLITE_TASK} THEN {_SQLITE_PRIMARY}"
    " WHEN top1 IS NOT NULL THEN 'top1' END"
)
_SQLITE_METRIC_VALUE = (
    f"CASE WHEN json_valid(document) AND {_SQLITE_TASK} THEN"
    f" CASE WHEN json_type(document, {_SQLITE_VALUE_PATH}) IN ('real', 'integer')"
    f" THEN json_extract(document, {_SQLITE_VALUE_PATH}) END"
    " ELSE top1 END"
)


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        _rebuild_sqlite()
    else:
        with op.batch_alter_table("runs", recreate="never") as batch:
            batch.add_column(sa.Column("metric", sa.String(32), nullable=True))
            batch.add_column(sa.Column("metric_value", sa.Float, nullable=True))
    op.create_index(METRIC_INDEX[0], "runs", METRIC_INDEX[1])
    _backfill(conn)


def downgrade() -> None:
    op.drop_index(METRIC_INDEX[0], table_name="runs")
    with op.batch_alter_table("runs", recreate="never") as batch:
        batch.drop_column("metric_value")
        batch.drop_column("metric")


def _json_type() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(JSONB(), "postgresql")


def _labels_type() -> sa.types.TypeEngine[Any]:
    return sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


def _runs_columns() -> list[sa.Column[Any]]:
    """``runs`` at 0003, in storage order (the document last)."""
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
    """``run_results`` as 0001 created it (unchanged)."""
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
    """``runs`` copied into the 0003 layout, metric and metric_value backfilled in the same
    pass where SQLite's JSON functions can read the document (the rest: :func:`_backfill`)."""
    new_columns = _runs_columns()
    op.create_table("runs_0003", *new_columns)
    kept = ", ".join(c.name for c in new_columns if c.name not in ADDED)
    op.execute(
        f"INSERT INTO runs_0003 ({kept}, metric, metric_value) SELECT {kept},"
        f" {_SQLITE_METRIC}, {_SQLITE_METRIC_VALUE} FROM runs"
    )
    results = ", ".join(c.name for c in _run_results_columns())
    op.execute(f"CREATE TEMPORARY TABLE run_results_0002 AS SELECT {results} FROM run_results")
    op.drop_table("run_results")  # first: nothing references runs when it is dropped
    op.drop_table("runs")
    op.rename_table("runs_0003", "runs")
    for name, columns in INDEXES.items():
        op.create_index(name, "runs", columns)
    op.create_table("run_results", *_run_results_columns())
    op.execute(f"INSERT INTO run_results ({results}) SELECT {results} FROM run_results_0002")
    op.execute("DROP TABLE run_results_0002")


def _backfill(conn: sa.Connection) -> None:
    """metric and metric_value from each stored document: in PostgreSQL's JSON functions (SQLite
    filled them in :func:`_rebuild_sqlite`), then Python for the documents SQLite cannot read
    (before 3.42 it rejects the NaN that Python's json writes for a NaN)."""
    if conn.dialect.name == "postgresql":
        conn.execute(
            sa.text(
                "UPDATE runs SET metric = CASE"
                " WHEN jsonb_typeof(document->'task') = 'object'"
                " THEN document->'task'->>'primary'"
                " WHEN top1 IS NOT NULL THEN 'top1' END,"
                " metric_value = CASE"
                " WHEN jsonb_typeof(document->'task') = 'object' THEN CASE"
                " WHEN jsonb_typeof(document->'task'->'metrics'->(document->'task'->>'primary'))"
                " = 'number'"
                " THEN (document->'task'->'metrics'->>(document->'task'->>'primary'))::float"
                " END ELSE top1 END"
            )
        )
        return
    if conn.dialect.name == "sqlite":
        leftover = sa.text("SELECT run_id, top1, document FROM runs WHERE NOT json_valid(document)")
    else:  # pragma: no cover - the store supports SQLite and PostgreSQL only
        leftover = sa.text("SELECT run_id, top1, document FROM runs")
    runs = sa.table(
        "runs", sa.column("run_id", sa.String), sa.column("metric"), sa.column("metric_value")
    )
    update = (
        sa.update(runs)
        .where(runs.c.run_id == sa.bindparam("key"))
        .values(
            metric=sa.bindparam("name", type_=sa.String),
            metric_value=sa.bindparam("value", type_=sa.Float),
        )
    )
    pending: list[dict[str, Any]] = []
    for run_id, top1, document in conn.execute(leftover).all():
        parsed = document if isinstance(document, dict) else json.loads(document)
        pending.append({"key": run_id, **_from_document(parsed, top1)})
        if len(pending) >= BATCH:
            conn.execute(update, pending)
            pending = []
    if pending:
        conn.execute(update, pending)


def _from_document(document: dict[str, Any], top1: float | None) -> dict[str, Any]:
    task = document.get("task")
    if not isinstance(task, dict):
        return {"name": None if top1 is None else "top1", "value": top1}
    primary = task.get("primary")
    value = (task.get("metrics") or {}).get(primary)
    finite = isinstance(value, int | float) and math.isfinite(value)
    name = primary if isinstance(primary, str) else None
    return {"name": name, "value": value if finite else None}
