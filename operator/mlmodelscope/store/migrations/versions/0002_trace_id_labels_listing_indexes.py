"""trace_id and labels columns; composite indexes for filtered, newest-first listings

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24

Written by hand; frozen once released: later changes go in a new revision, never here.

* ``runs.trace_id``: the run's OpenTelemetry trace id (the document's top-level ``trace_id``),
  and ``runs.labels``: tags such as a sweep name (the document's ``evaluation.labels`` object),
  both nullable and backfilled from the stored documents.
* Listings filter by one column and read newest first (``ORDER BY started_at DESC``): an index
  on ``(filter column, started_at)`` answers them by reading the first ``limit`` entries of one
  index range instead of sorting every match. Those indexes replace the ones they start with
  (``ix_runs_model_name``, ``ix_runs_evaluation``, ``ix_runs_gpu_product``); the others stay.

On SQLite ``runs`` is rebuilt with the new columns *before* ``document``: SQLite stores a row's
columns in order, and reading a column that follows a large document means walking that
document's overflow pages (with 16 KiB documents, listing 100 runs took 6 ms instead of 0.4
ms). The rebuild copies ``run_results`` aside and drops it first: with ``PRAGMA
foreign_keys=ON`` (as :func:`mlmodelscope.store.open_store` sets), dropping ``runs`` while
``run_results`` references it would cascade and delete every batch row, which is also why
Alembic's batch mode (copy, drop, rename) is not used. PostgreSQL keeps large JSONB out of line
(TOAST), so there the columns are simply added. Downgrade drops them in place on both
(``batch_alter_table(recreate="never")``: ALTER TABLE ... DROP COLUMN, SQLite >= 3.35).
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

LISTING_INDEXES = {
    "ix_runs_model_name_started_at": ["model_name", "started_at"],
    "ix_runs_framework_started_at": ["framework", "started_at"],
    "ix_runs_status_started_at": ["status", "started_at"],
    "ix_runs_evaluation_started_at": ["evaluation", "namespace", "started_at"],
    "ix_runs_gpu_product_started_at": ["gpu_product", "started_at"],
}
KEPT_INDEXES = {
    "ix_runs_model_sha256": ["model_sha256"],
    "ix_runs_framework": ["framework", "framework_version"],
    "ix_runs_device": ["device", "gpu_product"],
    "ix_runs_started_at": ["started_at"],
}
"""The 0001 indexes 0002 keeps (recreated with the table on SQLite)."""
REPLACED_INDEXES = {
    "ix_runs_model_name": ["model_name"],
    "ix_runs_evaluation": ["evaluation", "namespace"],
    "ix_runs_gpu_product": ["gpu_product"],
}
BATCH = 1000
"""Rows per UPDATE round trip in the Python backfill."""


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        _rebuild_sqlite()
    else:
        with op.batch_alter_table("runs", recreate="never") as batch:
            batch.add_column(sa.Column("trace_id", sa.String(32), nullable=True))
            batch.add_column(sa.Column("labels", _labels_type(), nullable=True))
        for name in REPLACED_INDEXES:
            op.drop_index(name, table_name="runs")
    for name, columns in LISTING_INDEXES.items():
        op.create_index(name, "runs", columns)
    _backfill(conn)


def downgrade() -> None:
    for name, columns in REPLACED_INDEXES.items():
        op.create_index(name, "runs", columns)
    for name in LISTING_INDEXES:
        op.drop_index(name, table_name="runs")
    with op.batch_alter_table("runs", recreate="never") as batch:
        batch.drop_column("labels")
        batch.drop_column("trace_id")


def _labels_type() -> sa.types.TypeEngine[Any]:
    return sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


def _runs_columns() -> list[sa.Column[Any]]:
    """``runs`` at 0002, in storage order (the document last)."""
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
        sa.Column("error_type", sa.String(128), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=True),
        sa.Column("labels", _labels_type(), nullable=True),
        sa.Column("document", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=False),
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
    """``runs`` copied into the 0002 layout, trace_id and labels backfilled in the same pass
    where SQLite's JSON functions can read the document (the rest: :func:`_backfill`)."""
    new_columns = _runs_columns()
    op.create_table("runs_0002", *new_columns)
    kept = ", ".join(c.name for c in new_columns if c.name not in ("trace_id", "labels"))
    op.execute(
        f"INSERT INTO runs_0002 ({kept}, trace_id, labels) SELECT {kept},"
        " CASE WHEN json_valid(document) THEN json_extract(document, '$.trace_id') END,"
        " CASE WHEN json_valid(document)"
        " AND json_type(document, '$.evaluation.labels') = 'object'"
        " THEN json_extract(document, '$.evaluation.labels') END"
        " FROM runs"
    )
    results = ", ".join(c.name for c in _run_results_columns())
    op.execute(f"CREATE TEMPORARY TABLE run_results_0001 AS SELECT {results} FROM run_results")
    op.drop_table("run_results")  # first: nothing references runs when it is dropped
    op.drop_table("runs")
    op.rename_table("runs_0002", "runs")
    for name, columns in KEPT_INDEXES.items():
        op.create_index(name, "runs", columns)
    op.create_table("run_results", *_run_results_columns())
    op.execute(f"INSERT INTO run_results ({results}) SELECT {results} FROM run_results_0001")
    op.execute("DROP TABLE run_results_0001")


def _backfill(conn: sa.Connection) -> None:
    """trace_id and labels from each stored document: in the database's own JSON functions
    (PostgreSQL here, SQLite in :func:`_rebuild_sqlite`), then Python for the documents those
    cannot read (SQLite before 3.42 rejects the NaN that Python's json writes for a NaN)."""
    if conn.dialect.name == "postgresql":
        conn.execute(
            sa.text(
                "UPDATE runs SET trace_id = document->>'trace_id', labels = CASE"
                " WHEN jsonb_typeof(document->'evaluation'->'labels') = 'object'"
                " THEN document->'evaluation'->'labels' END"
            )
        )
        return
    if conn.dialect.name == "sqlite":  # the rebuild filled the rest
        leftover = sa.text("SELECT run_id, document FROM runs WHERE NOT json_valid(document)")
    else:  # pragma: no cover - the store supports SQLite and PostgreSQL only
        leftover = sa.text("SELECT run_id, document FROM runs")
    runs = sa.table(
        "runs",
        sa.column("run_id", sa.String),
        sa.column("trace_id", sa.String),
        sa.column("labels", sa.JSON(none_as_null=True)),
    )
    update = (
        sa.update(runs)
        .where(runs.c.run_id == sa.bindparam("key"))
        .values(
            trace_id=sa.bindparam("trace", type_=sa.String),
            labels=sa.bindparam("tags", type_=sa.JSON(none_as_null=True)),
        )
    )
    pending: list[dict[str, Any]] = []
    for run_id, document in conn.execute(leftover).all():
        values = _from_document(document if isinstance(document, dict) else json.loads(document))
        pending.append({"key": run_id, **values})
        if len(pending) >= BATCH:
            conn.execute(update, pending)
            pending = []
    if pending:
        conn.execute(update, pending)


def _from_document(document: dict[str, Any]) -> dict[str, Any]:
    trace_id = document.get("trace_id")
    labels = (document.get("evaluation") or {}).get("labels")
    return {
        "trace": trace_id if isinstance(trace_id, str) else None,
        "tags": labels if isinstance(labels, dict) else None,
    }
