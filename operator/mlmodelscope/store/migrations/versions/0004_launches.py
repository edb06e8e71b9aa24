"""launches: the launch queue of `mlms serve`

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27

Written by hand; frozen once released: later changes go in a new revision, never here.

* ``launches``: one row per ModelEvaluation launched through ``POST /api/v1/launches`` (or the
  dashboard's Launch page): its YAML document, its state (queued, running, succeeded, failed,
  cancelled, interrupted), when it was created, started and finished, a message, and the run
  id it recorded. No foreign key to ``runs``: the run is recorded on its own.
* ``ix_launches_state_created_at``: workers take the oldest queued launch;
  ``ix_launches_created_at``: listings read newest first.

A new table only, the same on SQLite and PostgreSQL; downgrade drops it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "launches",
        sa.Column("launch_id", sa.Uuid(as_uuid=False), primary_key=True),
        sa.Column("evaluation", sa.String(253), nullable=False),
        sa.Column("model_name", sa.String(253), nullable=True),
        sa.Column("framework", sa.String(64), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("run_id", sa.Uuid(as_uuid=False), nullable=True),
        sa.Column("message", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_launches_state_created_at", "launches", ["state", "created_at"])
    op.create_index("ix_launches_created_at", "launches", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_launches_created_at", table_name="launches")
    op.drop_index("ix_launches_state_created_at", table_name="launches")
    op.drop_table("launches")
