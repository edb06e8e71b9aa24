"""launch_sweeps: EvaluationSweeps launched on `mlms serve`, their children in ``launches``

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-29

Written by hand; frozen once released: later changes go in a new revision, never here.

* ``launch_sweeps``: one row per EvaluationSweep launched through ``POST /api/v1/launches``
  (``kind: sweep``): its name, its YAML document and when it was created. It keeps no state:
  a sweep's state is its children's, summed up when read.
* ``launches.sweep_id`` (nullable, no foreign key, as ``run_id``): the sweep a launch is a
  child of; ``ix_launches_sweep_id`` reads a sweep's children.

``launches`` gains a nullable column without a table copy (``batch_alter_table(recreate=
"never")``: ALTER TABLE ... ADD/DROP COLUMN, SQLite >= 3.35), the same on PostgreSQL;
downgrade drops the index, the column and the table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "launch_sweeps",
        sa.Column("sweep_id", sa.Uuid(as_uuid=False), primary_key=True),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_launch_sweeps_created_at", "launch_sweeps", ["created_at"])
    with op.batch_alter_table("launches", recreate="never") as batch:
        batch.add_column(sa.Column("sweep_id", sa.Uuid(as_uuid=False), nullable=True))
    op.create_index("ix_launches_sweep_id", "launches", ["sweep_id"])


def downgrade() -> None:
    op.drop_index("ix_launches_sweep_id", table_name="launches")
    with op.batch_alter_table("launches", recreate="never") as batch:
        batch.drop_column("sweep_id")
    op.drop_index("ix_launch_sweeps_created_at", table_name="launch_sweeps")
    op.drop_table("launch_sweeps")
