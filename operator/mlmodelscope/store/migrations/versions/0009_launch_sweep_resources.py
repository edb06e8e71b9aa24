"""launch_sweeps: the EvaluationSweep a cluster launch created

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30

Written by hand; frozen once released: later changes go in a new revision, never here.

* ``launch_sweeps.namespace``, ``launch_sweeps.resource_uid``: where `mlms serve
  --launch-namespace` created the sweep launch's EvaluationSweep (its name is
  ``launch_sweeps.name``) and the uid the API server gave it, so the server follows the
  children of that object and deletes no later one of the same name. NULL for a sweep run by
  the server's own workers.

Two nullable columns without a table copy (``batch_alter_table(recreate="never")``: ALTER
TABLE ... ADD/DROP COLUMN, SQLite >= 3.35), the same on PostgreSQL; downgrade drops them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("launch_sweeps", recreate="never") as batch:
        batch.add_column(sa.Column("namespace", sa.String(63), nullable=True))
        batch.add_column(sa.Column("resource_uid", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("launch_sweeps", recreate="never") as batch:
        batch.drop_column("resource_uid")
        batch.drop_column("namespace")
