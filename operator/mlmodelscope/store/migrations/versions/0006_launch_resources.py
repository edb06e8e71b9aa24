"""launches: the ModelEvaluation a cluster launch created

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29

Written by hand; frozen once released: later changes go in a new revision, never here.

* ``launches.namespace``, ``launches.resource_uid``: where `mlms serve --launch-namespace`
  created the launch's ModelEvaluation (its name is ``launches.evaluation``) and the uid the
  API server gave it, so the launch follows that object and no later one of the same name.
  NULL for a launch run by the server's own workers.

Two nullable columns, the same on SQLite and PostgreSQL; downgrade drops them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("launches") as batch:
        batch.add_column(sa.Column("namespace", sa.String(63), nullable=True))
        batch.add_column(sa.Column("resource_uid", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("launches") as batch:
        batch.drop_column("resource_uid")
        batch.drop_column("namespace")
